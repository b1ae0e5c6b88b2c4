"""The TensorFlow plug-in's ConvNorm convolution (spatial conv + FFT filter) against the keras.ops reference
(`fourier.fourier_conv_norm`, itself checked against NumPy loops in tests/ops/test_fourier.py): values and the
gradients to the input and the kernel, eagerly and under XLA, for every padding, stride and kernel shape kind."""

import keras
import numpy as np
import pytest

tf = pytest.importorskip("tensorflow")
if keras.backend.backend() != "tensorflow":
    pytest.skip("the TensorFlow plug-in", allow_module_level=True)

from sphere_tf import testing  # noqa: E402
from sphere_tf.backends.tensorflow import conv_norm as conv_norm_lib  # noqa: E402
from sphere_tf.layers import ConvNorm2D  # noqa: E402
from sphere_tf.ops import acceleration  # noqa: E402
from sphere_tf.ops import fourier  # noqa: E402

GEOMETRIES = testing.CONV_NORM_GEOMETRIES


def _values_and_grads(fn, x, kernel, normalizer, strides, padding, upstream, jit):
    def run(x, kernel):
        with tf.GradientTape() as tape:
            tape.watch([x, kernel])
            y = fn(x, kernel, normalizer, strides, padding)
            loss = tf.reduce_sum(y * upstream)
        return (y, *tape.gradient(loss, [x, kernel]))

    if jit:
        run = tf.function(run, jit_compile=True)
    return [t.numpy() for t in run(tf.constant(x), tf.constant(kernel))]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "xla"])
@pytest.mark.parametrize("size,kernel_size,strides,padding", GEOMETRIES)
def test_plugin_conv_norm_matches_the_reference(size, kernel_size, strides, padding, jit):
    x, kernel, normalizer, upstream = testing.conv_norm_case(size, kernel_size, strides, padding)
    upstream = tf.constant(upstream)
    want = _values_and_grads(fourier.fourier_conv_norm, x, kernel, normalizer, strides, padding, upstream, jit)
    got = _values_and_grads(conv_norm_lib.conv_norm, x, kernel, normalizer, strides, padding, upstream, jit)
    testing.assert_float32_parity(got, want, ("value", "d_inputs", "d_kernel"))


def test_half_precision_inputs_are_computed_in_float32():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 8, 3)).astype(np.float16)
    kernel = rng.standard_normal((3, 3, 3, 4)).astype(np.float16)
    normalizer = fourier.spectral_normalizer(kernel, (10, 10))
    got = conv_norm_lib.conv_norm(tf.constant(x), tf.constant(kernel), normalizer, (1, 1), "same")
    want = fourier.fourier_conv_norm(x.astype(np.float32), kernel.astype(np.float32), normalizer, (1, 1), "same")
    assert got.dtype == tf.float32
    np.testing.assert_allclose(got.numpy(), keras.ops.convert_to_numpy(want), rtol=1e-4, atol=1e-4)


def test_the_layer_takes_the_plugin_and_the_reference_when_acceleration_is_off(monkeypatch):
    calls = []
    plugin_conv_norm = conv_norm_lib.conv_norm

    def spy(*args):
        calls.append(args[3:])
        return plugin_conv_norm(*args)

    monkeypatch.setattr(conv_norm_lib, "conv_norm", spy)
    x = np.random.default_rng(1).standard_normal((2, 8, 8, 3)).astype(np.float32)
    layer = ConvNorm2D(4, 3, strides=2, padding="same")
    accelerated = layer(x, training=True).numpy()
    assert calls == [((2, 2), "same")]
    with testing.training_path("reference"):
        reference = layer(x, training=True).numpy()
    assert len(calls) == 1
    np.testing.assert_allclose(accelerated, reference, rtol=1e-5, atol=1e-5)
    assert acceleration.Accelerator().conv_norm(x, None, None, (1, 1), "same") is NotImplemented
