r"""CoMHE Table 6.7: ResNet-18 / ResNet-34 / ResNet-50 on ImageNet-2012, top-1 error.

Compressive Hyperspherical Energy Minimization (CVPR 2020), Table 7; W. Liu's PhD thesis
(2020), Table 6.7. Top-1 error % (paper):

| method           | resnet18 | resnet34 | resnet50 |
|------------------|----------|----------|----------|
| baseline         | 32.95    | 30.04    | 25.30     |
| orthogonal       | 32.65    | 29.74    | 25.19     |
| orthonormal      | 32.61    | 29.75    | 25.21     |
| srip             | 32.53    | 29.55    | 24.91     |
| mhe              | 32.50    | 29.60    | 25.02     |
| half_space_mhe   | 32.45    | 29.50    | 24.98     |
| random           | 31.90    | 29.38    | 24.51     |
| angle_preserving | 31.80    | 29.32    | 24.53     |

`method=srip` is SRIP with the authors' constants (sphere_tf/configs/comhe/__init__.py); its λ schedule, stated
over 200 epochs, is moved to the same fractions of this run's 50 runner epochs of 10k iterations (phases
from epochs 1, 6, 13, 18, 31; an inference: the CoMHE papers give no SRIP setting). ResNet-50 is the zoo's
`resnet50` ("exactly the same architecture as [He et al.]", thesis App. E.1: bottleneck blocks, stride in
the first 1×1 conv); the regularizers reach all its convs (the 1×1s included) as they do ResNet-18/34's.

Recipe (thesis App. E.1): standard ResNets, SGD momentum 0.9, batch 64, lr 0.1, stop at
500k iterations, weight decay 1e-4, λ = 1, s = 2, orthogonal/orthonormal regularization
1e-5. Not stated in the paper, our choices: MHE's ImageNet schedule (×0.1 at 150k, 300k,
400k; thesis App. D.1), shorter side 256 + random 224 crop + flip, centre crop for testing,
(x − 127.5)/128 input.

Run:
  sphere-tf train-classifier \
    --config comhe/table6_7_imagenet:model=resnet18,method=random \
    --workdir runs/comhe_t6_7 --config.data.manual_dir=/path/to/ILSVRC2012 \
    --config.data.val_labels_file=/path/to/LOC_val_solution.csv
"""

from sphere_tf.configs import comhe
from sphere_tf.configs import common
from sphere_tf.configs import mhe

IMAGENET_STEPS_PER_EPOCH = 10000  # mhe.imagenet_config's runner epochs
# Model name and blocks per stage (He et al. 2016, Table 1).
RESNETS = {"resnet18": ("resnet18", 2), "resnet34": ("resnet18", (3, 4, 6, 3)),
           "resnet50": ("resnet50", (3, 4, 6, 3))}
METHODS = ("baseline", "orthogonal", "orthonormal", "srip", "mhe", "half_space_mhe", "random", "angle_preserving")
VARIANTS = {"model": tuple(RESNETS), "method": METHODS}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, model="resnet18", method="random")
    common.check(arg.model, "model", RESNETS)
    common.check(arg.method, "method", METHODS)
    name, blocks_per_stage = RESNETS[arg.model]
    model = dict(name=name, blocks_per_stage=blocks_per_stage, operator=dict(mhe.HE_CONV))
    if arg.method in ("orthonormal",):
        regularizers = mhe.mhe_entries(arg.method, hidden=mhe.RESNET_HIDDEN)
    else:
        regularizers = comhe.entries(arg.method, hidden=mhe.RESNET_HIDDEN,
                                     srip_epochs=mhe.IMAGENET_STEPS // IMAGENET_STEPS_PER_EPOCH)
    config = mhe.imagenet_config(model=model, regularizers=regularizers)
    return common.quick_narrow(config) if arg.quick else config
