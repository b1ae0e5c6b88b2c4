r"""MHE Table 5.5: ResNet-32 (64/128/256) on CIFAR-10+ / CIFAR-100+.

Learning towards Minimum Hyperspherical Energy (Liu et al., NeurIPS 2018), Table 5;
W. Liu's PhD thesis (2020), Table 5.5. ResNet-32 of thesis Table D.2: a [3×3, 64]
conv, then 5 basic blocks at each of 64, 128 and 256 channels (stride-2 convs
down-sample), average pooling: wider than He et al.'s 16/32/64. Error % (paper):

| method         | cifar10 | cifar100 |
|----------------|---------|----------|
| baseline       | 5.19    | 22.87    |
| mhe            | 4.72    | 22.19    |
| half_space_mhe | 4.66    | 22.04    |

(For reference the thesis lists ResNet-110 6.61 / 25.16 and ResNet-1001 4.92 / 22.71.)

Recipe: thesis App. D.1 (SGD momentum 0.9, batch 128, lr 0.1, ×0.1 at 20k/30k/37.5k,
42.5k iterations, BN + ReLU, He init, pad + crop + flip) with the authors' code
numerics of sphere_tf/configs/mhe/table5_1_cnn9.py (weight decay 5e-4, symmetric padding, label
smoothing 0.01). Not stated in the paper: the shortcut where the shape changes (we use
a 1×1 projection conv + BN, the zoo default) and s (we use 2). MHE goes on every conv
(`conv0`, `stage*`, shortcuts included) and on the classifier.

Run:
  sphere-tf train-classifier \
    --config mhe/table5_5_resnet32:data=cifar10,method=mhe \
    --workdir runs/mhe_t5_5 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import common
from sphere_tf.configs import mhe

METHODS = ("baseline", "mhe", "half_space_mhe")
VARIANTS = {"data": ("cifar10", "cifar100"), "method": METHODS}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, data="cifar100", method="half_space_mhe", s=2)
    common.check(arg.method, "method", METHODS)
    model = dict(name="resnet32", widths=mhe.CNN_WIDTHS, stem_width=64, blocks_per_stage=5,
                 operator=dict(mhe.HE_CONV))
    config = mhe.cifar_config(
        dataset=arg.data, model=model, regularizers=mhe.mhe_entries(arg.method, arg.s, hidden=mhe.RESNET_HIDDEN),
        steps=mhe.MHE_STEPS, boundaries=mhe.MHE_BOUNDARIES,
    )
    return common.quick_narrow(config) if arg.quick else config
