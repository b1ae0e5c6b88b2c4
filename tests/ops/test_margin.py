"""Tests for sphere_tf.ops.margin against explicit NumPy references (arccos + loops over k)."""

import math

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from keras import ops

from sphere_tf import testing
from sphere_tf.ops import margin

from tests.gradient_helpers import value_and_grads

MARGINS = (1, 2, 3, 4)
# safe_acos clips c to ±(1 − 1e-6): θ >= arccos(1 − 1e-6) ≈ 1.4e-3, so θ-based forms are
# off by at most m·|g'|·1.4e-3 at θ = 0 and θ = π.
CLIP_THETA = math.acos(1.0 - 1e-6)


# ---------------------------------------------------------------------------------------
# NumPy references (float64, arccos-based, explicit loops).


def np_psi(theta, m):
    """ψ(θ) = (−1)^k cos(mθ) − 2k on [kπ/m, (k+1)π/m], by looping over k [T-2.6]."""
    theta = np.atleast_1d(np.asarray(theta, np.float64))
    out = np.full_like(theta, np.nan)
    for i, t in enumerate(theta):
        for k in range(m):
            if k * math.pi / m <= t <= (k + 1) * math.pi / m:
                out[i] = (-1) ** k * math.cos(m * t) - 2 * k
                break
    return out


def np_linear(theta):
    return 1.0 - 2.0 * theta / math.pi


def np_sigmoid(theta, k):
    """Eq. 3.4 in its original exponential form."""
    a = math.exp(-math.pi / (2 * k))
    e = np.exp(theta / k - math.pi / (2 * k))
    return (1 + a) / (1 - a) * (1 - e) / (1 + e)


def np_g(theta, angular, k=0.3):
    return {"linear": np_linear, "cosine": np.cos, "sigmoid": lambda t: np_sigmoid(t, k)}[angular](theta)


def np_ga(theta, m, angular, k=0.3):
    if angular == "cosine":
        return np_psi(theta, m)
    return np.atleast_1d(np_g(m * np.asarray(theta, np.float64), angular, k))


def np_additive(theta, m1, m2, m3):
    """cos(m1θ + m2) − m3, continued past π by the (−1)^κ cos φ − 2κ rule, looping over κ."""
    theta = np.atleast_1d(np.asarray(theta, np.float64))
    out = np.empty_like(theta)
    for i, t in enumerate(theta):
        phi = m1 * t + m2
        kappa = 0
        while phi > (kappa + 1) * math.pi:
            kappa += 1
        out[i] = (-1) ** kappa * math.cos(phi) - 2 * kappa - m3
    return out


def np_lambda(t, base, gamma, power, lambda_min):
    return max(lambda_min, base * (1.0 + gamma * t) ** (-power))


def np_margin_logits(x, w, y, loss_type, m, angular="cosine", k=0.3, s=None, b=None, lam=0.0):
    """Logits by explicit loops over samples and classes (float64); ε inside the norms."""
    eps = 1e-4 if loss_type in ("ssoftmax", "cosface", "arcface", "combined") else 1e-12
    x, w = np.asarray(x, np.float64), np.asarray(w, np.float64)
    n, c = x.shape[0], w.shape[1]
    out = np.zeros((n, c))
    for i in range(n):
        xn = math.sqrt(np.sum(x[i] ** 2) + eps)
        for j in range(c):
            wn = math.sqrt(np.sum(w[:, j] ** 2) + eps)
            cos = np.clip(x[i] @ w[:, j] / (xn * wn), -1.0, 1.0)
            theta = math.acos(cos)
            if loss_type == "lsoftmax":
                r, g = xn * wn, cos
            elif loss_type in ("ssoftmax", "cosface", "arcface", "combined"):
                r, g = s, np_g(theta, angular, k)
            else:
                r, g = xn, np_g(theta, angular, k)
            plain = r * g + (0.0 if b is None else b[j])
            out[i, j] = plain
            if y is None or j != y[i]:
                continue
            if loss_type in ("lsoftmax", "asoftmax"):
                psi = np_psi(theta, m)[0]
            elif loss_type == "wsoftmax":
                psi = g
            elif loss_type in ("gasoftmax", "ssoftmax"):
                psi = np_ga(theta, m, angular, k)[0]
            elif loss_type == "cosface":
                psi = cos - m
            elif loss_type == "arcface":
                psi = np_additive(theta, 1.0, m, 0.0)[0]
            else:
                psi = np_additive(theta, *m)[0]
            target = r * psi + (0.0 if b is None else b[j])
            out[i, j] = (lam * plain + target) / (1.0 + lam)
    return out


