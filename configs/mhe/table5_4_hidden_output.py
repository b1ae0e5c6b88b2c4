r"""MHE Table 5.4: MHE on the hidden layers only, the output layer only, or both (CNN-9, CIFAR-100+).

Learning towards Minimum Hyperspherical Energy (Liu et al., NeurIPS 2018), Table 4;
W. Liu's PhD thesis (2020), Table 5.4. Error % (paper; N/A: the output layer has no
half-space form):

| method                 | output | hidden | hidden+output |
|------------------------|--------|--------|---------------|
| mhe                    | 26.85  | 26.55  | 26.16         |
| half_space_mhe         | N/A    | 26.28  | 25.61         |
| angular_mhe            | 27.8   | 26.56  | 26.17         |
| half_space_angular_mhe | N/A    | 26.64  | 26.03         |
| baseline               | 28.13  |        |               |

The hidden+output column equals Table 5.1's best s of each row (mhe at s = 0, the
others at s = 2), so `s` defaults to that (not stated for this table).

Recipe: as configs/mhe/table5_1_cnn9.py (SGD 0.1, batch 128, ×0.1 at 20k/30k/37.5k,
42.5k iterations, weight decay 5e-4; λ_h = 1, λ_o = 10 as the authors' code).

Run:
  python -m trainers.train_classifier \
    --config configs/mhe/table5_4_hidden_output.py:method=mhe,placement=hidden \
    --workdir runs/mhe_t5_4 --config.data.manual_dir=/path/to/cifar
"""

from configs import common
from configs import mhe

METHODS = ("baseline", "mhe", "half_space_mhe", "angular_mhe", "half_space_angular_mhe")
VARIANTS = {"method": METHODS, "placement": mhe.PLACEMENTS}
# The output layer has no half-space form (N/A in the table).
UNAVAILABLE = [{"method": "half_space_mhe", "placement": "output"},
               {"method": "half_space_angular_mhe", "placement": "output"}]


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, method="half_space_mhe", placement="hidden+output", s=-1)
    mhe.check(arg.method, "method", METHODS)
    power = (0 if arg.method == "mhe" else 2) if arg.s == -1 else arg.s
    config = mhe.cifar_config(
        dataset="cifar100", model=mhe.plain_cnn("cnn9"),
        regularizers=mhe.mhe_entries(arg.method, power, placement=arg.placement),
        steps=mhe.MHE_STEPS, boundaries=mhe.MHE_BOUNDARIES,
    )
    return mhe.quick(config) if arg.quick else config
