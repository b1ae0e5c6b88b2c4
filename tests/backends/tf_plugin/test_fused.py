"""Tests for sphere_tf.backends.tensorflow.fused (the layers' hot path) against NumPy references."""

import math

import numpy as np
import pytest
import tensorflow as tf

from sphere_tf import testing
from sphere_tf.backends.tensorflow.kernels import build as kernel_build
from sphere_tf.backends.tensorflow import fused
from sphere_tf.ops import magnitude as magnitude_lib

# Every implementation: plain TensorFlow ops ("tf"), the training path with XLA
# clusters only ("xla"), and the training path with the compiled kernels
# ("kernel", which must build here). Tests pass the `fused.Path` as `fuse`.
PATHS = pytest.mark.parametrize("path", ["tf", "xla", "kernel"])


@pytest.fixture
def fuse(path):
    if path == "kernel":
        kernels = kernel_build.compiled_kernels()
        assert kernels is not None, kernel_build.status()
        return fused.Path("kernels", kernels)
    return {"tf": fused.PLAIN, "xla": fused.XLA}[path]


def np_patch_squared_norm(x, kernel_size, strides, padding, dilation):
    """Σ x² over each conv patch by explicit loops, zero padding as TF 'SAME'."""
    n, h, w, _ = x.shape
    (kh, kw), (sh, sw), (dh, dw) = kernel_size, strides, dilation
    span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    if padding == "same":
        out_h, out_w = -(-h // sh), -(-w // sw)
        pad_h = max((out_h - 1) * sh + span_h - h, 0)
        pad_w = max((out_w - 1) * sw + span_w - w, 0)
        x = np.pad(x, ((0, 0), (pad_h // 2, pad_h - pad_h // 2), (pad_w // 2, pad_w - pad_w // 2), (0, 0)))
    else:
        out_h, out_w = (h - span_h) // sh + 1, (w - span_w) // sw + 1
    out = np.zeros((n, out_h, out_w, 1))
    for i in range(out_h):
        for j in range(out_w):
            patch = x[:, i * sh: i * sh + span_h: dh, j * sw: j * sw + span_w: dw, :]
            out[:, i, j, 0] = np.sum(patch.astype(np.float64) ** 2, axis=(1, 2, 3))
    return out


# Conv geometries for the patch energy: strides, 'same' borders, dilation, 1×1 and
# kernels larger than the input.
PATCH_GEOMETRIES = pytest.mark.parametrize(
    "shape,kernel_size,strides,padding,dilation",
    [
        ((2, 7, 6, 3), (3, 3), (1, 1), "same", (1, 1)),
        ((2, 7, 6, 3), (3, 3), (2, 2), "same", (1, 1)),
        ((1, 8, 9, 2), (2, 3), (2, 1), "same", (1, 1)),
        ((1, 8, 9, 2), (3, 2), (1, 3), "valid", (1, 1)),
        ((1, 9, 9, 2), (3, 3), (1, 1), "same", (2, 2)),
        ((1, 9, 10, 2), (2, 3), (1, 1), "valid", (2, 3)),
        ((1, 9, 10, 2), (4, 2), (1, 1), "same", (2, 1)),
        ((2, 5, 5, 4), (1, 1), (1, 1), "valid", (1, 1)),
        ((1, 4, 4, 1), (5, 5), (1, 1), "same", (1, 1)),
        ((2, 6, 6, 3), (1, 1), (2, 2), "valid", (1, 1)),
    ],
)


@PATCH_GEOMETRIES
@PATHS
def test_patch_squared_norm_matches_explicit_patches(shape, kernel_size, strides, padding, dilation, fuse):
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    got = fused.patch_squared_norm(tf.constant(x), kernel_size, strides, padding, dilation, fuse=fuse)
    want = np_patch_squared_norm(x, kernel_size, strides, padding, dilation)
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_patch_squared_norm_gradient_is_two_x_times_window_count():
    # d/dx Σ_out Σ_patch x² = 2x · (number of windows covering the pixel).
    x = np.random.default_rng(1).standard_normal((1, 5, 5, 2)).astype(np.float32)
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        total = tf.reduce_sum(fused.patch_squared_norm(xt, (3, 3), (1, 1), "same", (1, 1)))
    grad = tape.gradient(total, xt).numpy()
    counts = np.zeros((5, 5))
    for i in range(5):
        for j in range(5):
            counts[max(i - 1, 0): i + 2, max(j - 1, 0): j + 2] += 1
    np.testing.assert_allclose(grad, 2 * x * counts[None, :, :, None], rtol=1e-5)


def np_patch_squared_norm_grad(x, upstream, kernel_size, strides, padding, dilation):
    """d/dx Σ_out upstream·Σ_patch x² = 2x · Σ_(windows holding the pixel) upstream, by loops."""
    n, h, w, _ = x.shape
    (kh, kw), (sh, sw), (dh, dw) = kernel_size, strides, dilation
    span_h, span_w = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    pad_top = pad_left = 0
    if padding == "same":
        out_h, out_w = -(-h // sh), -(-w // sw)
        pad_top = max((out_h - 1) * sh + span_h - h, 0) // 2
        pad_left = max((out_w - 1) * sw + span_w - w, 0) // 2
    else:
        out_h, out_w = (h - span_h) // sh + 1, (w - span_w) // sw + 1
    spread = np.zeros((n, h, w))
    for i in range(out_h):
        for j in range(out_w):
            for a in range(kh):
                for b in range(kw):
                    r, c = i * sh + a * dh - pad_top, j * sw + b * dw - pad_left
                    if 0 <= r < h and 0 <= c < w:
                        spread[:, r, c] += upstream[:, i, j, 0]
    return 2.0 * x * spread[..., None]


@PATCH_GEOMETRIES
@PATHS
def test_patch_squared_norm_hand_written_gradient_matches_loops(shape, kernel_size, strides, padding, dilation, fuse):
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape).astype(np.float32)
    xt = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(xt)
        energy = fused.patch_squared_norm(xt, kernel_size, strides, padding, dilation, fuse=fuse)
        upstream = rng.standard_normal(energy.shape).astype(np.float32)
        total = tf.reduce_sum(energy * upstream)
    want = np_patch_squared_norm_grad(x.astype(np.float64), upstream, kernel_size, strides, padding, dilation)
    np.testing.assert_allclose(tape.gradient(total, xt).numpy(), want, rtol=1e-5, atol=1e-5)


def _angular_grad(angular, c, k=0.3, fuse=fused.PLAIN):
    """g and dg/dc through `_angular_of_dot` with ‖x‖ = 1 (dot = c, 1/‖x‖ = 1)."""
    ct = tf.constant(np.reshape(c, (1, -1)), tf.float32)
    with tf.GradientTape() as tape:
        tape.watch(ct)
        g = fused._angular_of_dot(ct, tf.ones((1, 1)), angular, k, fuse)
    return g.numpy()[0], tape.gradient(g, ct).numpy()[0]


@PATHS
def test_linear_custom_gradient_matches_closed_form(fuse):
    c = np.linspace(-0.999, 0.999, 41).astype(np.float32)
    g, dg = _angular_grad("linear", c, fuse=fuse)
    np.testing.assert_allclose(g, 1 - 2 * np.arccos(c.astype(np.float64)) / np.pi, atol=2e-6)
    np.testing.assert_allclose(dg, 2 / (np.pi * np.sqrt(1 - c.astype(np.float64) ** 2)), rtol=2e-4)


@PATHS
@pytest.mark.parametrize("k", [0.1, 0.3, 0.7, 5.0])
def test_sigmoid_custom_gradient_matches_closed_form(k, fuse):
    c = np.linspace(-0.99, 0.99, 33).astype(np.float32)
    g, dg = _angular_grad("sigmoid", c, k, fuse=fuse)
    theta = np.arccos(c.astype(np.float64))
    u = theta / k - np.pi / (2 * k)
    big_c = (1 + np.exp(-np.pi / (2 * k))) / (1 - np.exp(-np.pi / (2 * k)))
    want_g = big_c * (1 - np.exp(u)) / (1 + np.exp(u))            # [S-4], exponential form
    dg_dtheta = big_c * (-2 * np.exp(u)) / (k * (1 + np.exp(u)) ** 2)  # T-3.2.2 with C
    want_dg = dg_dtheta * (-1 / np.sqrt(1 - c.astype(np.float64) ** 2))
    np.testing.assert_allclose(g, want_g, atol=3e-6)
    # Near saturation 1 − tanh² is resolved to float32 ε, like TF's own TanhGrad (1 − y²).
    np.testing.assert_allclose(dg, want_dg, rtol=5e-4, atol=2e-5)


@PATHS
@pytest.mark.parametrize("angular", ["linear", "sigmoid"])
def test_custom_gradient_finite_and_zero_outside_clip(angular, fuse):
    c = np.array([-1.5, -1.0, -1.0 + 1e-7, 0.0, 1.0 - 1e-7, 1.0, 1.5], np.float32)
    g, dg = _angular_grad(angular, c, fuse=fuse)
    assert np.all(np.isfinite(g)) and np.all(np.isfinite(dg))
    assert np.all(np.abs(g) <= 1.0)
    # Outside the clip range [−1 + δ, 1 − δ] (δ = 1e-6) the gradient is exactly 0.
    np.testing.assert_array_equal(dg[[0, 1, 2, 4, 5, 6]], 0.0)
    # Bounded by the clip: 1/√(2δ − δ²) ≈ 707 times g's own slope factor (≤ 2 here).
    assert np.all(np.abs(dg) <= 2.0 / math.sqrt(2e-6 - 1e-12))


@PATHS
@pytest.mark.parametrize("angular", ["linear", "sigmoid"])
def test_custom_gradient_just_inside_clip_is_the_formula(angular, fuse):
    # The largest float32 cosines strictly inside the clip range keep their gradient.
    bound = np.float32(1.0 - 1e-6)
    c = np.array([np.nextafter(bound, np.float32(0)), -np.nextafter(bound, np.float32(0))], np.float32)
    _, dg = _angular_grad(angular, c, fuse=fuse)
    c64 = c.astype(np.float64)
    slope = 2 / np.pi if angular == "linear" else None
    if slope is not None:
        np.testing.assert_allclose(dg, slope / np.sqrt(1 - c64**2), rtol=0.05)
    assert np.all(dg > 0.0)


def _np_response(magnitude, angular, dot, x_norm, radius, alpha, k=0.3):
    """f = h(‖x‖)·g(c) with c = dot/‖x‖, from `sphere_tf.testing`'s NumPy formulas of the papers."""
    beta = magnitude_lib.MAGNITUDE_FNS[magnitude].default_beta
    g = testing.NUMPY_ANGULAR[angular](dot / x_norm, k)
    return testing.NUMPY_MAGNITUDE[magnitude](x_norm, radius, alpha, beta) * g


@PATHS
@pytest.mark.parametrize(
    "magnitude,angular",
    [("tanh", "cosine"), ("sphere", "linear"), ("sphere", "sigmoid"), ("tanh", "linear"),
     # The compiled rescale / squared tails (one-channel h, square cosine).
     ("tanh", "sqcosine"), ("linear", "sqcosine"), ("sphere", "cosine"), ("log", "cosine")],
)
def test_custom_gradient_tails_match_finite_differences(magnitude, angular, fuse):
    # Gradients w.r.t. dot, ‖x‖ (also through 1/‖x‖) and the per-filter radius against
    # central differences of the NumPy formula in float64.
    rng = np.random.default_rng(7)
    x_norm = rng.uniform(0.5, 2.0, (4, 1))
    dot = rng.uniform(-0.9, 0.9, (4, 3)) * x_norm
    radius = rng.uniform(0.5, 2.0, (3,))
    weights = rng.standard_normal((4, 3))
    alpha = 1.5

    def loss_np(d, n, r):
        return np.sum(weights * _np_response(magnitude, angular, d, n, r, alpha))

    tensors = [tf.constant(a, tf.float32) for a in (dot, x_norm, radius)]
    with tf.GradientTape() as tape:
        tape.watch(tensors)
        d, n, r = tensors
        out = fused.decoupled_response_from_dot(
            d, n, 1.0 / n, magnitude=magnitude, angular=angular, alpha=alpha, radius=r, k=0.3, fuse=fuse
        )
        loss = tf.reduce_sum(weights * out)
    np.testing.assert_allclose(loss.numpy(), loss_np(dot, x_norm, radius), rtol=1e-5, atol=2e-6)
    grads = tape.gradient(loss, tensors)
    args = [dot, x_norm, radius]
    for i, grad in enumerate(grads):
        def loss_of_arg(value, i=i):
            return loss_np(*(value if j == i else a for j, a in enumerate(args)))

        want = testing.numeric_gradient(loss_of_arg, args[i])
        if magnitude in ("sphere", "linear", "log") and i == 2:  # no radius
            assert grad is None or np.allclose(grad.numpy(), 0.0)
            continue
        np.testing.assert_allclose(grad.numpy(), want, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("alpha", [1.0, 2.5])
def test_linear_magnitude_cosine_is_alpha_times_dot(alpha):
    # α‖x‖·cos θ = α·x·ŵ: the norm cancels, so none is needed.
    assert fused.norm_cancels("linear", "cosine", None)
    assert fused.norm_cancels("linear", "cosine", "linear")
    assert not fused.norm_cancels("linear", "sqcosine", None)
    assert not fused.norm_cancels("tanh", "cosine", None)
    dot = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    out = fused.decoupled_response_from_dot(
        tf.constant(dot), magnitude="linear", angular="cosine", alpha=alpha
    )
    np.testing.assert_allclose(out.numpy(), alpha * dot, rtol=1e-6)


@PATHS
@pytest.mark.parametrize("magnitude", sorted(magnitude_lib.MAGNITUDE_FNS))
@pytest.mark.parametrize("angular", ["linear", "cosine", "sigmoid", "sqcosine"])
def test_response_from_dot_matches_formula(magnitude, angular, fuse):
    # f = h(‖x‖)·g(θ) with NumPy h and g (upstream forms), from dot = x·ŵ and ‖x‖.
    rng = np.random.default_rng(3)
    x_norm = rng.uniform(0.1, 3.0, (5, 1))
    cos = rng.uniform(-0.99, 0.99, (5, 4))
    dot = cos * x_norm
    radius = rng.uniform(0.5, 2.0, (4,))
    alpha, beta = 1.5, magnitude_lib.MAGNITUDE_FNS[magnitude].default_beta
    h = testing.NUMPY_MAGNITUDE[magnitude](x_norm, radius, alpha, beta)
    g = testing.NUMPY_ANGULAR[angular](cos, 0.3)
    f32 = lambda a: tf.constant(a, tf.float32)  # noqa: E731
    out = fused.decoupled_response_from_dot(
        f32(dot), f32(x_norm), f32(1 / x_norm), magnitude=magnitude, angular=angular,
        alpha=alpha, beta=magnitude_lib.MAGNITUDE_FNS[magnitude].default_beta,
        radius=f32(radius), k=0.3, fuse=fuse,
    )
    np.testing.assert_allclose(out.numpy(), h * g, rtol=1e-4, atol=1e-5)


def test_compiled_add_patch_gradient_matches_numpy():
    # conv_grad + 2·x·spread with one spread value per pixel (row), as the conv layers'
    # input gradient; also for a batch whose rows do not fill the kernel's blocks evenly.
    kernels = kernel_build.compiled_kernels()
    assert kernels is not None, kernel_build.status()
    rng = np.random.default_rng(11)
    for shape in [(2, 5, 7, 3), (1, 1, 1, 1), (3, 4, 4, 17)]:
        conv_grad = rng.standard_normal(shape).astype(np.float32)
        x = rng.standard_normal(shape).astype(np.float32)
        spread = rng.standard_normal(shape[:3] + (1,)).astype(np.float32)
        got = kernels.sphere_tf_add_patch_gradient(tf.constant(conv_grad), tf.constant(x), tf.constant(spread))
        np.testing.assert_allclose(got.numpy(), conv_grad + 2.0 * x * spread, rtol=1e-6, atol=1e-6)
    with pytest.raises(tf.errors.InvalidArgumentError, match="one value per row"):
        kernels.sphere_tf_add_patch_gradient(tf.ones((2, 3)), tf.ones((2, 3)), tf.ones((4,)))


def test_compiled_tanh_cosine_rejects_mismatched_operands():
    kernels = kernel_build.compiled_kernels()
    assert kernels is not None, kernel_build.status()
    with pytest.raises(tf.errors.InvalidArgumentError, match="rows x units"):
        kernels.sphere_tf_tanh_cosine(tf.ones((4, 3)), tf.ones((5,)), tf.ones((5,)), tf.ones((3,)))
    with pytest.raises(tf.errors.InvalidArgumentError, match="same size"):
        kernels.sphere_tf_tanh_cosine_grad(tf.ones((4, 2)), tf.ones((4, 3)), tf.ones((4,)), tf.ones((4,)), tf.ones((3,)))


def test_training_path_is_chosen_once_from_training_switch_xla_and_kernels():
    kernels = kernel_build.compiled_kernels()
    assert kernels is not None, kernel_build.status()
    assert fused.training_path(False) == fused.PLAIN
    assert fused.training_path(None) == fused.PLAIN
    path = fused.training_path(True)
    assert path.name == "kernels" and path.kernels is kernels and path.fused
    # Inside a function that XLA compiles whole, plain ops (XLA fuses them itself).
    seen = []
    tf.function(lambda: seen.append(fused.training_path(True)) or tf.zeros(()), jit_compile=True)()
    assert seen == [fused.PLAIN]
    fused.set_training_fusion(False)
    try:
        assert fused.training_path(True) == fused.PLAIN
    finally:
        fused.set_training_fusion(True)
    kernel_build.set_enabled(False)
    try:
        assert fused.training_path(True) == fused.XLA
        assert fused.as_path(True) == fused.XLA
    finally:
        kernel_build.set_enabled(True)
    # The layers' boolean `fuse` argument maps to the same values.
    assert fused.as_path(False) == fused.PLAIN
    assert fused.as_path(True).name == "kernels"
    assert fused.as_path(fused.XLA) is fused.XLA


@pytest.mark.parametrize("name", ["plain", "xla", "kernels"])
def test_each_path_runs_its_own_ops(name):
    # The TanhConv + cosine response's gradient graph holds the compiled op only on
    # 'kernels', an XLA cluster only on 'xla', neither on 'plain'.
    path = {"plain": fused.PLAIN, "xla": fused.XLA, "kernels": fused.as_path(True)}[name]
    assert path.name == name

    @tf.function
    def step(dot, x_norm):
        with tf.GradientTape() as tape:
            tape.watch(dot)
            out = fused.decoupled_response_from_dot(
                dot, x_norm, 1.0 / x_norm, magnitude="tanh", angular="cosine", radius=tf.ones((3,)), fuse=path
            )
        return tape.gradient(out, dot)

    spec = tf.TensorSpec((4, 3), tf.float32)
    graph = step.get_concrete_function(spec, tf.TensorSpec((4, 1), tf.float32)).graph
    types = {op.type for op in graph.get_operations()}
    functions = [f.definition.attr for f in graph._functions.values()]
    compiled = any("SphereTf" in t for t in types)
    xla = any("_XlaMustCompile" in attr and attr["_XlaMustCompile"].b for attr in functions)
    assert compiled == (name == "kernels")
    assert xla == (name == "xla")
