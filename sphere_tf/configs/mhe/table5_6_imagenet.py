r"""MHE Table 5.6: ResNet-18 / ResNet-34 on ImageNet-2012, top-1 error.

Learning towards Minimum Hyperspherical Energy (Liu et al., NeurIPS 2018), Table 6;
W. Liu's PhD thesis (2020), Table 5.6. Top-1 error % (paper):

| method         | resnet18 | resnet34 |
|----------------|----------|----------|
| baseline       | 32.95    | 30.04    |
| orthogonal     | 32.65    | 29.74    |
| orthonormal    | 32.61    | 29.75    |
| mhe            | 32.50    | 29.60    |
| half_space_mhe | 32.45    | 29.50    |

Recipe (thesis App. D.1): standard ResNet-18/34 (He et al., 2016; ResNet-34 is the
zoo's `resnet18` with 3/4/6/3 blocks per stage), SGD momentum 0.9, batch 64, lr 0.1,
×0.1 at 150k, 300k and 400k, 500k iterations, weight decay 1e-4 (Keras `L2(5e-5)`),
BN + ReLU, He init; orthogonal / orthonormal regularization 1e-5. Not stated in the
paper: the augmentation (we use shorter side 256, random 224 crop, flip; centre crop for
testing), the input scaling (we use the authors' (x − 127.5)/128), s (we use 2) and the
MHE weights (we use the code's λ_h = 1, λ_o = 10 of the CIFAR runs).

Run:
  sphere-tf train-classifier \
    --config mhe/table5_6_imagenet:model=resnet18,method=half_space_mhe \
    --workdir runs/mhe_t5_6 --config.data.manual_dir=/path/to/ILSVRC2012 \
    --config.data.val_labels_file=/path/to/LOC_val_solution.csv
"""

from sphere_tf.configs import common
from sphere_tf.configs import mhe

RESNETS = {"resnet18": 2, "resnet34": (3, 4, 6, 3)}

METHODS = ("baseline", "orthogonal", "orthonormal", "mhe", "half_space_mhe")
VARIANTS = {"model": tuple(RESNETS), "method": METHODS}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, model="resnet18", method="half_space_mhe", s=2)
    common.check(arg.model, "model", RESNETS)
    common.check(arg.method, "method", METHODS)
    model = dict(name="resnet18", blocks_per_stage=RESNETS[arg.model], operator=dict(mhe.HE_CONV))
    config = mhe.imagenet_config(model=model, regularizers=mhe.mhe_entries(arg.method, arg.s,
                                                                            hidden=mhe.RESNET_HIDDEN))
    return common.quick_narrow(config) if arg.quick else config
