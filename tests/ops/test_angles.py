"""Tests for sphere_tf.ops.angles against explicit NumPy references."""

import numpy as np
import pytest
from keras import ops

from sphere_tf import testing
from sphere_tf.ops import angles

# (kernel_size, strides, padding, dilation, (H, W)): stride 2 'same' on even and odd sizes (TF pads
# the extra cell at the bottom/right), dilation 2, 1x1, asymmetric kernels and strides.
GEOMETRIES = [
    ((3, 3), (1, 1), "valid", (1, 1), (5, 6)),
    ((3, 3), (1, 1), "same", (1, 1), (5, 6)),
    ((3, 3), (2, 2), "same", (1, 1), (6, 6)),
    ((3, 3), (2, 2), "same", (1, 1), (7, 5)),
    ((2, 2), (2, 2), "same", (1, 1), (5, 6)),
    ((3, 3), (2, 2), "valid", (1, 1), (7, 6)),
    ((3, 3), (1, 1), "same", (2, 2), (6, 7)),
    ((3, 3), (1, 1), "valid", (2, 2), (7, 6)),
    ((1, 1), (1, 1), "valid", (1, 1), (4, 3)),
    ((1, 1), (2, 2), "same", (1, 1), (5, 4)),
    ((2, 3), (2, 1), "same", (1, 1), (5, 6)),
]


def test_safe_acos_values_match_numpy_inside_and_clip_outside():
    c = np.array([-1.5, -1.0, -0.999, -0.3, 0.0, 0.5, 0.999, 1.0, 1.0 + 1e-7, 2.0], np.float32)
    delta = angles.ACOS_DELTA
    # The clip bounds are float32 numbers (1 − 1e-6 rounds to 0.99999899).
    lo, hi = np.float32(-1.0 + delta), np.float32(1.0 - delta)
    expected = np.arccos(np.clip(c, lo, hi).astype(np.float64))
    got = ops.convert_to_numpy(angles.safe_acos(c))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=2e-6)
    assert np.all(np.isfinite(got))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_safe_acos_returns_float32_with_finite_gradients(dtype):
    c = ops.convert_to_tensor([-1.0, -0.5, 0.0, 0.5, 1.0], dtype=dtype)
    theta = angles.safe_acos(c)
    # Each θ_i depends on c_i only, so the gradient of Σθ is the elementwise derivative.
    _, (grad,), _ = testing.gradients(lambda ct: ops.sum(angles.safe_acos(ct)), [c])
    assert ops.dtype(theta) == "float32"
    assert np.all(np.isfinite(grad.astype(np.float64)))
    # Inside the clip range the derivative is −1/√(1−c²).
    np.testing.assert_allclose(
        grad[1:4].astype(np.float64), -1.0 / np.sqrt(1.0 - np.array([0.25, 0.0, 0.25])),
        rtol=1e-2 if dtype in ("float16", "bfloat16") else 1e-6,
    )


@pytest.mark.parametrize("shape", [(3, 3, 2, 4), (1, 1, 5, 3), (7, 2)])
@pytest.mark.parametrize("epsilon", [0.0, 1e-4])
def test_kernel_norm_and_normalize_kernel(rng, shape, epsilon):
    w = rng.normal(size=shape).astype(np.float32)
    flat = w.astype(np.float64).reshape(-1, shape[-1])
    expected_norm = np.sqrt(np.sum(flat**2, axis=0) + epsilon)
    np.testing.assert_allclose(ops.convert_to_numpy(angles.kernel_norm(w, epsilon)), expected_norm,
                               rtol=1e-6)
    w_hat, w_norm = angles.normalize_kernel(w, epsilon)
    assert ops.dtype(w_hat) == "float32" and ops.dtype(w_norm) == "float32"
    np.testing.assert_allclose(ops.convert_to_numpy(w_norm), expected_norm, rtol=1e-6)
    np.testing.assert_allclose(ops.convert_to_numpy(w_hat), w / expected_norm, rtol=1e-6, atol=1e-7)


