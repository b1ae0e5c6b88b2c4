r"""OPT Table 7.8: ResNet-20 / ResNet-32 on CIFAR-100.

Orthogonal Over-Parameterized Training (Liu et al., CVPR 2021), Table 6; W. Liu's PhD
thesis (2020), Table 7.8 and Table F.2 (He et al.'s CIFAR ResNets: 16/32/64 channels,
3 or 5 basic blocks per stage). Error % (paper):

| method   | resnet20 | resnet32 |
|----------|----------|----------|
| baseline | 31.11    | 30.16    |
| gs       | 30.73    | 29.56    |
| cp       | 30.47    | 29.31    |

Recipe: "training per the CNN settings" (thesis App. F.3), i.e. sphere_tf/configs/opt/__init__.py
(SGD 0.1, batch 128, ×0.1 at 30k/50k/65k, 75k iterations, weight decay 5e-4). Not stated:
the shortcut (we use He et al.'s parameter-free zero-padding, option A, so only the 3×3
convs are OPT layers).

Run:
  sphere-tf train-classifier \
    --config opt/table7_8_resnets:model=resnet20,method=cp \
    --workdir runs/opt_t7_8 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import common
from sphere_tf.configs import mhe
from sphere_tf.configs import opt

RESNETS = {"resnet20": 3, "resnet32": 5}
METHODS = ("baseline", "gs", "cp")
VARIANTS = {"model": tuple(RESNETS), "method": METHODS}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, model="resnet32", method="cp")
    common.check(arg.model, "model", RESNETS)
    common.check(arg.method, "method", METHODS)
    operator = dict(mhe.HE_CONV) if arg.method == "baseline" else opt.opt_operator(arg.method)
    model = dict(name="resnet32", widths=(16, 32, 64), blocks_per_stage=RESNETS[arg.model], shortcut="zero_pad",
                 operator=operator)
    config = opt.cifar_config(model, arg.method)
    return opt.quick(config) if arg.quick else config
