r"""CoMHE Table 6.5: CNN-6 / CNN-9 / CNN-15 on CIFAR-100+.

Compressive Hyperspherical Energy Minimization (CVPR 2020), Table 5; W. Liu's PhD thesis
(2020), Table 6.5. Error % (paper; N/C: did not converge):

| method           | cnn6  | cnn9  | cnn15 |
|------------------|-------|-------|-------|
| baseline         | 32.08 | 28.13 | N/C   |
| mhe              | 28.16 | 26.75 | 26.90 |
| half_space_mhe   | 27.56 | 25.96 | 25.84 |
| random           | 26.73 | 24.39 | 24.21 |
| angle_preserving | 26.55 | 24.33 | 24.55 |

Recipe: as sphere_tf/configs/comhe/table6_1_variants.py (SGD 0.1, batch 128, ×0.1 at 30k/50k/65k,
75k iterations, weight decay 5e-4, λ = 1, s = 2); [3×3] × 2/3/5 per stage at 64/128/256.

Run:
  sphere-tf train-classifier \
    --config comhe/table6_5_depth:depth=cnn15,method=random \
    --workdir runs/comhe_t6_5 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import comhe
from sphere_tf.configs import common
from sphere_tf.configs import mhe

METHODS = ("baseline", "mhe", "half_space_mhe", "random", "angle_preserving")
VARIANTS = {"depth": tuple(mhe.DEPTHS), "method": METHODS}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, depth="cnn9", method="random")
    common.check(arg.method, "method", METHODS)
    config = comhe.cifar_config(model=mhe.plain_cnn(arg.depth), method=arg.method)
    return common.quick_narrow(config) if arg.quick else config
