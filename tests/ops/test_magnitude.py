"""Tests for sphere_tf.ops.magnitude: every registry entry vs DCNet's formulas [D-4..10, D-19..21]."""

import numpy as np
import pytest
from keras import ops

from sphere_tf import testing
from sphere_tf.ops import magnitude

MAGNITUDE_NAMES = sorted(magnitude.MAGNITUDE_FNS)


def _h(name, x, r, alpha=1.0, beta=None):
    mag = magnitude.get_magnitude(name)
    beta = mag.default_beta if beta is None else beta
    # Tensors, as the layers pass them (a NumPy array times a torch tensor is a TypeError).
    out = mag.fn(ops.convert_to_tensor(np.asarray(x, np.float32)),
                 None if r is None else ops.convert_to_tensor(np.asarray(r, np.float32)), alpha, beta)
    return ops.convert_to_numpy(ops.broadcast_to(out, np.shape(x)))


@pytest.mark.parametrize("name", MAGNITUDE_NAMES)
@pytest.mark.parametrize("alpha,beta", [(1.0, None), (0.7, 0.25), (2.0, 3.0)])
def test_matches_numpy_reference(rng, name, alpha, beta):
    assert name in testing.NUMPY_MAGNITUDE, f"add a NumPy reference for magnitude {name!r}"
    mag = magnitude.get_magnitude(name)
    if mag.default_beta is None:
        beta = None
    x = np.concatenate([rng.uniform(0.0, 5.0, size=100), [0.0, 1e-2, 1.3, 40.0]]).astype(np.float32)
    r = np.float32(1.3) if mag.has_radius else None
    got = _h(name, x, r, alpha, beta)
    assert got.dtype == np.float32
    used_beta = mag.default_beta if beta is None else beta
    expected = testing.NUMPY_MAGNITUDE[name](x.astype(np.float64), r, alpha, used_beta)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)


def test_registry_metadata_follows_the_paper():
    # Radius operators [D-19..21], bounded ones [D §3.2], defaults of β [D App B].
    fns = magnitude.MAGNITUDE_FNS
    assert {n for n, m in fns.items() if m.has_radius} >= {"ball", "tanh", "seg"}
    assert not any(fns[n].has_radius for n in ("sphere", "linear", "log", "mix"))
    assert {n for n, m in fns.items() if m.bounded} >= {"sphere", "ball", "tanh"}
    assert not any(fns[n].bounded for n in ("linear", "seg", "log", "mix"))
    assert fns["seg"].default_beta == 0.5 and fns["mix"].default_beta == 1.0
    assert all(fns[n].default_beta is None for n in ("sphere", "ball", "tanh", "linear", "log"))


@pytest.mark.parametrize("name", MAGNITUDE_NAMES)
def test_bounded_entries_are_bounded_by_alpha(name):
    mag = magnitude.get_magnitude(name)
    x = np.array([0.0, 1.0, 1e3, 1e6], np.float32)
    got = _h(name, x, 1.0 if mag.has_radius else None, alpha=1.5)
    assert np.all(np.isfinite(got)) and np.all(got >= 0.0)
    if mag.bounded:
        assert np.all(got <= 1.5 + 1e-6)
    else:
        assert got[-1] > 1.5


def test_seg_is_continuous_with_slopes_alpha_then_beta():
    r, alpha, beta = 2.0, 1.0, 0.5
    x = np.array([r - 1e-3, r, r + 1e-3, 3.0 * r], np.float32)
    got = _h("seg", x, r, alpha, beta)
    np.testing.assert_allclose(got[:3], [alpha * (r - 1e-3), alpha * r, alpha * r + beta * 1e-3],
                               rtol=1e-5)
    np.testing.assert_allclose(got[3], alpha * r + beta * 2.0 * r, rtol=1e-6)
    # β = α is LinearConv; β = 0 is BallConv scaled by α·r (Decoupled Networks eqs. 5, 7, 8).
    np.testing.assert_allclose(_h("seg", x, r, 1.0, 1.0), _h("linear", x, None, 1.0), rtol=1e-6)
    np.testing.assert_allclose(_h("seg", x, r, 1.0, 0.0), r * _h("ball", x, r, 1.0), rtol=1e-6)


@pytest.mark.parametrize("name", MAGNITUDE_NAMES)
def test_gradients_finite_at_zero_kink_and_large_norms(name):
    mag = magnitude.get_magnitude(name)
    x = np.array([0.0, 1e-8, 1.0, 1e6], np.float32)  # 1.0 is the kink at r = 1
    r = np.float32(1.0)
    _, (dx, dr), _ = testing.gradients(
        lambda xt, rt: ops.sum(mag.fn(xt, rt if mag.has_radius else None, 1.0, mag.default_beta)), [x, r])
    assert np.all(np.isfinite(dx))
    if mag.has_radius:
        assert np.all(np.isfinite(dr))


def test_radius_gradients_match_closed_forms():
    # ∂h/∂r of [D-19..21] differentiated by hand; for r = ρE with E = 1 it equals ∂h/∂ρ.
    alpha, beta = 1.0, 0.5
    x = np.array([0.5, 3.0], np.float32)
    r = np.float32(2.0)
    for name, expected in {
        "ball": [-alpha * 0.5 / 2.0**2, 0.0],
        "seg": [0.0, alpha - beta],
        "tanh": [-alpha * (1 - np.tanh(0.25) ** 2) * 0.5 / 4.0,
                 -alpha * (1 - np.tanh(1.5) ** 2) * 3.0 / 4.0],
    }.items():
        for i in range(2):
            _, (dr,), _ = testing.gradients(
                lambda rt, n=name, i=i: magnitude.get_magnitude(n).fn(x[i], rt, alpha, beta), [r])
            np.testing.assert_allclose(dr, expected[i], rtol=1e-5,
                                       atol=1e-7, err_msg=name)


def test_get_magnitude_and_register():
    assert magnitude.get_magnitude("tanh") is magnitude.MAGNITUDE_FNS["tanh"]
    entry = magnitude.MAGNITUDE_FNS["ball"]
    assert magnitude.get_magnitude(entry) is entry
    with pytest.raises(ValueError, match="Unknown magnitude function 'tanhh'"):
        magnitude.get_magnitude("tanhh")
    with pytest.raises(KeyError, match="already registered"):
        magnitude.register_magnitude("tanh", entry)
    with pytest.raises(TypeError):
        magnitude.register_magnitude("_test_bad", lambda x, r, a, b: x)
    try:
        magnitude.register_magnitude("_test_sq", magnitude.Magnitude(lambda x, r, a, b: a * x * x))
        assert float(magnitude.get_magnitude("_test_sq").fn(3.0, None, 2.0, None)) == 18.0
    finally:
        magnitude.MAGNITUDE_FNS.pop("_test_sq", None)
