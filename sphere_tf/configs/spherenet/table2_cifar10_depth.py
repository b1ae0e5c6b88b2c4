r"""SphereNet Table 2: plain CNNs of depth 3-60 and ResNet-32 on CIFAR-10, SphereConv vs convolution.

Deep Hyperspherical Learning (Liu et al., NIPS 2017), Table 2 (thesis Table 3.2), §4.2.

Recipe (§4.1, §4.2): CIFAR-10 without augmentation ("We do not use data augmentation"), mean subtraction
only; CNN-3/9/18/45/60 of App. Table 5 ([3×3]×N/3 per stage at 64/96/128, FC 256) and the ResNet-32 "for
Section 4.2" of App. Table 6 (3×3,64 stem, 5 basic blocks at 64/96/128, average pool); BN + ReLU; ADAM 1e-3,
batch 128, ÷10 at 34K and 54K iterations, stop at 64K. SphereNets use the cosine W-Softmax, the CNNs the
original softmax (§4.2). Not stated in the paper; we use: He-normal initialisation; 1×1 projection shortcuts
where the ResNet's shape changes (`shortcut="zero_pad"` gives He et al.'s option A).

Variants: `depth` = cnn3, cnn9, cnn18, cnn45, cnn60, resnet32; `operator` = sigmoid0.1, sigmoid0.3,
sigmoid0.7, linear, cosine, conv.

Paper's test accuracy (%):

| operator | CNN-3 | CNN-9 | CNN-18 | CNN-45 | CNN-60 | ResNet-32 |
|---|---|---|---|---|---|---|
| sigmoid0.1 | 82.08 | 91.13 | 91.43 | 89.34 | 87.67 | 90.94 |
| sigmoid0.3 | 81.92 | 91.28 | 91.55 | 89.73 | 87.85 | 91.7 |
| sigmoid0.7 | 82.4 | 91.18 | 91.69 | 89.85 | 88.42 | 91.19 |
| linear | 82.31 | 91.15 | 91.24 | 90.15 | 89.91 | 91.25 |
| cosine | 82.23 | 90.99 | 91.23 | 90.05 | 89.28 | 91.38 |
| conv | 81.19 | 90.68 | 90.62 | 88.23 | 88.15 | 90.40 |

Run (CIFAR-10 binary tarball in DIR):
  sphere-tf train-classifier \
    --config spherenet/table2_cifar10_depth:depth=cnn18,operator=linear \
    --workdir runs/spherenet_t2 --config.data.manual_dir=DIR
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import spherenet

MODELS = {"cnn3": "cnn3", "cnn9": "cnn9", "cnn18": "cnn18", "cnn45": "cnn45", "cnn60": "cnn60",
          "resnet32": "spherenet_resnet32"}
VARIANTS = {"depth": tuple(MODELS), "operator": tuple(spherenet.OPERATORS)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, depth="cnn9", operator="cosine")
    depth = common.choose(arg, "depth", VARIANTS["depth"])
    operator = common.choose(arg, "operator", VARIANTS["operator"])
    head = spherenet.LOSSES["softmax" if operator == "conv" else "wsoftmax_cosine"]
    config = spherenet.cifar_config(dict(name=MODELS[depth], operator=spherenet.OPERATORS[operator], head=head))
    if arg.quick:
        shallow = {"blocks_per_stage": 1} if depth == "resnet32" else {"name": "cnn3"}
        common.quick(config, width_multiplier=0.125, **shallow)
    return config
