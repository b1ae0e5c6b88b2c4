"""Tests for sphere_tf.regularizers.SRIP (Bansal et al., NeurIPS 2018) against NumPy: the authors' two-product
power iteration step by step, the exact σ(WᵀW − I) from np.linalg.svd once the iteration has converged, and
the gradient by central finite differences."""

import keras
import numpy as np
import pytest

from sphere_tf import regularizers
from sphere_tf.regularizers import srip
from sphere_tf.training import regularization


def np_residual(w, gram="smaller"):
    w2d = np.asarray(w, np.float64).reshape(-1, np.shape(w)[-1])
    d, n = w2d.shape
    g = w2d @ w2d.T if (gram == "smaller" and n > d) else w2d.T @ w2d
    return g - np.eye(g.shape[0])


def np_power_iteration(a, b, k, squared=False):
    """The authors' loop (VITA-Group/Orthogonality-in-CNNs `l2_reg_ortho`): normalise, multiply, k times."""
    v = b / np.linalg.norm(b)
    for _ in range(k - 1):
        u = a @ v
        v = u / np.linalg.norm(u)
    sigma = np.linalg.norm(a @ v)
    return sigma**2 if squared else sigma


def np_sigma(w, gram="smaller"):
    return np.linalg.svd(np_residual(w, gram), compute_uv=False)[0]


def _value(reg, w):
    return float(keras.ops.convert_to_numpy(reg(keras.ops.convert_to_tensor(w))))


@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("k", [1, 2, 5])
@pytest.mark.parametrize("shape", [(12, 5), (3, 3, 4, 6), (4, 9)])
def test_matches_the_numpy_power_iteration(rng, shape, k, squared):
    w = (0.4 * rng.standard_normal(shape)).astype(np.float32)
    reg = regularizers.SRIP(factor=0.3, power_iterations=k, squared=squared, seed=3)
    a = np_residual(w)
    b = srip.start_vector(a.shape[0], 3).astype(np.float64)
    np.testing.assert_allclose(_value(reg, w), 0.3 * np_power_iteration(a, b, k, squared), rtol=2e-5)


@pytest.mark.parametrize("gram", ["smaller", "columns"])
@pytest.mark.parametrize("shape", [(16, 6), (3, 3, 2, 8), (5, 9)])
def test_converged_iteration_is_the_largest_singular_value(rng, shape, gram):
    w = (0.5 * rng.standard_normal(shape)).astype(np.float32)
    reg = regularizers.SRIP(factor=1.0, power_iterations=300, gram=gram)
    np.testing.assert_allclose(_value(reg, w), np_sigma(w, gram), rtol=1e-4)


def test_two_products_already_bound_sigma_from_below(rng):
    """‖Av‖ with ‖v‖ = 1 never exceeds σ(A); the authors' 2 products land within a few percent on a random W."""
    w = (0.3 * rng.standard_normal((64, 16))).astype(np.float32)
    value = _value(regularizers.SRIP(factor=1.0), w)
    sigma = np_sigma(w)
    assert value <= sigma * (1 + 1e-5)
    assert value >= 0.5 * sigma


def test_over_complete_layer_columns_gram_is_stuck_at_one(rng):
    """A layer with more neurons than fan-in: WᵀW − I keeps the eigenvalue −1 (σ ≥ 1 whatever W); the smaller
    Gram WWᵀ − I is 0 for a W with orthonormal rows."""
    q, _ = np.linalg.qr(rng.standard_normal((10, 10)))
    w = q[:4].astype(np.float32)  # 4 × 10: orthonormal rows, 10 neurons in 4 dimensions
    assert _value(regularizers.SRIP(factor=1.0, power_iterations=50, gram="columns"), w) == pytest.approx(1.0, 1e-4)
    assert _value(regularizers.SRIP(factor=1.0, power_iterations=50), w) < 1e-4


def test_zero_and_finite_gradient_on_an_orthonormal_kernel(rng):
    q, _ = np.linalg.qr(rng.standard_normal((8, 8)))
    w = keras.Variable(q[:, :5].astype(np.float32))
    reg = regularizers.SRIP(factor=1.0)
    assert _value(reg, w) < 1e-4
    grad = _gradient(reg, np.asarray(keras.ops.convert_to_numpy(w)))
    assert np.all(np.isfinite(grad))


def _gradient(reg, w):
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        x = tf.constant(w)
        with tf.GradientTape() as tape:
            tape.watch(x)
            value = reg(x)
        return tape.gradient(value, x).numpy()
    if backend == "jax":
        import jax

        return np.asarray(jax.grad(lambda x: reg(x))(w))
    import torch

    x = torch.tensor(w, requires_grad=True)
    reg(x).backward()
    return x.grad.numpy()


