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


def np_unit_norm_neurons(kernel):
    """Each output unit (a column of the (-1, n) flattening) divided by its L2 norm, in float64."""
    kernel = np.asarray(kernel, np.float64)
    neurons = kernel.reshape(-1, kernel.shape[-1])
    return (neurons / np.sqrt((neurons ** 2).sum(axis=0))).reshape(kernel.shape)


@pytest.mark.parametrize("shape", [(3, 3, 4, 5), (6, 7), (2, 1, 3, 1)])
def test_unit_norm_neurons_normalises_each_neuron_of_the_base_draw(shape):
    from sphere_tf.initializers import UnitNormNeurons  # noqa: PLC0415

    base = keras.initializers.RandomUniform(-1.0, 2.0, seed=4)  # non-zero mean: norms far from 1
    drawn = keras.ops.convert_to_numpy(keras.initializers.RandomUniform(-1.0, 2.0, seed=4)(shape))
    got = keras.ops.convert_to_numpy(UnitNormNeurons(base)(shape))
    assert got.shape == shape and got.dtype == np.float32
    np.testing.assert_allclose(got, np_unit_norm_neurons(drawn), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.linalg.norm(got.reshape(-1, shape[-1]), axis=0), 1.0, rtol=1e-6)


def test_unit_norm_neurons_default_base_dtype_and_round_trip():
    from sphere_tf.initializers import UnitNormNeurons  # noqa: PLC0415

    # Default base: He normal, seeded; normalising removes its scale, not its directions.
    he = keras.ops.convert_to_numpy(
        keras.initializers.VarianceScaling(2.0, "fan_in", "untruncated_normal", seed=9)((3, 3, 8, 16)))
    unit = UnitNormNeurons(seed=9)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(unit((3, 3, 8, 16))), np_unit_norm_neurons(he),
                               rtol=1e-5, atol=1e-7)
    half = keras.ops.convert_to_numpy(UnitNormNeurons(seed=9)((3, 3, 8, 16), dtype="float16"))
    assert half.dtype == np.float16
    np.testing.assert_allclose(half, np_unit_norm_neurons(he), atol=1e-3)
    # Serialised under the package name and restored with its base and epsilon.
    spec = keras.initializers.serialize(UnitNormNeurons("he_uniform", epsilon=1e-6))
    assert spec["registered_name"] == "sphere_tf>UnitNormNeurons"
    restored = keras.initializers.get(spec)
    assert isinstance(restored, UnitNormNeurons) and restored.epsilon == 1e-6
    assert isinstance(restored.base, keras.initializers.HeUniform)
    by_name = keras.initializers.get({"class_name": "sphere_tf>UnitNormNeurons",
                                      "config": {"base": {"class_name": "Constant", "config": {"value": 3.0}}}})
    np.testing.assert_allclose(keras.ops.convert_to_numpy(by_name((4, 2))), np.full((4, 2), 0.5), rtol=1e-6)
    # A plain Conv2D built with it starts with unit-norm filters and trains them freely (a plain variable).
    layer = keras.layers.Conv2D(6, 3, kernel_initializer=restored)
    layer.build((None, 5, 5, 2))
    kernel = keras.ops.convert_to_numpy(layer.kernel)
    np.testing.assert_allclose(np.linalg.norm(kernel.reshape(-1, 6), axis=0), 1.0, rtol=1e-5)
    with pytest.raises(ValueError, match=r"`epsilon`: expected a float >= 0"):
        UnitNormNeurons(epsilon=-1.0)
