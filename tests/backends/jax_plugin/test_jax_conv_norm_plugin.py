"""The JAX plug-in's ConvNorm2D pieces: the 2-D-FFT convolution against the keras.ops reference
(`fourier.fourier_conv_norm`, itself checked against NumPy loops in tests/ops/test_fourier.py), and the shifted
multiply-add depthwise conv against NumPy loops and XLA's grouped convolution, values and gradients."""

import logging

import keras
import numpy as np
import pytest

from sphere_tf import testing
from sphere_tf.layers import ConvNorm2D
from sphere_tf.ops import acceleration
from sphere_tf.ops import fourier

pytestmark = pytest.mark.backend_only("jax")


def _plugin():
    from sphere_tf.backends import jax as jax_plugin

    return jax_plugin


def _values_and_grads(fn, x, kernel, upstream, jit):
    import jax
    from jax import numpy as jnp

    def loss(x, kernel):
        return jnp.sum(fn(x, kernel) * upstream)

    values_and_grads = jax.value_and_grad(loss, argnums=(0, 1))
    value = fn(x, kernel)
    if jit:
        value = jax.jit(fn)(x, kernel)
        values_and_grads = jax.jit(values_and_grads)
    _, grads = values_and_grads(x, kernel)
    return [np.asarray(t) for t in (value, *grads)]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("size,kernel_size,strides,padding", testing.CONV_NORM_GEOMETRIES)
def test_plugin_conv_norm_matches_the_reference(size, kernel_size, strides, padding, jit):
    from sphere_tf.backends.jax import conv_norm as conv_norm_lib

    x, kernel, normalizer, upstream = testing.conv_norm_case(size, kernel_size, strides, padding)
    want = _values_and_grads(lambda a, k: fourier.fourier_conv_norm(a, k, normalizer, strides, padding),
                             x, kernel, upstream, jit)
    got = _values_and_grads(lambda a, k: conv_norm_lib.conv_norm(a, k, normalizer, strides, padding),
                            x, kernel, upstream, jit)
    testing.assert_float32_parity(got, want, ("value", "d_inputs", "d_kernel"))


def test_plugin_conv_norm_stops_the_gradient_to_the_normalizer():
    import jax
    from jax import numpy as jnp

    from sphere_tf.backends.jax import conv_norm as conv_norm_lib

    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 6, 6, 3)).astype(np.float32)
    kernel = rng.standard_normal((3, 3, 3, 2)).astype(np.float32)
    normalizer = np.asarray(fourier.spectral_normalizer(kernel, (8, 8)))
    grad = jax.grad(lambda v: jnp.sum(conv_norm_lib.conv_norm(x, kernel, v, (1, 1), "same")))(normalizer)
    assert not np.any(np.asarray(grad))


def _numpy_depthwise(x, kernel, padding):
    """out[n, i, j, c·M + m] = Σ_{u,v} x_pad[n, i + u, j + v, c] · kernel[u, v, c, m], by explicit loops (float64)."""
    kh, kw, channels, multiplier = kernel.shape
    if padding == "same":
        pads = [((k - 1) // 2, k - 1 - (k - 1) // 2) for k in (kh, kw)]
    else:
        pads = [(0, 0), (0, 0)]
    padded = np.pad(x.astype(np.float64), [(0, 0), *pads, (0, 0)])
    out_h, out_w = padded.shape[1] - kh + 1, padded.shape[2] - kw + 1
    out = np.zeros((x.shape[0], out_h, out_w, channels * multiplier))
    for i in range(out_h):
        for j in range(out_w):
            for c in range(channels):
                for m in range(multiplier):
                    out[:, i, j, c * multiplier + m] = np.einsum(
                        "nuv,uv->n", padded[:, i:i + kh, j:j + kw, c], kernel[:, :, c, m])
    return out


@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize("kernel_size,multiplier", [((3, 3), 1), ((2, 2), 1), ((5, 3), 2), ((1, 1), 1)])
def test_shifted_depthwise_conv_matches_numpy_loops_and_the_grouped_conv(kernel_size, multiplier, padding):
    from sphere_tf.backends.jax import conv_norm as conv_norm_lib

    rng = np.random.default_rng([*kernel_size, multiplier, len(padding)])
    x = rng.standard_normal((2, 7, 6, 3)).astype(np.float32)
    kernel = rng.standard_normal((*kernel_size, 3, multiplier)).astype(np.float32)
    got = np.asarray(conv_norm_lib.depthwise_conv(x, kernel, padding))
    np.testing.assert_allclose(got, _numpy_depthwise(x, kernel, padding), rtol=1e-5, atol=1e-5)
    upstream = rng.standard_normal(got.shape).astype(np.float32)
    _, grads_plugin, _ = testing.gradients(
        lambda a, k: (conv_norm_lib.depthwise_conv(a, k, padding) * upstream).sum(), [x, kernel])
    _, grads_grouped, _ = testing.gradients(
        lambda a, k: (keras.ops.depthwise_conv(a, k, strides=1, padding=padding) * upstream).sum(), [x, kernel])
    testing.assert_float32_parity(grads_plugin, grads_grouped, ("d_inputs", "d_kernel"))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_shifted_depthwise_conv_keeps_half_precision_and_sums_in_float32(dtype):
    from sphere_tf.backends.jax import conv_norm as conv_norm_lib

    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 6, 6, 4)).astype(np.float32)
    kernel = rng.standard_normal((3, 3, 4, 1)).astype(np.float32)
    got = conv_norm_lib.depthwise_conv(keras.ops.cast(x, dtype), keras.ops.cast(kernel, dtype), "same")
    assert str(got.dtype) == dtype
    # Only the inputs' and the output's rounding: |error| ≤ a few half-precision ulps of the result.
    want = _numpy_depthwise(np.asarray(keras.ops.cast(keras.ops.cast(x, dtype), "float32")),
                            np.asarray(keras.ops.cast(keras.ops.cast(kernel, dtype), "float32")), "same")
    ulp = 2.0 ** -7 if dtype == "bfloat16" else 2.0 ** -10
    np.testing.assert_allclose(np.asarray(keras.ops.cast(got, "float32")), want, rtol=ulp, atol=ulp)


