"""The methods of the CoMHE tables (Compressive MHE, Lin et al., CVPR 2020; W. Liu's PhD thesis 2020, ch. 6).

The networks and the CIFAR recipe are MHE's (`configs/mhe/__init__.py`) with the
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
"""

from configs import mhe

PROJECTIONS = {
    "random": dict(projection="random"),
    "random_max": dict(projection="random", aggregation="max"),
    "angle_preserving": dict(projection="angle_preserving", unroll=True),
    "angle_preserving_unrolled": dict(projection="angle_preserving", unroll=True),
    "angle_preserving_alternating": dict(projection="angle_preserving", unroll=False),
    "adversarial": dict(projection="adversarial"),
    "group": dict(projection="group"),
}
METHODS = ("baseline", "orthogonal", "mhe", "half_space_mhe") + tuple(PROJECTIONS)


def entries(method, hidden=mhe.PLAIN_HIDDEN, **options):
    """The `regularizers` entries of a CoMHE-table method (after weight decay); `options` go to CoMHE."""
    mhe.check(method, "method", METHODS)
    if method not in PROJECTIONS:
        return mhe.mhe_entries(method, 2, hidden=hidden)
    hidden_entry = {"name": "comhe", "layers": list(hidden), "factor": 1.0, "power": 2, "half_space": True,
                    "projection_dim": 30, **PROJECTIONS[method], **options}
    return [hidden_entry, {"name": "mhe", "layers": mhe.OUTPUT, "role": "output", "power": 2, "factor": 10.0}]


def cifar_config(*, dataset="cifar100", model=None, method, hidden=mhe.PLAIN_HIDDEN, **options):
    """The CIFAR recipe of `configs/mhe` with the CoMHE code's 75k-iteration schedule."""
    return mhe.cifar_config(dataset=dataset, model=model or mhe.plain_cnn("cnn9"),
                            regularizers=entries(method, hidden, **options), steps=mhe.COMHE_STEPS,
                            boundaries=mhe.COMHE_BOUNDARIES)
