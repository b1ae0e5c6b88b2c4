r"""CoMHE Table 6.1: every CoMHE variant against MHE and orthogonality, CNN-9 on CIFAR-100+.

Compressive Hyperspherical Energy Minimization (Lin, Liu, Chen, Weller, Song; CVPR 2020),
Table 1; W. Liu's PhD thesis (2020), Table 6.1. Error % (paper):

| method                        | error |
|-------------------------------|-------|
| baseline                      | 28.03 |
| orthogonal                    | 27.01 |
| srip                          | 25.80 |
| mhe                           | 26.75 |
| half_space_mhe                | 25.96 |
| group (G-CoMHE)               | 25.08 |
| adversarial (Adv-CoMHE)       | 25.09 |
| random (RP-CoMHE)             | 24.39 |
| random_max (RP-CoMHE, max)    | 24.77 |
| angle_preserving_alternating  | 24.95 |
| angle_preserving_unrolled     | 24.33 |

`method=srip` is SRIP (Bansal, Chen, Wang, NeurIPS 2018) with the authors' constants (sphere_tf/configs/comhe/__init__.py).
The authors' logs (rmlin/CoMHE `log/`, one run): RP 24.41, AP 24.87, Adv 25.26.

Recipe (thesis App. E.1; rmlin/CoMHE `train.py`): the CNN-9 of MHE ([3×3] × 3 at
64/128/256, FC 256, BN + ReLU, He init); SGD momentum 0.9, batch 128, lr 0.1, ×0.1 at 30k,
50k and 65k, 75k iterations (the thesis: "divide when the performance is saturated");
weight decay 5e-4 (code; thesis 1e-4); symmetric pad + crop + flip; label smoothing 0.01
(code); λ = 1 for HS-MHE and every CoMHE hidden term, s = 2; orthogonal regularization 1e-5.
Projection settings: sphere_tf/configs/comhe/__init__.py.

Run:
  sphere-tf train-classifier \
    --config comhe/table6_1_variants:method=random \
    --workdir runs/comhe_t6_1 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import comhe
from sphere_tf.configs import common

METHODS = ("baseline", "orthogonal", "srip", "mhe", "half_space_mhe", "group", "adversarial", "random", "random_max",
           "angle_preserving_alternating", "angle_preserving_unrolled")
VARIANTS = {"method": METHODS}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, method="angle_preserving_unrolled")
    common.check(arg.method, "method", METHODS)
    config = comhe.cifar_config(method=arg.method)
    return common.quick_narrow(config) if arg.quick else config
