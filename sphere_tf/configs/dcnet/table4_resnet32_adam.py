r"""DCNet Table 4: ResNet-32 on CIFAR-100 with ADAM, every decoupled operator × every angular activation.

Decoupled Networks (Liu et al., CVPR 2018), Table 4 and Fig. 4, §6.1 (thesis Table 4.4).

Recipe (§6, App. A, App. B): ResNet-32 of App. Table 9 (3×3,96 stem, 5 basic blocks at 96/192/384, average
pool), BN + ReLU; CIFAR-100, ADAM 1e-3, batch 128, softmax, weight projection (s = 1), SphereNet's augmentation
(horizontal and vertical flips, pad-4 random crop). Operators (App. B): SphereConv, BallConv, TanhConv (ρ
learnable, init 1), LinearConv, SegConv (β = 0.5, ρ learnable), LogConv, MixConv (β = 1), all α = 1, with the
linear, cosine or squared-cosine g. Not stated in the paper; we use: projection after every step, the schedule
÷10 at 34K and 54K, stop at 64K, (x − 127.5)/128 preprocessing (the authors' TF code), He-normal
initialisation, 1×1 projection shortcuts (decoupled too) where the shape changes.

Variants: `operator` = baseline, sphere, ball, tanh, linear, seg, log, mix; `angular` = linear, cosine,
sq_cosine (the baseline has the cosine column only).

Paper's test error (%):

| operator | linear | cosine | sq_cosine |
|---|---|---|---|
| baseline | – | 26.69 | – |
| sphere | 21.79 | 21.44 | 24.40 |
| ball | 21.44 | 21.12 | 24.31 |
| tanh | 21.6 | 21.17 | 24.77 |
| linear | 21.09 | 22.17 | 21.31 |
| seg | 20.86 | 20.91 | 20.88 |
| log | 21.84 | 21.08 | 22.86 |
| mix | 21.02 | 21.28 | 21.81 |

Run (CIFAR-100 binary tarball in DIR):
  sphere-tf train-classifier \
    --config dcnet/table4_resnet32_adam:operator=seg,angular=linear \
    --workdir runs/dcnet_t4 --config.data.manual_dir=DIR
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import dcnet

VARIANTS = {"operator": ("baseline",) + tuple(dcnet.MAGNITUDES), "angular": tuple(dcnet.ANGULARS)}


def resnet32_config(operator, angular, optimizer=None):
    """The Table 4 / Table 10 cell `operator` × `angular` with `optimizer` (None: ADAM 1e-3)."""
    spec = dcnet.table_operator(operator, angular)
    return dcnet.cifar_config(dict(name="resnet32", operator=spec, head=None), optimizer=optimizer)


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, operator="tanh", angular="cosine")
    config = resnet32_config(common.choose(arg, "operator", VARIANTS["operator"]),
                             common.choose(arg, "angular", VARIANTS["angular"]))
    if arg.quick:
        common.quick(config, width_multiplier=1 / 12, blocks_per_stage=1)
    return config
