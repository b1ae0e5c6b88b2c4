r"""SphereNet Fig. 3(c): CNN-9 vs SphereNet-9 at four widths.

Deep Hyperspherical Learning (Liu et al., NIPS 2017), Fig. 3(c) (thesis Fig. 3.3c), §4.4.

Recipe (§4.1, §4.4): CNN-9 of App. Table 5 with conv1.x / conv2.x / conv3.x widths 16/32/48, 64/96/128,
128/192/256 or 256/384/512 (FC 256), BN + ReLU; CIFAR-10 without augmentation, mean subtraction; ADAM 1e-3,
batch 128, ÷10 at 34K and 54K, stop at 64K. Not stated in the paper; we use: cosine SphereConv and the
original softmax for both nets (as in Fig. 3(a, b)), He-normal initialisation.

Variants: `width` = 16, 64, 128, 256 (the conv1.x width selecting the row of
`sphere_tf.models.plain_cnn.FIG3C_WIDTHS`); `model` = cnn, spherenet.

Paper: curves only (no numbers); at 16/32/48 SphereNet is "similar to CNNs (slightly worse)" in final
accuracy but still converges faster; its advantage grows with the width.

Run (CIFAR-10 binary tarball in DIR):
  sphere-tf train-classifier \
    --config spherenet/fig3c_cnn9_width:width=16,model=spherenet \
    --workdir runs/spherenet_f3c --config.data.manual_dir=DIR
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import spherenet

# The four rows of Fig. 3(c) (the same as sphere_tf.models.plain_cnn.FIG3C_WIDTHS), keyed by conv1.x's width.
WIDTHS = {"16": (16, 32, 48), "64": (64, 96, 128), "128": (128, 192, 256), "256": (256, 384, 512)}
OPERATORS = {"cnn": "conv", "spherenet": "cosine"}
VARIANTS = {"width": tuple(WIDTHS), "model": tuple(OPERATORS)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, width="16", model="spherenet")
    widths = WIDTHS[common.choose(arg, "width", VARIANTS["width"])]
    operator = OPERATORS[common.choose(arg, "model", VARIANTS["model"])]
    config = spherenet.cifar_config(
        dict(name="cnn9", widths=widths, operator=spherenet.OPERATORS[operator], head=None))
    if arg.quick:
        common.quick(config, width_multiplier=0.125, name="cnn3")
    return config
