"""The methods of the CoMHE tables (Compressive MHE, Lin et al., CVPR 2020; W. Liu's PhD thesis 2020, ch. 6).

The networks and the CIFAR recipe are MHE's (`sphere_tf/configs/mhe/__init__.py`) with the
rmlin/CoMHE code's schedule: 75,000 iterations, ×0.1 at 30k, 50k and 65k, weight
decay 5e-4. CoMHE (λ = 1, s = 2, half-space) goes on every conv and on `fc`; a layer
whose neuron dimension is at most the projection dimension (the 27-dimensional
first conv) gets plain half-space MHE, as the code does. The classifier gets
full-space MHE with weight 10 (the code's `_add_thomson_constraint_final`).
Projections (thesis §6.3, App. E.1 and the code's defaults):

- `random` (RP): 5 Gaussian projections of dimension 30, re-drawn every step,
  energies averaged (`random_max`: the maximum), shared by layers of equal fan-in;
- `angle_preserving_unrolled` / `_alternating` (AP): one learned P of dimension 30,
  one unrolled step with the network's learning rate 0.1 (or none) and one own
  step per iteration;
- `adversarial`: one learned P of dimension 30 that maximises the energy (10 steps);
- `group`: groups of 8 consecutive channels.

`srip` is the SRIP baseline of Tables 6.1, 6.6 and 6.7 (Bansal, Chen, Wang, "Can We Gain More from
Orthogonality Regularizations in Training Deep CNNs?", NeurIPS 2018; `sphere_tf.regularizers.SRIP`) with the
authors' constants (VITA-Group/Orthogonality-in-CNNs, `ResNet/resnet_cifar_new.py` and
`Wide-Resnet/train_n.py`): λ σ(WᵀW − I) on every conv and `fc`, σ from two power-iteration products,
λ = 0.01 ×1 / 1e-3 / 1e-4 / 1e-6 / 0 from epochs 1 / 21 / 51 / 71 / 121 of 200. The CIFAR runs' 75,000
iterations are 200 runner epochs of 375 steps (`run_length`), so the schedule applies as written; other
run lengths scale its epochs (`srip_schedule`). The CoMHE papers give no SRIP setting of their own; the
classifier gets no SRIP term (the authors' `l2_reg_ortho` covers every weight of rank >= 2, the classifier
included; the CoMHE tables' hidden-layer comparison is kept here, an inference).
"""

from sphere_tf.regularizers import srip

from sphere_tf.configs import common
from sphere_tf.configs import mhe

PROJECTIONS = {
    "random": dict(projection="random"),
    "random_max": dict(projection="random", aggregation="max"),
    "angle_preserving": dict(projection="angle_preserving", unroll=True),
    "angle_preserving_unrolled": dict(projection="angle_preserving", unroll=True),
    "angle_preserving_alternating": dict(projection="angle_preserving", unroll=False),
    "adversarial": dict(projection="adversarial"),
    "group": dict(projection="group"),
}
METHODS = ("baseline", "orthogonal", "mhe", "half_space_mhe", "srip") + tuple(PROJECTIONS)
# The authors' SRIP schedule is stated over 200 epochs (VITA-Group/Orthogonality-in-CNNs).
SRIP_SCHEDULE_EPOCHS = 200


def srip_schedule(epochs=SRIP_SCHEDULE_EPOCHS):
    """The authors' λ schedule (`srip.AUTHORS_SCHEDULE`, over 200 epochs) with its phases moved to the same
    fractions of a run of `epochs` runner epochs (exactly the authors' for 200)."""
    return [[int((first - 1) * epochs / SRIP_SCHEDULE_EPOCHS) + 1, value] for first, value in srip.AUTHORS_SCHEDULE]


def srip_entry(hidden, epochs=SRIP_SCHEDULE_EPOCHS):
    """The `regularizers` entry of the SRIP baseline (module docstring)."""
    return {"name": "srip", "layers": list(hidden), "factor": srip.AUTHORS_FACTOR,
            "power_iterations": srip.AUTHORS_POWER_ITERATIONS, "schedule": srip_schedule(epochs)}


def entries(method, hidden=mhe.PLAIN_HIDDEN, srip_epochs=SRIP_SCHEDULE_EPOCHS, **options):
    """The `regularizers` entries of a CoMHE-table method (after weight decay); `options` go to CoMHE;
    `srip_epochs`: the run's length in runner epochs, for SRIP's schedule."""
    common.check(method, "method", METHODS)
    if method == "srip":
        return [srip_entry(hidden, srip_epochs)]
    if method not in PROJECTIONS:
        return mhe.mhe_entries(method, 2, hidden=hidden)
    hidden_entry = {"name": "comhe", "layers": list(hidden), "factor": 1.0, "power": 2, "half_space": True,
                    "projection_dim": 30, **PROJECTIONS[method], **options}
    return [hidden_entry, {"name": "mhe", "layers": mhe.OUTPUT, "role": "output", "power": 2, "factor": 10.0}]


def cifar_config(*, dataset="cifar100", model=None, method, hidden=mhe.PLAIN_HIDDEN, **options):
    """The CIFAR recipe of `sphere_tf/configs/mhe` with the CoMHE code's 75k-iteration schedule."""
    return mhe.cifar_config(dataset=dataset, model=model or mhe.plain_cnn("cnn9"),
                            regularizers=entries(method, hidden, **options), steps=mhe.COMHE_STEPS,
                            boundaries=mhe.COMHE_BOUNDARIES)
