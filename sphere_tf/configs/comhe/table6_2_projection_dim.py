r"""CoMHE Table 6.2: the projection dimension (CNN-9, CIFAR-100+).

Compressive Hyperspherical Energy Minimization (CVPR 2020), Table 2; W. Liu's PhD thesis
(2020), Table 6.2. RP uses 20 projections, AP one. Error % (paper):

| method                       | 10    | 20    | 30    | 40    | 80    |
|------------------------------|-------|-------|-------|-------|-------|
| random                       | 25.48 | 25.32 | 24.60 | 24.75 | 25.46 |
| angle_preserving_alternating | 25.21 | 24.60 | 24.95 | 24.97 | 24.99 |
| angle_preserving_unrolled    | 25.32 | 24.59 | 24.33 | 24.93 | 25.12 |

Recipe: as sphere_tf/configs/comhe/table6_1_variants.py (SGD 0.1, batch 128, ×0.1 at 30k/50k/65k,
75k iterations, weight decay 5e-4, λ = 1, s = 2). Layers whose fan-in is at most the
projection dimension get plain half-space MHE (rmlin/CoMHE).

Run:
  sphere-tf train-classifier \
    --config comhe/table6_2_projection_dim:method=random,dim=30 \
    --workdir runs/comhe_t6_2 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import comhe
from sphere_tf.configs import common

METHODS = ("random", "angle_preserving_alternating", "angle_preserving_unrolled")
DIMS = (10, 20, 30, 40, 80)
VARIANTS = {"method": METHODS, "dim": DIMS}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, method="angle_preserving_unrolled", dim=30)
    common.check(arg.method, "method", METHODS)
    common.check(arg.dim, "dim", DIMS)
    num_projections = 20 if arg.method == "random" else 1
    config = comhe.cifar_config(method=arg.method, projection_dim=arg.dim, num_projections=num_projections)
    return common.quick_narrow(config) if arg.quick else config
