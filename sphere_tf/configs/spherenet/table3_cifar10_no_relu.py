r"""SphereNet Table 3: CNN-18 with BN and without ReLU on CIFAR-10, SphereConv vs convolution.

Deep Hyperspherical Learning (Liu et al., NIPS 2017), Table 3 (thesis Table 3.3), §4.2 "Without ReLU".

Recipe (§4.1, §4.2): CIFAR-10 without augmentation, mean subtraction only; CNN-18 of App. Table 5 ([3×3]×6
per stage at 64/96/128, FC 256) with BatchNorm after every conv and the FC and **no ReLU anywhere**; ADAM
1e-3, batch 128, ÷10 at 34K and 54K iterations, stop at 64K. Not stated in the paper; we use: the losses of
Table 2 (cosine W-Softmax for the SphereNets, softmax for the CNN) and He-normal initialisation.

Variants: `operator` = sigmoid0.1, sigmoid0.3, sigmoid0.7, linear, cosine, conv.

Paper's test accuracy (%): sigmoid0.1 86.29, sigmoid0.3 85.67, sigmoid0.7 85.51, linear 85.34, cosine 85.25,
conv (CNN w/o ReLU) 80.73.

Run (CIFAR-10 binary tarball in DIR):
  sphere-tf train-classifier \
    --config spherenet/table3_cifar10_no_relu:operator=sigmoid0.1 \
    --workdir runs/spherenet_t3 --config.data.manual_dir=DIR
  (`quick` for a two-step smoke run.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import spherenet

VARIANTS = {"operator": tuple(spherenet.OPERATORS)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, operator="cosine")
    operator = common.choose(arg, "operator", VARIANTS["operator"])
    head = spherenet.LOSSES["softmax" if operator == "conv" else "wsoftmax_cosine"]
    config = spherenet.cifar_config(
        dict(name="cnn18", operator=spherenet.OPERATORS[operator], head=head, batch_norm=True, relu=False))
    if arg.quick:
        common.quick(config, width_multiplier=0.125, name="cnn3")
    return config
