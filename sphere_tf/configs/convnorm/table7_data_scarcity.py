r"""ConvNorm Table 7: data scarcity, CIFAR-10 ResNet-18 trained on 10 / 30 / 50 / 70% of the training set.

Convolutional Normalization (Liu et al., NeurIPS 2021), Table 7 and Fig. 3, §4.

Recipe (§4, App. C; the authors' code shengliu66/ConvNorm): the Table 4 setting (CIFAR ResNet-18, SGD momentum
0.9, learning rate 0.1, weight decay 1e-4, batch 128, 120 epochs with the rate ÷10 at epochs 40 and 80, random
crop with 4-pixel padding and horizontal flip) on a random 10 / 30 / 50 / 70% of the 45,000 training images
(4,500 / 13,500 / 22,500 / 31,500; a seeded random subset, `data.train_limit`); the validation and test sets
are unchanged. Differences from the paper (the runner's choices): (x − 127.5)/128 inputs instead of the
per-channel standardisation; the final model is tested (the paper tests the best-validation model); the
weight decay applies to the kernels only.

Variants: `fraction` = 10, 30, 50, 70 (percent); `method` = vanilla, bn, convnorm, convnorm_bn.

Paper's test accuracy (%, mean ± std):

| method | 10% | 30% | 50% | 70% |
|---|---|---|---|---|
| convnorm_bn | 77.96 ± 0.11 | 87.66 ± 0.23 | 90.49 ± 0.17 | 90.71 ± 0.15 |
| convnorm | 69.23 ± 0.94 | 83.93 ± 0.34 | 87.83 ± 0.21 | 89.85 ± 0.10 |
| bn | 67.10 ± 2.59 | 84.24 ± 0.51 | 88.74 ± 0.73 | 90.41 ± 0.33 |
| vanilla | 67.56 ± 0.50 | 81.98 ± 0.78 | 86.57 ± 0.35 | 87.61 ± 0.86 |

Run (CIFAR-10 binary tarball in DIR):
  sphere-tf train-classifier \
    --config convnorm/table7_data_scarcity:fraction=10,method=convnorm_bn \
    --workdir runs/convnorm_t7 --config.data.manual_dir=DIR
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import convnorm

FRACTIONS = (10, 30, 50, 70)
VARIANTS = {"fraction": FRACTIONS, "method": tuple(convnorm.METHODS)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, fraction=10, method="convnorm_bn")
    fraction = common.choose(arg, "fraction", FRACTIONS)
    method = common.choose(arg, "method", VARIANTS["method"])
    config = convnorm.cifar_config(convnorm.model(method), train_images=convnorm.TRAIN_IMAGES * fraction // 100)
    if arg.quick:
        common.quick(config, width_multiplier=1 / 16, blocks_per_stage=1)
    return config
