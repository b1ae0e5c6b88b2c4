"""The recipe shared by the L-Softmax configs (Large-Margin Softmax Loss, Liu et al., ICML 2016).

W. Liu's PhD thesis (2020), §2.2.7 and Table 2.1: VGG-like nets of 3×3 convs (Conv0, then
Conv1.x-Conv3.x each followed by a 2×2 max-pool), an FC feature, then the L-Softmax
classifier (no bias, plain inner product at test time); PReLU, BN, He init, no dropout,
mean subtraction only; batch 256, SGD momentum 0.9, weight decay 5e-4 (Caffe's, on every
kernel: Keras `L2(2.5e-4)`), lr 0.1 ÷10 at 12k and 15k, stop at 18k iterations. λ
annealing λ_t = max(λ_min, base·(1 + γt)^−power) from the authors' prototxts
(wy1iu/LargeMargin_Softmax_Loss): MNIST 1000 / 2.5e-5 / 35, CIFAR-10 1000 / 2e-5 / 45,
CIFAR-10+ 1000 / 1e-5 / 45, λ_min 0.
"""

from sphere_tf.configs import common
from sphere_tf.configs import mhe

# Table 2.1: (stem width, stage widths, convs per stage, FC feature) of each data set's net.
NETS = {
    "mnist": (64, (64, 64, 64), 3, 256),
    "cifar10": (64, (64, 96, 128), 4, 256),
    "cifar10+": (64, (64, 96, 128), 4, 256),
    "cifar100": (96, (96, 192, 384), 4, 512),
}
DATA = {"mnist": ("mnist", "none"), "cifar10": ("cifar10", "none"), "cifar10+": ("cifar10", "cifar_plus"),
        "cifar100": ("cifar100", "none")}
# The authors' prototxts; CIFAR-100 has none (we use the slower CIFAR-10+ schedule).
ANNEALING = {"mnist": "mnist", "cifar10": "cifar10", "cifar10+": "cifar10+", "cifar100": "cifar10+"}
HE_CONV = {"layer": "conv2d", "kernel_initializer": "he_normal"}


def head(loss, margin, annealing):
    """The classifier: a Dense for 'softmax' and 'hinge' (the loss differs), else an L-Softmax `MarginHead`
    with margin m."""
    common.check(loss, "loss", ("hinge", "softmax", "lsoftmax"))
    if loss in ("hinge", "softmax"):
        return None
    return {"layer": "margin", "loss_type": "lsoftmax", "margin": margin, "annealing": annealing}


def config(dataset, model, steps=18000, boundaries=(12000, 15000)):
    """The L-Softmax training recipe (module docstring) on `dataset` (a key of `DATA`) around `model`."""
    name, augmentation = DATA[dataset]
    return common.base_config(
        seed=0,
        data=dict(name=name, augmentation=augmentation, normalization="mean_subtraction"),
        model=model,
        regularizers=[mhe.weight_decay(5e-4)],
        optimizer=dict(name="sgd", learning_rate=0.1, momentum=0.9),
        schedule=dict(name="step", boundaries=list(boundaries), decay_factor=0.1),
        train=dict(batch_size=256, steps=steps, steps_per_epoch=0, checkpoint_every_steps=1000),
        export=True,
    )
