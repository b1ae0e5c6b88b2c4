"""The decoupled operator f = h(‖w‖, ‖x‖)·g(θ) [D-3] as the layers compute it: the reference implementation.

Written with `keras.ops` only, so it runs unchanged on the TensorFlow, JAX and
PyTorch backends; a backend's accelerator (`sphere_tf.ops.acceleration`) may take
over any piece and must agree with it to float32 rounding.

A hyperspherical conv layer spends most of its time in the main convolution;
what it adds on top is elementwise work over the `(N, H', W', C_out)` output.
Even the reference keeps that work small, since it is what XLA (JAX) and the
PyTorch compiler fuse:

* **Per-position factors on one channel.** The kernel is normalised before the
  conv (ŵ is tiny), so ``dot = x·ŵ`` and ``cos θ = dot / ‖x‖``. ‖x‖ is one number
  per output position, so every quantity of ‖x‖ alone is computed on a
  one-channel tensor and applied with one broadcast multiply:
  ``f = dot · (h(‖x‖)/‖x‖)`` for cosine g.
* **Norms that cancel are skipped.** LinearConv with cosine g is
  ``α‖x‖·dot/‖x‖ = α·dot``, a plain convolution with ŵ.
* **Patch energy on one channel.** ``Σ_patch x²`` is the per-pixel channel
  energy ``Σ_c x²`` summed over the conv's window: a one-channel ones-kernel
  convolution (1/C_in of the multiply-adds of convolving x² itself).
"""

from keras import ops

from sphere_tf.ops import acceleration
from sphere_tf.ops import angles
from sphere_tf.ops import angular as angular_lib
from sphere_tf.ops import magnitude as magnitude_lib


def norm_cancels(magnitude, angular, weighted):
    """True when h(‖x‖)·g(θ) does not depend on ‖x‖: LinearConv (α‖x‖) with cosine g.

    Then ``f = α·x·ŵ`` (times ‖w‖ when linearly weighted) and the patch norm need
    not be computed at all.
    """
    mag = magnitude_lib.get_magnitude(magnitude)
    return mag.proportional_to_norm and angular == "cosine" and weighted in (None, "linear")


def patch_squared_norm(inputs, kernel_size, strides=1, padding="valid", dilation_rate=1,
                       path=acceleration.REFERENCE):
    """Σ_patch x² per output position of a conv of that geometry, float32 `(N, H', W', 1)`.

    The accelerator of `path` where it handles the case, else
    `angles.patch_squared_norm` (channel energy, then a one-channel ones-kernel
    convolution; padded zeros counted as in the main convolution).
    """
    if path.accelerator is not None:
        out = path.accelerator.patch_squared_norm(inputs, kernel_size, strides, padding, dilation_rate, path)
        if out is not NotImplemented:
            return out
    return angles.patch_squared_norm(inputs, kernel_size, strides, padding, dilation_rate)


def conv_and_patch_squared_norm(inputs, kernel, strides, padding, dilation_rate, need_patch_sq=True,
                                path=acceleration.REFERENCE):
    """``(x ⊛ kernel, Σ_patch x²)`` of an NHWC input: the conv in the inputs' dtype, the energy float32.

    Args:
        inputs: NHWC tensor.
        kernel: `(kh, kw, C_in, C_out)` tensor in the dtype of `inputs`.
        strides, dilation_rate: pairs; padding: 'valid' or 'same'.
        need_patch_sq: False returns `(dot, None)` (a norm that cancels).
        path: the layer call's `acceleration.Path`.
    """
    if need_patch_sq and path.accelerator is not None:
        out = path.accelerator.conv_and_patch_squared_norm(inputs, kernel, strides, padding, dilation_rate, path)
        if out is not NotImplemented:
            return out
    dot = ops.conv(inputs, kernel, strides=strides, padding=padding, data_format="channels_last",
                   dilation_rate=dilation_rate)
    if not need_patch_sq:
        return dot, None
    kernel_size = tuple(kernel.shape[:2])
    return dot, patch_squared_norm(inputs, kernel_size, strides, padding, dilation_rate, path)


