r"""DCNet Table 3: plain CNN-9 with BatchNorm on CIFAR-100, every decoupled operator, with and without ReLU.

Decoupled Networks (Liu et al., CVPR 2018), Table 3, §6.1 (thesis Table 4.3).

Recipe (§6, App. A, App. B): DCNet's plain CNN-9 of App. Table 9 ([3×3]×3 per stage at 64/128/256, FC 512)
with BatchNorm, with or without ReLU; CIFAR-100, ADAM 1e-3, batch 128, softmax, weight projection (s = 1),
SphereNet's augmentation (horizontal and vertical flips, pad-4 random crop). Operators (App. B): SphereConv,
BallConv, TanhConv (ρ learnable, init 1), LinearConv, SegConv (β = 0.5, ρ learnable), LogConv, MixConv
(β = 1), all α = 1, with the cosine or squared-cosine g. Not stated in the paper; we use: projection after
every step, the schedule ÷10 at 34K and 54K, stop at 64K, (x − 127.5)/128 preprocessing (the authors' TF code),
He-normal initialisation, plain Dense hidden FC.

Variants: `operator` = baseline, sphere, ball, tanh, linear, seg, log, mix; `angular` = cosine, sq_cosine (the
baseline has the cosine column only); `relu` = true, false.

Paper's test error (%):

| operator | cosine w/o ReLU | sq_cosine w/o ReLU | cosine w/ ReLU | sq_cosine w/ ReLU |
|---|---|---|---|---|
| baseline | 58.24 | – | 26.01 | – |
| sphere | 33.31 | 25.90 | 26.00 | 26.97 |
| ball | 31.81 | 25.43 | 25.18 | 26.48 |
| tanh | 32.27 | 25.27 | 25.15 | 26.94 |
| linear | 36.49 | 24.36 | 24.81 | 25.14 |
| seg | 33.57 | 24.29 | 24.96 | 25.04 |
| log | 33.62 | 24.91 | 25.17 | 25.85 |
| mix | 33.46 | 24.93 | 25.27 | 25.77 |

Run (CIFAR-100 binary tarball in DIR):
  sphere-tf train-classifier \
    --config dcnet/table3_cnn9_bn:operator=seg,angular=sq_cosine,relu=false \
    --workdir runs/dcnet_t3 --config.data.manual_dir=DIR
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import dcnet

VARIANTS = {"operator": ("baseline",) + tuple(dcnet.MAGNITUDES), "angular": ("cosine", "sq_cosine"),
            "relu": ("true", "false")}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, operator="tanh", angular="cosine", relu="true")
    operator = common.choose(arg, "operator", VARIANTS["operator"])
    angular = common.choose(arg, "angular", VARIANTS["angular"])
    spec = dcnet.table_operator(operator, angular)
    relu = common.choose(arg, "relu", VARIANTS["relu"]) == "true"
    config = dcnet.cifar_config(dict(name="dcnet_cnn9", operator=spec, batch_norm=True, relu=relu, head=None))
    if arg.quick:
        common.quick(config, width_multiplier=1 / 8, **dcnet.QUICK_PLAIN_CNN)
    return config
