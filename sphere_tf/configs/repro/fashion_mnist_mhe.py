r"""MHE / HS-MHE / RP-CoMHE on a narrow CNN on Fashion-MNIST, with the tracked hyperspherical energy (CPU-sized).

Claims checked (docs/reproductions.md):

* "Learning towards Minimum Hyperspherical Energy" (NeurIPS 2018) / Liu's thesis (2020) Tables 5.2 and 6.4
  (t = 1), CIFAR-100, narrow CNN-9 (16/32/64): error 47.72% (baseline) → 36.84% (MHE) → 35.16% (HS-MHE) →
  34.73% (RP-CoMHE). Direction: MHE-family regularizers lower the error of a narrow network.
* "Compressive Hyperspherical Energy Minimization" (CVPR 2020) / thesis Fig. 6.2 and E.2-E.7: RP-CoMHE lowers
  the unprojected half-space s = 1 energy of the hidden layers (thesis Eq. E.2) more than HS-MHE; both lower it
  compared with no regularizer. Tracked per interval as `energy/<layer>` in the run's history.

Paper recipe (Table 5.2): CIFAR-100, CNN-9 at 16/32/64, BN + ReLU, SGD momentum 0.9, lr 0.1 divided by 10 at
20k/30k/37.5k, 42.5k iterations, batch 128, weight decay 1e-4; MHE s = 2; λ: the authors' code uses 1 (hidden)
and 10 (output), which are `sphere_tf.regularizers.MHE`'s defaults. CoMHE: projection dimension 30, 5
projections re-sampled every step, shared between layers of equal neuron dimension; layers whose neuron
dimension is at most 30 (here the first conv, 3·3·1 = 9) use plain HS-MHE, as the thesis does.

Here, to fit 2 shared CPU cores: a random 12,000-image subset of Fashion-MNIST (keyed by the seed), the full
10k test set, the `small_cnn` at 16/32 with FC 64 (BN + ReLU), SGD lr 0.05 momentum 0.9, constant rate, no
weight decay (not stated for a short run; we leave it off in every variant), batch 128, 282 steps (3 passes,
intervals of 47 steps), 3 seeds. The hidden layers are `conv*` and `fc`; the output layer `logits` gets
full-space MHE (s = 2, λ 10) in every regularized variant. Every variant tracks the energy of the same layers,
`conv*`, `fc` and `logits` (`train.energy_layers`), the unregularized baseline included.

Variants: `reg` in {none, mhe (full-space hidden), hs_mhe (half-space hidden), rp_comhe}; `quick`.

`full` (the full-data reproduction, `bench/gpu/reproduce.py`): all 60,000 training images, 20 passes (9,380
steps) with cosine decay from 0.05 (the paper divides a rate of 0.1 by 10 twice), energy and test accuracy after
every pass.

Run:
  sphere-tf sweep --config repro/fashion_mnist_mhe --workdir runs/repro/mhe \
    --summary reproductions/results/fashion_mnist_mhe.json
"""

from sphere_tf.configs import common

HIDDEN = ["conv*", "fc"]
# The layers whose energy every variant logs: the regularized ones of the MHE variants.
TRACKED = HIDDEN + ["logits"]
_OUTPUT = {"name": "mhe", "layers": "logits", "role": "output", "power": 2}
REGULARIZERS = {
    "none": [],
    "mhe": [{"name": "mhe", "layers": HIDDEN, "role": "hidden", "power": 2, "half_space": False}, _OUTPUT],
    "hs_mhe": [{"name": "mhe", "layers": HIDDEN, "role": "hidden", "power": 2, "half_space": True}, _OUTPUT],
    "rp_comhe": [{"name": "comhe", "layers": HIDDEN, "projection": "random", "projection_dim": 30,
                  "num_projections": 5, "resample_every": 1, "share_projections": True, "power": 2,
                  "half_space": True}, _OUTPUT],
}
SWEEP_VARIANTS = ["reg=none", "reg=mhe", "reg=hs_mhe", "reg=rp_comhe"]


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, full=False, reg="hs_mhe")
    if arg.reg not in REGULARIZERS:
        raise ValueError(f"Config argument reg={arg.reg!r}; expected one of {sorted(REGULARIZERS)}.")
    config = common.base_config(
        data=dict(name="fashion_mnist", train_limit=12000, test_limit=0),
        model=dict(name="small_cnn", widths=(16, 32), convs_per_stage=2, dense_units=64, batch_norm=True),
        regularizers=REGULARIZERS[arg.reg],
        optimizer=dict(name="sgd", learning_rate=0.05, momentum=0.9),
        train=dict(batch_size=128, steps=282, steps_per_epoch=47, verbose=2, checkpoint_every_steps=282,
                   energy_layers=list(TRACKED)),
        export=False,
    )
    if arg.full:  # all 60k training images, 20 passes (9,380 steps), cosine decay
        config.data.train_limit = 0
        config.schedule = {"name": "cosine", "decay_steps": 0, "alpha": 0.0}
        config.train.update(steps=0, epochs=20, steps_per_epoch=0, checkpoint_every_steps=0)
    if arg.quick:
        common.quick_train(config)
        config.train.steps = 0
    return config
