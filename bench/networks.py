"""The benchmark networks, with Keras alone (no TensorFlow import): every backend's benchmarks build them."""

import keras


def cnn9(conv_factory, input_shape=(32, 32, 3), widths=(64, 96, 128), num_classes=10, dense=256, output_dtype=None):
    """SphereNet's CNN-9: 3 stages of 3 conv 3×3 + BN + ReLU, max-pool, dense 256, 10 classes.

    Args:
        conv_factory: callable `(filters) -> layer` for a 3×3 'same' convolution.
        output_dtype: dtype (policy) of the logits layer; 'float32' keeps mixed-precision logits in float32.
    """
    model = keras.Sequential([keras.Input(input_shape)])
    for width in widths:
        for _ in range(3):
            model.add(conv_factory(width))
            model.add(keras.layers.BatchNormalization())
            model.add(keras.layers.ReLU())
        model.add(keras.layers.MaxPooling2D(2))
    model.add(keras.layers.Flatten())
    model.add(keras.layers.Dense(dense, activation="relu"))
    model.add(keras.layers.Dense(num_classes, dtype=output_dtype))
    return model


def readme_model(first_conv, second_conv, input_shape=(28, 28, 1), num_classes=10):
    """The README's operator example (Fashion-MNIST-sized inputs): a 32-filter conv, BN, ReLU, a strided 64-filter
    conv, global pooling and the classifier; `first_conv(filters)` / `second_conv(filters)` build the two convs
    (the README's DecoupledConv2D tanh + cosine and SphereConv2D linear, or Conv2D for its twin)."""
    return keras.Sequential([
        keras.Input(input_shape),
        first_conv(32),
        keras.layers.BatchNormalization(), keras.layers.ReLU(),
        second_conv(64),
        keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(num_classes),
    ])


def single_layer(conv_factory, input_shape=(32, 32, 64), filters=64, num_classes=10):
    """One of CNN-9's layers alone (the case's conv, BN, ReLU) with global pooling and a classifier for a loss:
    a per-layer profile (`--network=layer`)."""
    return keras.Sequential([
        keras.Input(input_shape),
        conv_factory(filters),
        keras.layers.BatchNormalization(), keras.layers.ReLU(),
        keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(num_classes),
    ])
