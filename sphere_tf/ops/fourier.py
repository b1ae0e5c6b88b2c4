"""Fourier-domain maths of convolutional normalization (ConvNorm).

Liu et al., "Convolutional Normalization: Improving Deep Convolutional Network
Robustness and Training", NeurIPS 2021. Citation keys: ``[C-6]`` is the paper's
Eq. (6), ``[C §3.2]`` its Section 3.2, ``[C fn. 10]`` its footnote 10.

ConvNorm replaces a convolution's output channel ``y_k = Σ_i a_ki ⊛ x_i`` by
``ỹ_k = v_k ⊛ y_k``, where the filter ``v_k`` is defined by its spectrum

```
V̂_k = (Σ_i |Â_ki|² + ε)^(−1/2)                                   [C-6], [C-7]
```

so that each channel operator ``P_k A_k`` is a tight frame (``M Mᵀ = I``,
spectral norm 1, in the circular model) [C §3.2]. The computation follows
Algorithm 1 of the paper and the authors' PyTorch code (shengliu66/ConvNorm,
`models/prec_conv.py`, `PreConv`):

1. `full_convolution`: the stride-1 cross-correlation with padding k − 1 on every
   side (the full linear convolution), grid ``H' × W' = (H + kh − 1) × (W + kw − 1)``;
2. `spectral_normalizer`: V̂ from the kernel zero-padded to ``H' × W'`` (one-sided
   `rfft2d` spectrum, shape ``(C_out, H', W'//2 + 1)``), with the gradient stopped
   (the paper treats V̂ "as constants during back-propagation");
3. `apply_spectral_normalizer`: ``irfft2d(V̂ ⊙ rfft2d(y))`` per channel, i.e. a
   circular convolution on the ``H' × W'`` grid;
4. `crop_and_stride`: keep the rows and columns a `keras.layers.Conv2D` with the
   same kernel size, strides and padding would produce (see `output_geometry`).

The layer does not run steps 1, 3 and 4 separately: `fourier_conv_norm` computes
the same values entirely in the Fourier domain (one rfft2d of the input, a
per-frequency complex matmul with the V̂-scaled kernel spectrum, one irfft2d),
which has no spatial convolution and is faster on CPU; the separate functions
remain as the reference decomposition.

1×1 kernels take the closed form ``V_k = (Σ_i a_ki² + ε)^(−1/2)`` (`normalizer_1x1`),
which is what the FFT formula gives for a one-tap kernel (a flat spectrum).

Everything here is float32 whatever the input dtype (the FFTs take
float32/float64 only, and squared spectra of float16 kernels underflow).

Note (epsilon): the final upstream code has no ε (``V = exp(−½ log Σ|Â|²)``), so a
spectral zero shared by all input channels of an output channel (e.g. taps that
sum to zero give a zero at DC, or a dead all-zero channel) gives ``inf`` and then
NaN. The first upstream commit added 1e-4 to ``Σ|Â|²`` before the inverse square
root; we keep that absolute ε = 1e-4 as the default (it is ≈ 1e-4 of the power
of a Glorot-initialised 3×3×64 kernel, so the normalisation is unchanged in
practice) and require ε > 0.

Note (backends): `keras.ops` has no complex dtype, so spectra are `(real, imag)`
pairs as in `keras.ops.rfft`, and a complex matmul is four real ones. The real
2-D FFT (`rfft2d`, `irfft2d`) is a `keras.ops.rfft` over the last axis and a
complex `keras.ops.fft` over the one before, after explicit zero padding to the
grid; NHWC maps are transposed to NCHW around the FFTs, and `irfft2d`'s
``fft_length`` recovers odd sizes. The kernel power spectrum
``Σ_i |Â_ki|²`` is not computed by C_out·C_in zero-padded FFTs but, exactly, as
the DFT of the kernel autocorrelation (`power_spectrum`). All of it compiles
under XLA on CPU (TensorFlow `jit_compile=True`, JAX `jit`).

Reference:
    Liu, Li, Zhai, You, Zhu, Fernandez-Granda, Qu, "Convolutional Normalization:
    Improving Deep Convolutional Network Robustness and Training",
    NeurIPS 2021, https://arxiv.org/abs/2103.00673
"""

