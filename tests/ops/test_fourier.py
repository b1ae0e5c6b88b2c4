"""Tests of sphere_tf.ops.fourier against NumPy references and the ConvNorm paper's oracles (C.4.9)."""

import math

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sphere_tf import testing
from sphere_tf.ops import fourier

# -- NumPy references (explicit loops / np.fft; independent of sphere_tf.ops.fourier) ------------


def np_normalizer_full(a, grid, eps):
    """Full two-sided V̂ (H', W', C_out) from np.fft.fft2 of the zero-padded kernel."""
    kh, kw, c_in, c_out = a.shape
    pad = np.zeros(grid + (c_in, c_out))
    pad[:kh, :kw] = a
    power = (np.abs(np.fft.fft2(pad, axes=(0, 1))) ** 2).sum(axis=2)
    return 1.0 / np.sqrt(power + eps)


def np_keras_rows(size, k, s, padding):
    """Indices on the full grid of the rows keras.layers.Conv2D outputs (TF SAME: extra pad after)."""
    if padding == "valid":
        out, before = (size - k) // s + 1, 0
    else:
        out = math.ceil(size / s)
        before = max((out - 1) * s + k - size, 0) // 2
    return [(k - 1 - before) + o * s for o in range(out)]


def np_conv_norm(x, a, strides, padding, eps, v_full=None):
    """ConvNorm forward (no affine/BN): full correlation, FFT normalisation, crop, stride."""
    _, h, w, _ = x.shape
    kh, kw = a.shape[:2]
    y = testing.numpy_full_correlation(x, a)
    grid = y.shape[1:3]
    v = np_normalizer_full(a, grid, eps) if v_full is None else v_full
    y = np.real(np.fft.ifft2(np.fft.fft2(y, axes=(1, 2)) * v[None], axes=(1, 2)))
    rows = np_keras_rows(h, kh, strides, padding)
    cols = np_keras_rows(w, kw, strides, padding)
    return y[:, rows][:, :, cols]


def circulant_2d(kernel_grid):
    """Matrix C with (C x) = circular convolution of x with kernel_grid, both (N1, N2), flattened row-major."""
    n1, n2 = kernel_grid.shape
    c = np.zeros((n1 * n2, n1 * n2))
    for p in range(n1):
        for q in range(n2):
            for r in range(n1):
                for s in range(n2):
                    c[p * n2 + q, r * n2 + s] = kernel_grid[(p - r) % n1, (q - s) % n2]
    return c


# -- power spectrum and normaliser --------------------------------------------------------------


