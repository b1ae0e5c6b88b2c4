r"""MHE Table 5.3: CNN-6 / CNN-9 / CNN-15 on CIFAR-100+.

Learning towards Minimum Hyperspherical Energy (Liu et al., NeurIPS 2018), Table 3;
W. Liu's PhD thesis (2020), Table 5.3. [3×3] × 2 / 3 / 5 per stage at 64/128/256,
FC 256 (thesis Table D.1). Error % (paper; N/C: did not converge):

| method         | cnn6  | cnn9  | cnn15 |
|----------------|-------|-------|-------|
| baseline       | 32.08 | 28.13 | N/C   |
| mhe            | 28.16 | 26.75 | 26.9  |
| half_space_mhe | 27.56 | 25.96 | 25.84 |

Recipe: as sphere_tf/configs/mhe/table5_1_cnn9.py (SGD 0.1, batch 128, ×0.1 at 20k/30k/37.5k,
42.5k iterations, weight decay 5e-4). s is not stated for this table; we use s = 2.

Run:
  sphere-tf train-classifier \
    --config mhe/table5_3_depth:depth=cnn15,method=mhe \
    --workdir runs/mhe_t5_3 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import common
from sphere_tf.configs import mhe

METHODS = ("baseline", "mhe", "half_space_mhe")
VARIANTS = {"depth": tuple(mhe.DEPTHS), "method": METHODS}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, depth="cnn9", method="half_space_mhe", s=2)
    common.check(arg.method, "method", METHODS)
    config = mhe.cifar_config(
        dataset="cifar100", model=mhe.plain_cnn(arg.depth), regularizers=mhe.mhe_entries(arg.method, arg.s),
        steps=mhe.MHE_STEPS, boundaries=mhe.MHE_BOUNDARIES,
    )
    return common.quick_narrow(config) if arg.quick else config
