"""DecoupledConv2D against NumPy transcriptions of the authors' TF code (wy1iu/DCNets).

The decoupled conv of `dcnet_cifar100/{tanh_cos,ball_cos,seg_cos}/architecture.py` (`_conv_layer`
with `norm=True`), transcribed:

```
filt   = w / sqrt(Σ_{h,w,c_in} w² + 1e-4)
conv   = conv2d(x, filt);   x_norm = sqrt(conv2d(x·x, ones) + 1e-4)
radius = radius_var² + 1e-4                           (radius_var initialised to 1)
mean   = reduce_mean(x_norm) while training (the batch-mean tensor itself, differentiated);
         ExponentialMovingAverage(0.999).average(mean) at test time
tanh_cos: conv / x_norm · tanh(x_norm / mean / radius)
ball_cos: conv / (radius·mean + relu(x_norm − radius·mean))
seg_cos:  conv / x_norm · where(x_norm < radius·mean, x_norm, 0.5·x_norm + 0.5·radius·mean)
```

`tf.train.ExponentialMovingAverage.apply` of a tensor creates its shadow with zeros and, with
`zero_debias=False` (its default), updates ``shadow -= (1 − decay)·(shadow − value)``. The layers
follow it with `zero_debias=False` and debias it by default (documented in `DecoupledConv2D`).
"""

import keras
import numpy as np
import pytest
from keras import ops

from sphere_tf import testing
from sphere_tf.layers import DecoupledConv2D

UPSTREAM_DECAY = 0.999
KINDS = ["tanh", "ball", "seg"]
GEOMETRY = dict(kernel_size=3, strides=1, padding="same")


def upstream_dcnet_conv(x, w, radius_var, kind, xnorm_mean=None):
    """The authors' decoupled conv in NumPy (float64); `xnorm_mean=None` is the training branch."""
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    wnorm = np.sqrt(np.sum(w**2, axis=(0, 1, 2)) + 1e-4)
    filt = (w / wnorm).reshape(-1, w.shape[-1])
    patches = testing.numpy_patches(x, GEOMETRY["kernel_size"], GEOMETRY["strides"], GEOMETRY["padding"])
    conv = patches @ filt
    x_norm = np.sqrt(np.sum(patches**2, axis=-1, keepdims=True) + 1e-4)
    radius = np.asarray(radius_var, np.float64) ** 2 + 1e-4
    mean = np.mean(x_norm) if xnorm_mean is None else xnorm_mean
    if kind == "tanh":
        return conv / x_norm * np.tanh(x_norm / mean / radius)
    adjusted = radius * mean
    if kind == "ball":
        return conv / (adjusted + np.maximum(x_norm - adjusted, 0.0))
    return conv / x_norm * np.where(x_norm < adjusted, x_norm, 0.5 * x_norm + 0.5 * adjusted)


def upstream_moving_average(values, decay=UPSTREAM_DECAY):
    """`tf.train.ExponentialMovingAverage(decay)` of a tensor after `len(values)` updates."""
    shadow = 0.0
    for value in values:
        shadow -= (1.0 - decay) * (shadow - value)
    return shadow


def _layer(kind, rng, x, **kwargs):
    layer = DecoupledConv2D(3, magnitude=kind, angular="cosine", **GEOMETRY, **kwargs)
    layer(x[:1], training=False)
    layer.kernel.assign(rng.normal(size=layer.kernel.shape).astype(np.float32))
    layer.rho_raw.assign(rng.uniform(0.6, 1.4, size=layer.rho_raw.shape).astype(np.float32))
    return layer


def _inputs(rng, shape=(2, 4, 4, 2)):
    # Per-sample scales spread the patch norms on both sides of the radius (ball / seg branches).
    scales = np.array([0.3, 2.5])[:, None, None, None]
    return (rng.normal(size=shape) * scales).astype(np.float32)


