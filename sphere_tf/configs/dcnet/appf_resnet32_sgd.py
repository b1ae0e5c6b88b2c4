r"""DCNet App. F (Table 10): the Table 4 setting optimised with SGD instead of ADAM.

Decoupled Networks (Liu et al., CVPR 2018), App. F, Table 10 (thesis App. C.6).

Recipe (App. F): Table 4's ResNet-32 (3×3,96 stem, 5 basic blocks at 96/192/384), CIFAR-100, BN + ReLU,
softmax, weight projection (s = 1), SphereNet's augmentation, batch 128, "SGD with momentum" instead of ADAM.
Not stated in the paper; we use: momentum 0.9 and learning rate 0.1 (the SGD setting of SphereNet's and the
authors' ImageNet runs and of He et al.'s CIFAR ResNets), the schedule ÷10 at 34K and 54K, stop at 64K, no
weight decay, projection after every step, (x − 127.5)/128 preprocessing, He-normal initialisation.

Variants: `operator` = baseline, sphere, ball, tanh, linear, seg, log, mix; `angular` = linear, cosine,
sq_cosine (the baseline has the cosine column only).

Paper's test error (%):

| operator | linear | cosine | sq_cosine |
|---|---|---|---|
| baseline | – | 21.55 | – |
| sphere | 21.71 | 21.61 | 24.62 |
| ball | 20.96 | 21.25 | 24.40 |
| tanh | 21.07 | 21.12 | 24.29 |
| linear | 21.43 | 21.25 | 20.54 |
| seg | 20.58 | 20.61 | 20.61 |
| log | 21.15 | 21.42 | 23.10 |
| mix | 20.82 | 21.20 | 21.19 |

Run (CIFAR-100 binary tarball in DIR):
  sphere-tf train-classifier \
    --config dcnet/appf_resnet32_sgd:operator=seg,angular=linear \
    --workdir runs/dcnet_appf --config.data.manual_dir=DIR
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs.dcnet import table4_resnet32_adam

VARIANTS = dict(table4_resnet32_adam.VARIANTS)
SGD = {"name": "sgd", "learning_rate": 0.1, "momentum": 0.9}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, operator="tanh", angular="cosine")
    config = table4_resnet32_adam.resnet32_config(common.choose(arg, "operator", VARIANTS["operator"]),
                                                  common.choose(arg, "angular", VARIANTS["angular"]),
                                                  optimizer=dict(SGD))
    if arg.quick:
        common.quick(config, width_multiplier=1 / 12, blocks_per_stage=1)
    return config
