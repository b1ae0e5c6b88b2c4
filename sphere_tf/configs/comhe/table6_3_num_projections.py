r"""CoMHE Table 6.3: the number of projections (dimension 30; CNN-9, CIFAR-100+).

Compressive Hyperspherical Energy Minimization (CVPR 2020), Table 3; W. Liu's PhD thesis
(2020), Table 6.3. Error % (paper):

| method           | 1     | 5     | 10    | 20    | 30    | 80    |
|------------------|-------|-------|-------|-------|-------|-------|
| random           | 25.11 | 24.39 | 25.11 | 24.60 | 24.82 | 24.92 |
| angle_preserving | 24.33 | 24.34 | 24.36 | 24.38 | 24.52 | 24.56 |

`angle_preserving` is the unrolled AP-CoMHE (Table 6.1's best); with several learned
projections their energies are averaged.

Recipe: as sphere_tf/configs/comhe/table6_1_variants.py (SGD 0.1, batch 128, ×0.1 at 30k/50k/65k,
75k iterations, weight decay 5e-4, λ = 1, s = 2).

Run:
  sphere-tf train-classifier \
    --config comhe/table6_3_num_projections:method=random,num=5 \
    --workdir runs/comhe_t6_3 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import comhe
from sphere_tf.configs import common

METHODS = ("random", "angle_preserving")
NUMS = (1, 5, 10, 20, 30, 80)
VARIANTS = {"method": METHODS, "num": NUMS}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, method="random", num=5)
    common.check(arg.method, "method", METHODS)
    common.check(arg.num, "num", NUMS)
    config = comhe.cifar_config(method=arg.method, projection_dim=30, num_projections=arg.num)
    return common.quick_narrow(config) if arg.quick else config
