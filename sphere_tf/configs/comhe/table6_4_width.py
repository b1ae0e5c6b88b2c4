r"""CoMHE Table 6.4: CNN-9 widths 16t/32t/64t on CIFAR-100+.

Compressive Hyperspherical Energy Minimization (CVPR 2020), Table 4; W. Liu's PhD thesis
(2020), Table 6.4. Error % (paper):

| method           | t=1   | t=2   | t=4   | t=8   | t=16  | t=20  |
|------------------|-------|-------|-------|-------|-------|-------|
| baseline         | 47.72 | 38.64 | 28.13 | 24.95 | 24.44 | 23.77 |
| mhe              | 36.84 | 30.05 | 26.75 | 24.05 | 23.14 | 22.36 |
| half_space_mhe   | 35.16 | 29.33 | 25.96 | 23.38 | 21.83 | 21.22 |
| random           | 34.73 | 28.92 | 24.39 | 22.44 | 20.81 | 20.62 |
| angle_preserving | 34.89 | 29.01 | 24.33 | 22.6  | 20.72 | 20.50 |

Recipe: as sphere_tf/configs/comhe/table6_1_variants.py (SGD 0.1, batch 128, ×0.1 at 30k/50k/65k,
75k iterations, weight decay 5e-4, λ = 1, s = 2); `angle_preserving` is the unrolled AP.

Run:
  sphere-tf train-classifier \
    --config comhe/table6_4_width:t=1,method=random \
    --workdir runs/comhe_t6_4 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import comhe
from sphere_tf.configs import common
from sphere_tf.configs import mhe

METHODS = ("baseline", "mhe", "half_space_mhe", "random", "angle_preserving")
TS = (1, 2, 4, 8, 16, 20)
VARIANTS = {"t": TS, "method": METHODS}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, t=4, method="random")
    common.check(arg.t, "t", TS)
    common.check(arg.method, "method", METHODS)
    model = mhe.plain_cnn("cnn9", widths=(16 * arg.t, 32 * arg.t, 64 * arg.t))
    config = comhe.cifar_config(model=model, method=arg.method)
    return common.quick_narrow(config) if arg.quick else config
