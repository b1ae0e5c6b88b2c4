"""Tests of ConvNorm2D: NumPy reference of the whole forward, running V̂, gradients, saving, dtypes."""

import inspect
import math

import keras
import numpy as np
import pytest

from sphere_tf import testing
from sphere_tf.layers import ConvNorm2D

# -- NumPy reference of the whole layer (explicit loops + np.fft; independent of sphere_tf) ------


def np_normalizer_full(a, grid, eps):
    kh, kw, c_in, c_out = a.shape
    pad = np.zeros(tuple(grid) + (c_in, c_out))
    pad[:kh, :kw] = a
    return 1.0 / np.sqrt((np.abs(np.fft.fft2(pad, axes=(0, 1))) ** 2).sum(axis=2) + eps)


def np_keras_rows(size, k, s, padding):
    if padding == "valid":
        out, before = (size - k) // s + 1, 0
    else:
        out = math.ceil(size / s)
        before = max((out - 1) * s + k - size, 0) // 2
    return [(k - 1 - before) + o * s for o in range(out)]


def np_depthwise_same(y, r, b):
    """Depthwise correlation with Keras 'same' zero padding (extra cell after), plus bias."""
    n, h, w, c = y.shape
    kh, kw = r.shape[:2]
    top, left = (kh - 1) // 2, (kw - 1) // 2
    yp = np.pad(y, ((0, 0), (top, kh - 1 - top), (left, kw - 1 - left), (0, 0)))
    out = np.zeros_like(y)
    for u in range(kh):
        for v in range(kw):
            out += yp[:, u : u + h, v : v + w, :] * r[u, v, :, 0]
    return out + b


def np_layer(x, a, strides, padding, eps, affine=None, bn=None, v_full=None):
    """ConvNorm2D forward. affine=(r, b); bn=(gamma, beta, mean, var, eps) or 'batch' statistics."""
    _, h, w, _ = x.shape
    kh, kw = a.shape[:2]
    y = testing.numpy_full_correlation(x, a)
    v = np_normalizer_full(a, y.shape[1:3], eps) if v_full is None else v_full
    y = np.real(np.fft.ifft2(np.fft.fft2(y, axes=(1, 2)) * v[None], axes=(1, 2)))
    y = y[:, np_keras_rows(h, kh, strides, padding)][:, :, np_keras_rows(w, kw, strides, padding)]
    if affine is not None:
        y = np_depthwise_same(y, *affine)
    if bn is not None:
        gamma, beta, mean, var, bn_eps = bn
        if mean is None:  # training: batch statistics
            mean, var = y.mean(axis=(0, 1, 2)), y.var(axis=(0, 1, 2))
        y = gamma * (y - mean) / np.sqrt(var + bn_eps) + beta
    return y


def np_alpha(t, steps=40000):
    return max(0.5 * (math.cos(math.pi * min(t, steps) / steps) + 1.0), 0.01)


def _weights(layer):
    return {w.path.split("/")[-1]: keras.ops.convert_to_numpy(w) for w in layer.weights}


# -- basics ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kernel_size,strides,padding,size",
    [(3, 1, "same", (8, 8)), (3, 2, "same", (8, 8)), (3, 2, "same", (7, 9)), (5, 2, "valid", (9, 8)),
     (1, 2, "same", (7, 7)), (4, 2, "same", (8, 6)), ((1, 3), 1, "valid", (5, 6)), (3, (2, 1), "valid", (7, 7))],
)
def test_output_shape_matches_conv2d(kernel_size, strides, padding, size):
    x = np.zeros((2,) + size + (3,), np.float32)
    layer = ConvNorm2D(5, kernel_size, strides=strides, padding=padding)
    expected = keras.layers.Conv2D(5, kernel_size, strides=strides, padding=padding)(x).shape
    assert layer(x).shape == expected
    assert layer.compute_output_shape((None,) + size + (3,)) == (None,) + tuple(expected[1:])


