r"""OPT Table 7.1: orthogonal vs unconstrained over-parameterization with fixed neurons (CIFAR-100).

Orthogonal Over-Parameterized Training (Liu et al., CVPR 2021), Table 1; W. Liu's PhD
thesis (2020), Table 7.1. FN: neurons V fixed; LR: the learnable transform (U =
unconstrained, GS = Gram-Schmidt orthogonal). Error % (paper):

| method,fixed        | FN | LR | cnn6  | cnn9  |
|---------------------|----|----|-------|-------|
| baseline            | –  | –  | 37.59 | 33.55 |
| upt,fixed=false     | N  | U  | 48.47 | 46.72 |
| upt                 | Y  | U  | 42.61 | 39.38 |
| gs,fixed=false      | N  | GS | 37.24 | 32.95 |
| gs                  | Y  | GS | 33.02 | 31.03 |

`fixed=false` trains V as well (`OPTConv2D(learnable_fixed_kernel=True)`), with the same
weight decay as every weight. `upt` is R = P unconstrained (the soft variant with β = 0),
only weight decay on P.

Recipe: sphere_tf/configs/opt/__init__.py (SGD 0.1, batch 128, ×0.1 at 30k/50k/65k, 75k iterations,
weight decay 5e-4, symmetric pad + crop + flip, BN).

Run:
  sphere-tf train-classifier \
    --config opt/table7_1_fixed_vs_learned:model=cnn6,method=upt,fixed=false \
    --workdir runs/opt_t7_1 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import common
from sphere_tf.configs import opt

METHODS = ("baseline", "upt", "gs")
FIXED = ("true", "false")
VARIANTS = {"model": opt.MODELS, "method": METHODS, "fixed": FIXED}
# The baseline has no V to fix or learn.
UNAVAILABLE = [{"method": "baseline", "fixed": "false"}]


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, model="cnn6", method="gs", fixed="true")
    common.check(arg.method, "method", METHODS)
    common.check(arg.fixed, "fixed", FIXED)
    if {"method": arg.method, "fixed": arg.fixed} in UNAVAILABLE:
        raise ValueError("Invalid value for argument `fixed`: the baseline has no fixed neurons; "
                         "Table 7.1 has no such cell (fixed=false goes with method=upt or gs).")
    options = {} if arg.fixed == "true" else {"learnable_fixed_kernel": True}
    config = opt.cifar_config(opt.model_section(arg.model, arg.method, **options), arg.method)
    return opt.quick(config) if arg.quick else config