@pytest.mark.parametrize("squared", [False, True])
@pytest.mark.parametrize("k", [2, 4])
def test_gradient_matches_finite_differences(rng, k, squared):
    """d/dW of the k-product estimate, differentiated through the iteration (as the authors' autograd),
    against central differences of the NumPy float64 estimate."""
    w = (0.5 * rng.standard_normal((7, 4))).astype(np.float32)
    reg = regularizers.SRIP(factor=1.0, power_iterations=k, squared=squared, seed=1)
    b = srip.start_vector(4, 1).astype(np.float64)
    grad = _gradient(reg, w)
    h = 1e-5
    numeric = np.zeros(w.shape)
    w64 = w.astype(np.float64)
    for index in np.ndindex(w.shape):
        plus, minus = w64.copy(), w64.copy()
        plus[index] += h
        minus[index] -= h
        numeric[index] = (np_power_iteration(np_residual(plus), b, k, squared)
                          - np_power_iteration(np_residual(minus), b, k, squared)) / (2 * h)
    np.testing.assert_allclose(grad, numeric, rtol=2e-3, atol=2e-4)


def test_authors_schedule():
    """VITA-Group/Orthogonality-in-CNNs `adjust_ortho_decay_rate`: 1e-2, ×1e-3 after epoch 20, ×1e-4 after 50,
    ×1e-6 after 70, 0 after 120 (epochs counted from 1)."""
    want = {1: 1e-2, 20: 1e-2, 21: 1e-5, 50: 1e-5, 51: 1e-6, 70: 1e-6, 71: 1e-8, 120: 1e-8, 121: 0.0, 200: 0.0}
    for epoch, value in want.items():
        assert srip.schedule_factor(epoch) == pytest.approx(value, rel=1e-12), epoch


def test_config_round_trip_and_registry():
    reg = regularizers.SRIP(factor=0.02, power_iterations=3, squared=True, gram="columns", seed=5)
    again = regularizers.SRIP.from_config(reg.get_config())
    assert again.get_config() == reg.get_config()
    restored = keras.regularizers.deserialize(keras.regularizers.serialize(reg))
    assert isinstance(restored, regularizers.SRIP) and restored.get_config() == reg.get_config()
    assert isinstance(regularizers.get("srip"), regularizers.SRIP)
    assert regularizers.get({"class_name": "sphere_tf>SRIP", "config": reg.get_config()}).get_config() == \
        reg.get_config()
    built = regularization.build_regularizer({"name": "srip", "layers": "conv*", "factor": 0.01})
    assert isinstance(built, regularizers.SRIP) and built.factor == 0.01


def test_saved_layer_keeps_the_regularizer(tmp_path, rng):
    layer_input = keras.Input((6,))
    output = keras.layers.Dense(3, kernel_regularizer=regularizers.SRIP(factor=0.5, seed=2), name="fc")(layer_input)
    model = keras.Model(layer_input, output)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    reg = loaded.get_layer("fc").kernel_regularizer
    assert isinstance(reg, regularizers.SRIP) and reg.get_config() == model.get_layer("fc").kernel_regularizer.get_config()
    np.testing.assert_allclose(float(keras.ops.convert_to_numpy(loaded.losses[0])),
                               float(keras.ops.convert_to_numpy(model.losses[0])), rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs,match",
    [({"factor": -1.0}, "`factor`"), ({"power_iterations": 0}, "`power_iterations`"), ({"gram": "rows"}, "`gram`"),
     ({"squared": "yes"}, "`squared`"), ({"seed": -1}, "`seed`")],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        regularizers.SRIP(**kwargs)


def test_schedule_argument():
    assert regularizers.SRIP(schedule="authors").schedule == srip.AUTHORS_SCHEDULE
    reg = regularizers.SRIP(factor=2.0, schedule=[[1, 1.0], [3, 0.5]])
    assert reg.schedule == ((1, 1.0), (3, 0.5)) and reg.get_config()["schedule"] == [[1, 1.0], [3, 0.5]]
    assert regularizers.SRIP.from_config(reg.get_config()).schedule == reg.schedule
    for bad in ("linear", [[2, 1.0]], [[1, 1.0], [1, 0.5]], [[1, -1.0]], [[1.5, 1.0]], []):
        with pytest.raises(ValueError, match="`schedule`"):
            regularizers.SRIP(schedule=bad)


def test_schedule_callback_sets_the_factor_during_fit():
    """λ follows the schedule epoch by epoch inside `fit` (compiled steps on TF and JAX): with zero inputs and
    targets the training loss is the penalty alone, λ_e · σ̂, and a zero learning rate keeps W fixed."""
    inputs = keras.Input((5,))
    reg = regularizers.SRIP(factor=2.0, schedule=[[1, 1.0], [2, 0.25], [3, 0.0]])
    outputs = keras.layers.Dense(3, kernel_regularizer=reg, name="fc")(inputs)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
    regularizers.track_state(model)
    sigma = float(keras.ops.convert_to_numpy(reg.spectral_norm(model.get_layer("fc").kernel)))
    x = np.zeros((8, 5), np.float32)
    y = np.zeros((8, 3), np.float32)
    history = model.fit(x, y, batch_size=4, epochs=3, verbose=0, callbacks=[regularizers.SRIPSchedule()])
    np.testing.assert_allclose(history.history["loss"], [2.0 * sigma, 0.5 * sigma, 0.0], rtol=1e-5, atol=1e-7)
    assert history.history["srip_factor"] == pytest.approx([2.0, 0.5, 0.0])
