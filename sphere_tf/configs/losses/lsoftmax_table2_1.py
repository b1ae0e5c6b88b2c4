r"""L-Softmax Table 2.1 networks: MNIST, CIFAR-10, CIFAR-10+ and CIFAR-100 (results: Tables 2.2-2.4).

Large-Margin Softmax Loss for Convolutional Neural Networks (Liu, Wen, Yu, Yang; ICML 2016),
Tables 1-4; W. Liu's PhD thesis (2020), Table 2.1 (networks) and Tables 2.2-2.4. Error %
(paper):

| loss      | m | mnist | cifar10 | cifar10+ | cifar100 |
|-----------|---|-------|---------|----------|----------|
| hinge     | – | 0.47  | 9.91    | 6.96     | 32.90    |
| softmax   | – | 0.40  | 9.05    | 6.50     | 32.74    |
| lsoftmax  | 2 | 0.32  | 7.73    | 6.01     | 29.95    |
| lsoftmax  | 3 | 0.31  | 7.66    | 5.94     | 29.87    |
| lsoftmax  | 4 | 0.31  | 7.58    | 5.92     | 29.53    |

The hinge row trains the softmax row's network (a plain FC classifier) with the one-vs-all
multi-class hinge loss of Caffe's `HingeLossLayer` on its logits instead of the softmax loss
(`loss.name='hinge'`, `sphere_tf.losses.SparseHinge`). Not stated in the paper: the norm; we
use Caffe's default, L1 (Σ_j max(0, 1 − t_j f_j); `--config.loss.hinge_norm=l2` for the
squared form), and the test prediction is the largest logit.

Networks (Table 2.1; 3×3 convs, each stage followed by a 2×2 max-pool):
- mnist: Conv0 [3×3, 64], [3×3, 64] × 3 at 64/64/64, FC 256;
- cifar10 / cifar10+: Conv0 [3×3, 64], [3×3] × 4 at 64/96/128, FC 256;
- cifar100: Conv0 [3×3, 96], [3×3] × 4 at 96/192/384, FC 512.

Recipe (thesis §2.2.7): PReLU, BN, He init, mean subtraction only; cifar10+ adds 4-pixel
zero pad + random 32×32 crop + horizontal flip (single centre view for testing); batch 256,
SGD momentum 0.9, weight decay 5e-4, lr 0.1 ÷10 at 12k and 15k, 18k iterations (chosen on
a 45k/5k split). λ annealing from the authors' prototxts (sphere_tf/configs/losses/__init__.py); for
CIFAR-100, which has no released prototxt, we use the CIFAR-10+ schedule (not stated).

Run:
  sphere-tf train-classifier \
    --config losses/lsoftmax_table2_1:data=cifar10,loss=lsoftmax,m=4 \
    --workdir runs/lsoftmax_t2_1 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import common
from sphere_tf.configs import losses

# m=0: not given (L-Softmax: m = 4, the thesis's best); softmax and hinge take no margin.
VARIANTS = {"data": tuple(losses.NETS), "loss": ("hinge", "softmax", "lsoftmax"), "m": (0, 2, 3, 4)}
UNAVAILABLE = [{"loss": loss, "m": m} for loss in ("hinge", "softmax") for m in (2, 3, 4)]


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, data="cifar10", loss="lsoftmax", m=0)
    common.check(arg.data, "data", losses.NETS)
    common.check(arg.m, "m", (0, 2, 3, 4))
    if arg.loss in ("hinge", "softmax") and arg.m:
        raise ValueError(f"loss={arg.loss!r} has no margin; m={arg.m} applies to loss='lsoftmax' only.")
    stem_width, widths, convs, feature = losses.NETS[arg.data]
    model = dict(name="small_cnn", stem="cifar", stem_width=stem_width, widths=widths, convs_per_stage=convs,
                 dense_units=feature, activation="prelu", batch_norm=True, operator=dict(losses.HE_CONV),
                 head=losses.head(arg.loss, arg.m or 4, losses.ANNEALING[arg.data]))
    config = losses.config(arg.data, model)
    if arg.loss == "hinge":
        config.loss.name = "hinge"
    return common.quick_narrow(config) if arg.quick else config
