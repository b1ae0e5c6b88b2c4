"""The recipe shared by the DCNet configs.

Decoupled Networks (Liu et al., CVPR 2018, https://arxiv.org/abs/1804.08071), §6 and App. A, B, F; Liu,
Deep Representation Learning on Hypersphere (PhD thesis 2020), §4.6 and App. C.

Each config file in this folder is one table of the paper (plus the README's Fashion-MNIST job,
`fashion_mnist_tanh_cosine.py`); this module holds what they share: the decoupled operators with the
paper's hyperparameters (App. B), the CIFAR recipe and the quick variant.
"""

from sphere_tf.configs import common

PAPER = "Decoupled Networks (Liu et al., CVPR 2018)"
# "All learning rates are divided by 10 when the error plateaus" (§6), no iteration counts: not stated in the
# paper; we use SphereNet's CIFAR schedule (÷10 at 34K and 54K iterations, stop at 64K).
CIFAR_STEPS = 64000
CIFAR_BOUNDARIES = (34000, 54000)
# "We follow [He et al.] for the initialization" (§6): He-normal for the DCNets and the baselines.
INITIALIZER = "he_normal"
# The rows of Tables 3, 4, 10 (App. B hyperparameters: α = 1; ρ learnable, initialised to 1 (× E‖x‖) for
# BallConv, TanhConv and SegConv; β = 0.5 for SegConv and 1 for MixConv, the layers' defaults).
MAGNITUDES = {
    "sphere": "sphere", "ball": "ball", "tanh": "tanh", "linear": "linear", "seg": "seg", "log": "log",
    "mix": "mix",
}
# The columns: the angular activations g (linear, cosine, squared cosine; D-11..14).
ANGULARS = {"linear": "linear", "cosine": "cosine", "sq_cosine": "sqcosine"}
BASELINE = {"layer": "conv2d", "kernel_initializer": INITIALIZER}
# The quick variants' plain CNN: DCNet's CNN-9 widths with one conv per stage (the registered `cnn3` builder).
QUICK_PLAIN_CNN = {"name": "cnn3", "widths": (64, 128, 256), "dense_units": 512}


def decoupled(magnitude, angular, **options):
    """The operator spec of a decoupled conv with `magnitude` h and `angular` g (keys of the tables)."""
    return {"layer": "decoupled", "magnitude": MAGNITUDES[magnitude], "angular": ANGULARS[angular],
            "kernel_initializer": INITIALIZER, **options}


def table_operator(operator, angular):
    """The operator spec of a table cell: the Conv2D baseline (cosine column only) or `decoupled`."""
    if operator != "baseline":
        return decoupled(operator, angular)
    if angular != "cosine":
        raise no_cell(operator=operator, angular=angular)
    return BASELINE


def no_cell(**variant):
    """The error for a variant combination that is "–" (not run) in the paper's table."""
    text = ", ".join(f"{k}={v!r}" for k, v in variant.items())
    return ValueError(f"Invalid config arguments {text}: the paper's table has no such cell "
                      "(the baseline is run with the cosine column only).")


def cifar_config(model, dataset="cifar100", optimizer=None, projection=True, weighted_gradients=False):
    """DCNet's CIFAR recipe (§6, App. B) for `model` (a dict of the runner's `model` section).

    ADAM 1e-3, batch 128, BN, softmax unless stated; the same augmentation as SphereNet (§6: "the same data
    augmentation protocol … as [SphereNet]"): horizontal and vertical flips and a pad-4 random crop
    (`spherenet_cifar_plus`); the preprocessing is not stated, we use (x − 127.5)/128 as the authors' TF
    code (wy1iu/DCNets); weight projection (s = 1) after every step for the
    unweighted operators (Tables 3, 4: "weight projection"; the interval is not stated, we use every
    step); no ℓ2 weight decay ("no longer suitable", §5). Not stated: the schedule (see CIFAR_STEPS).
    """
    return common.base_config(
        data=dict(name=dataset, augmentation="spherenet_cifar_plus"),
        model=model,
        paradigm=dict(weight_projection_every=1 if projection else 0, weighted_gradients=weighted_gradients),
        optimizer=optimizer or dict(name="adam", learning_rate=1e-3),
        schedule=dict(name="step", boundaries=list(CIFAR_BOUNDARIES), decay_factor=0.1),
        train=dict(batch_size=128, steps=CIFAR_STEPS),
    )