def test_weights():
    layer = ConvNorm2D(4, 3, padding="same")
    layer.build((None, 8, 6, 2))
    names = {w.path.split("/")[-1]: tuple(w.shape) for w in layer.weights}
    assert names["kernel"] == (3, 3, 2, 4)
    assert names["affine_kernel"] == (3, 3, 4, 1) and names["affine_bias"] == (4,)
    assert names["running_v"] == (4, 10, 8 // 2 + 1)
    assert names["num_batches_tracked"] == ()
    assert len(layer.trainable_weights) == 5  # kernel, affine kernel+bias, BN gamma+beta
    assert layer.running_v.dtype == "float32" and not layer.running_v.trainable
    bare = ConvNorm2D(4, 1, affine=False, batch_norm=False)
    bare.build((None, None, None, 2))
    assert [w.path.split("/")[-1] for w in bare.trainable_weights] == ["kernel"]
    assert tuple(bare.running_v.shape) == (4,)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"filters": 0}, "Invalid value for argument `filters`: expected a positive int. Received: filters=0"),
        ({"kernel_size": 0}, "Invalid value for argument `kernel_size`"),
        ({"strides": (1, 0)}, "Invalid value for argument `strides`"),
        ({"padding": "full"}, "Invalid value for argument `padding`: expected 'valid' or 'same'. Received: padding='full'"),
        ({"epsilon": 0.0}, "Invalid value for argument `epsilon`: expected a float > 0. Received: epsilon=0.0"),
        ({"momentum": 1.5}, "Invalid value for argument `momentum`"),
        ({"momentum": 0}, "Invalid value for argument `momentum`"),
        ({"rampdown_steps": 0}, "Invalid value for argument `rampdown_steps`"),
        ({"bn_momentum": 1.0}, "Invalid value for argument `bn_momentum`"),
        ({"bn_epsilon": -1.0}, "Invalid value for argument `bn_epsilon`"),
    ],
)
def test_bad_init_args(kwargs, message):
    args = {"filters": 4, "kernel_size": 3, **kwargs}
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ConvNorm2D(**args)


def test_needs_static_spatial_size_unless_1x1():
    with pytest.raises(ValueError, match="needs a static spatial input size"):
        keras.Sequential([keras.Input((None, None, 3)), ConvNorm2D(4, 3)])
    model = keras.Sequential([keras.Input((None, None, 3)), ConvNorm2D(4, 1)])
    assert model(np.ones((1, 5, 7, 3), np.float32)).shape == (1, 5, 7, 4)
    with pytest.raises(ValueError, match="Computed output size would be zero or negative"):
        ConvNorm2D(4, 5).build((None, 3, 8, 2))


def test_rejects_a_spatial_size_other_than_the_built_one():
    layer = ConvNorm2D(4, 3)
    layer(np.ones((1, 8, 8, 2), np.float32))
    with pytest.raises(ValueError):
        layer(np.ones((1, 9, 8, 2), np.float32))


def test_config_roundtrip():
    layer = ConvNorm2D(
        6, (3, 5), strides=2, padding="same", affine=False, batch_norm=True, epsilon=1e-3, momentum=0.2,
        rampdown_steps=100, kernel_regularizer="l2", kernel_initializer="he_normal", name="cn",
    )
    rebuilt = testing.assert_config_roundtrip(layer)
    assert rebuilt.kernel_size == (3, 5) and rebuilt.momentum == 0.2 and rebuilt.padding == "same"


# -- correctness against the NumPy reference -----------------------------------------------------


@pytest.mark.parametrize("kernel_size", [1, 3, 5])
@pytest.mark.parametrize("strides", [1, 2])
@pytest.mark.parametrize("padding", ["same", "valid"])
def test_forward_matches_numpy_reference(kernel_size, strides, padding, rng):
    x = rng.standard_normal((3, 8, 7, 2)).astype(np.float32)
    layer = ConvNorm2D(3, kernel_size, strides=strides, padding=padding, bn_epsilon=1e-3)
    layer.build(x.shape)
    # Non-trivial BN state for the inference check.
    layer.bn.gamma.assign(rng.uniform(0.5, 1.5, 3).astype(np.float32))
    layer.bn.beta.assign(rng.standard_normal(3).astype(np.float32))
    layer.bn.moving_mean.assign(rng.standard_normal(3).astype(np.float32))
    layer.bn.moving_variance.assign(rng.uniform(0.5, 2.0, 3).astype(np.float32))
    w = _weights(layer)
    bn_state = (w["gamma"], w["beta"], w["moving_mean"], w["moving_variance"], 1e-3)
    affine = (w["affine_kernel"], w["affine_bias"])
    # Inference before any training step uses V̂ of the current kernel.
    out = keras.ops.convert_to_numpy(layer(x, training=False))
    ref = np_layer(x, w["kernel"], strides, padding, 1e-4, affine, bn_state)
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)
    # Training: BN batch statistics.
    out = keras.ops.convert_to_numpy(layer(x, training=True))
    ref = np_layer(x, w["kernel"], strides, padding, 1e-4, affine, (w["gamma"], w["beta"], None, None, 1e-3))
    np.testing.assert_allclose(out, ref, rtol=1e-3, atol=1e-3)


