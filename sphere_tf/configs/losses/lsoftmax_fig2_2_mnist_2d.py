r"""L-Softmax Fig. 2.2 / SphereFace Fig. A.5: 2-D MNIST features under softmax and L- / A-Softmax m = 2, 3, 4.

Large-Margin Softmax Loss for Convolutional Neural Networks (ICML 2016), Fig. 2; W. Liu's
PhD thesis (2020), Fig. 2.2 and Table 2.1's "MNIST (for Figure 2.2)" net: [5×5] × 2 at
32/64/128 (pad 2), 2×2 max-pools, FC 2 (the zoo's `mnist_2d`, PReLU + BN). The figure shows
the training / test features; the paper gives no numbers for it (the claim is the ordering:
the angular spread of each class shrinks as m grows).

`loss=asoftmax` is thesis Fig. A.5 (App. A.4, the A-Softmax of SphereFace): the same 2-D
MNIST features under A-Softmax m = 2, 3, 4 (m = 1: the modified softmax, normalised weights
without margin); the thesis does not give that figure's net or recipe, so it reuses this one
(not stated; we use the L-Softmax figure's net, recipe and MNIST λ annealing). No numbers; the
claim is again the ordering (larger m, more compact classes in angle).

Recipe: the L-Softmax MNIST recipe (thesis §2.2.7; sphere_tf/configs/losses/__init__.py): batch 256,
SGD momentum 0.9, weight decay 5e-4, lr 0.1 ÷10 at 12k and 15k, 18k iterations, mean
subtraction, MNIST λ annealing. m = 1 is the L-Softmax layer without margin (softmax
without bias). Plot the `fc` layer's outputs of `checkpoints/model.keras`.

Run:
  sphere-tf train-classifier \
    --config losses/lsoftmax_fig2_2_mnist_2d:m=4 \
    --workdir runs/lsoftmax_fig2_2 --config.data.manual_dir=/path/to/mnist
  sphere-tf train-classifier \
    --config losses/lsoftmax_fig2_2_mnist_2d:loss=asoftmax,m=4 \
    --workdir runs/asoftmax_fig_a5 --config.data.manual_dir=/path/to/mnist      (Fig. A.5)
"""

from sphere_tf.configs import common
from sphere_tf.configs import losses

VARIANTS = {"m": (1, 2, 3, 4), "loss": ("lsoftmax", "asoftmax")}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, m=4, loss="lsoftmax")
    common.check(arg.m, "m", VARIANTS["m"])
    common.check(arg.loss, "loss", VARIANTS["loss"])
    model = dict(name="mnist_2d", operator=dict(losses.HE_CONV),
                 head={"layer": "margin", "loss_type": arg.loss, "margin": arg.m, "annealing": "mnist"})
    config = losses.config("mnist", model)
    return common.quick_narrow(config) if arg.quick else config
