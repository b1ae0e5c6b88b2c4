r"""SphereNet Table 1: CNN-9 on CIFAR-10 without augmentation, every SphereConv operator × every loss.

Deep Hyperspherical Learning (Liu et al., NIPS 2017), Table 1 (thesis Table 3.1), §4.2.

Recipe (§4.1): CIFAR-10 "without any data augmentation" (§4.2), mean subtraction only; CNN-9 of App. Table 5
([3×3]×3 per stage at 64/96/128, 2×2 max-pool after each stage, FC 256), BN + ReLU after every conv and the
FC; ADAM, learning rate 1e-3, batch 128, ÷10 at 34K and 54K iterations, stop at 64K; no weight decay.
Not stated in the paper; we use: He-normal initialisation (as L-Softmax and DCNet), the linear g for the
GA-Softmax column (the paper's "proposed large-margin loss"), no λ annealing for the A-/GA-Softmax.

Variants: `operator` (rows) = sigmoid0.1, sigmoid0.3, sigmoid0.7, linear, cosine, conv (original conv);
`loss` (columns) = softmax, wsoftmax_sigmoid0.1, wsoftmax_sigmoid0.3, wsoftmax_sigmoid0.7, wsoftmax_linear,
wsoftmax_cosine, asoftmax (m = 4), gasoftmax (m = 4).

Paper's test accuracy (%):

| operator \ loss | softmax | W sig0.1 | W sig0.3 | W sig0.7 | W linear | W cosine | A-Softmax | GA-Softmax |
|---|---|---|---|---|---|---|---|---|
| sigmoid0.1 | 90.97 | 90.91 | 90.89 | 90.88 | 91.07 | 91.13 | 91.87 | 91.99 |
| sigmoid0.3 | 91.08 | 91.44 | 91.37 | 91.21 | 91.34 | 91.28 | 92.13 | 92.38 |
| sigmoid0.7 | 91.05 | 91.16 | 91.47 | 91.07 | 90.99 | 91.18 | 92.22 | 92.36 |
| linear | 91.10 | 90.93 | 91.42 | 90.96 | 90.95 | 91.24 | 92.21 | 92.32 |
| cosine | 90.89 | 90.88 | 91.08 | 91.22 | 91.17 | 90.99 | 91.94 | 92.19 |
| conv | 90.58 | 90.58 | 90.73 | 90.78 | 91.08 | 90.68 | 91.78 | 91.80 |

Run (CIFAR-10 binary tarball in DIR):
  sphere-tf train-classifier \
    --config spherenet/table1_cifar10_cnn9:operator=cosine,loss=wsoftmax_cosine \
    --workdir runs/spherenet_t1 --config.data.manual_dir=DIR
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import spherenet

VARIANTS = {"operator": tuple(spherenet.OPERATORS), "loss": tuple(spherenet.LOSSES)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, operator="cosine", loss="wsoftmax_cosine")
    operator = common.choose(arg, "operator", VARIANTS["operator"])
    loss = common.choose(arg, "loss", VARIANTS["loss"])
    config = spherenet.cifar_config(
        dict(name="cnn9", operator=spherenet.OPERATORS[operator], head=spherenet.LOSSES[loss]))
    if arg.quick:
        common.quick(config, width_multiplier=0.25, name="cnn3")
    return config
