"""Tests for sphere_tf.ops.angular: every registry entry vs the papers' formulas."""

import math

import numpy as np
import keras
import pytest
from keras import ops

from sphere_tf import testing
from sphere_tf.ops import angles
from sphere_tf.ops import angular

ANGULAR_NAMES = sorted(angular.ANGULAR_FNS)
# g(0) for θ-based activations is evaluated at θ = arccos(1 − δ) ≈ 1.4e-3 (the safe_acos clip).
CLIP_TOL = 2e-3


def _g(name, c, k=0.3):
    return ops.convert_to_numpy(angular.get_angular_fn(name)(np.asarray(c, np.float32), k))


@pytest.mark.parametrize("name", ANGULAR_NAMES)
def test_matches_numpy_reference(rng, name):
    assert name in testing.NUMPY_ANGULAR, f"add a NumPy reference for angular {name!r}"
    c = np.concatenate([rng.uniform(-0.999, 0.999, size=200), [-0.5, 0.0, 0.5]]).astype(np.float32)
    for k in (0.1, 0.3, 0.7, 5.0):
        got = _g(name, c, k)
        assert got.dtype == np.float32
        expected = testing.NUMPY_ANGULAR[name](c.astype(np.float64), k)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ANGULAR_NAMES)
def test_endpoints_range_and_monotonicity(name):
    # g(0) = 1, g(π/2) = 0, g(π) = −1 and g decreasing, for every k [S §2.2].
    for k in (0.1, 0.3, 0.7, 5.0):
        np.testing.assert_allclose(_g(name, [1.0, 0.0, -1.0], k), [1.0, 0.0, -1.0], atol=CLIP_TOL)
        c = np.cos(np.linspace(0.0, math.pi, 181))
        g = _g(name, c, k)
        assert np.all(np.abs(g) <= 1.0 + 1e-6)
        assert np.all(np.diff(g) <= 1e-6), "g must not increase with θ"


@pytest.mark.parametrize("name", ANGULAR_NAMES)
def test_gradients_finite_at_aligned_opposite_and_orthogonal(name):
    c = np.array([-1.0, -1.0 + 1e-7, 0.0, 1.0 - 1e-7, 1.0], np.float32)
    k = keras.Variable(0.3)
    # ∂/∂k is zero for the entries that do not read k (`testing.gradients` fills unconnected sources with zeros).
    _, (dc,), (dk,) = testing.gradients(lambda ct: ops.sum(angular.get_angular_fn(name)(ct, k)), [c], [k])
    assert np.all(np.isfinite(dc))
    assert np.all(np.isfinite(dk))


@pytest.mark.parametrize(
    "k,expected",
    [  # g at θ = 0, π/6, π/3, π/2: [S-4] evaluated by hand to 3 digits
        (0.3, [1.0, 0.951, 0.710, 0.0]),
        (0.7, [1.0, 0.784, 0.442, 0.0]),
        (5.0, [1.0, 0.670, 0.336, 0.0]),
    ],
)
def test_sigmoid_table_values(k, expected):
    theta = np.array([0.0, math.pi / 6, math.pi / 3, math.pi / 2], np.float32)
    got = ops.convert_to_numpy(angular.sigmoid_of_theta(theta, k))
    np.testing.assert_allclose(got, expected, atol=6e-4)
    # Antisymmetry about π/2: g(π − θ) = −g(θ), so g(π) = −1.
    got_mirror = ops.convert_to_numpy(angular.sigmoid_of_theta(math.pi - theta, k))
    np.testing.assert_allclose(got_mirror, -got, atol=1e-6)
    # Through the cosine entry point as well (θ = 0 goes through the clip).
    np.testing.assert_allclose(_g("sigmoid", np.cos(theta), k), expected, atol=CLIP_TOL)


def test_sigmoid_limits_and_no_overflow_for_small_k():
    theta = np.linspace(0.0, math.pi, 50).astype(np.float32)
    step = ops.convert_to_numpy(angular.sigmoid_of_theta(theta, 0.01))
    assert np.all(np.isfinite(step))  # the exponential form would need e^314
    np.testing.assert_allclose(step[theta < 1.4], 1.0, atol=1e-6)
    np.testing.assert_allclose(step[theta > 1.75], -1.0, atol=1e-6)
    # k → ∞ gives the linear activation.
    np.testing.assert_allclose(
        ops.convert_to_numpy(angular.sigmoid_of_theta(theta, 1e3)),
        ops.convert_to_numpy(angular.linear_of_theta(theta)), atol=1e-5,
    )


