"""The recipe shared by the ConvNorm configs.

Convolutional Normalization: Improving Deep Convolutional Network Robustness and Training (Liu et al.,
NeurIPS 2021, https://arxiv.org/abs/2103.00673), §4 and App. C; the authors' code shengliu66/ConvNorm.
"""

from sphere_tf.configs import common

PAPER = "Convolutional Normalization (Liu et al., NeurIPS 2021)"
BATCH_SIZE = 128
# 10% of the 50,000 CIFAR training images are held out for validation (§4): 45,000 train.
TRAIN_IMAGES = 45000
# Epochs and learning-rate drops (÷10) of the authors' configs (shengliu66/ConvNorm): CIFAR-10 120 epochs,
# drops at 40 and 80; CIFAR-100 150 epochs, drops at 60 and 120.
SCHEDULES = {"cifar10": (120, (40, 80)), "cifar100": (150, (60, 120))}
# PyTorch's default conv initialisation (kaiming_uniform with a = √5, i.e. U(±1/√fan_in)), which the authors'
# code keeps.
TORCH_INITIALIZER = {"class_name": "VarianceScaling",
                     "config": {"scale": 1.0 / 3.0, "mode": "fan_in", "distribution": "uniform"}}
# The compared normalisations: (conv operator, BatchNorm). ConvNorm carries its own BatchNorm after the
# preconditioner (the authors' `PreConv`): ConvNorm + BN is ConvNorm → BN → ReLU.
METHODS = {
    "vanilla": ("conv2d", False),
    "bn": ("conv2d", True),
    "convnorm": ("conv_norm", False),
    "convnorm_bn": ("conv_norm", True),
}


def model(method, affine=True):
    """The runner's `model` section of the CIFAR ResNet-18 normalised by `method` (a key of METHODS).

    Raises:
        ValueError: `affine=False` with a method without ConvNorm (Table 5 ablates ConvNorm's affine only).
    """
    layer, batch_norm = METHODS[method]
    operator = {"layer": layer, "kernel_initializer": TORCH_INITIALIZER}
    if layer == "conv_norm":
        operator["affine"] = bool(affine)
    elif not affine:
        raise ValueError(f"Invalid config arguments method={method!r}, affine=False: the affine transform is "
                         "ConvNorm's (Table 5); expected method in ['convnorm', 'convnorm_bn'] or affine=true.")
    return dict(name="convnorm_resnet18", operator=operator, batch_norm=batch_norm, head=None)


def cifar_config(model_section, dataset="cifar10", train_images=TRAIN_IMAGES):
    """ConvNorm's CIFAR recipe (§4, App. C; shengliu66/ConvNorm configs) on `train_images` training images.

    SGD, momentum 0.9, learning rate 0.1 ("not sensitive to the learning rate, fixed for all experiments"),
    weight decay 1e-4 (PyTorch's coupled decay (wd/2)·‖w‖² = Keras L2(5e-5) on every kernel), batch 128,
    ÷10 at the epochs of SCHEDULES; random crop with 4-pixel zero padding and horizontal flip
    (`cifar_plus`); a seeded random `train_images` of the 50,000 training images (the rest is the paper's
    validation split).
    """
    epochs, drops = SCHEDULES[dataset]
    steps_per_epoch = train_images // BATCH_SIZE
    return common.base_config(
        data=dict(name=dataset, augmentation="cifar_plus", train_limit=train_images),
        model=model_section,
        regularizers=[dict(name="weight_decay", layers="*", factor=5e-5)],
        optimizer=dict(name="sgd", learning_rate=0.1, momentum=0.9),
        schedule=dict(name="step", boundaries=[e * steps_per_epoch for e in drops], decay_factor=0.1),
        train=dict(batch_size=BATCH_SIZE, epochs=epochs, steps_per_epoch=0),
    )