def test_forward_without_affine_and_bn_for_non_square_kernel(rng):
    x = rng.standard_normal((2, 6, 9, 2)).astype(np.float32)
    layer = ConvNorm2D(3, (1, 3), strides=(1, 2), padding="same", affine=False, batch_norm=False)
    out = keras.ops.convert_to_numpy(layer(x))
    # (1, 2) strides: rows stride 1, columns stride 2, so the reference crops axis by axis.
    a = _weights(layer)["kernel"]
    y = testing.numpy_full_correlation(x, a)
    v = np_normalizer_full(a, y.shape[1:3], 1e-4)
    y = np.real(np.fft.ifft2(np.fft.fft2(y, axes=(1, 2)) * v[None], axes=(1, 2)))
    ref = y[:, np_keras_rows(6, 1, 1, "same")][:, :, np_keras_rows(9, 3, 2, "same")]
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


# -- running V̂ ------------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel_size", [1, 3])
@pytest.mark.parametrize("momentum,rampdown_steps", [(None, 40000), (None, 2), (0.3, 40000)])
def test_running_average_and_inference(kernel_size, momentum, rampdown_steps, rng):
    x = rng.standard_normal((2, 6, 6, 2)).astype(np.float32)
    layer = ConvNorm2D(3, kernel_size, padding="same", affine=False, batch_norm=False,
                       momentum=momentum, rampdown_steps=rampdown_steps)
    layer.build(x.shape)
    grid = (6 + kernel_size - 1, 6 + kernel_size - 1)
    running = np.zeros(grid + (3,))
    kernels = []
    for t in range(1, 5):
        kernel = rng.standard_normal((kernel_size, kernel_size, 2, 3)).astype(np.float32)
        layer.kernel.assign(kernel)
        kernels.append(kernel)
        out = keras.ops.convert_to_numpy(layer(x, training=True))
        np.testing.assert_allclose(out, np_layer(x, kernel, 1, "same", 1e-4), rtol=1e-4, atol=1e-5)
        if momentum is None:
            alpha = np_alpha(t, rampdown_steps)
        else:
            alpha = 1.0 if t == 1 else momentum
        running = alpha * np_normalizer_full(kernel, grid, 1e-4) + (1 - alpha) * running
    assert float(layer.num_batches_tracked) == 4.0
    stored = keras.ops.convert_to_numpy(layer.running_v)
    if kernel_size == 1:
        np.testing.assert_allclose(stored, running[0, 0], rtol=1e-5)
    else:
        np.testing.assert_allclose(stored, running.transpose(2, 0, 1)[:, :, : grid[1] // 2 + 1], rtol=1e-5)
    # Inference uses the running V̂, not the current kernel's.
    out = keras.ops.convert_to_numpy(layer(x, training=False))
    np.testing.assert_allclose(out, np_layer(x, kernels[-1], 1, "same", 1e-4, v_full=running), rtol=1e-4, atol=1e-5)
    if momentum is not None or rampdown_steps == 2:  # α ≈ 1 during the first steps of a 40k ramp
        current = np_layer(x, kernels[-1], 1, "same", 1e-4)
        assert np.abs(out - current).max() > 1e-3


# -- gradients ------------------------------------------------------------------------------------


def _loss_of_weight(layer, weight, x, loss_fn):
    """`w ↦ loss_fn(layer(x, training=True))` with `weight` replaced by w (a stateless call, every backend)."""
    trainable = [keras.ops.convert_to_tensor(v) for v in layer.trainable_variables]
    non_trainable = [keras.ops.convert_to_tensor(v) for v in layer.non_trainable_variables]
    index = [v.path for v in layer.trainable_variables].index(weight.path)

    def fn(w):
        values = list(trainable)
        values[index] = w
        out, _ = layer.stateless_call(values, non_trainable, x, training=True)
        return loss_fn(out)

    return fn


def test_no_gradient_flows_through_the_normalizer(rng):
    """With V̂ stopped the output is linear in the kernel: ∂L/∂a_j = L(e_j) with V̂ frozen at a.

    Without the stop-gradient the output would be scale-invariant in a, so Σ a·∂L/∂a = 0; with it,
    Euler's identity gives Σ a·∂L/∂a = L.
    """
    x = rng.standard_normal((2, 5, 5, 2)).astype(np.float32)
    g = rng.standard_normal((2, 3, 3, 2))
    layer = ConvNorm2D(2, 3, strides=2, padding="same", affine=False, batch_norm=False)
    layer.build(x.shape)
    a = _weights(layer)["kernel"].astype(np.float64)
    g32 = g.astype(np.float32)
    loss, grad = testing.value_and_grad(
        _loss_of_weight(layer, layer.kernel, x, lambda out: keras.ops.sum(keras.ops.multiply(out, g32))), a)
    v = np_normalizer_full(a, (7, 7), 1e-4)
    expected = np.zeros_like(a)
    for idx in np.ndindex(*a.shape):
        basis = np.zeros_like(a)
        basis[idx] = 1.0
        expected[idx] = (np_layer(x, basis, 2, "same", 1e-4, v_full=v) * g).sum()
    np.testing.assert_allclose(grad, expected, rtol=1e-3, atol=1e-4)
    assert (a * grad).sum() == pytest.approx(float(loss), rel=1e-3)
    assert abs(float(loss)) > 1e-2


def test_gradients_are_finite_for_spectral_zeros(rng):
    x = rng.standard_normal((2, 6, 6, 2)).astype(np.float32)
    layer = ConvNorm2D(3, 3, padding="same")
    layer.build(x.shape)
    kernel = rng.standard_normal((3, 3, 2, 3))
    kernel = kernel - kernel.mean(axis=(0, 1), keepdims=True)  # zero at DC
    kernel[..., 0] = 0.0  # dead channel
    layer.kernel.assign(kernel.astype(np.float32))
    out = layer(x, training=True)
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(out)))
    for weight in layer.trainable_weights:
        fn = _loss_of_weight(layer, weight, x, lambda y: keras.ops.sum(y * y))
        _, grad = testing.value_and_grad(fn, keras.ops.convert_to_numpy(weight))
        assert np.all(np.isfinite(grad)), weight.path
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(layer(x, training=False))))