def _np(x):
    return ops.convert_to_numpy(x)


def _edge_thetas(m):
    ks = np.arange(m + 1) * math.pi / m
    return np.concatenate([ks, np.clip(ks + 1e-3, 0, math.pi), np.clip(ks - 1e-3, 0, math.pi)])


# ---------------------------------------------------------------------------------------
# Chebyshev, k and ψ.


@pytest.mark.parametrize("m", range(0, 7))
def test_chebyshev_cos_equals_cos_m_theta(rng, m):
    theta = np.concatenate([rng.uniform(0, math.pi, 300), [0.0, math.pi / 2, math.pi]])
    got = _np(margin.chebyshev_cos(np.cos(theta).astype(np.float32), m))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, np.cos(m * theta), atol=5e-6)


@pytest.mark.parametrize("m", (1, 2, 3, 4, 5, 6))
def test_margin_k_is_floor_m_theta_over_pi(rng, m):
    theta = rng.uniform(0, math.pi, 500)
    c = np.cos(theta).astype(np.float32)
    expected = np.minimum(np.floor(m * np.arccos(c.astype(np.float64)) / math.pi), m - 1)
    np.testing.assert_array_equal(_np(margin.margin_k(c, m)), expected)


@pytest.mark.parametrize("m", MARGINS + (5, 6))
def test_psi_matches_reference_at_random_and_edge_angles(rng, m):
    theta = np.concatenate([rng.uniform(0, math.pi, 400), _edge_thetas(m)])
    c = np.cos(theta)
    got = _np(margin.psi(c.astype(np.float32), m))
    assert got.dtype == np.float32
    # Reference at the angle the float32 cosine represents.
    expected = np_psi(np.arccos(c.astype(np.float32).astype(np.float64)), m)
    np.testing.assert_allclose(got, expected, atol=2e-5 * m * m)


@pytest.mark.parametrize("m", MARGINS)
def test_psi_matches_caffe_sign_formulas(rng, m):
    """The Caffe layer's branch-free sign tests (wy1iu/LargeMargin_Softmax_Loss
    `large_margin_inner_product_layer.cpp`), an independent route to ψ."""
    c = rng.uniform(-1, 1, 500)
    s0 = np.sign(c)
    if m == 1:
        expected = c
    elif m == 2:
        expected = 2 * s0 * c**2 - 1
    elif m == 3:
        s1 = np.sign(np.abs(c) - 0.5)
        s2 = s0 * (s1 + 1) - 2
        expected = s1 * (4 * c**3 - 3 * c) + s2
    else:
        s3 = s0 * np.sign(2 * c**2 - 1)
        s4 = 2 * s0 + s3 - 3
        expected = s3 * (8 * c**4 - 8 * c**2 + 1) + s4
    np.testing.assert_allclose(_np(margin.psi(c.astype(np.float32), m)), expected, atol=1e-5)


@pytest.mark.parametrize("m", MARGINS)
def test_psi_continuous_strictly_decreasing_from_1_to_1_minus_2m(m):
    theta = np.linspace(0.0, math.pi, 2001)
    values = _np(margin.psi(np.cos(theta).astype(np.float32), m)).astype(np.float64)
    assert values[0] == pytest.approx(1.0, abs=1e-6)
    assert values[-1] == pytest.approx(1.0 - 2.0 * m, abs=1e-5)
    steps = np.diff(values)
    assert np.all(steps < 0), f"not strictly decreasing at θ={theta[1:][steps >= 0]}"
    # |ψ'| <= m, so a jump would show as a step larger than m·Δθ.
    assert np.max(np.abs(steps)) <= m * (theta[1] - theta[0]) * 1.01


