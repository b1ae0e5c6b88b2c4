"""Tests for sphere_tf.ops.operator.decoupled_response against the NumPy formulas [D-3, D-15, D-16]."""

import itertools

import numpy as np
import pytest
from keras import ops

from sphere_tf import testing
from sphere_tf.ops import angular
from sphere_tf.ops import magnitude
from sphere_tf.ops import operator

COMBOS = list(itertools.product(sorted(magnitude.MAGNITUDE_FNS), sorted(angular.ANGULAR_FNS)))
WEIGHTED_COMBOS = [(m, w) for m in sorted(magnitude.MAGNITUDE_FNS) for w in ("linear",)] + [
    ("tanh", "nonlinear"), ("tanh", "nonlinear_separate")
]


def _tensor(x):
    """A float32 tensor: the functions take tensors (on PyTorch a NumPy array times a tensor fails or
    silently becomes NumPy)."""
    return ops.convert_to_tensor(np.asarray(x, np.float32))


def _inputs(rng, units=5, positions=40):
    """Patches and kernel; returns the raw arrays and the derived float32 cos/norms as tensors."""
    patches = rng.normal(size=(positions, 6)) * rng.uniform(0.1, 3.0, size=(positions, 1))
    kernel = rng.normal(size=(6, units))
    eps = 1e-4
    x_norm = np.sqrt(np.sum(patches**2, -1, keepdims=True) + eps)
    w_norm = np.sqrt(np.sum(kernel**2, 0) + eps)
    cos = patches @ kernel / (x_norm * w_norm)
    return patches, kernel, _tensor(cos), _tensor(x_norm), _tensor(w_norm)


@pytest.mark.parametrize("mag_name,ang_name", COMBOS)
def test_standard_operators_match_numpy(rng, mag_name, ang_name):
    patches, kernel, cos, x_norm, w_norm = _inputs(rng)
    mag = magnitude.get_magnitude(mag_name)
    rho = rng.uniform(0.5, 2.0, size=5)
    e = 1.7
    k = rng.uniform(0.1, 1.0, size=5)
    got = operator.decoupled_response(
        cos, x_norm, w_norm, magnitude=mag_name, angular=ang_name, alpha=1.3,
        beta=mag.default_beta, radius=_tensor(rho * e) if mag.has_radius else None, k=_tensor(k),
    )
    expected, _ = testing.numpy_decoupled(
        patches, kernel, mag_name, ang_name, alpha=1.3, beta=mag.default_beta,
        rho=rho if mag.has_radius else None, norm_mean=e, k=k,
    )
    got = ops.convert_to_numpy(got)
    assert got.dtype == np.float32 and got.shape == expected.shape
    # atol: the float32 rounding of cos θ is amplified by dg/dc (up to ~1/k near θ = π/2) and h.
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mag_name,weighted", WEIGHTED_COMBOS)
@pytest.mark.parametrize("ang_name", ["cosine", "linear"])
def test_weighted_operators_match_numpy(rng, mag_name, weighted, ang_name):
    patches, kernel, cos, x_norm, w_norm = _inputs(rng)
    mag = magnitude.get_magnitude(mag_name)
    rho = rng.uniform(0.5, 2.0, size=5)
    e = 1.7
    needs_rho = mag.has_radius or weighted == "nonlinear_separate"
    got = operator.decoupled_response(
        cos, x_norm, w_norm, magnitude=mag_name, angular=ang_name, alpha=0.8,
        beta=mag.default_beta, radius=_tensor(rho * e) if needs_rho else None,
        weighted=weighted, weight_radius=_tensor(rho) if needs_rho else None,
    )
    expected, _ = testing.numpy_decoupled(
        patches, kernel, mag_name, ang_name, alpha=0.8, beta=mag.default_beta,
        rho=rho if needs_rho else None, norm_mean=e, weighted=weighted,
    )
    # atol: near θ = π/2, g = 1 − 2θ/π cancels to ~1e-3, so the float32 rounding of θ and of 2θ/π leaves
    # |Δg| up to ~1e-7, which ‖w‖·h(‖x‖) (up to ~20 here) amplifies to 2e-6 (seen on JAX, whose result is
    # the exactly rounded float32 evaluation); 1e-5 as in `test_standard_operators_match_numpy`.
    np.testing.assert_allclose(ops.convert_to_numpy(got), expected, rtol=1e-5, atol=1e-5)


