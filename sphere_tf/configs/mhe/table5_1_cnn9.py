r"""MHE Table 5.1: CNN-9 on CIFAR-10+ / CIFAR-100+, every MHE variant at s = 0, 1, 2.

Learning towards Minimum Hyperspherical Energy (Liu et al., NeurIPS 2018), Table 1;
W. Liu's PhD thesis (2020), Table 5.1. Error % (paper):

| method           | C10 s=2 | C10 s=1 | C10 s=0 | C100 s=2 | C100 s=1 | C100 s=0 |
|------------------|---------|---------|---------|----------|----------|----------|
| mhe              | 6.22    | 6.74    | 6.44    | 27.15    | 27.09    | 26.16    |
| half_space_mhe   | 6.28    | 6.54    | 6.30    | 25.61    | 26.30    | 26.18    |
| angular_mhe      | 6.21    | 6.77    | 6.45    | 26.17    | 27.31    | 27.90    |
| half_space_angular_mhe | 6.52 | 6.49  | 6.44    | 26.03    | 26.52    | 26.47    |
| baseline         | 7.75    |         |         | 28.13    |         |          |

The authors' released CIFAR-100 logs (wy1iu/MHE `log/`, one run each) give baseline
30.26, mhe s=0/1/2 26.84/27.15/27.22, half_space_mhe 26.25/26.40/26.01, angular
28.03/27.50/27.24, half-space angular 26.47/26.58/26.06.

Recipe (thesis App. D.1 and wy1iu/MHE `code/train.py`; details in `sphere_tf/configs/mhe/__init__.py`):
CNN-9 = [3×3] × 3 per stage at 64/128/256, FC 256; BN + ReLU; He init; 4-pixel
symmetric pad + random crop + flip; (x − 127.5)/128; SGD momentum 0.9, batch 128,
lr 0.1, ×0.1 at 20k / 30k / 37.5k, 42.5k iterations; weight decay 5e-4 (code; the
thesis says 1e-4); label smoothing 0.01 (code). MHE on every conv and FC 256 (λ_h = 1)
and on the classifier (λ_o = 10, full space) as the code; the thesis prints λ_h = 10 / λ_o = 1.
The angular rows use the code's θ/π (`--power_s a0/a1/a2`).

Run:
  sphere-tf train-classifier \
    --config mhe/table5_1_cnn9:data=cifar100,method=half_space_mhe,s=2 \
    --workdir runs/mhe_t5_1 --config.data.manual_dir=/path/to/cifar
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import mhe

METHODS = ("baseline", "mhe", "half_space_mhe", "angular_mhe", "half_space_angular_mhe")
VARIANTS = {"data": ("cifar10", "cifar100"), "method": METHODS, "s": (0, 1, 2)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, data="cifar100", method="half_space_mhe", s=2)
    common.check(arg.method, "method", METHODS)
    config = mhe.cifar_config(
        dataset=arg.data, model=mhe.plain_cnn("cnn9"), regularizers=mhe.mhe_entries(arg.method, arg.s),
        steps=mhe.MHE_STEPS, boundaries=mhe.MHE_BOUNDARIES,
    )
    return common.quick_narrow(config) if arg.quick else config
