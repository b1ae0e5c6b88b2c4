"""Small public helpers for testing sphere_tf layers (and layers built on them).

Import as ``from sphere_tf import testing``. The helpers compare against
independent references only:

* `assert_keras_roundtrip`, `assert_saved_model_roundtrip`, `assert_config_roundtrip`:
  save/load round trips checked against the live model;
* `numpy_patches`: explicit-loop patch extraction with `keras.layers.Conv2D`
  geometry, for NumPy references of convolution-like operators;
* `numpy_decoupled`, `NUMPY_ANGULAR`, `NUMPY_MAGNITUDE`: float64 NumPy versions of
  the operator formulas [S-2..4], [D-3..16], [D-19..21], written from the papers,
  not from `sphere_tf.ops`;
* `numeric_gradient`: central finite differences of a NumPy function, the
  reference for every hand-written or custom gradient;
* `value_and_grad`: value and gradient of a `keras.ops` function on the current
  Keras backend, to test custom gradients on TensorFlow, JAX and PyTorch alike.
* `numpy_cayley_sgd_step`: one Cayley-SGD step (Li, Li & Todorovic, ICLR 2020,
  Algorithm 2) in float64 NumPy, the reference of the OPT optimizer.

Example:

>>> x = np.arange(16.0).reshape(1, 4, 4, 1)
>>> numpy_patches(x, 3, strides=2, padding="same").shape
(1, 2, 2, 9)
"""

import contextlib
import os
import zlib

import keras
import numpy as np

from sphere_tf.ops import acceleration
from sphere_tf.ops import fourier


def _to_numpy(x):
    if isinstance(x, dict):
        return {k: _to_numpy(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_to_numpy(v) for v in x]
    return keras.ops.convert_to_numpy(x)


def numeric_gradient(fn, value, step=1e-6):
    """Central finite differences ``(f(x + h·e_i) − f(x − h·e_i)) / 2h`` of a scalar function.

    Args:
        fn: callable taking a float64 NumPy array of `value`'s shape, returning a
            scalar (a NumPy reference, never the code under test).
        value: array-like, the point.
        step: float > 0, h (the error is O(h²) plus rounding of order eps/h).

    Returns:
        float64 array of `value`'s shape.
    """
    value = np.array(value, dtype=np.float64)
    grad = np.zeros_like(value)
    for i in np.ndindex(value.shape):
        plus, minus = value.copy(), value.copy()
        plus[i] += step
        minus[i] -= step
        grad[i] = (float(fn(plus)) - float(fn(minus))) / (2.0 * step)
    return grad


def value_and_grad(fn, x):
    """``(fn(x), ∂fn/∂x)`` of a scalar `keras.ops` function on the current Keras backend, as float64 NumPy.

    `gradients` for one float32 input (zeros where `fn` does not depend on `x`).
    """
    value, (grad,), _ = gradients(fn, [np.asarray(x, dtype=np.float32)])
    return np.float64(value), grad.astype(np.float64)


def _assert_outputs_close(actual, expected, rtol, atol):
    actual, expected = _to_numpy(actual), _to_numpy(expected)
    if isinstance(expected, dict):
        assert sorted(actual) == sorted(expected)
        for key in expected:
            np.testing.assert_allclose(actual[key], expected[key], rtol=rtol, atol=atol)
    elif isinstance(expected, list):
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)
    else:
        np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def assert_keras_roundtrip(model, inputs, tmp_dir, rtol=1e-6, atol=1e-6):
    """Saves `model` to a `.keras` file, reloads it and compares inference outputs.

    No `custom_objects` are passed: every sphere_tf object must be registered
    serializable. Non-trainable state (e.g. the E{‖x‖} moving averages) is
    compared implicitly through the inference outputs.

    Args:
        model: a built `keras.Model`.
        inputs: inputs accepted by `model(inputs, training=False)`.
        tmp_dir: str or path-like, a directory to write into.
        rtol, atol: floats, tolerances of `np.testing.assert_allclose`.

    Returns:
        The reloaded model.
    """
    os.makedirs(str(tmp_dir), exist_ok=True)
    path = os.path.join(str(tmp_dir), "model.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    _assert_outputs_close(
        reloaded(inputs, training=False), model(inputs, training=False), rtol, atol
    )
    return reloaded


