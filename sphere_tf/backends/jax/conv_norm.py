"""ConvNorm2D on JAX: the Fourier-domain convolution with JAX's own 2-D FFTs, and the affine depthwise conv as
shifted multiply-adds.

Both replace `keras.ops` code that XLA:CPU runs far below what the arithmetic needs (one 32×32×64 layer at batch
128, forward + backward, 2-core Xeon; docs/performance.md, "ConvNorm2D and OPT on CPU"):

* **The convolution.** The reference (`sphere_tf.ops.fourier.fourier_conv_norm`) builds each 2-D transform from
  `keras.ops`' 1-D FFTs between two transposes, and moves the spectra to frequency-major order and back as
  complex (real, imag) pairs. Here `jnp.fft.rfft2` / `irfft2` transform over the spatial axes of the NHWC array
  directly (XLA's multi-dimensional FFT), and the per-frequency channel product is one real matmul of the
  stacked ``[Re x, Im x]`` with the block matrix ``[[Re W, Im W], [−Im W, Re W]]`` (the complex product
  ``(a + ib)(c + id)`` written in reals), which XLA:CPU runs faster than a complex64 dot: 580 against 750 ms.
  Same formula as the reference, so the same values to float32 rounding; V̂ has its gradient stopped, the kernel
  gets its gradient through the kernel spectrum.
* **The affine depthwise conv** (``z_k = r_k ⋆ ỹ_k``). XLA:CPU's grouped convolution took 1.2–1.3 s for this
  layer's 3×3 depthwise conv and its two gradients, twice the main 64→64 convolution; the same sum as kh·kw
  shifted slices times a per-channel weight is one fused elementwise loop forward and backward: 150–200 ms. Sums
  in float32 for half-precision inputs (as the convolution accumulates).
"""

from jax import lax
from jax import numpy as jnp

from sphere_tf.ops import conv_geometry
from sphere_tf.ops import fourier


def conv_norm(inputs, kernel, normalizer, strides, padding):
    """`sphere_tf.ops.fourier.fourier_conv_norm` (same arguments, strides a pair; same values and gradients),
    float32."""
    h, w = int(inputs.shape[1]), int(inputs.shape[2])
    kh, kw, c_in, c_out = (int(d) for d in kernel.shape)
    grid_h, grid_w = fourier.full_size((h, w), (kh, kw))
    num_freqs = grid_h * (grid_w // 2 + 1)
    real, imag = fourier.kernel_spectrum(kernel, (grid_h, grid_w))  # (H', W'/2+1, C_in, C_out)
    v = jnp.transpose(lax.stop_gradient(jnp.asarray(normalizer, jnp.float32)), (1, 2, 0))[:, :, None, :]
    w_re, w_im = real * v, imag * v
    # [Re x, Im x] @ [[Re W, Im W], [−Im W, Re W]] = [Re(xW), Im(xW)], per frequency.
    blocks = jnp.concatenate([jnp.concatenate([w_re, w_im], axis=-1), jnp.concatenate([-w_im, w_re], axis=-1)],
                             axis=-2)
    blocks = jnp.reshape(blocks, (num_freqs, 2 * c_in, 2 * c_out))
    # Zero padded at the end to the full grid, as the reference's rfft2d.
    spectrum = jnp.fft.rfft2(jnp.asarray(inputs, jnp.float32), s=(grid_h, grid_w), axes=(1, 2))
    stacked = jnp.concatenate([spectrum.real, spectrum.imag], axis=-1)  # (N, H', W'/2+1, 2·C_in)
    # -1: the batch, which may be symbolic (jax.export with a polymorphic batch).
    per_frequency = jnp.reshape(jnp.transpose(stacked, (1, 2, 0, 3)), (num_freqs, -1, 2 * c_in))
    products = jnp.reshape(jnp.matmul(per_frequency, blocks), (grid_h, grid_w // 2 + 1, -1, 2 * c_out))
    outputs = jnp.fft.irfft2(lax.complex(products[..., :c_out], products[..., c_out:]), s=(grid_h, grid_w),
                             axes=(0, 1))  # (H', W', N, C_out)
    (top, left), (out_h, out_w) = fourier.output_geometry((h, w), (kh, kw), strides, padding)
    sh, sw = strides
    outputs = outputs[top:top + (out_h - 1) * sh + 1:sh, left:left + (out_w - 1) * sw + 1:sw]
    return jnp.transpose(outputs, (2, 0, 1, 3))


def depthwise_conv(inputs, kernel, padding):
    """`keras.ops.depthwise_conv(inputs, kernel, strides=1, padding=padding)` as kh·kw shifted multiply-adds.

    Args:
        inputs: `(N, H, W, C)`.
        kernel: `(kh, kw, C, M)`, M the depth multiplier (output channel c·M + m, as Keras orders them).
        padding: 'same' or 'valid'.

    Returns:
        `(N, H', W', C·M)` in the dtype of inputs and kernel together (`jnp.result_type`).
    """
    kh, kw, channels, multiplier = (int(d) for d in kernel.shape)
    (top, bottom, out_h), (left, right, out_w) = (
        conv_geometry.axis_geometry(int(inputs.shape[axis + 1]), size, 1, 1, padding.lower())
        for axis, size in ((0, kh), (1, kw)))
    dtype = jnp.result_type(inputs, kernel)
    x = jnp.pad(jnp.asarray(inputs, jnp.float32), ((0, 0), (top, bottom), (left, right), (0, 0)))
    weights = jnp.asarray(kernel, jnp.float32)
    total = None
    for u in range(kh):
        for t in range(kw):
            window = x[:, u:u + out_h, t:t + out_w, :, None] * weights[u, t]
            total = window if total is None else total + window
    return jnp.reshape(total, (*total.shape[:3], channels * multiplier)).astype(dtype)