def test_zero_kernel_normalises_to_zero_with_finite_gradient():
    w = np.zeros((2, 2, 3, 4), np.float32)
    w_hat, w_norm = angles.normalize_kernel(w)

    def loss(wt):
        w_hat, w_norm = angles.normalize_kernel(wt)
        return ops.sum(w_hat) + ops.sum(w_norm)

    _, (grad,), _ = testing.gradients(loss, [w])
    np.testing.assert_array_equal(ops.convert_to_numpy(w_hat), 0.0)
    np.testing.assert_allclose(ops.convert_to_numpy(w_norm), np.sqrt(angles.DEFAULT_EPSILON), rtol=1e-6)
    assert np.all(np.isfinite(grad))


def test_kernel_norm_of_float16_kernel_is_float32_and_does_not_overflow():
    w = np.full((3, 3, 8, 2), 200.0, np.float16)  # Σw² = 2.9e6 > float16 max 65504
    got = ops.convert_to_numpy(angles.kernel_norm(w))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.sqrt(72 * 200.0**2 + 1e-4), rtol=1e-6)


@pytest.mark.parametrize("kernel_size,strides,padding,dilation,hw", GEOMETRIES)
def test_patch_squared_norm_matches_explicit_patches(rng, kernel_size, strides, padding, dilation, hw):
    x = rng.normal(size=(2, *hw, 3)).astype(np.float32)
    patches = testing.numpy_patches(x, kernel_size, strides, padding, dilation)
    expected = np.sum(patches**2, axis=-1, keepdims=True)
    got = ops.convert_to_numpy(
        angles.patch_squared_norm(x, kernel_size, strides, padding, dilation)
    )
    assert got.dtype == np.float32
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("groups", [2, 3])
@pytest.mark.parametrize("kernel_size,strides,padding,dilation,hw", GEOMETRIES[:4] + GEOMETRIES[6:7])
def test_grouped_patch_squared_norm_matches_per_group_patches(rng, kernel_size, strides, padding, dilation,
                                                               hw, groups):
    x = rng.normal(size=(2, *hw, 2 * groups)).astype(np.float32)
    expected = np.concatenate(
        [np.sum(testing.numpy_patches(x[..., 2 * g:2 * g + 2], kernel_size, strides, padding, dilation) ** 2,
                axis=-1, keepdims=True) for g in range(groups)],
        axis=-1,
    )
    got = ops.convert_to_numpy(angles.patch_squared_norm(x, kernel_size, strides, padding, dilation, groups))
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


def test_patch_squared_norm_counts_padded_zeros_at_borders():
    # All-ones input: a 'same' 3x3 corner window holds 4 real cells, an edge 6, the interior 9.
    x = np.ones((1, 4, 4, 2), np.float32)
    got = ops.convert_to_numpy(angles.patch_squared_norm(x, (3, 3), 1, "same", 1))[0, :, :, 0]
    expected = 2.0 * np.array([[4, 6, 6, 4], [6, 9, 9, 6], [6, 9, 9, 6], [4, 6, 6, 4]])
    np.testing.assert_array_equal(got, expected)


def test_patch_squared_norm_float16_input_is_computed_in_float32():
    x = np.full((1, 4, 4, 4), 100.0, np.float16)  # 3x3x4 window: 360000 > float16 max
    got = ops.convert_to_numpy(angles.patch_squared_norm(x, (3, 3), 1, "valid", 1))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, 36 * 100.0**2, rtol=1e-6)


def test_patch_norm_gradient_is_finite_for_zero_inputs():
    x = np.zeros((1, 4, 4, 2), np.float32)
    _, (grad,), _ = testing.gradients(
        lambda xt: ops.sum(ops.sqrt(angles.patch_squared_norm(xt, (3, 3), 1, "same", 1) + angles.DEFAULT_EPSILON)),
        [x])
    np.testing.assert_array_equal(grad, 0.0)


@pytest.mark.parametrize("shape", [(4, 5), (2, 3, 5)])
def test_vector_squared_norm(rng, shape):
    x = rng.normal(size=shape).astype(np.float32)
    got = ops.convert_to_numpy(angles.vector_squared_norm(x))
    np.testing.assert_allclose(got, np.sum(x.astype(np.float64) ** 2, -1, keepdims=True), rtol=1e-6)
    assert got.dtype == np.float32