def assert_saved_model_roundtrip(model, inputs, tmp_dir, rtol=1e-6, atol=1e-6):
    """Exports `model` as a TF SavedModel and compares `serve(inputs)` with the model.

    Uses `model.export(path)` (Keras' inference export) and
    `tf.saved_model.load(path).serve(inputs)`.

    Args:
        model: a built `keras.Model`.
        inputs: a tensor or array (the single `serve` argument).
        tmp_dir: str or path-like, a directory to write into.
        rtol, atol: floats, tolerances of `np.testing.assert_allclose`.

    Returns:
        The loaded SavedModel object.
    """
    import tensorflow as tf  # only the SavedModel path needs TF directly

    os.makedirs(str(tmp_dir), exist_ok=True)
    path = os.path.join(str(tmp_dir), "saved_model")
    model.export(path, verbose=False)
    loaded = tf.saved_model.load(path)
    _assert_outputs_close(
        loaded.serve(tf.convert_to_tensor(inputs)), model(inputs, training=False), rtol, atol
    )
    return loaded


def assert_config_roundtrip(layer):
    """Checks that ``type(layer).from_config(layer.get_config())`` has the same config.

    Also serialises the config through `keras.saving.serialize_keras_object` /
    `deserialize_keras_object` (the path `.keras` files take), so an
    unregistered class fails here.

    Returns:
        The rebuilt layer.
    """
    config = layer.get_config()
    rebuilt = type(layer).from_config(config)
    assert rebuilt.get_config() == config, (rebuilt.get_config(), config)
    via_registry = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(via_registry) is type(layer)
    assert via_registry.get_config() == config
    return rebuilt


def registered_names(config):
    """The sphere_tf registered names ('sphere_tf>X') anywhere in a serialized Keras config (`.keras` files'
    `config.json`, `keras.saving.serialize_keras_object` output)."""
    found = set()
    if isinstance(config, dict):
        for key, value in config.items():
            if key in ("registered_name", "class_name") and isinstance(value, str) and value.startswith("sphere_tf>"):
                found.add(value)
            found |= registered_names(value)
    elif isinstance(config, list):
        for value in config:
            found |= registered_names(value)
    return found


