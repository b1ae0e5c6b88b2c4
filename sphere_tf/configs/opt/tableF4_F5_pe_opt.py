r"""OPT thesis Tables F.4 / F.5: parameter-efficient OPT with block-diagonal R (CNN-6, CIFAR-100).

W. Liu's PhD thesis (2020), App. F.5, Tables F.4 (block-shared R_s, `share=on`) and F.5
(independent blocks R_u, `share=off`); Orthogonal Over-Parameterized Training (CVPR 2021),
appendix. k blocks split each neuron along its input channels (c3/k channels each).
Error % (paper):

F.4, shared (R_s):

| k  | cp    | gs    | hr    | ls    | ogd   |
|----|-------|-------|-------|-------|-------|
| 1  | 33.53 | 33.02 | 35.67 | 34.48 | 33.33 |
| 2  | 34.93 | 34.39 | 35.83 | 34.50 | 35.06 |
| 4  | 39.40 | 39.13 | 39.67 | 37.58 | 39.80 |
| 8  | 47.77 | 46.65 | 46.69 | 45.62 | 47.43 |
| 16 | 56.65 | 55.91 | 55.69 | 54.75 | 57.15 |
| 32 | 63.46 | 62.65 | 62.38 | 61.60 | 62.46 |
| 64 | 67.36 | 67.11 | 67.05 | 66.61 | 67.23 |

F.5, independent (R_u):

| k  | cp    | gs    | hr    | ls    | ogd   |
|----|-------|-------|-------|-------|-------|
| 1  | 33.53 | 33.02 | 35.67 | 34.48 | 33.33 |
| 2  | 33.54 | 33.15 | 35.65 | 34.09 | 34.27 |
| 4  | 34.77 | 34.50 | 35.71 | 34.96 | 35.97 |
| 8  | 37.25 | 36.43 | 36.40 | 36.17 | 39.75 |
| 16 | 40.74 | 39.89 | 39.98 | 39.93 | 43.43 |
| 32 | 45.36 | 44.77 | 44.83 | 44.61 | 48.98 |
| 64 | 50.94 | 49.16 | 49.57 | 49.23 | 54.93 |

Baseline 37.59; fixed random neurons with only the classifier trained: 73.81.

Recipe: sphere_tf/configs/opt/__init__.py (SGD 0.1, batch 128, ×0.1 at 30k/50k/65k, 75k iterations,
weight decay 5e-4). Not stated: the first conv (3 input channels cannot be split in k > 1
blocks; we keep full OPT there, `first_operator`) and FC 64 (we use the same k blocks along
its 64 input channels).

Run:
  sphere-tf train-classifier \
    --config opt/tableF4_F5_pe_opt:method=ls,k=4,share=on \
    --workdir runs/opt_tF4 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import common
from sphere_tf.configs import opt

METHODS = ("cp", "gs", "hr", "ls", "ogd")
KS = (1, 2, 4, 8, 16, 32, 64)
VARIANTS = {"method": METHODS, "k": KS, "share": ("on", "off")}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, method="gs", k=4, share="off")
    common.check(arg.method, "method", METHODS)
    common.check(arg.k, "k", KS)
    common.check(arg.share, "share", ("on", "off"))
    blocks = {"num_blocks": arg.k, "share_blocks": arg.share == "on"}
    model = opt.model_section("cnn6", arg.method, first={}, **blocks)
    config = opt.cifar_config(model, arg.method)
    if arg.quick:  # 1/8 widths leave 8 channels: at most 8 blocks
        opt.quick(config)
        for key in ("operator", "fc_operator"):
            config.model[key].num_blocks = min(arg.k, 8)
    return config
