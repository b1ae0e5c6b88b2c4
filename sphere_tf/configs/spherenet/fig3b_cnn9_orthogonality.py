r"""SphereNet Fig. 3(b): convergence of CNN-9 vs SphereNet-9 with and without the orthogonality constraint.

Deep Hyperspherical Learning (Liu et al., NIPS 2017), Fig. 3(b) (thesis Fig. 3.3b), §4.4 and §2.4.

Recipe (§4.1, §4.4): CNN-9 of App. Table 5 (64/96/128, FC 256), BN + ReLU, softmax loss for every curve;
CIFAR-10 without augmentation, mean subtraction; ADAM 1e-3, batch 128, ÷10 at 34K and 54K, stop at 64K.
The orthogonality constraint is ‖WᵀW − I‖²_F on every conv kernel (§2.4); the coefficient is not stated in
the paper; we use 1e-5 (the orthonormal regulariser of Liu's thesis, App. D.1). Not stated: He-normal
initialisation.

Variants: `variant` = cnn (original conv), cosine (cosine SphereConv w/o orth.), cosine_orth, linear_orth,
sigmoid_orth (sigmoid k = 0.3, w/ orth.).

Paper: curves only (no numbers); every SphereNet converges faster than the CNN; "the orthogonality
constraints also can bring performance gains in some cases".

Run (CIFAR-10 binary tarball in DIR):
  sphere-tf train-classifier \
    --config spherenet/fig3b_cnn9_orthogonality:variant=cosine_orth \
    --workdir runs/spherenet_f3b --config.data.manual_dir=DIR
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import spherenet

CURVES = {
    "cnn": ("conv", False),
    "cosine": ("cosine", False),
    "cosine_orth": ("cosine", True),
    "linear_orth": ("linear", True),
    "sigmoid_orth": ("sigmoid0.3", True),
}
VARIANTS = {"variant": tuple(CURVES)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, variant="cosine_orth")
    operator, orth = CURVES[common.choose(arg, "variant", VARIANTS["variant"])]
    config = spherenet.cifar_config(
        dict(name="cnn9", operator=spherenet.OPERATORS[operator], head=None),
        regularizers=[dict(spherenet.ORTHONORMAL)] if orth else ())
    if arg.quick:
        common.quick(config, width_multiplier=0.25, name="cnn3")
    return config