@pytest.mark.parametrize("kind", KINDS)
def test_training_output_and_input_gradient_match_upstream(rng, kind, training_path):
    x = _inputs(rng)
    layer = _layer(kind, rng, x)
    w, radius_var = layer.kernel.numpy(), layer.rho_raw.numpy()
    upstream_out = upstream_dcnet_conv(x, w, radius_var, kind)
    # Positive weights: the loss's dependence on E{‖x‖} does not average out over positions.
    weights = rng.uniform(0.5, 1.5, size=upstream_out.shape)

    y = ops.convert_to_numpy(layer(x, training=True))
    _, (grad,), _ = testing.gradients(
        lambda xt: ops.sum(ops.multiply(layer(xt, training=True), weights.astype(np.float32))), [x],
        state=layer.non_trainable_variables)
    np.testing.assert_allclose(y, upstream_out, rtol=1e-5, atol=1e-5)

    def upstream_loss(value, xnorm_mean=None):
        return float(np.sum(upstream_dcnet_conv(value, w, radius_var, kind, xnorm_mean) * weights))

    expected = testing.numeric_gradient(upstream_loss, x)
    scale = np.max(np.abs(expected))
    np.testing.assert_allclose(grad, expected, rtol=2e-4, atol=2e-4 * scale)

    # The test can tell: with the batch mean held constant (a stopped gradient) the input
    # gradient differs by far more (25x) than the tolerance above.
    patches = testing.numpy_patches(x, GEOMETRY["kernel_size"], GEOMETRY["strides"], GEOMETRY["padding"])
    batch_mean = np.mean(np.sqrt(np.sum(patches.astype(np.float64) ** 2, axis=-1) + 1e-4))
    stopped = testing.numeric_gradient(lambda v: upstream_loss(v, batch_mean), x)
    assert np.max(np.abs(stopped - expected)) > 5e-3 * scale


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("zero_debias", [False, True], ids=["upstream", "debiased"])
def test_inference_after_training_steps_matches_upstream_average(rng, kind, zero_debias):
    """Four `fit` steps, then inference: the upstream average, or the debiased one (the default)."""
    steps, batch = 4, 2
    x = np.concatenate([_inputs(rng) * (1.0 + step) for step in range(steps)])
    layer = DecoupledConv2D(3, magnitude=kind, angular="cosine", zero_debias=zero_debias, **GEOMETRY)
    model = keras.Sequential([keras.Input(x.shape[1:]), layer])
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    y = rng.normal(size=(len(x), 4, 4, 3)).astype(np.float32)
    model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)

    batch_means = []
    for step in range(steps):
        patches = testing.numpy_patches(x[step * batch:(step + 1) * batch], 3, 1, "same")
        batch_means.append(np.mean(np.sqrt(np.sum(patches.astype(np.float64) ** 2, axis=-1) + 1e-4)))
    shadow = upstream_moving_average(batch_means)
    expected_mean = shadow / (1.0 - UPSTREAM_DECAY**steps) if zero_debias else shadow
    np.testing.assert_allclose(float(layer.norm_mean()), expected_mean, rtol=1e-5)

    x_test = _inputs(rng)
    expected = upstream_dcnet_conv(x_test, layer.kernel.numpy(), layer.rho_raw.numpy(), kind,
                                   xnorm_mean=expected_mean)
    np.testing.assert_allclose(ops.convert_to_numpy(model(x_test, training=False)), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_untrained_upstream_average_infers_like_upstream(rng, kind):
    """Before any training step the upstream shadow is 0: the radius is 0 and h saturates."""
    x = _inputs(rng)
    layer = _layer(kind, rng, x, zero_debias=False)
    assert float(layer.norm_mean()) == 0.0
    with np.errstate(divide="ignore"):
        expected = upstream_dcnet_conv(x, layer.kernel.numpy(), layer.rho_raw.numpy(), kind, xnorm_mean=0.0)
    got = ops.convert_to_numpy(layer(x, training=False))
    assert np.all(np.isfinite(got))
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