# -- models, saving, compilation, dtypes ----------------------------------------------------------


def _small_model(input_shape=(8, 8, 1)):
    inputs = keras.Input(input_shape)
    h = ConvNorm2D(4, 3, padding="same")(inputs)
    h = keras.layers.ReLU()(h)
    h = ConvNorm2D(6, 3, strides=2, padding="same", momentum=0.5)(h)
    h = ConvNorm2D(5, 1, batch_norm=False)(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(inputs, keras.layers.Dense(3)(h))


def _train_steps(model, x, y, steps=2):
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, epochs=steps, batch_size=len(x), verbose=0)


def test_keras_and_saved_model_roundtrips_in_inference_mode(tmp_path, rng):
    x = rng.standard_normal((4, 8, 8, 1)).astype(np.float32)
    y = rng.integers(0, 3, 4)
    model = _small_model()
    _train_steps(model, x, y)
    for layer in model.layers:
        if isinstance(layer, ConvNorm2D):
            assert float(layer.num_batches_tracked) == 2.0
            assert np.abs(keras.ops.convert_to_numpy(layer.running_v)).max() > 0
    reloaded = testing.assert_keras_roundtrip(model, x, tmp_path, rtol=1e-5, atol=1e-5)
    for a, b in zip(model.weights, reloaded.weights):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))
    if keras.backend.backend() == "tensorflow":  # SavedModel export is the TensorFlow backend's
        testing.assert_saved_model_roundtrip(model, x, tmp_path, rtol=1e-5, atol=1e-5)


def test_sequential_and_subclassed_models(rng):
    x = rng.standard_normal((2, 8, 8, 3)).astype(np.float32)
    seq = keras.Sequential([keras.Input((8, 8, 3)), ConvNorm2D(4, 3, padding="same"), keras.layers.Flatten()])
    assert seq(x).shape == (2, 256)

    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.conv = ConvNorm2D(4, 3, strides=2)
            self.pool = keras.layers.GlobalAveragePooling2D()

        def call(self, inputs, training=False):
            return self.pool(self.conv(inputs, training=training))

    net = Net()
    assert net(x, training=True).shape == (2, 4)
    assert float(net.conv.num_batches_tracked) == 1.0


