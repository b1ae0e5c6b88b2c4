r"""SphereNet §4.3: learnable SphereConv (sigmoid g with a learned k per filter) on CNN-9, CIFAR-10.

Deep Hyperspherical Learning (Liu et al., NIPS 2017), §2.5 and §4.3 (thesis §3.2.5, §3.4.3, Fig. 3.4).

Recipe (§2.5, §4.1, §4.3): CNN-9 of App. Table 5 (64/96/128, FC 256), BN + ReLU, sigmoid SphereConv whose k is
learned by back-propagation independently for every filter, initialised to 0.5 (kept positive), cosine
W-Softmax; CIFAR-10 without augmentation (the paper's wording is "without full data augmentation"; §4.1 also
mentions left-right flips: `augmentation=flip`), mean subtraction; ADAM 1e-3, batch 128, ÷10 at 34K and 54K,
stop at 64K. Not stated: He-normal initialisation.

Variants: `k` = learnable (the paper's learnable SphereConv) or a fixed 0.1, 0.3, 0.7 (the Table 1 baselines
with the cosine W-Softmax); `augmentation` = none, flip.

Paper's test accuracy (%): learnable 91.64; best fixed sigmoid "91.22" in the text (Table 1 itself gives
sigmoid 0.1 / 0.3 / 0.7 with cosine W-Softmax 91.13 / 91.28 / 91.18).

Run (CIFAR-10 binary tarball in DIR):
  sphere-tf train-classifier \
    --config spherenet/learnable_k_cnn9:k=learnable \
    --workdir runs/spherenet_learnable_k --config.data.manual_dir=DIR
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import spherenet

OPERATORS = {
    "learnable": {"layer": "sphere", "angular": "sigmoid", "learnable_k": True, "learnable_k_init": 0.5,
                  "kernel_initializer": spherenet.INITIALIZER},
    "0.1": spherenet.OPERATORS["sigmoid0.1"],
    "0.3": spherenet.OPERATORS["sigmoid0.3"],
    "0.7": spherenet.OPERATORS["sigmoid0.7"],
}
VARIANTS = {"k": tuple(OPERATORS), "augmentation": ("none", "flip")}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, k="learnable", augmentation="none")
    operator = OPERATORS[common.choose(arg, "k", VARIANTS["k"])]
    augmentation = common.choose(arg, "augmentation", VARIANTS["augmentation"])
    config = spherenet.cifar_config(
        dict(name="cnn9", operator=operator, head=spherenet.LOSSES["wsoftmax_cosine"]), augmentation=augmentation)
    if arg.quick:
        common.quick(config, width_multiplier=0.25, name="cnn3")
    return config
