"""Plain VGG-style CNNs of SphereNet (App. Table 5) with a swappable operator.

`cnn3` / `cnn9` / `cnn18`: N/3 convs 3×3 per stage at widths (64, 96, 128), each
followed by BatchNorm and ReLU, a 2×2 max-pool per stage, FC 256, then the
classifier [S-App A]. `small_cnn` is the Fashion-MNIST network of
`configs/dcnet/fashion_mnist_tanh_cosine.py`.
"""

import keras

from sphere_tf.models import operators
from sphere_tf.models.registry import register_model


def build_plain_cnn(
    input_shape,
    num_classes,
    widths=(64, 96, 128),
    convs_per_stage=3,
    dense_units=256,
    operator=None,
    batch_norm=True,
    relu=True,
    decoupled_dense=False,
    name="plain_cnn",
):
    """Builds a plain CNN: `len(widths)` stages of `convs_per_stage` conv 3×3 'same', max-pool.

    Args:
        input_shape: tuple, e.g. (32, 32, 3).
        num_classes: int, classifier width (a plain Dense producing logits).
        widths: tuple of ints, filters per stage.
        convs_per_stage: int.
        dense_units: int, hidden FC width (0 for none).
        operator: dict, `{'layer': 'conv2d'|'decoupled'|'sphere', **layer kwargs}`.
        batch_norm: bool, BatchNorm after every conv and the hidden FC.
        relu: bool, ReLU after every conv (SphereNet Table 3 drops it).
        decoupled_dense: bool, use the operator for the hidden FC layer too.
        name: str, the model's name.

    Returns:
        A functional `keras.Model` mapping images to logits.
    """
    operator = dict(operator or {"layer": "conv2d"})
    inputs = keras.Input(input_shape, name="images")
    x = inputs
    for stage, width in enumerate(widths):
        for i in range(convs_per_stage):
            x = operators.conv_layer(
                operator, width, 3, padding="same", use_bias=not batch_norm,
                name=f"conv{stage + 1}_{i + 1}",
            )(x)
            if batch_norm:
                x = keras.layers.BatchNormalization(name=f"bn{stage + 1}_{i + 1}")(x)
            if relu:
                x = keras.layers.ReLU()(x)
        x = keras.layers.MaxPooling2D(2, name=f"pool{stage + 1}")(x)
    x = keras.layers.Flatten()(x)
    if dense_units:
        fc_operator = operator if decoupled_dense else {"layer": "conv2d"}
        x = operators.dense_layer(fc_operator, dense_units, use_bias=not batch_norm, name="fc")(x)
        if batch_norm:
            x = keras.layers.BatchNormalization(name="bn_fc")(x)
        x = keras.layers.ReLU()(x)
    logits = keras.layers.Dense(num_classes, name="logits", dtype="float32")(x)
    return keras.Model(inputs, logits, name=name)


def _cnn(convs_per_stage, name):
    def builder(input_shape=(32, 32, 3), num_classes=10, **kwargs):
        return build_plain_cnn(input_shape, num_classes, convs_per_stage=convs_per_stage, name=name, **kwargs)

    builder.__name__ = name
    builder.__doc__ = f"SphereNet's {name.upper()}: {convs_per_stage} conv(s) per stage, widths 64/96/128."
    return builder


cnn3 = register_model(_cnn(1, "cnn3"))
cnn9 = register_model(_cnn(3, "cnn9"))
cnn18 = register_model(_cnn(6, "cnn18"))


@register_model
def small_cnn(input_shape=(28, 28, 1), num_classes=10, widths=(32, 64), convs_per_stage=2,
              dense_units=128, **kwargs):
    """Two stages of two 3×3 convs (32, 64), FC 128: the Fashion-MNIST network of the DCNet config."""
    return build_plain_cnn(input_shape, num_classes, widths=widths, convs_per_stage=convs_per_stage,
                           dense_units=dense_units, name="small_cnn", **kwargs)