@pytest.mark.parametrize(
    "kernel_size,grid",
    [((1, 1), (4, 5)), ((3, 3), (10, 10)), ((3, 3), (3, 4)), ((5, 5), (7, 9)), ((1, 3), (4, 5)), ((3, 5), (6, 5))],
)
def test_power_spectrum_matches_numpy_fft(kernel_size, grid, rng):
    a = rng.standard_normal(kernel_size + (3, 4)).astype(np.float32)
    power = keras.ops.convert_to_numpy(fourier.power_spectrum(a, grid))
    kh, kw = kernel_size
    pad = np.zeros(grid + (3, 4))
    pad[:kh, :kw] = a
    ref = (np.abs(np.fft.fft2(pad, axes=(0, 1))) ** 2).sum(axis=2).transpose(2, 0, 1)[:, :, : grid[1] // 2 + 1]
    assert power.shape == (4, grid[0], grid[1] // 2 + 1)
    np.testing.assert_allclose(power, ref, rtol=1e-5, atol=1e-5 * ref.max())


def test_spectral_normalizer_matches_numpy(rng):
    a = rng.standard_normal((3, 3, 2, 3)).astype(np.float32)
    v = keras.ops.convert_to_numpy(fourier.spectral_normalizer(a, (8, 7), epsilon=1e-3))
    ref = np_normalizer_full(a, (8, 7), 1e-3).transpose(2, 0, 1)[:, :, :4]
    np.testing.assert_allclose(v, ref, rtol=1e-5)


def test_normalizer_1x1_is_inverse_kernel_norm_and_the_fft_formula(rng):
    a = rng.standard_normal((1, 1, 5, 3)).astype(np.float32)
    v = keras.ops.convert_to_numpy(fourier.normalizer_1x1(a, epsilon=1e-4))
    np.testing.assert_allclose(v, 1.0 / np.sqrt((a[0, 0] ** 2).sum(axis=0) + 1e-4), rtol=1e-6)
    flat = np_normalizer_full(a, (4, 4), 1e-4)  # a one-tap kernel has a flat spectrum
    np.testing.assert_allclose(flat, np.broadcast_to(v, flat.shape), rtol=1e-6)


def test_no_gradient_flows_through_the_normalizers(rng):
    kernel = rng.standard_normal((3, 3, 2, 2))
    kernel_1x1 = rng.standard_normal((1, 1, 2, 2))
    _, grad = testing.value_and_grad(lambda k: keras.ops.sum(fourier.spectral_normalizer(k, (6, 6))), kernel)
    _, grad_1x1 = testing.value_and_grad(lambda k: keras.ops.sum(fourier.normalizer_1x1(k)), kernel_1x1)
    np.testing.assert_array_equal(grad, 0.0)
    np.testing.assert_array_equal(grad_1x1, 0.0)


# -- oracles of C.4.9 (circular model) ------------------------------------------------------------


@pytest.mark.parametrize("kernel_size,grid,c_in", [(3, (12, 12), 5), (5, (7, 6), 3), (2, (5, 5), 2)])
def test_channel_operator_is_a_tight_frame(kernel_size, grid, c_in, rng):
    """Per channel M = P_k A_k (built as an explicit matrix): M Mᵀ = I, ‖M‖₂ = 1; v_k real and even."""
    c_out, n = 2, grid[0] * grid[1]
    a = rng.standard_normal((kernel_size, kernel_size, c_in, c_out)).astype(np.float32)
    v_half = keras.ops.convert_to_numpy(fourier.spectral_normalizer(a, grid, epsilon=1e-12)).astype(np.float64)
    blocks = []
    for k in range(c_out):
        v_k = np.fft.irfft2(v_half[k], s=grid)  # the filter from the one-sided spectrum
        # real and even: its full DFT is real, and v(−n) = v(n) (circularly)
        np.testing.assert_allclose(np.fft.fft2(v_k).imag, 0.0, atol=1e-9)
        np.testing.assert_allclose(v_k, np.roll(v_k[::-1, ::-1], (1, 1), axis=(0, 1)), atol=1e-9)
        a_k = np.hstack([
            circulant_2d(np.pad(a[:, :, i, k], ((0, grid[0] - kernel_size), (0, grid[1] - kernel_size))))
            for i in range(c_in)
        ])
        m = circulant_2d(v_k) @ a_k
        assert m.shape == (n, c_in * n)
        np.testing.assert_allclose(m @ m.T, np.eye(n), atol=2e-4)
        np.testing.assert_allclose(np.linalg.norm(m, 2), 1.0, atol=1e-4)
        blocks.append(m)
    # Proposition 3.1: the layer operator's spectral norm is at most sqrt(C_out).
    assert np.linalg.norm(np.vstack(blocks), 2) <= math.sqrt(c_out) + 1e-4


def test_apply_is_circular_convolution_with_v(rng):
    y = rng.standard_normal((2, 6, 5, 3)).astype(np.float32)
    v_half = rng.uniform(0.5, 2.0, (3, 6, 3)).astype(np.float32)
    out = keras.ops.convert_to_numpy(fourier.apply_spectral_normalizer(y, v_half))
    for k in range(3):
        v_k = np.fft.irfft2(v_half[k].astype(np.float64), s=(6, 5))
        c = circulant_2d(v_k)
        for b in range(2):
            np.testing.assert_allclose(out[b, :, :, k].ravel(), c @ y[b, :, :, k].ravel(), atol=1e-5)


# -- geometry -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel_size", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("strides", [1, 2, 3])
@pytest.mark.parametrize("padding", ["same", "valid"])
@pytest.mark.parametrize("size", [(7, 8)])
def test_crop_of_full_convolution_is_keras_conv2d(kernel_size, strides, padding, size, rng):
    x = rng.standard_normal((2,) + size + (3,)).astype(np.float32)
    conv = keras.layers.Conv2D(4, kernel_size, strides=strides, padding=padding, use_bias=False)
    expected = keras.ops.convert_to_numpy(conv(x))
    kernel = conv.kernel
    full = fourier.full_convolution(x, kernel)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(full), testing.numpy_full_correlation(x, keras.ops.convert_to_numpy(kernel)), atol=1e-5
    )
    out = keras.ops.convert_to_numpy(fourier.crop_and_stride(full, size, kernel_size, strides, padding))
    assert out.shape == expected.shape
    np.testing.assert_allclose(out, expected, atol=1e-5)
    (top, left), out_size = fourier.output_geometry(size, kernel_size, strides, padding)
    assert out_size == expected.shape[1:3]
    assert top == np_keras_rows(size[0], kernel_size, strides, padding)[0]


def test_output_geometry_same_stride2_differs_from_pytorch_on_even_sizes():
    # TF pads 0 before / 1 after for k = 3, s = 2, H = 8; PyTorch padding=1 would start at full row 1.
    (top, left), out = fourier.output_geometry((8, 7), 3, 2, "same")
    assert out == (4, 4)
    assert top == 2 and left == 1


def test_output_geometry_rejects_unknown_padding():
    with pytest.raises(ValueError, match="Invalid value for argument `padding`"):
        fourier.output_geometry((5, 5), 3, 1, "full")


# -- the whole normalised convolution --------------------------------------------------------------


@pytest.mark.parametrize("kernel_size", [1, 3, 5])
@pytest.mark.parametrize("strides", [1, 2])
@pytest.mark.parametrize("padding", ["same", "valid"])
def test_conv_norm_matches_numpy_reference(kernel_size, strides, padding, rng):
    x = rng.standard_normal((2, 8, 7, 3)).astype(np.float32)
    a = rng.standard_normal((kernel_size, kernel_size, 3, 4)).astype(np.float32) * 0.3
    out = keras.ops.convert_to_numpy(fourier.conv_norm(x, a, strides, padding, epsilon=1e-4))
    ref = np_conv_norm(x, a, strides, padding, 1e-4)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


def test_conv_norm_stride2_is_stride1_subsampled_in_valid_mode(rng):
    x = rng.standard_normal((1, 9, 9, 2)).astype(np.float32)
    a = rng.standard_normal((3, 3, 2, 3)).astype(np.float32)
    s1 = keras.ops.convert_to_numpy(fourier.conv_norm(x, a, 1, "valid"))
    s2 = keras.ops.convert_to_numpy(fourier.conv_norm(x, a, 2, "valid"))
    np.testing.assert_allclose(s2, s1[:, ::2, ::2], atol=1e-6)


def test_conv_norm_is_scale_invariant_in_the_kernel(rng):
    x = rng.standard_normal((1, 6, 6, 2)).astype(np.float32)
    a = rng.standard_normal((3, 3, 2, 2)).astype(np.float32)
    y1 = keras.ops.convert_to_numpy(fourier.conv_norm(x, a, epsilon=1e-9))
    y2 = keras.ops.convert_to_numpy(fourier.conv_norm(x, 7.0 * a, epsilon=1e-9))
    np.testing.assert_allclose(y1, y2, rtol=1e-4, atol=1e-5)


@given(
    scale=st.floats(1e-3, 1e3),
    size=st.integers(3, 9),
    kernel_size=st.sampled_from([1, 2, 3]),
    seed=st.integers(0, 2**16),
)
def test_each_channel_has_lipschitz_constant_one(scale, size, kernel_size, seed):
    """‖ỹ_k‖ ≤ ‖x‖ (Parseval + Cauchy-Schwarz per frequency, [C §3.2]); cropping only removes energy."""
    r = np.random.default_rng(seed)
    x = (scale * r.standard_normal((1, size, size, 3))).astype(np.float32)
    a = r.standard_normal((kernel_size, kernel_size, 3, 2)).astype(np.float32)
    y = keras.ops.convert_to_numpy(fourier.conv_norm(x, a, 1, "same"))
    x_norm = np.linalg.norm(x.astype(np.float64))
    for k in range(2):
        assert np.linalg.norm(y[..., k]) <= x_norm * (1 + 1e-4) + 1e-6


@given(
    kind=st.sampled_from(["zeros", "dc_zero", "shared_zero", "tiny", "huge"]),
    kernel_size=st.sampled_from([1, 3, 4]),
    seed=st.integers(0, 2**16),
)
def test_spectral_zeros_give_finite_outputs(kind, kernel_size, seed):
    r = np.random.default_rng(seed)
    a = r.standard_normal((kernel_size, kernel_size, 2, 3))
    if kind == "zeros":
        a[..., 0] = 0.0  # a dead output channel
    elif kind == "dc_zero":
        a = a - a.mean(axis=(0, 1), keepdims=True)  # taps sum to 0: zero at DC for every input channel
    elif kind == "shared_zero":
        a[:, :, 1] = a[:, :, 0]  # identical input channels share every spectral zero
        a = a - a.mean(axis=(0, 1), keepdims=True)
    elif kind == "tiny":
        a = a * 1e-20
    else:
        a = a * 1e15
    x = r.standard_normal((2, 6, 5, 2)).astype(np.float32)
    y = keras.ops.convert_to_numpy(fourier.conv_norm(x, a.astype(np.float32), 2, "same"))
    assert np.all(np.isfinite(y))
    v = keras.ops.convert_to_numpy(fourier.spectral_normalizer(a.astype(np.float32), (8, 7)))
    assert np.all(np.isfinite(v)) and np.all(v > 0)


@pytest.mark.tensorflow_only
def test_conv_norm_under_jit_compile_matches_eager(rng):
    import tensorflow as tf  # noqa: PLC0415 (TensorFlow-only test)

    x = rng.standard_normal((2, 8, 8, 3)).astype(np.float32)
    a = rng.standard_normal((3, 3, 3, 4)).astype(np.float32)
    eager = keras.ops.convert_to_numpy(fourier.conv_norm(x, a, 2, "same"))
    jitted = tf.function(lambda x, a: fourier.conv_norm(x, a, 2, "same"), jit_compile=True)(x, a)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(jitted), eager, rtol=1e-4, atol=1e-5)