def test_linearly_weighted_linear_cosine_is_the_inner_product(rng):
    patches, kernel, cos, x_norm, w_norm = _inputs(rng)
    got = operator.decoupled_response(cos, x_norm, w_norm, magnitude="linear", angular="cosine",
                                      weighted="linear")
    # ‖w‖‖x‖cos θ = wᵀx up to the ε inside both norms.
    np.testing.assert_allclose(ops.convert_to_numpy(got), patches @ kernel, rtol=1e-5, atol=1e-4)


def test_weighting_names_are_the_documented_ones():
    assert operator.WEIGHTINGS == (None, "linear", "nonlinear", "nonlinear_separate")
    assert set(operator.NONLINEAR_WEIGHTINGS) == {"nonlinear", "nonlinear_separate"}


@pytest.mark.parametrize("mag_name,ang_name", COMBOS)
def test_gradients_finite_for_degenerate_cosines_and_norms(mag_name, ang_name):
    mag = magnitude.get_magnitude(mag_name)
    cos = np.array([[1.0, -1.0, 0.0, 1.0, -1.0]], np.float32)
    x_norm = np.array([[1e-2], [1e6]], np.float32)
    radius = np.float32(1.0)
    k = np.full((5,), 0.3, np.float32)

    def response(c, n, r, k):
        return operator.decoupled_response(
            ops.tile(c, [2, 1]), n, ops.ones(5), magnitude=mag_name, angular=ang_name,
            beta=mag.default_beta, radius=r if mag.has_radius else None, k=k,
        )

    out = ops.convert_to_numpy(response(cos, x_norm, radius, k))
    _, grads, _ = testing.gradients(lambda *args: ops.sum(response(*args)), [cos, x_norm, radius, k])
    assert np.all(np.isfinite(out))
    for g in grads:
        assert np.all(np.isfinite(g))


@pytest.mark.parametrize("mag_name,ang_name", COMBOS)
def test_gradients_match_finite_differences_of_the_numpy_formulas(rng, mag_name, ang_name):
    # ∂f/∂cos θ and ∂f/∂‖x‖ (weighted sum of f) against central differences of
    # sphere_tf.testing's NumPy h(‖x‖)·g(θ) in float64; k a float, so linear and sigmoid g
    # take their hand-written gradients.
    mag = magnitude.get_magnitude(mag_name)
    cos = rng.uniform(-0.95, 0.95, (6, 4))
    x_norm = rng.uniform(0.3, 2.5, (6, 1))
    radius = rng.uniform(0.5, 2.0, (4,))
    weights = rng.standard_normal((6, 4))
    alpha, beta = 1.3, mag.default_beta

    def loss_np(c, n):
        h = testing.NUMPY_MAGNITUDE[mag_name](n, radius, alpha, beta)
        return np.sum(weights * h * testing.NUMPY_ANGULAR[ang_name](c, 0.3))

    def loss(c_t, n_t):
        out = operator.decoupled_response(
            c_t, n_t, magnitude=mag_name, angular=ang_name, alpha=alpha, beta=beta,
            radius=_tensor(radius) if mag.has_radius else None, k=0.3,
        )
        return ops.sum(_tensor(weights) * out)

    value, (d_cos, d_norm), _ = testing.gradients(loss, [cos.astype(np.float32), x_norm.astype(np.float32)])
    np.testing.assert_allclose(value, loss_np(cos, x_norm), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d_cos, testing.numeric_gradient(lambda c: loss_np(c, x_norm), cos),
                               rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(d_norm, testing.numeric_gradient(lambda n: loss_np(cos, n), x_norm),
                               rtol=1e-3, atol=1e-4)
