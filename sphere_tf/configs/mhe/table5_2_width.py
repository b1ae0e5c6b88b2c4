r"""MHE Table 5.2: CNN-9 of different widths on CIFAR-100+.

Learning towards Minimum Hyperspherical Energy (Liu et al., NeurIPS 2018), Table 2;
W. Liu's PhD thesis (2020), Table 5.2 (the same numbers reappear in CoMHE's Table 6.4).
Filters per stage 16/32/64 … 256/512/1024 (`width` = the first stage's). Error % (paper):

| method         | 16/32/64 | 32/64/128 | 64/128/256 | 128/256/512 | 256/512/1024 |
|----------------|----------|-----------|------------|-------------|--------------|
| baseline       | 47.72    | 38.64     | 28.13      | 24.95       | 25.45        |
| mhe            | 36.84    | 30.05     | 26.75      | 24.05       | 23.14        |
| half_space_mhe | 35.16    | 29.33     | 25.96      | 23.38       | 21.83        |

Recipe: as sphere_tf/configs/mhe/table5_1_cnn9.py (thesis App. D.1, wy1iu/MHE code: SGD 0.1,
batch 128, ×0.1 at 20k/30k/37.5k, 42.5k iterations, weight decay 5e-4, symmetric pad +
crop + flip). The power s is not stated for this table; we use the thesis's default s = 2.

Run:
  sphere-tf train-classifier \
    --config mhe/table5_2_width:width=16,method=half_space_mhe \
    --workdir runs/mhe_t5_2 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import common
from sphere_tf.configs import mhe

WIDTHS = (16, 32, 64, 128, 256)

METHODS = ("baseline", "mhe", "half_space_mhe")
VARIANTS = {"width": WIDTHS, "method": METHODS}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, width=64, method="half_space_mhe", s=2)
    common.check(arg.width, "width", WIDTHS)
    common.check(arg.method, "method", METHODS)
    config = mhe.cifar_config(
        dataset="cifar100", model=mhe.plain_cnn("cnn9", widths=(arg.width, 2 * arg.width, 4 * arg.width)),
        regularizers=mhe.mhe_entries(arg.method, arg.s), steps=mhe.MHE_STEPS, boundaries=mhe.MHE_BOUNDARIES,
    )
    return common.quick_narrow(config) if arg.quick else config
