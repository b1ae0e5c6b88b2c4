r"""SphereNet / DCNet without ReLU, and early convergence, on Fashion-MNIST (CPU-sized).

Claims checked (docs/reproductions.md):

* SphereNet (NIPS 2017) Table 3, CIFAR-10, CNN-9 without ReLU: CNN 80.73% vs cosine SphereNet about 85-86%;
  DCNet (CVPR 2018) Table 3, CIFAR-100 without ReLU: CNN 58.24% error vs about 32% (cosine). Direction: a
  bounded angular operator keeps most of its accuracy without ReLU; a plain CNN without ReLU is nearly linear
  (only max-pool and BN are nonlinear) and loses much more.
* SphereNet Fig. 3(b) (CNN-9, softmax loss, Adam 1e-3, batch 128): SphereNet converges faster in the first
  iterations. Compared here on the per-"epoch" (25-step interval) training loss/accuracy curves with ReLU on.

Paper recipe (Table 3): CIFAR-10, CNN-9 (64/96/128), BN, Adam 1e-3, batch 128, 64k iterations. Here, to fit 2
shared CPU cores: a random 6,000-image subset of Fashion-MNIST (keyed by the seed), the full 10k test set, the
`small_cnn` (two stages of two 3×3 convs at 16/32, FC 64, BN), Adam 1e-3, batch 64, 300 steps (12 intervals
of 25 steps, about 3.2 passes), no augmentation, no weight decay, 3 seeds.

Variants: `operator` in {conv2d, sphere (cosine SphereConv, SphereDense in the FC), tanh (DCNet TanhConv +
cosine)}, `relu` in {True, False}; `quick` for a two-step smoke run.

`full` (the full-data reproduction, `bench/gpu/reproduce.py`): all 60,000 training images, the paper's batch
128 and Adam 1e-3 (constant, as Table 3), 20 passes (9,380 steps), test accuracy after every pass.

Run:
  sphere-tf sweep --config repro/fashion_mnist_no_relu --workdir runs/repro/no_relu \
    --summary reproductions/results/fashion_mnist_no_relu.json
  sphere-tf train-classifier \
    --config repro/fashion_mnist_no_relu:operator=sphere,relu=False --workdir runs/one
"""

from sphere_tf.configs import common

OPERATORS = {
    "conv2d": "conv2d",
    "sphere": {"layer": "sphere", "angular": "cosine"},
    "tanh": {"layer": "decoupled", "magnitude": "tanh", "angular": "cosine"},
}
SWEEP_VARIANTS = [
    "operator=conv2d,relu=False", "operator=sphere,relu=False", "operator=tanh,relu=False",
    "operator=conv2d,relu=True", "operator=sphere,relu=True",
]


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, full=False, operator="conv2d", relu=True)
    if arg.operator not in OPERATORS:
        raise ValueError(f"Config argument operator={arg.operator!r}; expected one of {sorted(OPERATORS)}.")
    operator = OPERATORS[arg.operator]
    config = common.base_config(
        data=dict(name="fashion_mnist", train_limit=6000, test_limit=0),
        model=dict(
            name="small_cnn", widths=(16, 32), convs_per_stage=2, dense_units=64, batch_norm=True,
            relu=arg.relu, operator=operator, fc_operator=None if arg.operator == "conv2d" else operator,
        ),
        optimizer=dict(name="adam", learning_rate=1e-3),
        train=dict(batch_size=64, steps=300, steps_per_epoch=25, verbose=2, checkpoint_every_steps=300),
        export=False,
    )
    if arg.full:  # all 60k training images, 20 passes at the paper's batch 128 (9,380 steps)
        config.data.train_limit = 0
        config.train.update(batch_size=128, steps=0, epochs=20, steps_per_epoch=0, checkpoint_every_steps=0)
    if arg.quick:
        common.quick_train(config)
        config.train.steps = 0
    return config