def _same_padding(size, kernel, stride, dilation):
    """TF 'SAME' padding (before, after) of one spatial axis; extra cell goes after."""
    out = -(-size // stride)
    effective = (kernel - 1) * dilation + 1
    total = max((out - 1) * stride + effective - size, 0)
    return total // 2, total - total // 2


def numpy_patches(x, kernel_size, strides=1, padding="valid", dilation=1):
    """Explicit-loop patch extraction with `keras.layers.Conv2D` geometry.

    Patches are flattened in (row, col, channel) order, i.e. they line up with
    a Keras HWIO kernel reshaped to `(kh * kw * C, filters)`. 'same' pads zeros
    as TF does: total padding ``max((out − 1)·s + (k − 1)·d + 1 − size, 0)``,
    half before (rounded down) and the rest after, so stride 2 on an even size
    pads only at the bottom/right.

    Args:
        x: array `(N, H, W, C)`.
        kernel_size, strides, dilation: int or pair of ints.
        padding: 'valid' or 'same'.

    Returns:
        float64 array `(N, H', W', kh * kw * C)`.
    """
    def pair(v):
        return (v, v) if isinstance(v, int) else tuple(v)

    (kh, kw), (sh, sw), (dh, dw) = pair(kernel_size), pair(strides), pair(dilation)
    x = np.asarray(x, dtype=np.float64)
    n, h, w, c = x.shape
    if padding == "same":
        (top, bottom), (left, right) = _same_padding(h, kh, sh, dh), _same_padding(w, kw, sw, dw)
        x = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
        out_h, out_w = -(-h // sh), -(-w // sw)
    elif padding == "valid":
        out_h = (h - (kh - 1) * dh - 1) // sh + 1
        out_w = (w - (kw - 1) * dw - 1) // sw + 1
    else:
        raise ValueError(f"Invalid value for argument `padding`. Received: padding={padding!r}")
    patches = np.zeros((n, max(out_h, 0), max(out_w, 0), kh * kw * c))
    for i in range(out_h):
        for j in range(out_w):
            cells = []
            for a in range(kh):
                for b in range(kw):
                    cells.append(x[:, i * sh + a * dh, j * sw + b * dw, :])
            patches[:, i, j, :] = np.concatenate(cells, axis=-1)
    return patches


# -- NumPy references of the operator maths ------------------------------------------------
# Written from the papers' formulas (float64, no clipping beyond arccos' domain), independently of
# `sphere_tf.ops`. A new registry entry needs an entry here too; the tests fail until it has one.


def _np_sigmoid_of_theta(theta, k):
    # [S-4] in the paper's exponential form (float64 does not overflow for k >= 0.01).
    e = np.exp(-np.pi / (2.0 * k))
    u = np.exp(theta / k - np.pi / (2.0 * k))
    return (1.0 + e) / (1.0 - e) * (1.0 - u) / (1.0 + u)


def _np_theta(c):
    return np.arccos(np.clip(c, -1.0, 1.0))


NUMPY_ANGULAR = {
    "linear": lambda c, k: 1.0 - 2.0 * _np_theta(c) / np.pi,  # [S-2]
    "cosine": lambda c, k: c,  # [S-3]
    "sigmoid": lambda c, k: _np_sigmoid_of_theta(_np_theta(c), k),  # [S-4]
    "sqcosine": lambda c, k: np.sign(c) * c**2,  # [D-14]
}


def _np_seg(x, r, alpha, beta):
    # [D-8]/[D-21] piecewise, as printed.
    return np.where(x <= r, alpha * x, beta * x + alpha * r - beta * r)


NUMPY_MAGNITUDE = {
    "sphere": lambda x, r, alpha, beta: alpha * np.ones_like(x),  # [D-4]
    "ball": lambda x, r, alpha, beta: alpha * np.minimum(x, r) / r,  # [D-5], [D-20]
    "tanh": lambda x, r, alpha, beta: alpha * np.tanh(x / r),  # [D-6], [D-19]
    "linear": lambda x, r, alpha, beta: alpha * x,  # [D-7]
    "seg": _np_seg,
    "log": lambda x, r, alpha, beta: alpha * np.log(1.0 + x),  # [D-9]
    "mix": lambda x, r, alpha, beta: alpha * x + beta * np.log(1.0 + x),  # [D-10]
}


def numpy_decoupled(patches, kernel, magnitude="tanh", angular="cosine", alpha=1.0, beta=None,
                    rho=None, norm_mean=None, k=0.3, weighted=None, epsilon=1e-4):
    """NumPy reference of f_d = h(‖w‖, ‖x‖)·g(θ) [D-3] on explicit patches.

    ```
    ‖x‖ = sqrt(Σ x² + ε),  ‖w‖ = sqrt(Σ w² + ε),  c = x·w / (‖x‖‖w‖)
    r = ρ·E{‖x‖}                     (E: `norm_mean`, or the mean of ‖x‖ when None)
    weighted None       h(‖x‖)·g(θ)
    'linear'            ‖w‖·h(‖x‖)·g(θ)
    'nonlinear'         α·tanh(‖w‖‖x‖ / r)·g(θ)                 [D-15]
    'nonlinear_separate' α·tanh(‖w‖ / ρ)·tanh(‖x‖ / r)·g(θ)    [D-16]
    ```

    Args:
        patches: array `(..., D)`, e.g. from `numpy_patches` (or dense inputs).
        kernel: array whose leading axes flatten to `D`, last axis `units`.
        magnitude, angular: names in `NUMPY_MAGNITUDE` / `NUMPY_ANGULAR`.
        rho: None, float or `(units,)` array, the effective ρ (already > 0).
        norm_mean: None or float, E{‖x‖} (inference); None uses the batch mean (training).
        k: float or `(units,)` array, the sigmoid parameter.

    Returns:
        `(output, mean_patch_norm)`: float64 array `(..., units)` and the mean of ‖x‖.
    """
    p = np.asarray(patches, dtype=np.float64)
    w = np.asarray(kernel, dtype=np.float64).reshape(-1, np.shape(kernel)[-1])
    x_norm = np.sqrt(np.sum(p**2, axis=-1, keepdims=True) + epsilon)
    w_norm = np.sqrt(np.sum(w**2, axis=0) + epsilon)
    cos = (p @ w) / (x_norm * w_norm)
    g = NUMPY_ANGULAR[angular](cos, np.asarray(k, dtype=np.float64))
    batch_mean = float(np.mean(x_norm))
    radius = None
    if rho is not None:
        radius = np.asarray(rho, dtype=np.float64) * (batch_mean if norm_mean is None else norm_mean)
    if weighted == "nonlinear":
        h = alpha * np.tanh(x_norm * w_norm / radius)
    elif weighted == "nonlinear_separate":
        h = alpha * np.tanh(w_norm / rho) * np.tanh(x_norm / radius)
    else:
        h = NUMPY_MAGNITUDE[magnitude](x_norm, radius, alpha, beta)
        if weighted == "linear":
            h = h * w_norm
    return h * g, batch_mean


def numpy_full_correlation(x, kernel):
    """Cross-correlation with k − 1 zeros on every side (the "full" linear conv), float64.

    One kernel tap at a time: `x` NHWC, `kernel` HWIO; returns `(N, H + kh − 1, W + kw − 1, C_out)`.
    The ConvNorm reference [ConvNorm C.1] starts from this grid.
    """
    n, h, w, _ = x.shape
    kh, kw, _, c_out = kernel.shape
    xp = np.pad(np.asarray(x, np.float64), ((0, 0), (kh - 1, kh - 1), (kw - 1, kw - 1), (0, 0)))
    hf, wf = h + kh - 1, w + kw - 1
    y = np.zeros((n, hf, wf, c_out))
    for u in range(kh):
        for v in range(kw):
            y += np.einsum("nhwi,io->nhwo", xp[:, u : u + hf, v : v + wf, :], np.asarray(kernel[u, v], np.float64))
    return y



def numpy_cayley_sgd_step(x, momentum_buffer, grad, lr, momentum=0.9, iters=2):
    """One Cayley SGD step with momentum on an orthogonal `x`, float64 NumPy.

    Li, Li & Todorovic, "Efficient Riemannian optimization on the Stiefel manifold via the
    Cayley transform" (ICLR 2020), Algorithm 2, with the descent direction and constants
    of the OPT authors' code (wy1iu/OPT, `opt_ogd`):

    ```
    M ← μM − G;   Ŵ = M Xᵀ − ½ X (Xᵀ M Xᵀ);   W = Ŵ − Ŵᵀ;   M ← W X
    α = min(lr, 1 / (‖W‖_F + 1e-8));   Y = X + α M;   `iters` times Y ← X + (α/2) W (X + Y)
    ```

    Args:
        x, momentum_buffer, grad: arrays ``(n, n)``: X, M before the step, ∂L/∂X.
        lr: float, the cap on α.
        momentum: float, μ.
        iters: int, fixed-point iterations of the Cayley transform.

    Returns:
        ``(new_x, new_momentum_buffer)``, float64.
    """
    x = np.asarray(x, np.float64)
    m = momentum * np.asarray(momentum_buffer, np.float64) - np.asarray(grad, np.float64)
    w_hat = m @ x.T - 0.5 * x @ (x.T @ m @ x.T)
    w = w_hat - w_hat.T
    m = w @ x
    alpha = min(lr, 1.0 / (np.linalg.norm(w) + 1e-8))
    y = x + alpha * m
    for _ in range(iters):
        y = x + alpha / 2 * w @ (x + y)
    return y, m



def gradients(fn, inputs, variables=(), state=()):
    """`(value, grads_inputs, grads_variables)` of a scalar `fn(*inputs)`, on every Keras backend.

    The test suites' one replacement for `tf.GradientTape`: `fn` may call layers
    eagerly, and `variables` are Keras variables `fn` reads. State that `fn`
    assigns (an E{‖x‖} moving average) is updated as in an eager call on every
    backend, for the variables listed in `state` (TensorFlow and PyTorch update
    every variable eagerly anyway; JAX differentiates a pure function, so the
    updates are collected and applied afterwards).

    Args:
        fn: callable of the input tensors returning a scalar tensor.
        inputs: list of arrays/tensors to differentiate with respect to.
        variables: list of `keras.Variable`s to differentiate with respect to.
        state: list of `keras.Variable`s whose assignments inside `fn` must persist.

    Returns:
        `(value, [∂/∂input], [∂/∂variable])` as NumPy arrays (a source `fn` does
        not depend on gets zeros).
    """
    backend = keras.backend.backend()
    inputs = [keras.ops.convert_to_tensor(x) for x in inputs]
    variables, state = list(variables), list(state)
    if backend == "tensorflow":
        import tensorflow as tf

        # The tape differentiates the backing `tf.Variable`s: with a Keras variable as a source, an unconnected one
        # fails in `zeros_like` (its dtype is a string), and a non-trainable one would not be watched.
        sources = inputs + [v.value for v in variables]
        with tf.GradientTape() as tape:
            for s in sources:
                tape.watch(s)
            value = fn(*inputs)
        grads = tape.gradient(value, sources, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    elif backend == "jax":
        import jax

        def pure(xs, values):
            # The differentiated variables enter as arguments; every assignment is collected, not applied.
            with keras.StatelessScope(state_mapping=list(zip(variables, values))) as scope:
                out = fn(*xs)
            return out, [scope.get_current_value(v) for v in state]

        (value, updates), (grad_x, grad_v) = jax.value_and_grad(pure, argnums=(0, 1), has_aux=True)(
            inputs, [v.value for v in variables]
        )
        for var, new in zip(state, updates):
            if new is not None:
                var.assign(new)
        grads = list(grad_x) + list(grad_v)
    elif backend == "torch":
        import torch

        inputs = [x.detach().clone().requires_grad_(True) for x in inputs]
        sources = inputs + [v.value for v in variables]
        with torch.enable_grad():
            value = fn(*inputs)
            # A value that depends on no source (a constant magnitude) has no graph: every gradient is zero.
            grads = (torch.autograd.grad(value, sources, allow_unused=True) if value.requires_grad
                     else [None] * len(sources))
        grads = [torch.zeros_like(s) if g is None else g for s, g in zip(sources, grads)]
    else:
        raise ValueError(f"sphere_tf.testing.gradients supports tensorflow, jax and torch; got {backend!r}")
    grads = [keras.ops.convert_to_numpy(g) for g in grads]
    return keras.ops.convert_to_numpy(value), grads[: len(inputs)], grads[len(inputs):]


def training_paths():
    """The layers' training-path implementations on this backend, for tests to run each.

    TensorFlow: 'kernels' (the plug-in's compiled kernels), 'xla' (its XLA clusters),
    'plain' (its hand-written gradients), then 'reference'; elsewhere 'reference'
    (the `keras.ops` reference, `sphere_tf.ops.set_acceleration(False)`).
    """
    if keras.backend.backend() == "tensorflow":
        return ["kernels", "xla", "plain", "reference"]
    return ["reference"]


@contextlib.contextmanager
def training_path(name):
    """Runs the layers on one of `training_paths()` inside the block, restoring the defaults after.

    'kernels' asserts that the compiled kernels are built here (a failure, not a fallback).
    """
    if name == "reference":
        acceleration.set_acceleration(False)
        try:
            yield name
        finally:
            acceleration.set_acceleration(True)
        return
    from sphere_tf.backends.tensorflow.kernels import build as kernel_build  # the TensorFlow plug-in

    if name == "kernels":
        assert kernel_build.compiled_kernels() is not None, kernel_build.status()
    kernel_build.set_enabled(name == "kernels")
    acceleration.set_training_fusion(name != "plain")
    try:
        yield name
    finally:
        kernel_build.set_enabled(True)
        acceleration.set_training_fusion(True)


# Patch-energy geometries the backend plug-ins' parity tests share: (kernel_size, strides, padding,
# dilation_rate, (H, W)) with odd and even windows, strides, dilation and 1×1 kernels.
PLUGIN_CONV_GEOMETRIES = [
    ((3, 3), (1, 1), "same", (1, 1), (6, 5)),
    ((3, 3), (2, 2), "same", (1, 1), (7, 6)),
    ((2, 3), (1, 2), "valid", (1, 1), (6, 7)),
    ((3, 3), (1, 1), "same", (2, 2), (6, 7)),
    ((2, 2), (1, 1), "same", (2, 2), (4, 4)),
    ((5, 5), (1, 1), "same", (1, 1), (2, 3)),
    ((1, 1), (2, 2), "same", (1, 1), (5, 4)),
    ((4, 4), (2, 2), "same", (1, 1), (8, 8)),
]


# ConvNorm2D geometries the plug-ins' parity tests share: ((H, W), kernel (kh, kw), strides, padding) with odd and
# even grids, strided crops and rectangular kernels.
CONV_NORM_GEOMETRIES = [
    ((8, 8), (3, 3), (1, 1), "same"),
    ((8, 8), (3, 3), (2, 2), "same"),
    ((9, 7), (3, 3), (2, 1), "valid"),
    ((7, 10), (2, 2), (1, 1), "same"),
    ((10, 9), (1, 3), (1, 2), "valid"),
    ((11, 11), (5, 5), (3, 3), "same"),
]


def conv_norm_case(size, kernel_size, strides, padding):
    """Inputs of a ConvNorm2D plug-in parity case for a `CONV_NORM_GEOMETRIES` entry, float32 NumPy seeded by the
    geometry: `(x, kernel, normalizer, upstream)` with 3 × `size` × 4 inputs, a kernel to 5 filters, its V̂ on the
    full grid and a gradient of the reference output's shape."""
    rng = np.random.default_rng([*size, *kernel_size, *strides])
    x = rng.standard_normal((3, *size, 4)).astype(np.float32)
    kernel = (0.3 * rng.standard_normal((*kernel_size, 4, 5))).astype(np.float32)
    normalizer = keras.ops.convert_to_numpy(fourier.spectral_normalizer(kernel, fourier.full_size(size, kernel_size)))
    shape = fourier.fourier_conv_norm(x, kernel, normalizer, strides, padding).shape
    upstream = rng.standard_normal(shape).astype(np.float32)
    return x, kernel, normalizer, upstream


def assert_float32_parity(got, want, names, rtol=1e-4):
    """Each `got` array has `want`'s shape, is float32 and matches it within `rtol` and `rtol`·max|want|."""
    for name, g, w in zip(names, got, want, strict=True):
        assert g.shape == w.shape and g.dtype == np.float32, name
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * np.abs(w).max(), err_msg=name)


def response_case(magnitude, angular, weighted, units=5):
    """Inputs of a response parity case, `(dot, x_norm, w_norm, radius, k)` float32, drawn from a seed fixed by the
    case's names (Python's str hash changes with every process): cosines within (−0.999, 0.999), positive norms,
    radii and k."""
    rng = np.random.default_rng(zlib.crc32(f"{magnitude}-{angular}-{weighted}".encode()))
    x_norm = np.abs(rng.normal(size=(3, 4, 1))).astype(np.float32) + 0.2
    cos = np.clip(rng.normal(size=(3, 4, units)) * 0.5, -0.999, 0.999).astype(np.float32)
    dot = (cos * x_norm).astype(np.float32)
    w_norm = (np.abs(rng.normal(size=(units,))) + 0.5).astype(np.float32)
    radius = (np.abs(rng.normal(size=(units,))) + 0.5).astype(np.float32)
    k = (np.abs(rng.normal(size=(units,))) * 0.2 + 0.2).astype(np.float32)
    return dot, x_norm, w_norm, radius, k
