r"""OPT Table 7.7: unit-norm fixed neurons (CNN-6, CIFAR-100).

Orthogonal Over-Parameterized Training (Liu et al., CVPR 2021), Table 5; W. Liu's PhD
thesis (2020), Table 7.7 and §7.3.7. Error % (paper):

| method   | norm=off | norm=on |
|----------|----------|---------|
| baseline | 37.59    | 36.05   |
| gs       | 33.02    | 32.54   |
| hr       | 35.67    | 35.30   |
| ls       | 34.48    | 32.11   |
| cp       | 33.53    | 32.49   |
| ogd      | 33.37 (33.33 in Table 7.4) | 32.70 |
| or       | 34.70    | 33.27   |

`norm=on` rescales every neuron of V to unit norm once (`normalize_fixed_kernel`). The
baseline with unit-norm initial neurons has no variant (plain convs have no such option).

Recipe: configs/opt/__init__.py (SGD 0.1, batch 128, ×0.1 at 30k/50k/65k, 75k iterations,
weight decay 5e-4).

Run:
  python -m trainers.train_classifier \
    --config configs/opt/table7_7_unit_norm.py:method=ls,norm=on \
    --workdir runs/opt_t7_7 --config.data.manual_dir=/path/to/cifar
"""

from configs import common
from configs import mhe
from configs import opt

METHODS = ("baseline", "gs", "hr", "ls", "cp", "ogd", "or")
VARIANTS = {"method": METHODS, "norm": ("off", "on")}
UNAVAILABLE = [{"method": "baseline", "norm": "on"}]


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, method="gs", norm="on")
    mhe.check(arg.method, "method", METHODS)
    mhe.check(arg.norm, "norm", ("off", "on"))
    if arg.method == "baseline" and arg.norm == "on":
        raise ValueError("method='baseline' with norm='on' is not available: plain convs have no unit-norm "
                         "initialisation option.")
    options = {"normalize_fixed_kernel": True} if arg.norm == "on" else {}
    config = opt.cifar_config(opt.model_section("cnn6", arg.method, **options), arg.method)
    return opt.quick(config) if arg.quick else config
