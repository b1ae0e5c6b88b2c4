"""The operator layers' hot path: the same maths as `operator.decoupled_response`, fewer passes.

A hyperspherical conv layer spends almost all of its time in the main
convolution; what it adds on top is memory-bound elementwise work over the
`(N, H', W', C_out)` output. This module keeps that work small (measurements in
docs/performance.md):

* **Per-position rescale.** The kernel is normalised before the conv (ŵ is tiny),
  so ``dot = x·ŵ`` and ``cos θ = dot / ‖x‖``. ‖x‖ is one number per output
  position, so every quantity of ‖x‖ alone is computed on a one-channel tensor
  and applied with one broadcast multiply: ``f = dot · (h(‖x‖)/‖x‖)`` for cosine g.
* **Norms that cancel are skipped.** LinearConv with cosine g is
  ``α‖x‖·dot/‖x‖ = α·dot``, a plain convolution with ŵ, so the patch norm is never
  computed; SphereConv with cosine g needs only ``dot·α/‖x‖``.
* **Patch energy by shifted slices.** ``Σ_patch x²`` is a box sum of the
  per-pixel channel energy; summing `kh + kw` strided slices (separable) is
  exact and cheaper than the one-channel ones-kernel conv, forward and backward.
* **A custom gradient for angular functions that need θ** (linear, sigmoid with a
  fixed k). The backward pass uses only cos θ and the forward output:

  ```
  linear:   dg/dc = (2/π) / √(1 − c²)                                   [S-2]
  sigmoid:  dg/dc = (1 − (g·tanh(π/4k))²) / (2k·tanh(π/4k)·√(1 − c²))    [S-4]
  ```

  with ``1 − c²`` evaluated once and the gradient set to zero outside the clip
  range of `angles.safe_acos` (|c| ≥ 1 − δ), exactly as the clip's own gradient
  does, so it stays ≤ 1/√(2δ − δ²) ≈ 707. Autodiff through clip → arccos → affine
  stores three full-size intermediates and runs about twice as many kernels.

Values equal `operator.decoupled_response` to float32 rounding (the forward pass
of every angular function is the registry function itself); the tests compare
both paths against NumPy references.
"""

import math

import tensorflow as tf
from keras import ops

from sphere_tf.ops import angles
from sphere_tf.ops import angular as angular_lib
from sphere_tf.ops import magnitude as magnitude_lib


# -- patch energy ------------------------------------------------------------------------


