r"""SphereNet Fig. 3(d): an ultra-deep plain net, CNN-69 vs SphereNet-69 (no shortcuts).

Deep Hyperspherical Learning (Liu et al., NIPS 2017), Fig. 3(d) (thesis Fig. 3.3d), §4.4.

Recipe (§4.1, §4.4): CNN-69 of App. Table 5 ([3×3]×23 per stage at 64/96/128, FC 256), BN + ReLU, no
shortcuts; SphereNet-69 = cosine SphereConv + cosine W-Softmax, the CNN the original softmax; CIFAR-10 without
augmentation, mean subtraction; ADAM 1e-3, batch 128, ÷10 at 34K and 54K, stop at 64K (the figure's x-axis
ends at 4×10⁴ iterations). Not stated: He-normal initialisation.

Variants: `model` = cnn, spherenet.

Paper: curves only; SphereNet-69 trains to "nearly 90%" test accuracy while the CNN-69 converges much worse.

Run (CIFAR-10 binary tarball in DIR):
  sphere-tf train-classifier \
    --config spherenet/fig3d_cnn69:model=spherenet \
    --workdir runs/spherenet_f3d --config.data.manual_dir=DIR
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import spherenet

SETTINGS = {"cnn": ("conv", "softmax"), "spherenet": ("cosine", "wsoftmax_cosine")}
VARIANTS = {"model": tuple(SETTINGS)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, model="spherenet")
    operator, loss = SETTINGS[common.choose(arg, "model", VARIANTS["model"])]
    config = spherenet.cifar_config(
        dict(name="cnn69", operator=spherenet.OPERATORS[operator], head=spherenet.LOSSES[loss]))
    if arg.quick:
        common.quick(config, width_multiplier=1 / 16, name="cnn3")
    return config
