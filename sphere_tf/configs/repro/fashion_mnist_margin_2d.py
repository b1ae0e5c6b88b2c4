r"""L-Softmax / A-Softmax with a 2-D feature on Fashion-MNIST: accuracy and angular compactness (CPU-sized).

Claim checked (docs/reproductions.md): "Large-Margin Softmax Loss for Convolutional Neural Networks" (ICML
2016) Fig. 2 (thesis Fig. 2.2): on MNIST with a 2-D feature, a larger margin m gives more compact, better
separated angular class distributions than softmax (the paper shows scatter plots, no numbers; SphereFace's
Fig. A.5 shows the same for A-Softmax). Quantitative proxy (Liu's thesis Eq. A.1): the angular Fisher score
(intra-class over inter-class angular scatter, lower is more compact) of the test features; also the test
accuracy of the plain logits. The 2-D features are plotted in docs/img/repro_margin_2d.png.

Paper recipe (Table 2.1, "MNIST (for Figure 2)"): [5×5 conv]×2 at 32/64/128, 2×2 max-pools, PReLU, FC 2;
SGD momentum 0.9, lr 0.01 (batch 256 in the thesis), λ annealed from 1000 (base 1000, γ 2.5e-5, power 35),
MNIST 60k, about 18k iterations.

Here, to fit 2 shared CPU cores: Fashion-MNIST (the MNIST-format set on this machine), a random 12,000-image
subset (keyed by the seed), the full 10k test set, the `mnist_2d` net at a quarter of its widths (8/16/32,
`width_multiplier=0.25`), Adam 1e-3 (not the paper's optimizer: SGD at lr 0.01 does not get far in 400 steps),
batch 64, 400 steps (intervals of 50), λ = 100·(1 + 0.05 t)^−2 (a fast version of the paper's annealing that
reaches λ ≈ 0.23 at step 400; with the paper's schedule λ would still be about 900 after 400 steps, i.e. no
margin), 3 seeds.

Variants: `loss` in {softmax (plain Dense logits), lsoftmax_m2, lsoftmax_m4, asoftmax_m4}; `width` (the
`mnist_2d` width multiplier; 0 = the recipe's: 0.25 for `recipe=adam`, the paper's 1 for `recipe=paper`);
`recipe` in {adam (the recipe above), paper}; `quick`.

`recipe=paper` is the authors' MNIST recipe of the figure (thesis §2.2.7, Table 2.1; sphere_tf/configs/losses/__init__.py):
the full-width net with He-initialised convs, batch 256, SGD lr 0.1 momentum 0.9, weight decay 5e-4, ÷10 at 12k
and 15k, 18k iterations, mean subtraction, the authors' MNIST λ schedule. It is the check that the margin claim's
failure at quarter width is not an implementation error (docs/reproductions.md §5).

`full` (the full-data reproduction, `bench/gpu/reproduce.py`): all 60,000 training images, 15 passes at batch 64
(14,070 steps, the paper's MNIST run is about 18k iterations) with the authors' MNIST λ schedule
(λ = 1000·(1 + 2.5e-5·t)^−35, preset 'mnist', about 0.03 at the end), test accuracy after every pass.

Run:
  sphere-tf sweep --config repro/fashion_mnist_margin_2d --workdir runs/repro/margin_2d \
    --summary reproductions/results/fashion_mnist_margin_2d.json
  python reproductions/plot_reproductions.py --runs runs/repro   # the 2-D feature plots and Fisher scores
"""

from sphere_tf.configs import common
from sphere_tf.configs import losses

# λ = base · (1 + γ t)^−power, floored at lambda_min (sphere_tf.layers.MarginHead's annealing dict).
SHORT_ANNEALING = {"base": 100.0, "gamma": 0.05, "power": 2.0, "lambda_min": 0.0}
HEADS = {
    "softmax": None,
    "lsoftmax_m2": {"layer": "margin", "loss_type": "lsoftmax", "margin": 2, "annealing": SHORT_ANNEALING},
    "lsoftmax_m4": {"layer": "margin", "loss_type": "lsoftmax", "margin": 4, "annealing": SHORT_ANNEALING},
    "asoftmax_m4": {"layer": "margin", "loss_type": "asoftmax", "margin": 4, "annealing": SHORT_ANNEALING},
}
SWEEP_VARIANTS = ["loss=softmax", "loss=lsoftmax_m2", "loss=lsoftmax_m4"]
RECIPES = ("adam", "paper")
DEFAULT_WIDTH = {"adam": 0.25, "paper": 1.0}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, full=False, loss="lsoftmax_m4", width=0.0, recipe="adam")
    if arg.loss not in HEADS:
        raise ValueError(f"Config argument loss={arg.loss!r}; expected one of {sorted(HEADS)}.")
    common.check(arg.recipe, "recipe", RECIPES)
    if arg.width < 0:
        raise ValueError(f"Config argument width={arg.width!r}; expected a positive multiplier or 0 (the recipe's).")
    width = arg.width or DEFAULT_WIDTH[arg.recipe]
    if arg.recipe == "paper":
        head = HEADS[arg.loss] and {**HEADS[arg.loss], "annealing": "mnist"}
        model = dict(name="mnist_2d", width_multiplier=width, operator=dict(losses.HE_CONV), head=head)
        config = losses.config("mnist", model)
        config.data.update(name="fashion_mnist", train_limit=0, test_limit=0)
        config.train.update(steps_per_epoch=0, checkpoint_every_steps=0)
        config.export = False
        if arg.quick:
            common.quick_train(config)
            config.train.steps = 0
        return config
    config = common.base_config(
        data=dict(name="fashion_mnist", train_limit=12000, test_limit=0),
        model=dict(name="mnist_2d", width_multiplier=width, head=HEADS[arg.loss]),
        optimizer=dict(name="adam", learning_rate=1e-3),
        train=dict(batch_size=64, steps=400, steps_per_epoch=50, verbose=2, checkpoint_every_steps=400),
        export=False,
    )
    if arg.full:  # all 60k training images, 15 passes at batch 64 (14,070 steps), upstream MNIST annealing
        config.data.train_limit = 0
        if config.model.head is not None:
            config.model.head = {**config.model.head, "annealing": "mnist"}
        config.train.update(steps=0, epochs=15, steps_per_epoch=0, checkpoint_every_steps=0)
    if arg.quick:
        common.quick_train(config)
        config.train.steps = 0
    return config
