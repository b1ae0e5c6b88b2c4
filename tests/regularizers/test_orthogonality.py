"""Tests for sphere_tf.regularizers.Orthogonality (explicit-loop NumPy references)."""

import keras
import numpy as np
import pytest

from sphere_tf import regularizers


def np_orthogonality(w, mode, normalized, eps=1e-4):
    w2d = np.asarray(w, np.float64).reshape(-1, np.shape(w)[-1])
    n = w2d.shape[1]
    if normalized:
        w2d = w2d / np.sqrt(np.sum(w2d**2, axis=0) + eps)
    total = 0.0
    for i in range(n):
        for j in range(n):
            g = float(np.dot(w2d[:, i], w2d[:, j]))
            if i == j:
                total += (g - 1.0) ** 2 if mode == "orthonormal" else 0.0
            else:
                total += g**2
    return total


@pytest.mark.parametrize("mode", ["orthonormal", "orthogonal"])
@pytest.mark.parametrize("normalized", [False, True])
@pytest.mark.parametrize("shape", [(6, 4), (3, 3, 2, 5)])
def test_matches_reference(rng, mode, normalized, shape):
    w = rng.standard_normal(shape).astype(np.float32)
    reg = regularizers.Orthogonality(factor=0.3, mode=mode, normalized=normalized)
    np.testing.assert_allclose(float(reg(w)), 0.3 * np_orthogonality(w, mode, normalized), rtol=2e-5)


def test_l2_loss_convention_halves(rng):
    """SphereNet's `2e-4 * tf.nn.l2_loss(WᵀW − I)` = Σ(·)²·1e-4."""
    w = rng.standard_normal((9, 4)).astype(np.float32)
    upstream = regularizers.Orthogonality(factor=2e-4, l2_loss_convention=True)
    np.testing.assert_allclose(float(upstream(w)), 2e-4 * np_orthogonality(w, "orthonormal", False) / 2, rtol=2e-5)
    np.testing.assert_allclose(float(upstream(w)), float(regularizers.Orthogonality(factor=1e-4)(w)), rtol=1e-6)


def test_zero_on_orthonormal_and_orthogonal_sets(rng):
    q, _ = np.linalg.qr(rng.standard_normal((8, 8)))
    q = q[:, :5].astype(np.float32)
    assert float(regularizers.Orthogonality(factor=1.0)(q)) < 1e-10
    scaled = q * np.array([1.0, 2.0, 3.0, 4.0, 5.0], np.float32)
    assert float(regularizers.Orthogonality(factor=1.0, mode="orthogonal")(scaled)) < 1e-9
    assert float(regularizers.Orthogonality(factor=1.0, mode="orthonormal")(scaled)) > 1.0


@pytest.mark.parametrize(
    "kwargs,match",
    [({"factor": -1.0}, "`factor`"), ({"mode": "rows"}, "`mode`"), ({"epsilon": -1.0}, "`epsilon`")],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        regularizers.Orthogonality(**kwargs)


def test_serialization_in_a_model(tmp_path, rng):
    reg = regularizers.Orthogonality(factor=1e-3, mode="orthogonal", normalized=True)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, kernel_regularizer=reg)])
    path = str(tmp_path / "orth.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    assert reloaded.layers[0].kernel_regularizer.get_config() == reg.get_config()
    np.testing.assert_allclose(float(reloaded.losses[0]), float(model.losses[0]), rtol=1e-6)
