r"""CoMHE Table 6.6: ResNet-32 (64/128/256) on CIFAR-10+ / CIFAR-100+.

Compressive Hyperspherical Energy Minimization (CVPR 2020), Table 6; W. Liu's PhD thesis
(2020), Table 6.6; the ResNet-32 of thesis Table D.2/E.2 (a [3×3, 64] conv, 5 basic blocks
at 64, 128 and 256, average pooling). Error % (paper):

| method           | cifar10 | cifar100 |
|------------------|---------|----------|
| baseline         | 5.19    | 22.87    |
| orthogonal       | 5.02    | 22.36    |
| srip             | 4.75    | 22.08    |
| mhe              | 4.72    | 22.19    |
| half_space_mhe   | 4.66    | 22.04    |
| random           | 4.59    | 21.82    |
| angle_preserving | 4.57    | 21.63    |

`method=srip` is SRIP (Bansal, Chen, Wang, NeurIPS 2018) with the authors' constants (sphere_tf/configs/comhe/__init__.py).

Recipe: as sphere_tf/configs/comhe/table6_1_variants.py (SGD 0.1, batch 128, ×0.1 at 30k/50k/65k,
75k iterations, weight decay 5e-4, λ = 1, s = 2). Not stated: the shortcut where the shape
changes (we use the zoo's 1×1 projection conv + BN).

Run:
  sphere-tf train-classifier \
    --config comhe/table6_6_resnet32:data=cifar10,method=random \
    --workdir runs/comhe_t6_6 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import comhe
from sphere_tf.configs import common
from sphere_tf.configs import mhe

METHODS = ("baseline", "orthogonal", "srip", "mhe", "half_space_mhe", "random", "angle_preserving")
VARIANTS = {"data": ("cifar10", "cifar100"), "method": METHODS}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, data="cifar100", method="angle_preserving")
    common.check(arg.method, "method", METHODS)
    model = dict(name="resnet32", widths=mhe.CNN_WIDTHS, stem_width=64, blocks_per_stage=5,
                 operator=dict(mhe.HE_CONV))
    config = comhe.cifar_config(dataset=arg.data, model=model, method=arg.method, hidden=mhe.RESNET_HIDDEN)
    return common.quick_narrow(config) if arg.quick else config
