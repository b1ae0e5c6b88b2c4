r"""OPT Table 7.6: refining the random neurons by minimising their energy before training (CNN-6, CIFAR-100).

Orthogonal Over-Parameterized Training (Liu et al., CVPR 2021), Table 4; W. Liu's PhD
thesis (2020), Table 7.6 and §7.3.7. Error % (paper) and the initial energy of V:

| method | original | mhe   | half_space_mhe |
|--------|----------|-------|----------------|
| gs     | 33.02    | 32.99 | 32.78          |
| ls     | 34.48    | 34.43 | 34.37          |
| cp     | 33.53    | 33.50 | 33.42          |
| energy | 3.5109   | 3.5003| 3.4976         |

Recipe: sphere_tf/configs/opt/__init__.py (SGD 0.1, batch 128, ×0.1 at 30k/50k/65k, 75k iterations,
weight decay 5e-4). Pre-processing: 5,000 gradient steps on the (half-space) MHE energy of
V (§7.5.3; `energy_init`). Not stated in the paper: the step size and s (we use the layer
defaults, 1.0 and s = 2).

Run:
  sphere-tf train-classifier \
    --config opt/table7_6_energy_init:method=gs,init=half_space_mhe \
    --workdir runs/opt_t7_6 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import common
from sphere_tf.configs import opt

METHODS = ("gs", "ls", "cp")
INITS = ("original", "mhe", "half_space_mhe")
VARIANTS = {"method": METHODS, "init": INITS}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, method="gs", init="half_space_mhe")
    common.check(arg.method, "method", METHODS)
    common.check(arg.init, "init", INITS)
    options = {} if arg.init == "original" else {"energy_init": arg.init, "energy_init_steps": 5000}
    config = opt.cifar_config(opt.model_section("cnn6", arg.method, **options), arg.method)
    return opt.quick(config) if arg.quick else config