def _window_geometry(size, kernel, stride, dilation, padding):
    """(pad_before, pad_after, out_size) of one spatial axis, TF/Keras conv rules."""
    span = (kernel - 1) * dilation + 1
    if padding == "same":
        out = -(-size // stride)
        total = max((out - 1) * stride + span - size, 0)
        return total // 2, total - total // 2, out
    return 0, 0, (size - span) // stride + 1


def _box_sum_axis(energy, axis, kernel, stride, dilation, padding):
    size = energy.shape[axis]
    before, after, out = _window_geometry(size, kernel, stride, dilation, padding)
    if before or after:
        paddings = [[0, 0]] * len(energy.shape)
        paddings[axis] = [before, after]
        energy = ops.pad(energy, paddings)
    total = None
    for i in range(kernel):
        start = i * dilation
        index = [slice(None)] * len(energy.shape)
        index[axis] = slice(start, start + (out - 1) * stride + 1, stride)
        part = energy[tuple(index)]
        total = part if total is None else total + part
    return total


def patch_squared_norm(inputs, kernel_size, strides=1, padding="valid", dilation_rate=1):
    """Σ_patch x² per output position, exact, by a separable box sum of shifted slices.

    Same contract as `angles.patch_squared_norm` (float32 `(N, H', W', 1)`, the
    conv's geometry, padded zeros counted); falls back to it when the spatial
    size is not known when the graph is built.

    Args:
        inputs: NHWC tensor.
        kernel_size: pair `(kh, kw)`.
        strides, dilation_rate: ints or pairs.
        padding: 'valid' or 'same'.

    Returns:
        float32 tensor `(N, H', W', 1)`.
    """
    pair = lambda v: (v, v) if isinstance(v, int) else tuple(v)  # noqa: E731
    kernel_size, strides, dilation_rate = pair(kernel_size), pair(strides), pair(dilation_rate)
    padding = padding.lower()
    if inputs.shape[1] is None or inputs.shape[2] is None:
        return angles.patch_squared_norm(inputs, kernel_size, strides, padding, dilation_rate)
    x = ops.cast(inputs, "float32")
    energy = ops.sum(ops.square(x), axis=-1, keepdims=True)
    for axis in (1, 2):
        energy = _box_sum_axis(
            energy, axis, kernel_size[axis - 1], strides[axis - 1], dilation_rate[axis - 1], padding
        )
    return energy


# -- angular functions of θ with a hand-written gradient ----------------------------------

# The clip margin δ of `angles.safe_acos`; |c| ≥ 1 − δ gets zero gradient, as the clip gives.
_ONE_MINUS_C2_MIN = 2.0 * angles.ACOS_DELTA - angles.ACOS_DELTA**2


def _inv_sin(c):
    """1/√(1 − c²) inside the clip range of `safe_acos`, 0 outside (the clip's gradient)."""
    one_minus = 1.0 - ops.square(c)
    inside = ops.greater(one_minus, _ONE_MINUS_C2_MIN)
    return ops.where(inside, ops.rsqrt(ops.maximum(one_minus, _ONE_MINUS_C2_MIN)), 0.0)


def _angular_with_grad(angular, k):
    """`g(c)` as a `tf.custom_gradient` function for the θ-based activations."""
    g_fn = angular_lib.ANGULAR_FNS[angular]
    if angular == "linear":

        def dg_dc(c, g):
            del g
            return (2.0 / math.pi) * _inv_sin(c)

    else:  # sigmoid with a fixed float k
        k = float(k)
        t = math.tanh(math.pi / (4.0 * k))

        def dg_dc(c, g):
            tanh_u = g * t
            return ((1.0 - ops.square(tanh_u)) / (2.0 * k * t)) * _inv_sin(c)

    # tf.custom_gradient: keras.ops has no custom-gradient primitive.
    @tf.custom_gradient
    def g_of_c(c):
        g = g_fn(c, k)

        def grad(upstream):
            return upstream * dg_dc(c, g)

        return g, grad

    return g_of_c


def _angular_of_cos(cos_theta, angular, k):
    # A learnable k is a tensor that needs its own gradient: autodiff handles that case.
    if angular == "linear" or (angular == "sigmoid" and isinstance(k, (int, float))):
        return _angular_with_grad(angular, k)(cos_theta)
    return angular_lib.get_angular_fn(angular)(cos_theta, k)


# -- the response ---------------------------------------------------------------------------


# Magnitudes with h(‖x‖) = α·h₁(‖x‖) (α a pure factor); seg and mix mix α with β.
_ALPHA_LINEAR = ("sphere", "ball", "tanh", "linear", "log")


def norm_cancels(magnitude, angular, weighted):
    """True when h(‖x‖)·g(θ) does not depend on ‖x‖: LinearConv (α‖x‖) with cosine g.

    Then ``f = α·x·ŵ`` (times ‖w‖ when linearly weighted) and the patch norm need
    not be computed at all.
    """
    mag = magnitude_lib.get_magnitude(magnitude)
    return (
        mag is magnitude_lib.MAGNITUDE_FNS["linear"]
        and angular == "cosine"
        and weighted in (None, "linear")
    )


def decoupled_response_from_dot(
    dot,
    x_norm=None,
    inv_norm=None,
    w_norm=None,
    magnitude="tanh",
    angular="cosine",
    alpha=1.0,
    beta=None,
    radius=None,
    k=None,
    weighted=None,
    weight_radius=None,
):
    """``f = h(‖w‖, ‖x‖)·g(θ)`` from ``dot = x·ŵ`` and the patch norm, float32   [D-3].

    The same function as `operator.decoupled_response` (see it for the forms of
    `weighted`), with the cosine never formed as a full tensor when g is the cosine
    and with the custom gradient above for linear/sigmoid g.

    Args:
        dot: float32 tensor `(..., units)`, ``x·ŵ`` with the unit-norm kernel.
        x_norm: float32 tensor broadcastable to `dot` (`(..., 1)`), ‖x‖ = √(Σx² + ε);
            may be None when `norm_cancels(...)`.
        inv_norm: float32 tensor like `x_norm`, 1/‖x‖.
        w_norm: float32 `(units,)`, needed when `weighted`.
        magnitude, angular, alpha, beta, radius, k, weighted, weight_radius: as
            `operator.decoupled_response`.

    Returns:
        float32 tensor of the shape of `dot`.
    """
    mag = magnitude_lib.get_magnitude(magnitude)
    if norm_cancels(mag, angular, weighted):
        # α‖x‖ · dot/‖x‖ = α·dot  [D-7 with D-12].
        scale = alpha if weighted is None else alpha * w_norm
        return dot * scale

    # h = α·h₁ for these magnitudes: α then joins the one-channel factor (or vanishes
    # for α = 1) instead of costing a full-size multiply.
    alpha_linear = any(mag is magnitude_lib.MAGNITUDE_FNS[n] for n in _ALPHA_LINEAR)
    scale = alpha if alpha_linear else 1.0
    if weighted == "nonlinear":
        h = mag.fn(x_norm * w_norm, radius, 1.0 if alpha_linear else alpha, beta)
    elif mag is magnitude_lib.MAGNITUDE_FNS["sphere"]:
        h = None  # a constant: no tensor at all
    else:
        h = mag.fn(x_norm, radius, 1.0 if alpha_linear else alpha, beta)
    if weighted == "linear":
        h = w_norm if h is None else h * w_norm
    elif weighted == "nonlinear_separate":
        tanh_w = ops.tanh(w_norm / weight_radius)
        h = tanh_w if h is None else h * tanh_w

    if angular == "cosine":
        # α·h₁·dot/‖x‖: the per-position factors meet on the one-channel tensor first.
        factor = inv_norm if scale == 1.0 else scale * inv_norm
        return dot * (factor if h is None else h * factor)
    g = _angular_of_cos(dot * inv_norm, angular, k)
    if h is not None:
        g = h * g
    return g if scale == 1.0 else scale * g
