r"""OPT Table 7.1: orthogonal vs unconstrained over-parameterization with fixed neurons (CIFAR-100).

Orthogonal Over-Parameterized Training (Liu et al., CVPR 2021), Table 1; W. Liu's PhD
thesis (2020), Table 7.1. FN: neurons V fixed; LR: the learnable transform (U =
unconstrained, GS = Gram-Schmidt orthogonal). Error % (paper):

| method              | FN | LR | cnn6  | cnn9  |
|---------------------|----|----|-------|-------|
| baseline            | –  | –  | 37.59 | 33.55 |
| UPT                 | N  | U  | 48.47 | 46.72 |
| upt                 | Y  | U  | 42.61 | 39.38 |
| OPT                 | N  | GS | 37.24 | 32.95 |
| gs                  | Y  | GS | 33.02 | 31.03 |

The FN = N rows (V trained as well) have no variant: `OPTConv2D` keeps V fixed.
`upt` is R = P unconstrained (the soft variant with β = 0), only weight decay on P.

Recipe: configs/opt/__init__.py (SGD 0.1, batch 128, ×0.1 at 30k/50k/65k, 75k iterations,
weight decay 5e-4, symmetric pad + crop + flip, BN).

Run:
  python -m trainers.train_classifier \
    --config configs/opt/table7_1_fixed_vs_learned.py:model=cnn6,method=upt \
    --workdir runs/opt_t7_1 --config.data.manual_dir=/path/to/cifar
"""

from configs import common
from configs import mhe
from configs import opt

METHODS = ("baseline", "upt", "gs")
VARIANTS = {"model": opt.MODELS, "method": METHODS}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, model="cnn6", method="gs")
    mhe.check(arg.method, "method", METHODS)
    config = opt.cifar_config(opt.model_section(arg.model, arg.method), arg.method)
    return opt.quick(config) if arg.quick else config