import math

import numpy as np
from keras import ops

from sphere_tf import validation
from sphere_tf.ops import angles
from sphere_tf.ops import conv_geometry

# First upstream commit (da5a4f2): Σ|Â|² + 1e-4 before the inverse square root. See the module Note.
DEFAULT_EPSILON = 1e-4
# Upstream `_calculate_running_estimate`: max(cosine_rampdown(t, 40000), 1e-2).
RAMPDOWN_STEPS = 40000
MIN_AVERAGING_FACTOR = 0.01


def full_size(input_size, kernel_size):
    """Spatial size ``(H + kh − 1, W + kw − 1)`` of the full linear convolution.

    Args:
        input_size: pair of ints `(H, W)`.
        kernel_size: int or pair of ints `(kh, kw)`.

    Returns:
        Pair of ints `(H', W')`, the grid on which V̂ is computed and applied.
    """
    h, w = validation.int_pair(input_size, "input_size")
    kh, kw = validation.int_pair(kernel_size, "kernel_size")
    return h + kh - 1, w + kw - 1


def output_geometry(input_size, kernel_size, strides=1, padding="valid"):
    """Where the `keras.layers.Conv2D` output sits on the full-convolution grid.

    A Conv2D output row ``o`` reads input rows ``o·s − p_top … o·s − p_top + kh − 1``,
    which is row ``o·s + (kh − 1 − p_top)`` of the full convolution (padding
    kh − 1). So the Conv2D output is the full output cropped by
    ``kh − 1 − p_top`` at the top and subsampled by ``s``:

    ```
    'valid':  p_top = 0,                     out = ⌊(H − kh)/s⌋ + 1
    'same' :  p_top = ⌊p_total/2⌋,           out = ⌈H/s⌉,
              p_total = max((out − 1)·s + kh − H, 0)          (TF 'SAME')
    ```

    (p_top and out from `sphere_tf.ops.conv_geometry.axis_geometry`, the one home
    of the Conv2D rules.)

    Note: the PyTorch original crops ``k − 1 − p`` on every side with a symmetric
    ``p`` and then takes ``[::s]``. That is the same grid for stride 1 and for
    'valid', but for 'same' with stride 2 on an even size TF pads only after
    (``p_top = 0`` for k = 3), so our samples sit one row/column further than
    PyTorch's ``padding=1`` grid. We match Keras so that `ConvNorm2D` is a drop-in
    replacement for `Conv2D` (same output shapes and the same receptive-field
    alignment as the layer it replaces).

    Args:
        input_size: pair of ints `(H, W)`.
        kernel_size, strides: int or pair of ints.
        padding: 'valid' or 'same'.

    Returns:
        `((top, left), (out_h, out_w))`: first kept row/column of the full grid
        and the output size (<= 0 when a 'valid' window does not fit).

    Raises:
        ValueError: `padding` is neither 'valid' nor 'same'.
    """
    h, w = validation.int_pair(input_size, "input_size")
    kh, kw = validation.int_pair(kernel_size, "kernel_size")
    sh, sw = validation.int_pair(strides, "strides")
    top, _, out_h = conv_geometry.axis_geometry(h, kh, sh, 1, padding)
    left, _, out_w = conv_geometry.axis_geometry(w, kw, sw, 1, padding)
    return (kh - 1 - top, kw - 1 - left), (out_h, out_w)


def full_convolution(inputs, kernel):
    """Stride-1 cross-correlation with padding ``k − 1`` on every side (step 1).

    Args:
        inputs: tensor `(N, H, W, C_in)`.
        kernel: tensor `(kh, kw, C_in, C_out)` (Keras HWIO), same dtype as `inputs`.

    Returns:
        Tensor `(N, H + kh − 1, W + kw − 1, C_out)` in the input dtype.
    """
    kh, kw = int(kernel.shape[0]), int(kernel.shape[1])
    # Explicit zero padding + 'valid': `tf.nn.conv2d(padding=[[...]])` is much slower under XLA on
    # CPU (docs/conv_norm.md), and keras.ops.conv has no explicit padding.
    padded = ops.pad(inputs, [[0, 0], [kh - 1, kh - 1], [kw - 1, kw - 1], [0, 0]])
    return ops.conv(padded, kernel, strides=1, padding="valid")


