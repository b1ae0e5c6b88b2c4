r"""ConvNorm Fig. 4 (middle panel): test accuracy over iterations, CIFAR-10 ResNet-18, no augmentation or decay.

Convolutional Normalization (Liu et al., NeurIPS 2021), Fig. 4 and §4.2 ("Improved training on supervised
learning"): "to isolate the effects of the normalization layers for training, we train on CIFAR-10 and
ImageNet without using any augmentation, regularization, and learning rate decay"; the claim: ConvNorm
converges faster and more stably than BatchNorm, "1000 iterations of training with ConvNorm lead to
generalization performance comparable to 8000 iterations of training using BatchNorm". The figure has no
numbers in the text.

Recipe: the Table 4 setting (sphere_tf/configs/convnorm/table4_cifar_resnet18.py: the authors' CIFAR ResNet-18, SGD
momentum 0.9, learning rate 0.1, batch 128, 45,000 training images) with the three things the paper drops:
no augmentation, no weight decay, a constant learning rate. Not stated in the paper; we use: 20,000 iterations
(past the 8,000 of the claim), the test set evaluated every 250 iterations (`evaluation.eval_every_steps`; the
curve is `results.json`'s `history`, `val_error` / `val_step`, and TensorBoard). The figure's other panels
(VGG16 on CIFAR-10, ResNet-18 on ImageNet) have no config: the zoo has no VGG16, and the paper gives no
ImageNet recipe (docs/experiments.md). Fig. 6 (the same curves with augmentation, weight decay and decay) is
`table4_cifar_resnet18.py` with `--config.evaluation.eval_every_steps=351` (one epoch).

Variants: `method` = vanilla, bn, convnorm, convnorm_bn.

Run (CIFAR-10 binary tarball in DIR):
  sphere-tf train-classifier \
    --config convnorm/fig4_convergence:method=convnorm_bn \
    --workdir runs/convnorm_f4 --config.data.manual_dir=DIR
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import convnorm

# Not stated in the paper (see the docstring): the run length and the evaluation interval.
STEPS = 20000
EVAL_EVERY = 250
VARIANTS = {"method": tuple(convnorm.METHODS)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, method="convnorm_bn")
    method = common.choose(arg, "method", VARIANTS["method"])
    config = convnorm.cifar_config(convnorm.model(method))
    config.data.augmentation = "none"
    config.regularizers = []
    config.schedule = common.base_config().schedule  # constant
    config.train.steps = STEPS
    config.train.steps_per_epoch = EVAL_EVERY
    config.evaluation.eval_every_steps = EVAL_EVERY
    if arg.quick:
        common.quick(config, width_multiplier=1 / 16, blocks_per_stage=1)
        config.evaluation.eval_every_steps = 2
    return config