@pytest.mark.parametrize("m", (2, 3, 4))
def test_psi_below_cos_theta(m):
    """Design criterion ψ(θ) <= cos θ on [0, π] (the target class is made harder)."""
    theta = np.linspace(0.0, math.pi, 1001)
    c = np.cos(theta).astype(np.float32)
    assert np.all(_np(margin.psi(c, m)) <= c + 1e-6)


@pytest.mark.parametrize("m", MARGINS)
def test_psi_gradient_finite_everywhere(m):
    c = np.concatenate([[-1.0, 1.0, 0.0], np.cos(np.arange(m + 1) * math.pi / m)]).astype(np.float32)
    _, (grad,) = value_and_grads(lambda v: keras.ops.sum(margin.psi(v, m)), c)  # elementwise: Σ's gradient
    assert np.all(np.isfinite(grad))
    # dψ/dc = (−1)^k m U_{m−1}(c) >= 0 and at most m² in magnitude.
    assert np.all(grad >= -1e-5) and np.all(grad <= m * m + 1e-4)


@given(st.floats(-1.0, 1.0, width=32), st.sampled_from(MARGINS))
def test_psi_finite_and_in_range_hypothesis(c, m):
    value = float(_np(margin.psi(np.float32(c), m)))
    assert 1.0 - 2.0 * m - 1e-5 <= value <= 1.0 + 1e-5


# ---------------------------------------------------------------------------------------
# GA-Softmax and the additive family.


@pytest.mark.parametrize("angular", margin.GA_ANGULAR)
@pytest.mark.parametrize("m", MARGINS)
def test_ga_target_matches_reference(rng, angular, m):
    theta = np.concatenate([rng.uniform(0.01, math.pi - 0.01, 300), _edge_thetas(m)])
    theta = np.clip(theta, CLIP_THETA, math.pi - CLIP_THETA)
    c = np.cos(theta).astype(np.float32)
    theta32 = np.arccos(c.astype(np.float64))
    got = _np(margin.ga_target(c, m, angular, k=0.3))
    np.testing.assert_allclose(got, np_ga(theta32, m, angular, 0.3), atol=5e-5 * m * m)


@pytest.mark.parametrize("angular", ("linear", "sigmoid"))
@pytest.mark.parametrize("m", (1.5, 2.5))
def test_ga_target_non_integer_margin(rng, angular, m):
    theta = rng.uniform(0.01, math.pi - 0.01, 200)
    c = np.cos(theta).astype(np.float32)
    expected = np_ga(np.arccos(c.astype(np.float64)), m, angular, 0.7)
    np.testing.assert_allclose(_np(margin.ga_target(c, m, angular, k=0.7)), expected, atol=1e-5)