# -- running-average factor -------------------------------------------------------------------------


@pytest.mark.parametrize("step", [0, 1, 100, 20000, 39999, 40000, 100000])
def test_averaging_factor_is_the_upstream_cosine_rampdown(step):
    expected = max(0.5 * (math.cos(math.pi * min(step, 40000) / 40000) + 1.0), 0.01)
    got = float(keras.ops.convert_to_numpy(fourier.averaging_factor(step)))
    assert got == pytest.approx(expected, abs=1e-6)


def test_averaging_factor_with_momentum_is_constant():
    for step in (1, 10, 50000):
        assert float(keras.ops.convert_to_numpy(fourier.averaging_factor(step, momentum=0.1))) == pytest.approx(0.1)


# -- the Fourier-domain convolution (fourier_conv_norm) -------------------------------------------


@pytest.mark.parametrize("size,fft_length", [((4, 5), (6, 7)), ((5, 6), (7, 8)), ((3, 3), (3, 4))])
def test_rfft2d_gradient_matches_numpy_dft(size, fft_length, rng):
    x = rng.standard_normal((2, 3) + size).astype(np.float32)
    n1, n2 = fft_length
    p = rng.standard_normal((2, 3, n1, n2 // 2 + 1))
    q = rng.standard_normal((2, 3, n1, n2 // 2 + 1))

    def loss_fn(xt):
        real, imag = fourier.rfft2d(xt, fft_length)
        return keras.ops.sum(keras.ops.multiply(real, p.astype(np.float32)) + keras.ops.multiply(imag, q.astype(np.float32)))

    _, grad = testing.value_and_grad(loss_fn, x)
    real, imag = fourier.rfft2d(keras.ops.convert_to_tensor(x), fft_length)
    # Y(f) = Σ_n x(n) e^(−iθ), θ = 2π(f1 n1/N1 + f2 n2/N2): ∂L/∂x(n) = Σ_f P cos θ − Q sin θ.
    f1, f2, r, c = np.meshgrid(np.arange(n1), np.arange(n2 // 2 + 1), np.arange(size[0]), np.arange(size[1]),
                               indexing="ij")
    theta = 2 * np.pi * (f1 * r / n1 + f2 * c / n2)
    ref = np.einsum("bcfg,fgrs->bcrs", p, np.cos(theta)) - np.einsum("bcfg,fgrs->bcrs", q, np.sin(theta))
    np.testing.assert_allclose(grad, ref, rtol=1e-4, atol=1e-4)
    pad = np.zeros((2, 3) + tuple(fft_length))
    pad[..., : size[0], : size[1]] = x
    np.testing.assert_allclose(keras.ops.convert_to_numpy(real), np.fft.rfft2(pad).real, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(imag), np.fft.rfft2(pad).imag, rtol=1e-4, atol=1e-4)


def test_irfft2d_inverts_numpy_rfft2_for_odd_and_even_sizes(rng):
    for shape in ((4, 6), (5, 7)):
        x = rng.standard_normal((2,) + shape)
        spec = np.fft.rfft2(x)
        pair = (keras.ops.convert_to_tensor(spec.real.astype(np.float32)),
                keras.ops.convert_to_tensor(spec.imag.astype(np.float32)))
        np.testing.assert_allclose(keras.ops.convert_to_numpy(fourier.irfft2d(pair, shape)), x, atol=1e-5)


@pytest.mark.parametrize("kernel_size,grid", [((3, 3), (10, 10)), ((2, 3), (5, 7)), ((5, 1), (8, 4))])
def test_kernel_spectrum_is_fft_of_the_flipped_padded_kernel(kernel_size, grid, rng):
    a = rng.standard_normal(kernel_size + (2, 3)).astype(np.float32)
    real, imag = fourier.kernel_spectrum(a, grid)
    pad = np.zeros(grid + (2, 3))
    pad[: kernel_size[0], : kernel_size[1]] = a[::-1, ::-1]
    ref = np.fft.fft2(pad, axes=(0, 1))[:, : grid[1] // 2 + 1]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(real), ref.real, atol=1e-4)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(imag), ref.imag, atol=1e-4)


@pytest.mark.parametrize("kernel_size", [(2, 2), (3, 3), (2, 3), (5, 3)])
@pytest.mark.parametrize("strides", [1, 2, (1, 2)])
@pytest.mark.parametrize("padding", ["same", "valid"])
def test_fourier_conv_norm_matches_numpy_with_a_given_normalizer(kernel_size, strides, padding, rng):
    x = rng.standard_normal((2, 8, 7, 3)).astype(np.float32)
    a = rng.standard_normal(kernel_size + (3, 4)).astype(np.float32) * 0.3
    grid = fourier.full_size((8, 7), kernel_size)
    v_full = rng.uniform(0.5, 2.0, grid + (4,))
    v_full = 0.5 * (v_full + v_full[(-np.arange(grid[0])) % grid[0]][:, (-np.arange(grid[1])) % grid[1]])  # even
    v_half = np.transpose(v_full[:, : grid[1] // 2 + 1], (2, 0, 1)).astype(np.float32)
    out = keras.ops.convert_to_numpy(fourier.fourier_conv_norm(x, a, v_half, strides, padding))
    s = strides if isinstance(strides, tuple) else (strides, strides)
    rows = np_keras_rows(8, kernel_size[0], s[0], padding)
    cols = np_keras_rows(7, kernel_size[1], s[1], padding)
    full = np.real(np.fft.ifft2(np.fft.fft2(testing.numpy_full_correlation(x, a), axes=(1, 2)) * v_full[None], axes=(1, 2)))
    ref = full[:, rows][:, :, cols]
    assert out.shape == ref.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "kernel_size,strides,padding", [((3, 3), 1, "same"), ((2, 3), 2, "same"), ((3, 3), 2, "valid")]
)
def test_fourier_conv_norm_gradients_match_the_spatial_path(kernel_size, strides, padding, rng):
    """Gradients (x and kernel) of the Fourier path equal the spatial path's, differentiated natively."""
    ops = keras.ops
    x = rng.standard_normal((2, 7, 8, 3)).astype(np.float32)
    a = rng.standard_normal(kernel_size + (3, 4)).astype(np.float32)
    v = fourier.spectral_normalizer(a, fourier.full_size((7, 8), kernel_size))
    weights = rng.standard_normal((2, 7, 8, 4)).astype(np.float32)

    def spatial(xt, at):
        # Full correlation (conv) + the normaliser applied with the backend's own FFT gradients.
        full = ops.transpose(fourier.full_convolution(xt, at), (0, 3, 1, 2))
        n1, n2 = full.shape[2], full.shape[3]
        real, imag = ops.rfft(full)
        real, imag = (ops.swapaxes(t, -1, -2) for t in ops.fft((ops.swapaxes(real, -1, -2),
                                                                   ops.swapaxes(imag, -1, -2))))
        real, imag = ops.multiply(real, v), ops.multiply(imag, v)
        real, imag = (ops.swapaxes(t, -1, -2) for t in ops.fft((ops.swapaxes(real, -1, -2),
                                                                   -ops.swapaxes(imag, -1, -2))))
        y = ops.transpose(ops.irfft((real / n1, -imag / n1), fft_length=n2), (0, 2, 3, 1))
        return fourier.crop_and_stride(y, (7, 8), kernel_size, strides, padding)

    def loss(path, xt, at):
        y = fourier.fourier_conv_norm(xt, at, v, strides, padding) if path == "fourier" else spatial(xt, at)
        return ops.sum(ops.multiply(ops.sin(y), weights[:, : y.shape[1], : y.shape[2]]))

    for path_args in ((lambda xt: loss("fourier", xt, a), lambda xt: loss("spatial", xt, a), x),
                      (lambda at: loss("fourier", x, at), lambda at: loss("spatial", x, at), a)):
        g_fourier = testing.value_and_grad(path_args[0], path_args[2])[1]
        g_spatial = testing.value_and_grad(path_args[1], path_args[2])[1]
        np.testing.assert_allclose(g_fourier, g_spatial, rtol=1e-4, atol=1e-4)