def weighted_magnitude(mag, x_norm, w_norm, alpha, beta, radius, weighted, weight_radius):
    """h(‖w‖, ‖x‖) of the four kernel weightings [D-3, D §3.5, D-15, D-16]; None for a constant 1.

    ``weighted``: None (h(‖x‖)), 'linear' (‖w‖·h(‖x‖)), 'nonlinear' (h(‖w‖·‖x‖))
    or 'nonlinear_separate' (tanh(‖w‖/ρ_w)·h(‖x‖)).
    """
    if weighted == "nonlinear":
        h = mag.fn(x_norm * w_norm, radius, alpha, beta)
    elif mag.fn is magnitude_lib.sphere and isinstance(alpha, (int, float)) and alpha == 1:
        h = None  # the constant 1: no tensor at all
    else:
        h = mag.fn(x_norm, radius, alpha, beta)
    if weighted == "linear":
        h = w_norm if h is None else h * w_norm
    elif weighted == "nonlinear_separate":
        tanh_w = ops.tanh(w_norm / weight_radius)
        h = tanh_w if h is None else h * tanh_w
    return h


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
    path=acceleration.REFERENCE,
):
    """``f = h(‖w‖, ‖x‖)·g(θ)`` from ``dot = x·ŵ`` and the patch norm, float32   [D-3].

    The one definition of the decoupled operator (SphereNet, DCNet) as the layers
    compute it, with cos θ = dot·(1/‖x‖); `operator.decoupled_response` is its
    cosine-form wrapper. The accelerator of `path` computes it where it handles
    the case; otherwise `keras.ops`:

    * norms that cancel (LinearConv + cosine): ``α·dot`` (times ‖w‖ when linearly weighted);
    * cosine g: ``dot · (α·h₁(‖x‖)/‖x‖)``, the factor formed on the one-channel tensor;
    * other g: ``h · g(clip(dot/‖x‖))`` through the registry function (its arccos
      is `angles.safe_acos`: finite values and gradients everywhere).

    Args:
        dot: float32 tensor `(..., units)`, ``x·ŵ`` with the unit-norm kernel.
        x_norm: float32 tensor broadcastable to `dot` (`(..., 1)`), ‖x‖ = √(Σx² + ε);
            may be None when `norm_cancels(...)`.
        inv_norm: float32 tensor like `x_norm`, 1/‖x‖.
        w_norm: float32 `(units,)`, the kernel norms; needed when `weighted`.
        magnitude: registry name or `magnitude.Magnitude`.
        angular: registry name or callable `g(cos_theta, k)`.
        alpha, beta: floats, the magnitude hyperparameters.
        radius: float32 tensor broadcastable to `dot`, r = ρ·E{‖x‖}, for
            magnitudes with a radius.
        k: float or float32 tensor `(units,)`, the sigmoid parameter.
        weighted: None, 'linear', 'nonlinear' or 'nonlinear_separate'.
        weight_radius: float32 tensor `(units,)`, ρ_w of [D-16].
        path: the layer call's `acceleration.Path` (`acceleration.layer_path`).

    Returns:
        float32 tensor of the shape of `dot`.
    """
    mag = magnitude_lib.get_magnitude(magnitude)
    if path.accelerator is not None:
        out = path.accelerator.response_from_dot(
            dot, x_norm, inv_norm, w_norm, magnitude=mag, angular=angular, alpha=alpha, beta=beta,
            radius=radius, k=k, weighted=weighted, weight_radius=weight_radius, path=path,
        )
        if out is not NotImplemented:
            return out
    if norm_cancels(mag, angular, weighted):
        # α‖x‖ · dot/‖x‖ = α·dot  [D-7 with D-12].
        return dot * (alpha if weighted is None else alpha * w_norm)
    if angular == "cosine":
        # h = α·h₁ for these magnitudes: α joins the one-channel factor (or vanishes for α = 1).
        scale = alpha if mag.alpha_factor else 1.0
        h = weighted_magnitude(mag, x_norm, w_norm, 1.0 if mag.alpha_factor else alpha, beta, radius, weighted,
                               weight_radius)
        factor = inv_norm if scale == 1.0 else scale * inv_norm  # α/‖x‖, one channel
        return dot * (factor if h is None else h * factor)
    g = angular_lib.get_angular_fn(angular)(dot * inv_norm, k)
    return magnitude_times(g, mag, x_norm, w_norm, alpha, beta, radius, weighted, weight_radius)


def magnitude_times(g, magnitude, x_norm, w_norm, alpha, beta, radius, weighted, weight_radius):
    """``h(‖w‖, ‖x‖)·g`` for an angular value `g` of the dot products' shape (every g but cosine): the
    reference's tail, which a plug-in computing g its own way reuses.

    `magnitude` is a `Magnitude`; the other arguments as for `decoupled_response_from_dot`. α of the magnitudes
    that are α·h₁ multiplies last (no full-size multiply for α = 1).
    """
    scale = alpha if magnitude.alpha_factor else 1.0
    h = weighted_magnitude(magnitude, x_norm, w_norm, 1.0 if magnitude.alpha_factor else alpha, beta, radius,
                           weighted, weight_radius)
    if h is not None:
        g = h * g
    return g if isinstance(scale, (int, float)) and scale == 1.0 else scale * g
