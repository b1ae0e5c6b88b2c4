r"""SphereNet Table 4: SphereResNet-32 vs ResNet-32 on CIFAR-10+ and CIFAR-100.

Deep Hyperspherical Learning (Liu et al., NIPS 2017), Table 4 (thesis Table 3.4), §4.5.

Recipe (§4.1, §4.5): CIFAR-10+ = "random flip (both horizontal and vertical) and random crop" (pad 4, random
32×32 crop; `spherenet_cifar_plus`), mean subtraction; ResNet-32 of App. Table 6 labelled "Section 4.3" (3×3,96
stem, 5 basic blocks at 96/192/384, average pool; it is the one of §4.5: §4.3 uses CNN-9); BN + ReLU; ADAM 1e-3,
batch 128, ÷10 at 34K and 54K iterations, stop at 64K. Not stated in the paper; we use: the CIFAR-10+
augmentation for CIFAR-100 too, He-normal initialisation, 1×1 projection shortcuts, the linear GA-Softmax
(m = 4) for S-G.

Variants: `dataset` = cifar10plus, cifar100; `method` = baseline (ResNet-32, softmax), s_sw (sigmoid 0.3
SphereConv + sigmoid 0.3 W-Softmax), l_lw (linear + linear W-Softmax), c_cw (cosine + cosine W-Softmax),
s_g (sigmoid 0.3 + GA-Softmax).

Paper's test accuracy (%):

| method | CIFAR-10+ | CIFAR-100 |
|---|---|---|
| baseline | 93.26 | 72.85 |
| s_sw | 94.47 | 76.02 |
| l_lw | 94.33 | 75.62 |
| c_cw | 94.64 | 74.92 |
| s_g | 95.01 | 76.39 |

(The paper also lists ELU 94.16 / 72.34, FitResNet 93.45 / 65.72 and ResNet-1001 95.38 / 77.29 from the
literature; they are not trained here.)

Run (CIFAR binary tarballs in DIR):
  sphere-tf train-classifier \
    --config spherenet/table4_resnet32:dataset=cifar100,method=s_g \
    --workdir runs/spherenet_t4 --config.data.manual_dir=DIR
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import spherenet

DATASETS = {"cifar10plus": "cifar10", "cifar100": "cifar100"}
METHODS = {
    "baseline": ("conv", "softmax"),
    "s_sw": ("sigmoid0.3", "wsoftmax_sigmoid0.3"),
    "l_lw": ("linear", "wsoftmax_linear"),
    "c_cw": ("cosine", "wsoftmax_cosine"),
    "s_g": ("sigmoid0.3", "gasoftmax"),
}
VARIANTS = {"dataset": tuple(DATASETS), "method": tuple(METHODS)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, dataset="cifar10plus", method="s_sw")
    dataset = common.choose(arg, "dataset", VARIANTS["dataset"])
    operator, loss = METHODS[common.choose(arg, "method", VARIANTS["method"])]
    config = spherenet.cifar_config(
        dict(name="resnet32", operator=spherenet.OPERATORS[operator], head=spherenet.LOSSES[loss]),
        dataset=DATASETS[dataset], augmentation="spherenet_cifar_plus")
    if arg.quick:
        common.quick(config, width_multiplier=1 / 12, blocks_per_stage=1)
    return config