def _lag_dft_matrices(size, kernel, num_freqs):
    # cos/sin(2π·f·d/size) for frequencies f < num_freqs and lags d = −(k−1) … k−1.
    freqs = np.arange(num_freqs)[:, None]
    lags = np.arange(-(kernel - 1), kernel)[None, :]
    phase = 2.0 * np.pi * ((freqs * lags) % size) / size
    return np.cos(phase).astype("float32"), np.sin(phase).astype("float32")


def _lag_scatter_matrix(kh, kw):
    # 0/1 matrix mapping tap pairs (p, q) to the lag p − q on the (2kh − 1) × (2kw − 1) lag grid.
    taps = [(u, v) for u in range(kh) for v in range(kw)]
    scatter = np.zeros((len(taps) ** 2, (2 * kh - 1) * (2 * kw - 1)), dtype="float32")
    for i, (pu, pv) in enumerate(taps):
        for j, (qu, qv) in enumerate(taps):
            scatter[i * len(taps) + j, (pu - qu + kh - 1) * (2 * kw - 1) + (pv - qv + kw - 1)] = 1.0
    return scatter


def power_spectrum(kernel, grid_shape):
    """``Σ_i |Â_ki|²`` on the one-sided ``grid_shape`` spectrum, float32, no gradient.

    Â_ki is the DFT of the kernel zero-padded to the grid (Algorithm 1, step 2).
    Rather than C_out·C_in FFTs of size H'×W', we use that the power spectrum is
    the DFT of the autocorrelation (Wiener–Khinchin):

    ```
    R_k(d) = Σ_i Σ_p a_ki(p) a_ki(p + d),   d ∈ [−(kh−1), kh−1] × [−(kw−1), kw−1]
    Σ_i |Â_ki(ω)|² = Σ_d R_k(d) e^(−i ω·d) = Σ_d R_k(d) cos(ω₁d₁ + ω₂d₂)   (R_k even)
    ```

    evaluated with small separable cos/sin matrices: O(C_out·C_in·(kh·kw)² +
    C_out·H'·W'·(kh + kw)) real flops. This is exact for any grid (wrap-around
    aliasing is implied by the periodic phase) and much cheaper than the FFTs on
    CNN-9 shapes (docs/conv_norm.md); tests check it against `numpy.fft` of the
    padded kernel.
    Rounding can make near-zero values slightly negative; they are clipped at 0.

    Args:
        kernel: tensor `(kh, kw, C_in, C_out)`.
        grid_shape: pair of ints `(H', W')`.

    Returns:
        float32 tensor `(C_out, H', W'//2 + 1)`.
    """
    h, w = validation.int_pair(grid_shape, "grid_shape")
    kh, kw, c_in, c_out = (int(d) for d in kernel.shape)
    a = ops.stop_gradient(ops.cast(kernel, "float32"))
    taps = ops.transpose(ops.reshape(a, (kh * kw, c_in, c_out)), (2, 0, 1))  # (C_out, taps, C_in)
    gram = ops.matmul(taps, ops.transpose(taps, (0, 2, 1)))  # (C_out, taps, taps), summed over C_in
    lags = ops.matmul(ops.reshape(gram, (c_out, -1)), _lag_scatter_matrix(kh, kw))
    lags = ops.reshape(lags, (c_out, 2 * kh - 1, 2 * kw - 1))  # R_k(d)
    cos_h, sin_h = _lag_dft_matrices(h, kh, h)
    cos_w, sin_w = _lag_dft_matrices(w, kw, w // 2 + 1)
    power = ops.einsum("ad,odf,bf->oab", cos_h, lags, cos_w) - ops.einsum(
        "ad,odf,bf->oab", sin_h, lags, sin_w
    )
    return ops.maximum(power, 0.0)


def spectral_normalizer(kernel, grid_shape, epsilon=DEFAULT_EPSILON):
    """Per-output-channel normaliser ``V̂_k = (Σ_i |Â_ki|² + ε)^(−1/2)``   [C-6]-[C-7].

    Computed from the kernel with the gradient stopped (Algorithm 1, step 3): the
    layer's gradient reaches the kernel only through the convolution itself.
    V̂ is real, nonnegative and symmetric (V̂(−ω) = V̂(ω)), so the filter
    ``v_k = F⁻¹ V̂_k`` is real and even (zero phase).

    Args:
        kernel: tensor `(kh, kw, C_in, C_out)` (Keras HWIO).
        grid_shape: pair of ints `(H', W')`, the grid of the signal it will be
            applied to (the full convolution: `full_size(input_size, kernel_size)`).
        epsilon: float > 0, added to ``Σ|Â|²`` (see the module Note).

    Returns:
        float32 tensor `(C_out, H', W'//2 + 1)`, the one-sided spectrum of V̂.
    """
    return ops.rsqrt(power_spectrum(kernel, grid_shape) + epsilon)


def normalizer_1x1(kernel, epsilon=DEFAULT_EPSILON):
    """Closed form of V̂ for 1×1 kernels: ``V_k = (Σ_i a_ki² + ε)^(−1/2)``   [C §3.3].

    A one-tap kernel has a flat spectrum ``|Â_ki(ω)| = |a_ki|``, so the FFT
    formula reduces to a division by the kernel norm (weight normalization
    without gain). Gradient stopped as in `spectral_normalizer`.

    Args:
        kernel: tensor `(1, 1, C_in, C_out)`.
        epsilon: float > 0.

    Returns:
        float32 tensor `(C_out,)`.
    """
    _, norm = angles.normalize(ops.stop_gradient(ops.convert_to_tensor(kernel)), axis=(0, 1, 2), epsilon=epsilon)
    return 1.0 / ops.reshape(norm, (-1,))


def _fft_along_rows(real, imag):
    # Complex DFT over the second-to-last axis (keras.ops.fft acts on the last one).
    real, imag = ops.fft((ops.swapaxes(real, -1, -2), ops.swapaxes(imag, -1, -2)))
    return ops.swapaxes(real, -1, -2), ops.swapaxes(imag, -1, -2)


def irfft2d(spectrum, fft_length):
    """Inverse of `rfft2d`: real ``(..., N₁, N₂)`` signal from a one-sided `(real, imag)` spectrum.

    An inverse complex DFT over axis −2, written as ``conj(DFT(conj(z)))/N₁``, then
    `keras.ops.irfft` over the last axis with length N₂ (which recovers odd N₂;
    the imaginary parts of the DC and, for even N₂, Nyquist columns are ignored,
    as `numpy.fft.irfft2` does).

    Args:
        spectrum: pair of float32 tensors `(real, imag)`, each `(..., N₁, N₂//2 + 1)`.
        fft_length: pair of ints `(N₁, N₂)`.

    Returns:
        float32 tensor `(..., N₁, N₂)`.
    """
    n1, n2 = validation.int_pair(fft_length, "fft_length")
    real, imag = spectrum
    real, imag = _fft_along_rows(real, -imag)
    return ops.irfft((real / n1, -imag / n1), fft_length=n2)


def _rfft2d_padded(x, n2):
    return _fft_along_rows(*ops.rfft(x, fft_length=n2))


def rfft2d(inputs, fft_length):
    """Real 2-D DFT over the last two axes (zero-padded to `fft_length`), with a cheaper gradient.

    The values of `numpy.fft.rfft2(inputs, s=fft_length)` as a `(real, imag)` pair.
    The gradient of a real-to-complex DFT ``Y(f) = Σ_n x(n) e^(−2πi f·n/N)``
    (one-sided in the last axis) is

    ```
    ∂L/∂x(n) = Re Σ_f g(f) e^(2πi f·n/N) = N₁N₂ · irfft2d(c ⊙ g)(n),   g = ∂L/∂Re Y + i ∂L/∂Im Y
    ```

    with column weights ``c = 1`` at the DC (and, for even N₂, Nyquist) column
    and ``½`` elsewhere (irfft2d counts those columns twice, as their mirror
    images), cropped to the unpadded input (by the padding's gradient): a single inverse transform, where
    TF's registered RFFT2D gradient builds the same result from extra complex
    masks and FFTs, several times the cost of the forward FFT (docs/conv_norm.md).
    Tests check it against NumPy's finite differences.

    Args:
        inputs: float32 tensor `(..., h, w)` with static h, w ≤ `fft_length`.
        fft_length: pair of ints `(N₁, N₂)`.

    Returns:
        Pair of float32 tensors `(real, imag)`, each `(..., N₁, N₂//2 + 1)`.
    """
    h, w = int(inputs.shape[-2]), int(inputs.shape[-1])
    n1, n2 = validation.int_pair(fft_length, "fft_length")
    weights = np.full(n2 // 2 + 1, 0.5 * n1 * n2, dtype="float32")
    weights[0] = n1 * n2
    if n2 % 2 == 0:
        weights[-1] = n1 * n2
    rank = len(inputs.shape)
    # Explicit zero padding to the grid (keras.ops.rfft pads the last axis only).
    padded = ops.pad(ops.cast(inputs, "float32"), [[0, 0]] * (rank - 2) + [[0, n1 - h], [0, n2 - w]])

    # One stacked output: PyTorch's `custom_gradient` passes a single upstream tensor.
    @ops.custom_gradient
    def _forward(x):
        def _grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            # The gradient for the padded grid; the padding's own gradient crops it to (h, w).
            c = ops.convert_to_tensor(weights)
            return irfft2d((upstream[0] * c, upstream[1] * c), (n1, n2))

        return ops.stack(_rfft2d_padded(x, n2)), _grad

    stacked = _forward(padded)
    return stacked[0], stacked[1]


def _dft_matrices(size, taps, num_freqs):
    # cos/sin(2π·f·u/size) for frequencies f < num_freqs and taps u < taps.
    phase = 2.0 * np.pi * ((np.arange(num_freqs)[:, None] * np.arange(taps)[None, :]) % size) / size
    return np.cos(phase).astype("float32"), np.sin(phase).astype("float32")


def kernel_spectrum(kernel, grid_shape):
    """Transfer function ``B̂_ki`` of the full correlation with ``a_ki`` on the ``grid_shape`` grid.

    The full correlation (padding k − 1) is the linear convolution with the
    flipped kernel ``b(u) = a(k − 1 − u)``; on the ``H' × W'`` grid it does not
    wrap, so it is the circular convolution there and ``F y_k = Σ_i B̂_ki ⊙ F x_i``
    with x zero-padded at the end. ``B̂ = Σ_u b(u) e^(−2πi f·u/N)`` is evaluated
    with small cos/sin matrices (``O(H'·W'·kh·C_in·C_out)``, no FFT); the gradient
    flows to the kernel.

    Args:
        kernel: tensor `(kh, kw, C_in, C_out)` (Keras HWIO).
        grid_shape: pair of ints `(H', W')`.

    Returns:
        Pair of float32 tensors `(real, imag)`, each `(H', W'//2 + 1, C_in, C_out)`.
    """
    h, w = validation.int_pair(grid_shape, "grid_shape")
    kh, kw = int(kernel.shape[0]), int(kernel.shape[1])
    b = ops.flip(ops.flip(ops.cast(kernel, "float32"), axis=0), axis=1)
    cos_h, sin_h = _dft_matrices(h, kh, h)
    cos_w, sin_w = _dft_matrices(w, kw, w // 2 + 1)
    # e^(−i(α+β)) = (cos α cos β − sin α sin β) − i (sin α cos β + cos α sin β)
    real = ops.einsum("au,uvio,bv->abio", cos_h, b, cos_w) - ops.einsum("au,uvio,bv->abio", sin_h, b, sin_w)
    imag = -(ops.einsum("au,uvio,bv->abio", sin_h, b, cos_w) + ops.einsum("au,uvio,bv->abio", cos_h, b, sin_w))
    return real, imag


def fourier_conv_norm(inputs, kernel, normalizer, strides=1, padding="valid"):
    """Steps 1, 4 and 5 in one pass through the Fourier domain (no spatial convolution).

    Same values as ``crop_and_stride(apply_spectral_normalizer(full_convolution(x, a), V̂))``:

    ```
    ỹ_k = crop_stride( irfft2d( Σ_i (V̂_k ⊙ B̂_ki) ⊙ rfft2d(x_i) ) )       on the H'×W' grid
    ```

    (`kernel_spectrum`): one rfft2d of the C_in inputs zero-padded to the full
    grid, a per-frequency complex matrix product with the normalised kernel
    spectrum, one irfft2d of the C_out outputs. Per frequency that is
    ``C_in·C_out`` complex products, against ``kh·kw·C_in·C_out`` real ones per
    pixel for the spatial convolution plus the C_out-channel FFT pair of the
    separate path: ~2× fewer multiply-adds for 3×3 and more for larger kernels,
    and the conv's two backward convolutions become two frequency matmuls.
    V̂ has its gradient stopped (it comes from `spectral_normalizer`); the kernel
    gets its gradient through B̂. Computed in float32 whatever the input dtype.

    Args:
        inputs: tensor `(N, H, W, C_in)` with static H and W.
        kernel: tensor `(kh, kw, C_in, C_out)`.
        normalizer: float32 tensor `(C_out, H', W'//2 + 1)` from `spectral_normalizer`
            (or the running average), ``(H', W') = full_size((H, W), (kh, kw))``.
        strides: int or pair of ints.
        padding: 'valid' or 'same'.

    Returns:
        float32 tensor with the shape of `keras.layers.Conv2D`'s output.
    """
    h, w = int(inputs.shape[1]), int(inputs.shape[2])
    kh, kw, c_in, c_out = (int(d) for d in kernel.shape)
    grid_h, grid_w = full_size((h, w), (kh, kw))
    num_freqs = grid_h * (grid_w // 2 + 1)
    batch = ops.shape(inputs)[0]
    real, imag = kernel_spectrum(kernel, (grid_h, grid_w))
    v = ops.expand_dims(ops.transpose(ops.cast(normalizer, "float32"), (1, 2, 0)), 2)  # (H', W'/2+1, 1, C_out)
    w_re = ops.reshape(real * v, (num_freqs, c_in, c_out))
    w_im = ops.reshape(imag * v, (num_freqs, c_in, c_out))
    x = ops.transpose(ops.cast(inputs, "float32"), (0, 3, 1, 2))  # NCHW: FFT on the last two axes

    def per_frequency(part):  # (N, C, H', W'/2+1) -> (freqs, N, C)
        return ops.reshape(ops.transpose(part, (2, 3, 0, 1)), (num_freqs, batch, c_in))

    def per_image(part):  # (freqs, N, C_out) -> (N, C_out, H', W'/2+1)
        return ops.transpose(ops.reshape(part, (grid_h, grid_w // 2 + 1, batch, c_out)), (2, 3, 0, 1))

    x_re, x_im = (per_frequency(part) for part in rfft2d(x, (grid_h, grid_w)))
    # (a + ib)(c + id) = (ac − bd) + i(ad + bc), per frequency: (freqs, N, C_in) @ (freqs, C_in, C_out).
    y_re = ops.matmul(x_re, w_re) - ops.matmul(x_im, w_im)
    y_im = ops.matmul(x_re, w_im) + ops.matmul(x_im, w_re)
    y = irfft2d((per_image(y_re), per_image(y_im)), (grid_h, grid_w))  # (N, C_out, H', W')
    (top, left), (out_h, out_w) = output_geometry((h, w), (kh, kw), strides, padding)
    sh, sw = validation.int_pair(strides, "strides")
    # Crop in NCHW before the transpose back (fewer elements to move); plain slice first (cheap gradient).
    y = ops.slice(y, (0, 0, top, left), (batch, c_out, (out_h - 1) * sh + 1, (out_w - 1) * sw + 1))
    if (sh, sw) != (1, 1):
        y = y[:, :, ::sh, ::sw]
    return ops.transpose(y, (0, 2, 3, 1))


def apply_spectral_normalizer(outputs, normalizer):
    """``ỹ_k = F⁻¹(V̂_k ⊙ F y_k)`` per channel: circular convolution with v_k (step 4).

    Args:
        outputs: tensor `(N, H', W', C_out)`; computed in float32.
        normalizer: float32 tensor `(C_out, H', W'//2 + 1)` from `spectral_normalizer`.

    Returns:
        float32 tensor `(N, H', W', C_out)`.
    """
    h, w = int(outputs.shape[1]), int(outputs.shape[2])
    y = ops.transpose(ops.cast(outputs, "float32"), (0, 3, 1, 2))  # NCHW: FFT on the last two axes
    real, imag = rfft2d(y, (h, w))
    normalizer = ops.cast(normalizer, "float32")
    y = irfft2d((real * normalizer, imag * normalizer), (h, w))  # fft_length recovers odd W'
    return ops.transpose(y, (0, 2, 3, 1))


def crop_and_stride(outputs, input_size, kernel_size, strides=1, padding="valid"):
    """Keeps the full-grid samples a `keras.layers.Conv2D` would output (step 5).

    See `output_geometry` for the grid.

    Args:
        outputs: tensor `(N, H + kh − 1, W + kw − 1, C)`.
        input_size: pair of ints `(H, W)`, the convolution's input size.
        kernel_size, strides: int or pair of ints.
        padding: 'valid' or 'same'.

    Returns:
        Tensor `(N, out_h, out_w, C)`.
    """
    (top, left), (out_h, out_w) = output_geometry(input_size, kernel_size, strides, padding)
    sh, sw = validation.int_pair(strides, "strides")
    span_h, span_w = (out_h - 1) * sh + 1, (out_w - 1) * sw + 1
    # A plain slice first: its gradient is a pad, much cheaper on CPU than a strided slice's.
    outputs = ops.slice(outputs, (0, top, left, 0), (ops.shape(outputs)[0], span_h, span_w, outputs.shape[-1]))
    if (sh, sw) == (1, 1):
        return outputs
    # keras.ops has no strided slice; every backend's tensors support it directly.
    return outputs[:, ::sh, ::sw, :]


def conv_norm(inputs, kernel, strides=1, padding="valid", epsilon=DEFAULT_EPSILON):
    """The whole normalised convolution (no affine, no BN), with the current V̂.

    ```
    ỹ_k = crop_stride( F⁻¹( V̂_k ⊙ F( Σ_i a_ki ⋆ x_i ) ) )          Algorithm 1 of [C]
    ```

    1×1 kernels use `normalizer_1x1` and a plain strided convolution.

    Args:
        inputs: tensor `(N, H, W, C_in)` with static H and W (for kernels > 1×1).
        kernel: tensor `(kh, kw, C_in, C_out)`.
        strides: int or pair of ints.
        padding: 'valid' or 'same'.
        epsilon: float > 0.

    Returns:
        float32 tensor with the shape of `keras.layers.Conv2D`'s output.
    """
    kh, kw = int(kernel.shape[0]), int(kernel.shape[1])
    if (kh, kw) == (1, 1):
        y = ops.conv(inputs, ops.cast(kernel, inputs.dtype), strides=strides, padding=padding)
        return ops.cast(y, "float32") * normalizer_1x1(kernel, epsilon)
    size = (int(inputs.shape[1]), int(inputs.shape[2]))
    return fourier_conv_norm(inputs, kernel, spectral_normalizer(kernel, full_size(size, (kh, kw)), epsilon),
                             strides, padding)


def averaging_factor(step, momentum=None, rampdown_steps=RAMPDOWN_STEPS, floor=MIN_AVERAGING_FACTOR):
    """Factor α of the running V̂ update ``V̄ ← α·V̂ + (1 − α)·V̄``   [C fn. 10].

    With ``momentum=None`` (upstream default) α follows a cosine ramp-down from 1
    to `floor` over `rampdown_steps` updates, then stays at `floor`:

    ```
    α(t) = max(½·(cos(π·min(t, T)/T) + 1), floor),   T = 40000, floor = 0.01
    ```

    where t counts training updates from 1 (upstream increments the counter
    before computing α). A float `momentum` gives a constant α = momentum.

    Args:
        step: scalar tensor or number, t ≥ 1.
        momentum: None or float in (0, 1].
        rampdown_steps: int > 0, T.
        floor: float in [0, 1], the smallest α.

    Returns:
        float32 scalar tensor.
    """
    if momentum is not None:
        return ops.convert_to_tensor(float(momentum), "float32")
    t = ops.clip(ops.cast(step, "float32"), 0.0, float(rampdown_steps))
    ramp = 0.5 * (ops.cos(math.pi * t / float(rampdown_steps)) + 1.0)
    return ops.maximum(ramp, floor)