@pytest.mark.parametrize("angular", margin.GA_ANGULAR)
@pytest.mark.parametrize("m", MARGINS)
def test_ga_target_endpoints_and_monotone(angular, m):
    theta = np.linspace(0.0, math.pi, 1001)
    values = _np(margin.ga_target(np.cos(theta).astype(np.float32), m, angular, 0.3)).astype(np.float64)
    # g(m·0) = 1 up to the safe_acos clip.
    assert values[0] == pytest.approx(1.0, abs=m * 2e-3 * 3)
    steps = np.diff(values)
    if angular == "sigmoid":
        # Saturates towards −1/tanh(π/4k) for mθ ≫ π/2: flat to float32 precision.
        assert np.all(steps <= 5e-7) and np.all(steps[: len(steps) // (2 * m)] < 0)
    else:
        assert np.all(steps < 0)


@pytest.mark.parametrize(
    "m1,m2,m3", [(1.0, 0.0, 0.35), (1.0, 0.5, 0.0), (1.0, 0.3, 0.2), (1.5, 0.2, 0.1), (2.0, 0.0, 0.1), (1.35, 0.0, 0.0)]
)
def test_additive_target_matches_reference(rng, m1, m2, m3):
    theta = np.concatenate([rng.uniform(0.01, math.pi - 0.01, 300), [math.pi - m2, math.pi / m1, 2.0, 3.0]])
    c = np.cos(theta).astype(np.float32)
    # θ at the float32 cosine, clipped as safe_acos does.
    theta32 = np.clip(np.arccos(c.astype(np.float64)), CLIP_THETA, math.pi - CLIP_THETA)
    np.testing.assert_allclose(
        _np(margin.additive_target(c, m1, m2, m3)), np_additive(theta32, m1, m2, m3), atol=2e-5
    )


@pytest.mark.parametrize("m1,m2,m3", [(1.0, 0.5, 0.0), (1.5, 0.2, 0.1), (1.0, 0.0, 0.35)])
def test_additive_target_continuous_decreasing_and_finite_gradient(m1, m2, m3):
    theta = np.linspace(CLIP_THETA, math.pi - CLIP_THETA, 2001)
    c = np.cos(theta).astype(np.float32)
    values = _np(margin.additive_target(c, m1, m2, m3)).astype(np.float64)
    _, (grad,) = value_and_grads(lambda v: keras.ops.sum(margin.additive_target(v, m1, m2, m3)), c)
    assert np.all(np.diff(values) <= 1e-6)
    assert np.max(np.abs(np.diff(values))) < 0.01
    assert np.all(np.isfinite(grad))
    assert np.all(values <= np.cos(theta) + 1e-5)


# ---------------------------------------------------------------------------------------
# λ schedule and annealing.


@pytest.mark.parametrize("preset", sorted(margin.ANNEALING_PRESETS))
def test_annealing_lambda_matches_formula(preset):
    params = margin.ANNEALING_PRESETS[preset]
    for t in (0, 1, 2, 10, 100, 1000, 1600, 5000, 12000, 20000, 100000):
        got = float(_np(margin.annealing_lambda(t, **params)))
        assert got == pytest.approx(np_lambda(t, **params), rel=1e-5, abs=1e-30)


def test_annealing_lambda_table_from_spec():
    """λ at a few steps of the released prototxts' schedules, worked out by hand (rounded)."""
    table = {
        "mnist": {1000: 421, 2000: 181, 5000: 16.2, 8000: 1.69, 10000: 0.41},
        "cifar10": {1000: 410, 2000: 171, 5000: 13.7, 8000: 1.26},
        "cifar10+": {1000: 639, 2000: 410, 5000: 111, 8000: 31.3, 16000: 1.26, 20000: 0.27},
        "sphereface": {1000: 8.26, 2000: 5.0, 20000: 5.0},
    }
    for preset, values in table.items():
        for t, expected in values.items():
            got = float(_np(margin.annealing_lambda(t, **margin.ANNEALING_PRESETS[preset])))
            assert got == pytest.approx(expected, rel=2e-2), (preset, t)  # table is rounded


def test_anneal_mixes_plain_and_target():
    np.testing.assert_allclose(_np(margin.anneal(2.0, -3.0, 0.0)), -3.0)
    np.testing.assert_allclose(_np(margin.anneal(2.0, -3.0, 4.0)), (4 * 2.0 - 3.0) / 5.0)
    np.testing.assert_allclose(_np(margin.anneal(2.0, -3.0, 1e8)), 2.0, atol=1e-6)


# ---------------------------------------------------------------------------------------
# Full logits.

CASES = (
    [("lsoftmax", m, "cosine", None) for m in MARGINS]
    + [("asoftmax", m, "cosine", None) for m in MARGINS]
    + [("wsoftmax", 1, g, None) for g in margin.GA_ANGULAR]
    + [("gasoftmax", m, g, None) for g in margin.GA_ANGULAR for m in MARGINS]
    + [("ssoftmax", m, g, 30.0) for g in margin.GA_ANGULAR for m in (1, 4)]
    + [("cosface", 0.35, "cosine", 64.0), ("arcface", 0.5, "cosine", 64.0)]
    + [("combined", (1.0, 0.3, 0.2), "cosine", 64.0), ("combined", (1.35, 0.0, 0.0), "cosine", 30.0)]
)


@pytest.mark.parametrize("loss_type,m,angular,s", CASES)
@pytest.mark.parametrize("lam", (0.0, 3.0))
def test_margin_logits_match_reference(rng, loss_type, m, angular, s, lam):
    x = rng.normal(size=(12, 5)).astype(np.float32) * rng.uniform(0.5, 3.0, size=(12, 1)).astype(np.float32)
    w = rng.normal(size=(5, 4)).astype(np.float32)
    b = rng.normal(size=(4,)).astype(np.float32)
    y = rng.integers(0, 4, size=12)
    got = _np(
        margin.margin_logits(x, w, y, loss_type=loss_type, margin=m, angular=angular, k=0.3, scale=s, bias=b, lam=lam)
    )
    assert got.dtype == np.float32
    expected = np_margin_logits(x, w, y, loss_type, m, angular, 0.3, s, b, lam)
    scale = 1.0 if s is None else s / 10.0
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=2e-4 * scale)
    # Plain logits: labels ignored, equal to the reference without margin.
    plain = _np(margin.margin_logits(x, w, None, loss_type=loss_type, margin=m, angular=angular, scale=s, bias=b))
    np.testing.assert_allclose(plain, np_margin_logits(x, w, None, loss_type, m, angular, 0.3, s, b), rtol=1e-4,
                               atol=2e-4 * scale)
    # Only the target column changes.
    onehot = np.eye(4, dtype=bool)[y]
    np.testing.assert_array_equal(got[~onehot], plain[~onehot])


@pytest.mark.parametrize("m", MARGINS)
def test_margin_logits_at_edge_angles(m):
    """Features exactly at θ = kπ/m from their class weight (2-D, so the angle is exact)."""
    w = np.array([[1.0, 0.0], [0.0, 1.0]], np.float32)
    theta = np.arange(m + 1) * math.pi / m
    x = (2.0 * np.stack([np.cos(theta), np.sin(theta)], axis=1)).astype(np.float32)
    y = np.zeros(len(theta), np.int64)
    got = _np(margin.margin_logits(x, w, y, loss_type="asoftmax", margin=m))
    np.testing.assert_allclose(got[:, 0], 2.0 * np_psi(theta, m), atol=1e-4 * m)
    np.testing.assert_allclose(got[:, 1], x[:, 1], atol=1e-6)


@pytest.mark.parametrize(
    "loss_type,m,angular,s",
    [("lsoftmax", 3, "cosine", None), ("asoftmax", 4, "cosine", None), ("gasoftmax", 2.5, "linear", None),
     ("ssoftmax", 2, "sigmoid", 30.0), ("arcface", 0.5, "cosine", 16.0), ("combined", (1.35, 0.2, 0.1), "cosine", 8.0)],
)
def test_margin_logits_gradient_matches_finite_differences_of_reference(rng, loss_type, m, angular, s):
    """d(Σ r ⊙ logits)/d(x, W) by autodiff vs central differences of the float64 loop reference."""
    x = rng.normal(size=(5, 3)) * 2.0
    w = rng.normal(size=(3, 4))
    y = rng.integers(0, 4, size=5)
    r = rng.normal(size=(5, 4))
    kwargs = dict(loss_type=loss_type, margin=m, angular=angular, k=0.3, scale=s, lam=0.5)
    r32 = r.astype(np.float32)
    _, (gx, gw) = value_and_grads(
        lambda a, b: keras.ops.sum(keras.ops.multiply(margin.margin_logits(a, b, y, **kwargs), r32)),
        x.astype(np.float32), w.astype(np.float32)
    )

    def ref(xv, wv):
        return np.sum(np_margin_logits(xv, wv, y, loss_type, m, angular, 0.3, s, None, 0.5) * r)

    scale = 1.0 if s is None else s / 4.0
    np.testing.assert_allclose(gx, testing.numeric_gradient(lambda v: ref(v, w), x), rtol=2e-3, atol=2e-3 * scale)
    np.testing.assert_allclose(gw, testing.numeric_gradient(lambda v: ref(x, v), w), rtol=2e-3, atol=2e-3 * scale)


# ---------------------------------------------------------------------------------------
# Margin ranges.


@pytest.mark.parametrize(
    "loss_type,angular,margin_value,expected",
    [
        ("lsoftmax", "cosine", 1, 1), ("lsoftmax", "cosine", np.int64(4), 4), ("asoftmax", "cosine", 4, 4),
        ("gasoftmax", "cosine", 2, 2), ("ssoftmax", "cosine", 3, 3),
        ("gasoftmax", "linear", 4, 4.0), ("gasoftmax", "sigmoid", 1.5, 1.5), ("ssoftmax", "linear", 1, 1.0),
        ("wsoftmax", "cosine", 1, 1), ("cosface", "cosine", 0, 0.0), ("cosface", "cosine", 1.99, 1.99),
        ("arcface", "cosine", 3.14, 3.14), ("combined", "cosine", [4, 0.0, 1.5], (4.0, 0.0, 1.5)),
    ],
)
def test_check_margin_accepts_the_documented_ranges(loss_type, angular, margin_value, expected):
    got = margin.check_margin(loss_type, margin_value, angular)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize(
    "loss_type,angular,margin_value,expected_message",
    [
        ("asoftmax", "cosine", 100, r"an int in \[1, 4\].*SINGLE..QUADRUPLE"),
        ("lsoftmax", "cosine", 0, r"an int in \[1, 4\]"),
        ("lsoftmax", "cosine", 5, r"an int in \[1, 4\]"),
        ("asoftmax", "cosine", 2.0, r"an int in \[1, 4\]"),
        ("gasoftmax", "cosine", 5, r"an int in \[1, 4\]"),
        ("gasoftmax", "linear", 4.01, r"a float in \[1, 4\]"),
        ("ssoftmax", "sigmoid", 0.5, r"a float in \[1, 4\]"),
        ("wsoftmax", "cosine", 2, r"1 \(W-Softmax has no margin"),
        ("cosface", "cosine", 2.0, r"a float in \[0, 2\)"),
        ("cosface", "cosine", -0.1, r"a float in \[0, 2\)"),
        ("arcface", "cosine", math.pi, r"a float in \[0, 3.14159\)"),
        ("combined", "cosine", (4.5, 0.0, 0.0), r"m1 in \[1, 4\]"),
        ("combined", "cosine", (1.0, 3.2, 0.0), r"m2 in \[0, π\)"),
        ("combined", "cosine", (1.0, 0.0, 2.0), r"m3 in \[0, 2\)"),
        ("combined", "cosine", (1.0, 0.5), r"a triple"),
        ("combined", "cosine", True, r"a triple"),
        ("asoftmax", "cosine", True, r"an int in \[1, 4\]"),
    ],
)
def test_check_margin_rejects_outside_the_ranges(loss_type, angular, margin_value, expected_message):
    pattern = rf"Invalid value for argument `margin`: expected .*{expected_message}.*Received: margin="
    with pytest.raises(ValueError, match=pattern):
        margin.check_margin(loss_type, margin_value, angular)


@pytest.mark.parametrize("loss_type", margin.LOSS_TYPES)
def test_class_major_kernel_gives_the_same_logits(rng, loss_type):
    """`class_axis=0` (a `(C, d)` kernel, PartialFCHead's storage) equals the `(d, C)` layout."""
    kwargs = {"scale": 8.0} if loss_type in margin.NORMALIZED_FEATURES else {}
    if loss_type == "combined":
        kwargs["margin"] = (1.1, 0.2, 0.1)
    elif loss_type in ("cosface", "arcface"):
        kwargs["margin"] = 0.3
    x = rng.normal(size=(5, 6)).astype(np.float32)
    w = rng.normal(size=(6, 7)).astype(np.float32)
    b = rng.normal(size=(7,)).astype(np.float32)
    y = rng.integers(0, 7, size=5).astype(np.int32)
    for labels in (None, y):
        columns = margin.margin_logits(x, w, labels, loss_type=loss_type, bias=b, lam=0.5, **kwargs)
        rows = margin.margin_logits(x, w.T, labels, loss_type=loss_type, bias=b, lam=0.5, class_axis=0, **kwargs)
        np.testing.assert_allclose(_np(rows), _np(columns), rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="class_axis"):
        margin.margin_logits(x, w, y, loss_type=loss_type, class_axis=2, **kwargs)
