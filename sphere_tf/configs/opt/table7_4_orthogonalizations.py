r"""OPT Table 7.4 (with BN) and Table 7.5 (CNN-6 without BN): every orthogonalization, CIFAR-100.

Orthogonal Over-Parameterized Training (Liu et al., CVPR 2021), Tables 2 and 3; W. Liu's
PhD thesis (2020), Tables 7.4 and 7.5. Error % (paper; N/C: did not converge):

| method         | cnn6, BN | cnn9, BN | cnn6, no BN |
|----------------|----------|----------|-------------|
| baseline       | 37.59    | 33.55    | 38.95       |
| half_space_mhe | 34.97    | 32.87    | 36.90       |
| gs             | 33.02    | 31.03    | 35.61       |
| hr             | 35.67    | 32.75    | 37.51       |
| ls             | 34.48    | 31.22    | 35.83       |
| cp             | 33.53    | 31.28    | 34.88       |
| ogd            | 33.33    | 31.47    | 35.38       |
| or             | 34.70    | 32.63    | N/C         |

Table 7.5 is CNN-6 only: `bn=off` with `model=cnn9` is refused.

Recipe: sphere_tf/configs/opt/__init__.py (SGD 0.1, batch 128, ×0.1 at 30k/50k/65k, 75k iterations,
weight decay 5e-4, label smoothing 0.01, symmetric pad + crop + flip). HS-MHE: the MHE
recipe's half-space MHE (λ_h = 1, λ_o = 10, s = 2; sphere_tf/configs/mhe). OGD: Cayley SGD on R
(`paradigm.opt_optimizer`, lr_R 0.02 of `sphere_tf.optimizers`); OR: β = 0.1 (code).

Run:
  sphere-tf train-classifier \
    --config opt/table7_4_orthogonalizations:model=cnn6,method=cp,bn=off \
    --workdir runs/opt_t7_4 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import common
from sphere_tf.configs import opt

METHODS = ("baseline", "half_space_mhe", "gs", "hr", "ls", "cp", "ogd", "or")
VARIANTS = {"model": opt.MODELS, "method": METHODS, "bn": ("on", "off")}
UNAVAILABLE = [{"model": "cnn9", "bn": "off"}]


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, model="cnn6", method="gs", bn="on")
    common.check(arg.method, "method", METHODS)
    common.check(arg.bn, "bn", ("on", "off"))
    if arg.bn == "off" and arg.model != "cnn6":
        raise ValueError("bn='off' is Table 7.5, CNN-6 only; use model='cnn6'.")
    config = opt.cifar_config(opt.model_section(arg.model, arg.method, batch_norm=arg.bn == "on"), arg.method)
    return opt.quick(config) if arg.quick else config
