"""Tests for sphere_tf.metrics: angular Fisher score [T-A.1] and inter-/intra-class angles vs NumPy loops."""

import math

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sphere_tf import metrics


def _cos(a, b):
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def np_afs(x, y):
    """Eq. A.1 with explicit loops over classes and samples (float64)."""
    x = x.astype(np.float64)
    m = x.mean(axis=0)
    s_w = s_b = 0.0
    for c in np.unique(y):
        members = x[y == c]
        m_c = members.mean(axis=0)
        for xj in members:
            s_w += 1.0 - _cos(xj, m_c)
        s_b += len(members) * (1.0 - _cos(m_c, m))
    return s_w / s_b


def np_directions(x, y):
    out = {}
    for c in np.unique(y):
        u = x[y == c] / np.linalg.norm(x[y == c], axis=1, keepdims=True)
        d = u.sum(axis=0)
        out[c] = d / np.linalg.norm(d)
    return out


def np_min_interclass(x, y):
    d = np_directions(x.astype(np.float64), y)
    best = math.inf
    for a in d:
        for b in d:
            if a != b:
                best = min(best, math.acos(np.clip(d[a] @ d[b], -1, 1)))
    return best


def np_max_intraclass(x, y):
    d = np_directions(x.astype(np.float64), y)
    return max(math.acos(np.clip(_cos(xi, d[yi]), -1, 1)) for xi, yi in zip(x.astype(np.float64), y))


def _data(rng, n=60, d=4, classes=5, spread=0.5):
    centers = rng.normal(size=(classes, d)) * 2
    y = np.concatenate([np.arange(classes), rng.integers(0, classes, n - classes)]).astype(np.int32)
    return (centers[y] + spread * rng.normal(size=(n, d))).astype(np.float32), y


def test_angular_fisher_score_matches_reference(rng):
    for spread in (0.1, 0.5, 2.0):
        x, y = _data(rng, spread=spread)
        got = float(metrics.angular_fisher_score(x, y, 5))
        assert got == pytest.approx(np_afs(x, y), rel=1e-4)


def test_angular_fisher_score_ignores_absent_classes(rng):
    x, y = _data(rng, classes=3)
    assert float(metrics.angular_fisher_score(x, y, 10)) == pytest.approx(np_afs(x, y), rel=1e-4)


def test_angles_match_reference(rng):
    x, y = _data(rng)
    assert float(metrics.min_interclass_angle(x, y, 5)) == pytest.approx(np_min_interclass(x, y), abs=2e-3)
    assert float(metrics.max_intraclass_angle(x, y, 5)) == pytest.approx(np_max_intraclass(x, y), abs=2e-3)
    theta = keras.ops.convert_to_numpy(metrics.interclass_angles(x, y, 5))
    np.testing.assert_allclose(theta, theta.T, atol=1e-6)


def test_min_interclass_angle_known_geometry():
    """Three classes at 0°, 90°, 135° in the plane: min angle 45°; absent classes ignored."""
    dirs = {0: 0.0, 1: math.pi / 2, 2: 3 * math.pi / 4}
    x = np.array([[math.cos(a) * r, math.sin(a) * r] for c, a in dirs.items() for r in (1.0, 3.0)], np.float32)
    y = np.repeat(list(dirs), 2).astype(np.int32)
    assert float(metrics.min_interclass_angle(x, y, 7)) == pytest.approx(math.pi / 4, abs=1e-5)
    assert float(metrics.max_intraclass_angle(x, y, 7)) == pytest.approx(0.0, abs=2e-3)
    assert math.isinf(float(metrics.min_interclass_angle(x[:2], y[:2], 7)))


def test_tighter_classes_score_better(rng):
    x_tight, y = _data(rng, spread=0.05)
    x_loose = (x_tight + rng.normal(size=x_tight.shape) * 1.5).astype(np.float32)
    assert float(metrics.angular_fisher_score(x_tight, y, 5)) < float(metrics.angular_fisher_score(x_loose, y, 5))


@given(st.integers(0, 3), st.sampled_from([0.0, 1e-30, 1e30]))
def test_finite_for_degenerate_features(zero_rows, scale):
    x = np.ones((6, 3), np.float32) * np.float32(scale)
    x[:zero_rows] = 0.0
    y = np.array([0, 1, 2, 0, 1, 2], np.int32)
    values = [float(fn(x, y, 3)) for fn in (metrics.min_interclass_angle, metrics.max_intraclass_angle,
                                            metrics.angular_fisher_score)]
    assert np.all(np.isfinite(values))
    if scale < 1.0:
        # Zero (or, against the 1e-12 ε inside the norms, negligible) features map to the zero vector: every
        # cosine is 0, so both angles are π/2 and S_w = S_b = 6 (AFS = 1).
        np.testing.assert_allclose(values, [math.pi / 2, math.pi / 2, 1.0], rtol=1e-6)


def test_metric_classes_average_batches_and_serialize(rng):
    x1, y1 = _data(rng)
    x2, y2 = _data(rng)
    afs = metrics.AngularFisherScore(5)
    angle = metrics.MinInterclassAngle(5)
    for x, y in ((x1, y1), (x2, y2)):
        afs.update_state(y, x)
        angle.update_state(y, x)
    assert float(afs.result()) == pytest.approx((np_afs(x1, y1) + np_afs(x2, y2)) / 2, rel=1e-4)
    expected = (np_min_interclass(x1, y1) + np_min_interclass(x2, y2)) / 2
    assert float(angle.result()) == pytest.approx(expected, abs=2e-3)
    angle.update_state(y1[:1], x1[:1])  # one class: skipped, not +inf
    assert float(angle.result()) == pytest.approx(expected, abs=2e-3)
    angle.reset_state()
    assert float(angle.result()) == 0.0
    for metric in (afs, angle):
        rebuilt = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(metric))
        assert type(rebuilt) is type(metric) and rebuilt.num_classes == 5
    with pytest.raises(ValueError, match=r"Invalid value for argument `num_classes`.*Received: num_classes=1"):
        metrics.MinInterclassAngle(1)
