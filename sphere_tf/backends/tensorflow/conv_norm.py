"""ConvNorm's convolution on TensorFlow: the spatial full convolution, then the per-channel V̂ filter by FFT.

The reference (`sphere_tf.ops.fourier.fourier_conv_norm`) runs the whole convolution in the Fourier domain with
`keras.ops` only: its 2-D FFTs are a real FFT over one axis and a complex FFT over the other between two
transposes, and the per-frequency channel matmul needs the spectra transposed to frequency-major and back. On a
CPU those layout passes, not the arithmetic, were most of the time (docs/performance.md, "ConvNorm2D and OPT").
TensorFlow has the pieces to avoid them:

```
y   = conv(pad(x, k − 1), a)                         the full cross-correlation (oneDNN, NHWC, no transpose)
ỹ   = crop_stride( irfft2d(V̂ ⊙ rfft2d(y)) )          per output channel, on the (H + kh − 1) × (W + kw − 1) grid
```

with `tf.signal.rfft2d` / `irfft2d` on the last two axes of one NCHW copy of y. The filter is linear and
self-adjoint (V̂ is real and even, so v_k is real and even and the circular convolution with it is symmetric), so
its gradient is the same filter applied to the upstream gradient zero-padded back to the grid: one rfft2d and one
irfft2d, where TensorFlow's registered RFFT2D gradient builds several. Same values as the reference to float32
rounding (tests/backends/tf_plugin/test_conv_norm_plugin.py); computed in float32 whatever the input dtype, as the
reference is.
"""

import tensorflow as tf

from sphere_tf.ops import fourier


def _spectral_filter(y, normalizer, grid, top_left, size):
    """``crop(irfft2d(V̂ ⊙ rfft2d(y)))`` for NCHW `y` on the grid, with the adjoint filter as its gradient."""
    (grid_h, grid_w), (top, left), (rows, cols) = grid, top_left, size
    spectrum = tf.cast(normalizer, tf.complex64)

    def circular(signal):
        return tf.signal.irfft2d(tf.signal.rfft2d(signal) * spectrum, fft_length=[grid_h, grid_w])

    @tf.custom_gradient
    def filtered(signal):
        def grad(upstream):
            upstream = tf.pad(upstream, [[0, 0], [0, 0], [top, grid_h - top - rows], [left, grid_w - left - cols]])
            return circular(upstream)

        return circular(signal)[:, :, top:top + rows, left:left + cols], grad

    return filtered(y)


def conv_norm(inputs, kernel, normalizer, strides, padding):
    """`sphere_tf.ops.fourier.fourier_conv_norm` (same arguments, values and gradients), float32."""
    h, w = int(inputs.shape[1]), int(inputs.shape[2])
    kh, kw = int(kernel.shape[0]), int(kernel.shape[1])
    grid = fourier.full_size((h, w), (kh, kw))
    (top, left), (out_h, out_w) = fourier.output_geometry((h, w), (kh, kw), strides, padding)
    sh, sw = strides
    x = tf.cast(inputs, tf.float32)
    # Explicit zero padding and a 'VALID' conv: an explicit-padding conv is much slower under XLA on CPU.
    y = tf.nn.conv2d(tf.pad(x, [[0, 0], [kh - 1, kh - 1], [kw - 1, kw - 1], [0, 0]]),
                     tf.cast(kernel, tf.float32), strides=1, padding="VALID")
    # Only the rows and columns up to the last sample are filtered back; the stride then takes every s-th.
    span = ((out_h - 1) * sh + 1, (out_w - 1) * sw + 1)
    y = _spectral_filter(tf.transpose(y, (0, 3, 1, 2)), tf.stop_gradient(tf.cast(normalizer, tf.float32)), grid,
                         (top, left), span)
    if (sh, sw) != (1, 1):
        y = y[:, :, ::sh, ::sw]
    return tf.transpose(y, (0, 2, 3, 1))
