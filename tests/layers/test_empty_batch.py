"""Every convolution layer maps an empty batch to an empty output of its output shape, eagerly, on every backend,
without touching its statistics. (TensorFlow 2.21's oneDNN convolution returns its *input* for an empty batch on
some CPUs, tensorflow/tensorflow PR 112639; the fuzz suite draws this case only at random.)"""

import keras
import numpy as np
import pytest

from sphere_tf.layers import ConvNorm2D
from sphere_tf.layers import DecoupledConv2D
from sphere_tf.layers import OPTConv2D
from sphere_tf.layers import SphereConv2D

LAYERS = {
    "DecoupledConv2D tanh": lambda: DecoupledConv2D(2, 3, magnitude="tanh", angular="cosine"),
    "DecoupledConv2D grouped, channels_first": lambda: DecoupledConv2D(4, 3, groups=2, padding="same",
                                                                       data_format="channels_first"),
    "SphereConv2D strided": lambda: SphereConv2D(2, 3, strides=2, padding="same", angular="linear"),
    "OPTConv2D": lambda: OPTConv2D(2, 3),
    "ConvNorm2D": lambda: ConvNorm2D(2, 3, padding="same"),
}


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("training", [False, True])
def test_an_empty_batch_gives_an_empty_output_of_the_output_shape(name, training):
    layer = LAYERS[name]()
    channels_first = getattr(layer, "data_format", "channels_last") == "channels_first"
    sample = (4, 7, 7) if channels_first else (7, 7, 4)
    layer(np.ones((2, *sample), np.float32), training=False)
    before = [keras.ops.convert_to_numpy(v) for v in layer.non_trainable_variables]
    out = layer(np.zeros((0, *sample), np.float32), training=training)
    assert tuple(out.shape) == layer.compute_output_shape((0, *sample)), tuple(out.shape)
    assert tuple(out.shape)[1:] == tuple(layer(np.ones((1, *sample), np.float32)).shape)[1:]
    for old, variable in zip(before, layer.non_trainable_variables):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(variable), old, err_msg=variable.path)
