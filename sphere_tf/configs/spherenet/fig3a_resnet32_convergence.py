r"""SphereNet Fig. 3(a): convergence of ResNet-32 vs SphereResNet-32 on CIFAR-10 and CIFAR-10+.

Deep Hyperspherical Learning (Liu et al., NIPS 2017), Fig. 3(a) (thesis Fig. 3.3a), §4.4.

Recipe (§4.1, §4.4): the ResNet-32 "for Section 4.2" of App. Table 6 (3×3,64 stem, 5 basic blocks at
64/96/128, average pool); the SphereResNet uses sigmoid (k = 0.3) SphereConv; the original softmax for both;
ADAM 1e-3 with the same learning rate for both, batch 128; CIFAR-10 without augmentation or CIFAR-10+
(horizontal and vertical flips, pad-4 random crop), mean subtraction. The figure plots test accuracy over
7×10⁴ iterations; we keep the paper's CIFAR schedule (÷10 at 34K and 54K, stop at 64K) and read the curve
from the per-epoch history in results.json / TensorBoard. Not stated: He-normal initialisation, 1×1 shortcuts.

Variants: `model` = resnet, sphereresnet; `dataset` = cifar10, cifar10plus.

Paper: curves only (no numbers); SphereResNet-32 converges faster and more stably on both data sets and ends
higher (Table 2's ResNet-32 column: 90.40% conv vs 91.7% sigmoid 0.3 SphereConv with W-Softmax).

Run (CIFAR-10 binary tarball in DIR):
  sphere-tf train-classifier \
    --config spherenet/fig3a_resnet32_convergence:model=sphereresnet,dataset=cifar10plus \
    --workdir runs/spherenet_f3a --config.data.manual_dir=DIR
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import spherenet

OPERATORS = {"resnet": "conv", "sphereresnet": "sigmoid0.3"}
AUGMENTATIONS = {"cifar10": "none", "cifar10plus": "spherenet_cifar_plus"}
VARIANTS = {"model": tuple(OPERATORS), "dataset": tuple(AUGMENTATIONS)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, model="sphereresnet", dataset="cifar10")
    operator = OPERATORS[common.choose(arg, "model", VARIANTS["model"])]
    augmentation = AUGMENTATIONS[common.choose(arg, "dataset", VARIANTS["dataset"])]
    config = spherenet.cifar_config(
        dict(name="spherenet_resnet32", operator=spherenet.OPERATORS[operator], head=None),
        augmentation=augmentation)
    if arg.quick:
        common.quick(config, width_multiplier=0.125, blocks_per_stage=1)
    return config
