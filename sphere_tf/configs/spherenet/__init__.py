"""The recipe shared by the SphereNet configs.

Deep Hyperspherical Learning (Liu et al., NIPS 2017, https://arxiv.org/abs/1711.03189), §4.1 and
App. A/B; Liu, Deep Representation Learning on Hypersphere (PhD thesis 2020), §3.4.

Each config file in this folder is one table or figure of the paper; this module holds the pieces they
share: the operators (table rows), the classifier losses (table columns), the CIFAR recipe (ADAM 1e-3,
batch 128, learning rate ÷10 at 34K and 54K iterations, stop at 64K).
"""

from sphere_tf.configs import common

PAPER = "Deep Hyperspherical Learning (Liu et al., NIPS 2017)"
CIFAR_STEPS = 64000
CIFAR_BOUNDARIES = (34000, 54000)
# He-normal initialisation: not stated in the paper; we use it as L-Softmax (ICML 2016) and DCNet do.
INITIALIZER = "he_normal"


def _sphere(angular, **options):
    return {"layer": "sphere", "angular": angular, "kernel_initializer": INITIALIZER, **options}


# The rows of Tables 1-3: SphereConv with each angular function g, and the original convolution.
OPERATORS = {
    "sigmoid0.1": _sphere("sigmoid", k=0.1),
    "sigmoid0.3": _sphere("sigmoid", k=0.3),
    "sigmoid0.7": _sphere("sigmoid", k=0.7),
    "linear": _sphere("linear"),
    "cosine": _sphere("cosine"),
    "conv": {"layer": "conv2d", "kernel_initializer": INITIALIZER},
}


def _wsoftmax(angular, **options):
    return {"layer": "margin", "loss_type": "wsoftmax", "angular": angular, **options}


# The columns of Table 1: the original softmax, the W-Softmax with each g (Eq. 10; thesis Eq. 3.10), the
# A-Softmax (SphereFace) and the GA-Softmax (Eq. 11) with m = 4. The GA-Softmax of the table is the linear one:
# the paper calls linear GA-Softmax "our proposed large-margin loss" (§3) and the table does not name g.
# λ annealing is not mentioned for the CIFAR runs: off.
LOSSES = {
    "softmax": None,
    "wsoftmax_sigmoid0.1": _wsoftmax("sigmoid", k=0.1),
    "wsoftmax_sigmoid0.3": _wsoftmax("sigmoid", k=0.3),
    "wsoftmax_sigmoid0.7": _wsoftmax("sigmoid", k=0.7),
    "wsoftmax_linear": _wsoftmax("linear"),
    "wsoftmax_cosine": _wsoftmax("cosine"),
    "asoftmax": {"layer": "margin", "loss_type": "asoftmax", "margin": 4},
    "gasoftmax": {"layer": "margin", "loss_type": "gasoftmax", "margin": 4, "angular": "linear"},
}

# Orthogonality ‖WᵀW − I‖²_F on every conv kernel (§2.4); the coefficient is not stated in the paper,
# we use 1e-5, the value of the orthonormal regulariser in Liu's thesis (App. D.1).
ORTHONORMAL = {"name": "orthogonality", "layers": "conv*", "mode": "orthonormal", "factor": 1e-5}


def cifar_config(model, dataset="cifar10", augmentation="none", batch_size=128, regularizers=(), seed=0):
    """The paper's CIFAR recipe (§4.1) for `model` (a dict of the runner's `model` section).

    Mean subtraction only and He-normal initialisation ("we follow the same settings from [He et al.,
    L-Softmax]", §4.1); ADAM 1e-3, batch 128, ÷10 at 34K and 54K iterations, stop at 64K; no weight decay
    for SphereNets ("we stop using the ℓ2 weight decay", §2.4; the baselines' decay is not stated, so none).
    """
    return common.base_config(
        seed=seed,
        data=dict(name=dataset, augmentation=augmentation, normalization="mean_subtraction"),
        model=model,
        regularizers=list(regularizers),
        optimizer=dict(name="adam", learning_rate=1e-3),
        schedule=dict(name="step", boundaries=list(CIFAR_BOUNDARIES), decay_factor=0.1),
        train=dict(batch_size=batch_size, steps=CIFAR_STEPS),
    )
