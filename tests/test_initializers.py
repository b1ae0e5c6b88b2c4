"""sphere_tf.initializers (refined OPT neurons) against a NumPy transcription of projected energy descent."""

import keras
import numpy as np
import pytest

from sphere_tf import initializers


def np_energy_gradient(u, power):
    """∇ of E = 1/(N(N−1)) Σ_{i≠j} ‖û_i − û_j‖^(−s) w.r.t. unit columns u, projected on the tangent spaces."""
    n = u.shape[1]
    grad = np.zeros_like(u)
    for i in range(n):
        for j in range(n):
            if i != j:
                diff = u[:, i] - u[:, j]
                # i appears in the ordered pairs (i, j) and (j, i): factor 2.
                grad[:, i] += 2.0 * (-power) * np.linalg.norm(diff) ** (-power - 2) * diff
    grad /= n * (n - 1)
    for i in range(n):  # the energy sees û = u/‖u‖: only the tangential part acts
        grad[:, i] -= u[:, i] * (u[:, i] @ grad[:, i])
    return grad


def np_minimize_energy(u, steps, lr, power):
    u = np.array(u, np.float64)
    for _ in range(steps):
        u = u - lr * np_energy_gradient(u, power)
        u = u / np.linalg.norm(u, axis=0, keepdims=True)
    return u


@pytest.mark.parametrize("power", [1.0, 2.0])
def test_minimize_energy_matches_numpy_descent(power):
    rng = np.random.default_rng(0)
    u = rng.standard_normal((5, 7))
    u /= np.linalg.norm(u, axis=0, keepdims=True)
    got = initializers.minimize_energy(u.astype(np.float32), steps=4, lr=0.05, power=power, half_space=False)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(got), np_minimize_energy(u, 4, 0.05, power), atol=2e-5)


def test_refine_neurons_keeps_norms_or_normalises():
    rng = np.random.default_rng(1)
    v = rng.standard_normal((6, 5)) * rng.uniform(0.5, 2.0, size=5)
    norms = np.linalg.norm(v, axis=0)
    kept = initializers.refine_neurons(v.astype(np.float32), energy_init="mhe", steps=3, lr=0.05)
    np.testing.assert_allclose(np.linalg.norm(kept, axis=0), norms, rtol=1e-5)
    expected = np_minimize_energy(v / norms, 3, 0.05, 2.0) * norms
    np.testing.assert_allclose(kept, expected, atol=1e-4)
    unit = initializers.refine_neurons(v.astype(np.float32), normalize=True)
    np.testing.assert_allclose(unit, v / norms, atol=1e-6)


def test_mean_shifted_adds_the_mean_to_the_base_draw_and_round_trips():

    from sphere_tf.initializers import MeanShifted  # noqa: PLC0415

    constant = MeanShifted(0.5, base=keras.initializers.Constant(2.0))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(constant((3, 4))), np.full((3, 4), 2.5, np.float32))
    # Default base: He normal (fan_in 3·3·64 = 576), so entries ~ N(mean, 2/576).
    values = keras.ops.convert_to_numpy(MeanShifted(0.05, seed=3)((3, 3, 64, 128))).ravel()
    assert abs(values.mean() - 0.05) < 4 * np.sqrt(2 / 576 / values.size)
    assert values.std() == pytest.approx(np.sqrt(2 / 576), rel=0.02)
    restored = keras.initializers.get(keras.initializers.serialize(MeanShifted(0.02, base="zeros")))
    assert isinstance(restored, MeanShifted) and restored.mean == 0.02
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(restored((2, 2))), np.full((2, 2), 0.02, np.float32))
    with pytest.raises(ValueError, match="mean"):
        MeanShifted(float("nan"))