def test_sigmoid_accepts_per_filter_k():
    c = np.array([[0.3, 0.3, 0.3]], np.float32)
    k = np.array([0.1, 0.3, 5.0], np.float32)
    got = _g("sigmoid", c, k)
    np.testing.assert_allclose(got, testing.NUMPY_ANGULAR["sigmoid"](c.astype(np.float64), k),
                               rtol=1e-5)


def test_linear_of_theta_exact_slope():
    theta = np.array([0.0, math.pi / 4, math.pi / 2, math.pi], np.float32)
    np.testing.assert_allclose(ops.convert_to_numpy(angular.linear_of_theta(theta)),
                               [1.0, 0.5, 0.0, -1.0], atol=1e-7)


def test_sqcosine_value_and_derivative():
    c = np.linspace(-1.0, 1.0, 41).astype(np.float32)
    g = ops.convert_to_numpy(angular.sqcosine(c))
    _, (dc,), _ = testing.gradients(lambda ct: ops.sum(angular.sqcosine(ct)), [c])
    np.testing.assert_allclose(g, np.sign(c) * c**2, atol=1e-7)
    np.testing.assert_allclose(dc, 2.0 * np.abs(c), atol=1e-6)


def test_cosine_needs_no_arccos_and_is_exact_at_endpoints():
    np.testing.assert_array_equal(_g("cosine", [1.0, -1.0, 0.0]), [1.0, -1.0, 0.0])
    np.testing.assert_array_equal(_g("sqcosine", [1.0, -1.0, 0.0]), [1.0, -1.0, 0.0])
    assert "cosine" not in angular.NEEDS_THETA and "sqcosine" not in angular.NEEDS_THETA
    assert {"linear", "sigmoid"} <= angular.NEEDS_THETA
    assert "sigmoid" in angular.USES_K
    assert not {"linear", "cosine", "sqcosine"} & angular.USES_K


@pytest.mark.parametrize("name", ANGULAR_NAMES)
@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_cosines_give_float32(name, dtype):
    c = ops.convert_to_tensor([-0.9, -0.2, 0.0, 0.4, 0.95], dtype)
    got = angular.get_angular_fn(name)(c, 0.3)
    assert ops.dtype(got) == "float32"
    expected = testing.NUMPY_ANGULAR[name](ops.convert_to_numpy(c).astype(np.float64), 0.3)
    np.testing.assert_allclose(ops.convert_to_numpy(got), expected, rtol=1e-5, atol=1e-6)


def test_get_angular_fn_resolves_names_and_callables():
    assert angular.get_angular_fn("cosine") is angular.cosine
    fn = lambda c, k=None: c  # noqa: E731
    assert angular.get_angular_fn(fn) is fn
    with pytest.raises(ValueError, match="Unknown angular function 'cos'"):
        angular.get_angular_fn("cos")


def test_register_angular_fn_refuses_taken_names_and_adds_new_ones():
    with pytest.raises(KeyError, match="already registered"):
        angular.register_angular_fn("cosine", angular.cosine)
    name = "_test_cube"
    saved = (dict(angular.ANGULAR_FNS), angular.NEEDS_THETA, angular.USES_K)
    try:
        angular.register_angular_fn(name, lambda c, k=None: c**3, needs_theta=False)
        assert angular.get_angular_fn(name)(2.0, None) == 8.0
        assert name not in angular.NEEDS_THETA
    finally:
        angular.ANGULAR_FNS.clear()
        angular.ANGULAR_FNS.update(saved[0])
        angular.NEEDS_THETA, angular.USES_K = saved[1], saved[2]


def test_safe_acos_is_used_for_theta():
    # linear(c) must equal linear_of_theta(safe_acos(c)) bit for bit (one arccos path).
    c = np.array([-1.0, -0.3, 0.2, 1.0], np.float32)
    np.testing.assert_array_equal(
        _g("linear", c), ops.convert_to_numpy(angular.linear_of_theta(angles.safe_acos(c)))
    )