def test_train_step_under_jit_compile_matches_eager(rng):
    """Two SGD steps compiled (XLA on TensorFlow and JAX; PyTorch's compiler is not asked for) equal eager ones."""
    x = rng.standard_normal((2, 8, 8, 3)).astype(np.float32)
    y = rng.standard_normal((2, 4)).astype(np.float32)
    models = []
    for jit_compile in (False, keras.backend.backend() != "torch"):
        keras.utils.set_random_seed(7)
        model = keras.Sequential([keras.Input((8, 8, 3)), ConvNorm2D(4, 3, strides=2, padding="same"),
                                  keras.layers.GlobalAveragePooling2D()])
        model.compile(keras.optimizers.SGD(0.05), "mse", run_eagerly=not jit_compile, jit_compile=jit_compile)
        model.fit(x, y, epochs=2, batch_size=2, verbose=0)
        models.append(model)
    eager, jitted = models
    for e, j in zip(eager.weights, jitted.weights):  # kernels, affine, BN, running V̂ and its step count
        np.testing.assert_allclose(keras.ops.convert_to_numpy(j), keras.ops.convert_to_numpy(e), rtol=1e-3, atol=1e-4,
                                   err_msg=e.path)
    np.testing.assert_allclose(jitted.predict(x, verbose=0), keras.ops.convert_to_numpy(eager(x, training=False)),
                               rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_runs_the_fft_path_in_float32(policy, rng, monkeypatch):
    x = rng.standard_normal((2, 8, 8, 3)).astype(np.float32)
    ref_layer = ConvNorm2D(4, 3, strides=2, padding="same")
    ref_layer.build(x.shape)
    layer = ConvNorm2D(4, 3, strides=2, padding="same", dtype=policy)
    layer.build(x.shape)
    layer.set_weights(ref_layer.get_weights())
    seen = []
    rfft = keras.ops.rfft

    def spy(signal, fft_length=None):
        seen.append(keras.backend.standardize_dtype(signal.dtype))
        return rfft(signal, fft_length=fft_length)

    monkeypatch.setattr(keras.ops, "rfft", spy)
    with testing.training_path("reference"):  # the keras.ops path; the TensorFlow plug-in's: its parity test
        out = layer(x, training=True)
    assert seen and all(d == "float32" for d in seen)
    assert keras.backend.standardize_dtype(out.dtype) == layer.compute_dtype
    assert layer.kernel.dtype == "float32" and layer.running_v.dtype == "float32"
    expected = keras.ops.convert_to_numpy(ref_layer(x, training=True))
    tol = 2e-2 if policy == "mixed_float16" else 1e-1
    np.testing.assert_allclose(keras.ops.convert_to_numpy(keras.ops.cast(out, "float32")), expected, rtol=tol, atol=tol)
    big = layer(1e3 * x, training=False)
    assert np.all(np.isfinite(keras.ops.convert_to_numpy(keras.ops.cast(big, "float32"))))


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_fit_evaluate_and_predict_are_finite(policy, rng):
    """With the backend's default path (the TensorFlow and JAX plug-ins, PyTorch's reference) a mixed-precision
    model fits, evaluates and predicts finitely, also on an all-zero batch (V̂ is finite for a zero response) and
    on large inputs."""
    x = rng.standard_normal((8, 8, 8, 3)).astype(np.float32)
    y = rng.integers(0, 4, size=(8,))
    keras.mixed_precision.set_dtype_policy(policy)
    try:
        model = keras.Sequential([keras.Input((8, 8, 3)), ConvNorm2D(4, 3, padding="same"),
                                  keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(4, dtype="float32")])
    finally:
        keras.mixed_precision.set_dtype_policy("float32")
    model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = model.fit(x, y, batch_size=4, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert np.isfinite(model.evaluate(x, y, verbose=0))
    for batch in (x, np.zeros_like(x), 1e3 * x):
        assert np.isfinite(model.predict(batch, verbose=0)).all()


# -- Keras's own layer harness ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,input_shape,output_shape,weights",
    [
        ({"kernel_size": 3, "strides": 2, "padding": "SAME"}, (2, 6, 5, 3), (2, 3, 3, 4), (5, 4)),
        ({"kernel_size": (2, 3), "affine": False, "batch_norm": False}, (2, 5, 5, 3), (2, 4, 3, 4), (1, 2)),
        ({"kernel_size": 1, "momentum": 0.5}, (2, 4, 4, 3), (2, 4, 4, 4), (5, 4)),
    ],
)
def test_keras_layer_harness(kwargs, input_shape, output_shape, weights, keras_harness):
    keras_harness.run_layer_test(
        ConvNorm2D,
        init_kwargs={"filters": 4, **kwargs},
        input_shape=input_shape,
        expected_output_shape=output_shape,
        expected_num_trainable_weights=weights[0],
        expected_num_non_trainable_weights=weights[1],
    )


def test_constructor_has_an_explicit_signature():
    params = inspect.signature(ConvNorm2D.__init__).parameters
    assert list(params)[1:5] == ["filters", "kernel_size", "strides", "padding"]
    for name in ("affine", "batch_norm", "epsilon", "momentum", "rampdown_steps", "kernel_initializer"):
        assert name in params and f"{name}:" in ConvNorm2D.__doc__.replace("bn_momentum, bn_epsilon", "")