def test_a_strided_depthwise_conv_runs_the_reference_after_one_info_line(caplog):
    jax_plugin = _plugin()
    jax_plugin._fall_back.reported.clear()
    x = np.ones((1, 4, 4, 2), np.float32)
    kernel = np.ones((3, 3, 2, 1), np.float32)
    with caplog.at_level(logging.INFO, logger=jax_plugin.__name__):
        for _ in range(3):
            assert jax_plugin.ACCELERATOR.depthwise_conv(x, kernel, (2, 2), "same") is NotImplemented
    lines = [r.getMessage() for r in caplog.records if r.name == jax_plugin.__name__]
    assert len(lines) == 1 and "strides (2, 2)" in lines[0], lines


def test_the_layer_takes_both_plugin_pieces_and_the_reference_when_acceleration_is_off(monkeypatch):
    from sphere_tf.backends.jax import conv_norm as conv_norm_lib

    calls = []
    for name in ("conv_norm", "depthwise_conv"):
        original = getattr(conv_norm_lib, name)

        def spy(*args, _name=name, _original=original):
            calls.append(_name)
            return _original(*args)

        monkeypatch.setattr(conv_norm_lib, name, spy)
    x = np.random.default_rng(1).standard_normal((2, 8, 8, 3)).astype(np.float32)
    layer = ConvNorm2D(4, 3, strides=2, padding="same")
    accelerated = np.asarray(layer(x, training=True))
    assert calls == ["conv_norm", "depthwise_conv"]
    with testing.training_path("reference"):
        reference = np.asarray(layer(x, training=True))
    assert len(calls) == 2
    np.testing.assert_allclose(accelerated, reference, rtol=1e-5, atol=1e-5)
    assert acceleration.Accelerator().depthwise_conv(x, None, (1, 1), "same") is NotImplemented


def test_plugin_conv_norm_exports_with_a_symbolic_batch():
    """`jax.export` with a polymorphic batch (what a serving export of a JAX model traces) gives the reference's
    values at any batch size."""
    import jax
    from jax import export
    from jax import numpy as jnp

    from sphere_tf.backends.jax import conv_norm as conv_norm_lib

    rng = np.random.default_rng(4)
    kernel = rng.standard_normal((3, 3, 4, 5)).astype(np.float32)
    normalizer = fourier.spectral_normalizer(kernel, (10, 10))
    (batch,) = export.symbolic_shape("batch")
    exported = export.export(jax.jit(lambda x: conv_norm_lib.conv_norm(x, kernel, normalizer, (2, 2), "same")))(
        jax.ShapeDtypeStruct((batch, 8, 8, 4), jnp.float32))
    for size in (1, 3):
        x = rng.standard_normal((size, 8, 8, 4)).astype(np.float32)
        want = np.asarray(fourier.fourier_conv_norm(x, kernel, normalizer, (2, 2), "same"))
        np.testing.assert_allclose(np.asarray(exported.call(x)), want, rtol=1e-5, atol=1e-5)
