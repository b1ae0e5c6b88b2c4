r"""DCNet Table 5: DCNet-32 with W-Softmax on CIFAR-10 and CIFAR-100 (comparison to the state of the art).

Decoupled Networks (Liu et al., CVPR 2018), Table 5, §6.1 (thesis Table 4.5).

Recipe (§6, App. A, App. B): ResNet-32 of App. Table 9 (3×3,96 stem, 5 basic blocks at 96/192/384) with
TanhConv + cosine g or LinearConv + squared-cosine g, BN + ReLU, W-Softmax ("the DCNets use W-Softmax"),
weight projection (s = 1); ADAM 1e-3, batch 128; SphereNet's augmentation (horizontal and vertical flips,
pad-4 random crop). Not stated in the paper; we use: the cosine W-Softmax, the schedule ÷10 at 34K and 54K,
stop at 64K, projection after every step, (x − 127.5)/128 preprocessing, He-normal initialisation.

Variants: `dataset` = cifar10, cifar100; `model` = tanh_cosine, linear_sq_cosine.

Paper's test error (%):

| model | CIFAR-10 | CIFAR-100 |
|---|---|---|
| tanh_cosine | 4.75 | 21.12 |
| linear_sq_cosine | 5.34 | 20.23 |

(The table's ResNet-110 6.61 / 25.16, ResNet-1001 4.92 / 22.71 and ResNet-1001 (batch 64) 4.64 are quoted from
the literature and are not trained here.)

Run (CIFAR binary tarballs in DIR):
  sphere-tf train-classifier \
    --config dcnet/table5_state_of_the_art:dataset=cifar10,model=tanh_cosine \
    --workdir runs/dcnet_t5 --config.data.manual_dir=DIR
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import dcnet

MODELS = {"tanh_cosine": ("tanh", "cosine"), "linear_sq_cosine": ("linear", "sq_cosine")}
VARIANTS = {"dataset": ("cifar10", "cifar100"), "model": tuple(MODELS)}
W_SOFTMAX = {"layer": "margin", "loss_type": "wsoftmax", "angular": "cosine"}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, dataset="cifar100", model="tanh_cosine")
    dataset = common.choose(arg, "dataset", VARIANTS["dataset"])
    magnitude, angular = MODELS[common.choose(arg, "model", VARIANTS["model"])]
    config = dcnet.cifar_config(
        dict(name="resnet32", operator=dcnet.decoupled(magnitude, angular), head=dict(W_SOFTMAX)), dataset=dataset)
    if arg.quick:
        common.quick(config, width_multiplier=1 / 12, blocks_per_stage=1)
    return config
