r"""ConvNorm Table 6: symmetric label noise, CIFAR-10 ResNet-18 (max test accuracy).

Convolutional Normalization (Liu et al., NeurIPS 2021), Table 6 and Fig. 3, §4 "robustness to label noise".

Recipe (§4, App. C; the authors' code shengliu66/ConvNorm): the Table 4 setting (CIFAR ResNet-18, SGD momentum
0.9, learning rate 0.1, weight decay 1e-4, batch 128, 120 epochs with the rate ÷10 at epochs 40 and 80, random
crop with 4-pixel padding and horizontal flip, 45,000 training images) with 20 / 40 / 60 / 80 % of the
training labels redrawn (`data.label_noise`, `data.label_noise_type='symmetric'`): the authors'
`symmetric_noise` (`data_loader/cifar10.py`, flag `trainer.sym`, rate `trainer.percent`) redraws exactly
⌈p·n⌉ labels uniformly over all 10 classes, their own included, so about 0.9·p of the labels change; the
test labels are clean. The paper reports the **maximum** test accuracy over training: the test set is
evaluated every epoch (`evaluation.eval_every_steps` = 351 steps, 45,000 // 128) and the best evaluation is
kept (`evaluation.select_best`; the authors' `train.py` keeps `best_acc` the same way). Differences from the
paper (the runner's choices): (x − 127.5)/128 inputs instead of the per-channel standardisation; the
authors also noise their 5,000 held-out validation images, which the runner does not use; the weight decay
applies to the kernels only; the noisy labels are drawn from the run's `seed` (the authors' NumPy state is
unseeded).

Variants: `noise` = 20, 40, 60, 80 (percent); `method` = vanilla, bn, convnorm, convnorm_bn.

Paper's max test accuracy (%, mean ± std):

| method | 20% | 40% | 60% | 80% |
|---|---|---|---|---|
| convnorm_bn | 88.94 ± 0.36 | 85.88 ± 0.26 | 79.54 ± 0.73 | 69.26 ± 0.59 |
| convnorm | 87.75 ± 0.13 | 84.16 ± 0.71 | 77.48 ± 0.26 | 54.11 ± 2.65 |
| bn | 86.98 ± 0.12 | 81.88 ± 0.29 | 74.14 ± 0.56 | 53.82 ± 1.04 |
| vanilla | 85.94 ± 0.25 | 82.11 ± 0.52 | 76.75 ± 0.20 | 57.20 ± 0.71 |

Run (CIFAR-10 binary tarball in DIR):
  sphere-tf train-classifier \
    --config convnorm/table6_label_noise:noise=80,method=convnorm_bn \
    --workdir runs/convnorm_t6 --config.data.manual_dir=DIR
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import convnorm

NOISE_PERCENTS = (20, 40, 60, 80)
VARIANTS = {"noise": NOISE_PERCENTS, "method": tuple(convnorm.METHODS)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, noise=20, method="convnorm_bn")
    noise = common.choose(arg, "noise", NOISE_PERCENTS)
    method = common.choose(arg, "method", VARIANTS["method"])
    config = convnorm.cifar_config(convnorm.model(method))
    config.data.label_noise = noise / 100
    config.data.label_noise_type = "symmetric"
    # "Max test accuracy": the test set after every epoch, the best evaluation kept.
    config.evaluation.eval_every_steps = convnorm.TRAIN_IMAGES // convnorm.BATCH_SIZE
    config.evaluation.select_best = True
    if arg.quick:
        common.quick(config, width_multiplier=1 / 16, blocks_per_stage=1)
        config.evaluation.eval_every_steps = 2
    return config
