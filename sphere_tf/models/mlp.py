"""Multilayer perceptrons on flattened images, any dense operator in every hidden layer.

| name      | paper, table                                               | layers                       |
|-----------|------------------------------------------------------------|------------------------------|
| `opt_mlp` | OPT (CVPR 2021) §5.2; W. Liu's thesis Table 7.3, App. F.3  | 784 → 256 → 256 → 10, ReLU   |

OPT's MNIST MLP follows hwalsuklee/tensorflow-mnist-MLP-batch_normalization-weight_initializers
(`mnist_weightInitializer_batchnormLayer.py`, `MLPwoBN`): two hidden layers of 256 with biases and ReLU, a linear
output layer; the thesis applies OPT to the two hidden layers, not to the classifier. The repository also has a
BatchNorm variant; the thesis does not say which was used, and the default here has none (`batch_norm=False`).
Note: inferred from Table 7.3, whose "Normal" baseline (6.05 % error) fits the repository's run without BN
(94.85 % accuracy with N(0, 1) weights), not one with BN, which makes the weight scale irrelevant.
"""

import keras

from sphere_tf import validation
from sphere_tf.models import blocks
from sphere_tf.models import operators
from sphere_tf.models.registry import register_model


def build_mlp(
    input_shape,
    num_classes,
    dense_units=(256, 256),
    operator=None,
    batch_norm=False,
    relu=True,
    activation="relu",
    head=None,
    width_multiplier=1.0,
    name="mlp",
):
    """Builds an MLP: flatten, `len(dense_units)` hidden layers `fc1`, `fc2`, ..., the head.

    Args:
        input_shape: tuple, e.g. (28, 28, 1); flattened first.
        num_classes: int, classifier width.
        dense_units: int or tuple of ints, the hidden widths (before `width_multiplier`).
        operator: operator spec of every hidden layer (`sphere_tf.models.operators.dense_layer`: None or
            'conv2d' gives `keras.layers.Dense`, 'opt' `OPTDense`, 'sphere' `SphereDense`, 'decoupled'
            `DecoupledDense`); its options go to the layer (`kernel_initializer`, OPT's
            `fixed_kernel_initializer`, ...).
        batch_norm: bool, BatchNorm after every hidden layer (the layers lose their bias then).
        relu: bool, the activations.
        activation: 'relu' or 'prelu'.
        head: the classifier (`sphere_tf.models.blocks`): None (Dense), a dict or a layer.
        width_multiplier: float > 0, scales the hidden widths.
        name: str, the model's name.

    Returns:
        A functional `keras.Model`.
    """
    multiplier = blocks.check_common(batch_norm, relu, activation, width_multiplier)
    widths = blocks.scale_widths(dense_units, multiplier, "dense_units")
    operators.validate_operator(operator, dense=True)
    images = blocks.images_input(input_shape)
    x = keras.layers.Flatten(name="flatten")(blocks.pixels(images))
    for i, units in enumerate(widths):
        x = blocks.fc_unit(x, operator, units, batch_norm=batch_norm, relu=relu, activation=activation,
                           name=f"fc{i + 1}")
    return blocks.finish(images, x, head, validation.positive_int(num_classes, "num_classes"), name)


@register_model(passes_kwargs_to=build_mlp)
def opt_mlp(input_shape=(28, 28, 1), num_classes=10, **kwargs):
    """OPT's MNIST MLP (thesis Table 7.3, App. F.3): 784 → 256 → 256 → 10, ReLU, biases, no BatchNorm."""
    return build_mlp(input_shape, num_classes, **{"name": "opt_mlp", **kwargs})
