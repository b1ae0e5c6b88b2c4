r"""DCNet Table 1: weighted decoupled operators vs the optimisation tricks (TanhConv, CIFAR-100).

Decoupled Networks (Liu et al., CVPR 2018), Table 1, §3.5 and §4 (thesis Table 4.1).

Recipe (§3.5, §4, §6, App. B): TanhConv h = α·tanh(‖x‖/ρ) with learnable ρ, cosine g; CIFAR-100, ADAM 1e-3,
batch 128, BN, softmax, SphereNet's augmentation (horizontal and vertical flips, pad-4 random crop). The rows:
linearly weighted TanhConv (‖w‖·h·g), the nonlinearly weighted forms of Eq. 15 and Eq. 16, and the unweighted
TanhConv trained with standard gradients, with weight projection (w ← ŵ, s = 1) or with weighted gradients
(Eq. 18). Not stated in the paper; we use: ResNet-32 (3×3,96 stem, 5 basic blocks at 96/192/384; its "weight
projection" row equals Table 4's ResNet-32 TanhConv + cosine entry), the schedule ÷10 at 34K and 54K
iterations, stop at 64K (the paper: "divided by 10 when the error plateaus"), projection after every step,
(x − 127.5)/128 preprocessing (the authors' TF code), He-normal initialisation.

Variants: `method` = linear_weighted, nonlinear_eq15, nonlinear_eq16, standard_gradients, weight_projection,
weighted_gradients.

Paper's test error (%): linear_weighted 22.95, nonlinear_eq15 23.03, nonlinear_eq16 23.38, standard_gradients
23.09, weight_projection 21.17, weighted_gradients 21.45.

Run (CIFAR-100 binary tarball in DIR):
  sphere-tf train-classifier \
    --config dcnet/table1_weighted_operators:method=weight_projection \
    --workdir runs/dcnet_t1 --config.data.manual_dir=DIR
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import dcnet

# method -> (weighted form, weight projection, weighted gradients)
METHODS = {
    "linear_weighted": ("linear", False, False),
    "nonlinear_eq15": ("nonlinear", False, False),
    "nonlinear_eq16": ("nonlinear_separate", False, False),
    "standard_gradients": (None, False, False),
    "weight_projection": (None, True, False),
    "weighted_gradients": (None, False, True),
}
VARIANTS = {"method": tuple(METHODS)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, method="weight_projection")
    weighted, projection, weighted_gradients = METHODS[common.choose(arg, "method", VARIANTS["method"])]
    options = {"weighted": weighted} if weighted else {}
    config = dcnet.cifar_config(
        dict(name="resnet32", operator=dcnet.decoupled("tanh", "cosine", **options), head=None),
        projection=projection, weighted_gradients=weighted_gradients)
    if arg.quick:
        common.quick(config, width_multiplier=1 / 12, blocks_per_stage=1)
    return config
