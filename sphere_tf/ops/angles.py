"""Norms, cosines and angles between kernels and input patches.

Every quantity here is computed in float32 whatever the input dtype (squares of
float16 activations overflow above 256 and underflow below 4e-3), and every
arccos in the package goes through `safe_acos`.

The sliding-window patch norm follows the authors' TF code (wy1iu/SphereNet `spherenet.py`,
wy1iu/DCNets `architecture.py`): ``sqrt(conv2d(x * x, ones) + 1e-4)``, with the epsilon *inside* the
square root so that all-zero patches (padding, dead ReLUs) give a finite norm and
a finite gradient.  The one refinement is that we sum ``x * x`` over channels
first and convolve a single channel with a ``(kh, kw, 1, 1)`` ones kernel, which
is the same sum at 1/C_in of the multiply-adds.
"""

from keras import ops

# Upstream constant: `sqrt(sum(x^2) + 1e-4)` in wy1iu/SphereNet and wy1iu/DCNets.
DEFAULT_EPSILON = 1e-4
# Clip margin for arccos: |dθ/dc| <= 1/sqrt(2δ - δ²) ≈ 707 in float32.
ACOS_DELTA = 1e-6


def safe_acos(cos_theta, delta=ACOS_DELTA):
    """Arccos with finite values and gradients everywhere, in float32.

    ```
    θ = arccos(clip(c, −1 + δ, 1 − δ))
    ```

    Rounding makes |c| slightly exceed 1 for aligned or opposite vectors, which
    gives NaN in the forward pass, and dθ/dc = −1/√(1 − c²) is infinite at ±1.
    The clip keeps both finite; gradients vanish outside the clip range.

    Note: the upstream TF code calls `tf.acos` unclipped (it relies on the norm
    epsilon only). That is a known bug (NaN when a kernel matches a patch
    exactly) and is not reproduced.

    Args:
        cos_theta: tensor of cosines, any float dtype.
        delta: float in (0, 1), the clip margin δ.

    Returns:
        float32 tensor of angles in [arccos(1 − δ), π − arccos(1 − δ)].
    """
    c = ops.cast(cos_theta, "float32")
    return ops.arccos(ops.clip(c, -1.0 + delta, 1.0 - delta))


def normalize(x, axis=-1, epsilon=DEFAULT_EPSILON):
    """Unit vectors along `axis`: ``x / sqrt(Σ x² + ε)``, in float32, with their norms.

    The one column/row normalisation of the package (kernels, neurons, class
    weights, features): ε inside the square root keeps zero vectors finite (they
    map to zero) with finite gradients.

    Args:
        x: tensor, any float dtype.
        axis: int or tuple of ints, the axes that make up one vector.
        epsilon: float >= 0 inside the square root.

    Returns:
        `(unit, norm)`: float32 tensors, `norm` with `axis` kept as size 1.
    """
    x = ops.cast(x, "float32")
    norm = ops.sqrt(ops.sum(ops.square(x), axis=axis, keepdims=True) + epsilon)
    return x / norm, norm


def kernel_norm(kernel, epsilon=DEFAULT_EPSILON):
    """Per-output-unit kernel norm ``sqrt(Σ w² + ε)`` over all but the last axis.

    Args:
        kernel: tensor of shape `(..., units)` (Keras HWIO conv or `(in, out)` dense).
        epsilon: float >= 0, added inside the square root (upstream: 1e-4).

    Returns:
        float32 tensor of shape `(units,)`.
    """
    return normalize_kernel(kernel, epsilon)[1]


def normalize_kernel(kernel, epsilon=DEFAULT_EPSILON):
    """Unit-norm kernel ŵ = w / sqrt(‖w‖² + ε) per output unit (`normalize` over all but the last axis).

    Returns:
        `(w_hat, w_norm)`: float32 tensors of the kernel's shape and `(units,)`.
    """
    units = kernel.shape[-1]
    w_hat, w_norm = normalize(kernel, axis=tuple(range(len(kernel.shape) - 1)), epsilon=epsilon)
    return w_hat, ops.reshape(w_norm, (units,))


def patch_squared_norm(inputs, kernel_size, strides=1, padding="valid", dilation_rate=1, groups=1):
    """Sliding-window squared norm Σ_{patch} x² for every output position of a conv.

    Uses the same kernel size, strides, padding and dilation as the main
    convolution, so padded zeros count in both (Keras 'same' == TF SAME). Do not
    replace with `avg_pool * kh * kw`: TF average pooling leaves padded cells out
    of the divisor and gets the borders wrong.

    With `groups` > 1 (a grouped convolution) a patch is one group's window: the
    channel energy is summed per group of ``C / groups`` consecutive channels and
    the window sum is a grouped ones-kernel convolution (one input channel per group).

    Args:
        inputs: NHWC tensor.
        kernel_size: tuple `(kh, kw)`.
        strides, padding, dilation_rate: as for `keras.ops.conv`.
        groups: int dividing the channel count.

    Returns:
        float32 tensor `(N, H', W', groups)`.
    """
    x = ops.cast(inputs, "float32")
    if groups == 1:
        channel_energy = ops.sum(ops.square(x), axis=-1, keepdims=True)
    else:
        shape = ops.shape(x)
        grouped = ops.reshape(x, (shape[0], shape[1], shape[2], groups, x.shape[-1] // groups))
        channel_energy = ops.sum(ops.square(grouped), axis=-1)
    ones = ops.ones(tuple(kernel_size) + (1, groups), dtype="float32")
    return ops.conv(
        channel_energy,
        ones,
        strides=strides,
        padding=padding,
        data_format="channels_last",
        dilation_rate=dilation_rate,
    )


def vector_squared_norm(inputs):
    """Squared norm of the last axis (the dense-layer "patch"), float32, keepdims."""
    x = ops.cast(inputs, "float32")
    return ops.sum(ops.square(x), axis=-1, keepdims=True)
