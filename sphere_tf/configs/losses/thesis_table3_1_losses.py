r"""The §3.4 loss comparison: W-Softmax, A-Softmax and GA-Softmax against softmax, CNN-9 on CIFAR-10.

Deep Hyperspherical Learning (Liu et al., NIPS 2017), Table 1; W. Liu's PhD thesis (2020),
§3.4 and Table 3.1. Rows: the conv operator (`operator`); columns: the loss (`loss`).
Accuracy % (paper):

(columns: softmax, wsoftmax_sigmoid0.1, wsoftmax_sigmoid0.3, wsoftmax_sigmoid0.7, wsoftmax_linear,
wsoftmax_cosine, asoftmax, gasoftmax)

| operator \ loss | softmax | W σ0.1 | W σ0.3 | W σ0.7 | W lin | W cos | A m=4 | GA m=4 |
|-----------------|---------|-------|-------|-------|-------|-------|-------|-------|
| sigmoid0.1      | 90.97   | 90.91 | 90.89 | 90.88 | 91.07 | 91.13 | 91.87 | 91.99 |
| sigmoid0.3      | 91.08   | 91.44 | 91.37 | 91.21 | 91.34 | 91.28 | 92.13 | 92.38 |
| sigmoid0.7      | 91.05   | 91.16 | 91.47 | 91.07 | 90.99 | 91.18 | 92.22 | 92.36 |
| linear          | 91.10   | 90.93 | 91.42 | 90.96 | 90.95 | 91.24 | 92.21 | 92.32 |
| cosine          | 90.89   | 90.88 | 91.08 | 91.22 | 91.17 | 90.99 | 91.94 | 92.19 |
| conv            | 90.58   | 90.58 | 90.73 | 90.78 | 91.08 | 90.68 | 91.78 | 91.80 |

The same grid is SphereNet's Table 1 (sphere_tf/configs/spherenet/ of the SphereNet configs); this
file is the thesis's loss-centred reading of it (§3.4: W-Softmax ≈ softmax, the large
margin of A-/GA-Softmax adds about a point on an ordinary CNN).

Recipe (thesis §3.4.1): CNN-9 of thesis Table B.1 ([3×3] × 3 at
64/96/128, FC 256), BN + ReLU, CIFAR-10 with horizontal flips only, Adam lr 1e-3, batch 128,
÷10 at 34k and 54k, 64k iterations; A-/GA-Softmax m = 4. Not stated, our choices: the
GA-Softmax g is the thesis's proposed linear one ("linear GA-Softmax"), the A-Softmax λ
annealing is SphereFace's (base 1000, γ 0.12, power 1, λ_min 5), inputs (x − 127.5)/128
(the authors' TF code), SphereConv operators without weight decay or orthonormality.

Run:
  sphere-tf train-classifier \
    --config losses/thesis_table3_1_losses:operator=conv,loss=gasoftmax \
    --workdir runs/losses_t3_1 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import common

OPERATORS = {
    "sigmoid0.1": {"layer": "sphere", "angular": "sigmoid", "k": 0.1},
    "sigmoid0.3": {"layer": "sphere", "angular": "sigmoid", "k": 0.3},
    "sigmoid0.7": {"layer": "sphere", "angular": "sigmoid", "k": 0.7},
    "linear": {"layer": "sphere", "angular": "linear"},
    "cosine": {"layer": "sphere", "angular": "cosine"},
    "conv": {"layer": "conv2d"},
}
LOSSES = {
    "softmax": None,
    "wsoftmax_sigmoid0.1": {"layer": "margin", "loss_type": "wsoftmax", "angular": "sigmoid", "k": 0.1},
    "wsoftmax_sigmoid0.3": {"layer": "margin", "loss_type": "wsoftmax", "angular": "sigmoid", "k": 0.3},
    "wsoftmax_sigmoid0.7": {"layer": "margin", "loss_type": "wsoftmax", "angular": "sigmoid", "k": 0.7},
    "wsoftmax_linear": {"layer": "margin", "loss_type": "wsoftmax", "angular": "linear"},
    "wsoftmax_cosine": {"layer": "margin", "loss_type": "wsoftmax", "angular": "cosine"},
    "asoftmax": {"layer": "margin", "loss_type": "asoftmax", "margin": 4, "annealing": "sphereface"},
    "gasoftmax": {"layer": "margin", "loss_type": "gasoftmax", "angular": "linear", "margin": 4},
}
VARIANTS = {"operator": tuple(OPERATORS), "loss": tuple(LOSSES)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, operator="conv", loss="asoftmax")
    common.check(arg.operator, "operator", OPERATORS)
    common.check(arg.loss, "loss", LOSSES)
    head = LOSSES[arg.loss]
    config = common.base_config(
        seed=0,
        data=dict(name="cifar10", augmentation="flip"),
        model=dict(name="cnn9", batch_norm=True, operator=dict(OPERATORS[arg.operator]),
                   head=None if head is None else dict(head)),
        optimizer=dict(name="adam", learning_rate=1e-3),
        schedule=dict(name="step", boundaries=[34000, 54000], decay_factor=0.1),
        train=dict(batch_size=128, steps=64000, steps_per_epoch=0, checkpoint_every_steps=1000),
        export=True,
    )
    return common.quick_narrow(config) if arg.quick else config
