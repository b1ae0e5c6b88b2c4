r"""DCNet Table 2: plain CNN-9 without BatchNorm on CIFAR-100, decoupled operators vs the CNN.

Decoupled Networks (Liu et al., CVPR 2018), Table 2, §6.1 (thesis Table 4.2).

Recipe (§6, App. A, App. B): DCNet's plain CNN-9 of App. Table 9 ([3×3]×3 per stage at 64/128/256, 2×2
max-pools, FC 512) **without BatchNorm**, ReLU; CIFAR-100, ADAM 1e-3, batch 128, softmax, SphereNet's
augmentation (horizontal and vertical flips, pad-4 random crop). Operators: LinearConv, TanhConv (ρ learnable,
init 1), SegConv (β = 0.5, ρ learnable) with the linear, cosine or squared-cosine g. Not stated in the paper;
we use: weight projection after every step (as Tables 3 and 4), the schedule ÷10 at 34K and 54K, stop at 64K,
(x − 127.5)/128 preprocessing (the authors' TF code), He-normal initialisation, plain Dense hidden FC.

Variants: `operator` = baseline, linear, tanh, seg; `angular` = linear, cosine, sq_cosine (the baseline has the
cosine column only: "–" cells raise).

Paper's test error (%) (N/C: does not converge):

| operator | linear | cosine | sq_cosine |
|---|---|---|---|
| baseline | – | 35.30 | – |
| linear | 33.39 | 31.76 | N/C |
| tanh | 32.88 | 31.88 | 34.26 |
| seg | 34.69 | 30.34 | N/C |

Run (CIFAR-100 binary tarball in DIR):
  sphere-tf train-classifier \
    --config dcnet/table2_cnn9_no_bn:operator=seg,angular=cosine \
    --workdir runs/dcnet_t2 --config.data.manual_dir=DIR
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import dcnet

VARIANTS = {"operator": ("baseline", "linear", "tanh", "seg"), "angular": tuple(dcnet.ANGULARS)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, operator="tanh", angular="cosine")
    operator = common.choose(arg, "operator", VARIANTS["operator"])
    angular = common.choose(arg, "angular", VARIANTS["angular"])
    spec = dcnet.table_operator(operator, angular)
    config = dcnet.cifar_config(dict(name="dcnet_cnn9", operator=spec, batch_norm=False, head=None))
    if arg.quick:
        common.quick(config, width_multiplier=1 / 8, **dcnet.QUICK_PLAIN_CNN)
    return config
