r"""CoMHE thesis Table E.4: how often RP-CoMHE re-draws its random projections (CNN-9, CIFAR-100+).

W. Liu's PhD thesis (2020), App. E, Table E.4 (Compressive Hyperspherical Energy
Minimization, CVPR 2020, appendix). Error % (paper; `never`: one fixed P for the run):

| period (iterations) | 1    | 200   | 1000  | never |
|---------------------|------|-------|-------|-------|
| random              | 24.6 | 24.84 | 24.62 | 26.09 |

`never` draws P once (`resample_every` = the 75k-iteration run).

Recipe: as sphere_tf/configs/comhe/table6_1_variants.py (SGD 0.1, batch 128, ×0.1 at 30k/50k/65k,
75k iterations, weight decay 5e-4, λ = 1, s = 2). Not stated for this table: the number
and dimension of the projections (we use the RP defaults, 5 of dimension 30).

Run:
  sphere-tf train-classifier \
    --config comhe/tableE4_resample_period:period=never \
    --workdir runs/comhe_tE4 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import comhe
from sphere_tf.configs import common
from sphere_tf.configs import mhe

PERIODS = {"1": 1, "200": 200, "1000": 1000, "never": mhe.COMHE_STEPS}
VARIANTS = {"period": tuple(PERIODS)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, period="1")
    common.check(arg.period, "period", PERIODS)
    config = comhe.cifar_config(method="random", resample_every=PERIODS[arg.period])
    return common.quick_narrow(config) if arg.quick else config
