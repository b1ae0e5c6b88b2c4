r"""ConvNorm Tables 4 and 5: CIFAR ResNet-18 with no normalisation, BN, ConvNorm, ConvNorm + BN (± affine).

Convolutional Normalization (Liu et al., NeurIPS 2021), Table 4 ("generalization, standard setting") and
Table 5 (ablation of the affine transform and BN), §4.

Recipe (§4, App. C; epochs, learning rate and decay from the authors' code shengliu66/ConvNorm): the CIFAR
ResNet-18 of the authors' `models/resnet.py` (3×3,64 stem, no max-pool, 2 basic blocks at 64/128/256/512,
average pool) with ConvNorm in every conv (shortcuts included) and/or BN; 10% of the training set held out
for validation (45,000 training images); random crop with 4-pixel padding and horizontal flip; SGD, momentum
0.9, learning rate 0.1, weight decay 1e-4, batch 128; CIFAR-10 120 epochs with the rate ÷10 at epochs 40 and
80, CIFAR-100 150 epochs, ÷10 at 60 and 120. Differences from the paper (the runner's choices): the inputs
are scaled as (x − 127.5)/128 instead of the per-channel mean/std standardisation (mean (0.4914, 0.4822,
0.4465), std (0.2023, 0.1994, 0.2010)); the 5,000 held-out images are not used for model selection (the final
model is tested); the weight decay applies to the kernels only (PyTorch decays every parameter).

Variants: `method` = vanilla, bn, convnorm, convnorm_bn; `affine` = true, false (ConvNorm's learnable affine
transform; false only with ConvNorm); `dataset` = cifar10, cifar100.

Paper's test accuracy (%, mean ± std):

| method | CIFAR-10 | CIFAR-100 |
|---|---|---|
| vanilla | 91.58 ± 0.67 | 66.59 ± 0.72 |
| bn | 93.18 ± 0.16 | 73.06 ± 0.13 |
| convnorm | 92.12 ± 0.32 | 68.20 ± 0.27 |
| convnorm_bn | 93.31 ± 0.17 | 73.38 ± 0.24 |

Table 5 (CIFAR-10): convnorm_bn affine=true 93.31 ± 0.17, affine=false 93.18 ± 0.16 (equal to the BN-only
number of Table 4, possibly a copy error in the paper); convnorm affine=true 92.12 ± 0.32, affine=false
92.01 ± 0.21.

Run (CIFAR binary tarballs in DIR):
  sphere-tf train-classifier \
    --config convnorm/table4_cifar_resnet18:method=convnorm_bn,dataset=cifar10 \
    --workdir runs/convnorm_t4 --config.data.manual_dir=DIR
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import convnorm

VARIANTS = {"method": tuple(convnorm.METHODS), "affine": ("true", "false"), "dataset": ("cifar10", "cifar100")}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, method="convnorm_bn", affine="true", dataset="cifar10")
    method = common.choose(arg, "method", VARIANTS["method"])
    affine = common.choose(arg, "affine", VARIANTS["affine"]) == "true"
    dataset = common.choose(arg, "dataset", VARIANTS["dataset"])
    config = convnorm.cifar_config(convnorm.model(method, affine), dataset=dataset)
    if arg.quick:
        common.quick(config, width_multiplier=1 / 16, blocks_per_stage=1)
    return config
