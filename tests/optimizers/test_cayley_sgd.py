"""Tests for sphere_tf.optimizers.CayleySGD against a NumPy transcription of the upstream OGD step."""

import keras
import numpy as np
import pytest
from keras import ops

from sphere_tf import testing
from sphere_tf.optimizers import CayleySGD
from sphere_tf.optimizers import cayley_sgd

# Documented drift bound (cayley_sgd docstring, docs/opt.md): with typical OPT step sizes
# (α‖W‖_F ≲ 0.2) two fixed-point iterations keep ‖XᵀX − I‖_max below 1e-5 over 1,000 steps.
DRIFT_TOLERANCE_1000_STEPS = 1e-5


def np_cayley_sgd(x, grads, lr, momentum=0.9, iters=2):
    """The upstream OGD optimizer (wy1iu/OPT opt_ogd), step by step, float64."""
    m = np.zeros_like(x, np.float64)
    for g in grads:
        x, m = testing.numpy_cayley_sgd_step(x, m, g, lr, momentum, iters)
    return x


def _orth_error(x):
    x = np.asarray(x, np.float64)
    eye = np.eye(x.shape[-1])
    return np.abs(np.swapaxes(x, -1, -2) @ x - eye).max()


def _random_orthogonal(d, seed):
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((d, d)))
    return q.astype(np.float32)


@pytest.mark.parametrize("lr, scale", [(0.02, 0.05), (0.5, 3.0)])  # second case hits the α cap
def test_matches_numpy_reference(lr, scale):
    d = 6
    x0 = _random_orthogonal(d, 0)
    grads = [scale * np.random.default_rng(i).standard_normal((d, d)) for i in range(4)]
    var = keras.Variable(x0)
    opt = CayleySGD(lr)
    for g in grads:
        opt.apply([ops.convert_to_tensor(g, "float32")], [var])
    np.testing.assert_allclose(ops.convert_to_numpy(var), np_cayley_sgd(x0, grads, lr), atol=1e-5)


def test_zero_gradient_leaves_x_unchanged():
    x0 = _random_orthogonal(5, 1)
    var = keras.Variable(x0)
    opt = CayleySGD()
    for _ in range(3):
        opt.apply([ops.zeros((5, 5))], [var])
    np.testing.assert_allclose(ops.convert_to_numpy(var), x0, atol=1e-7)


def _run_steps(opt, var, grads_fn, steps):
    """`steps` eager `opt.apply` calls, the same on every backend (no tf.function: this is backend-neutral)."""
    for i in range(steps):
        opt.apply([ops.convert_to_tensor(grads_fn(i), "float32")], [var])


def test_stays_orthogonal_over_1000_steps():
    d = 16
    var = keras.Variable(np.eye(d, dtype="float32"))
    g = np.random.default_rng(2).standard_normal((1000, d, d)).astype("float32") / d
    _run_steps(CayleySGD(0.02), var, lambda i: g[i], 1000)
    assert _orth_error(ops.convert_to_numpy(var)) < DRIFT_TOLERANCE_1000_STEPS
    assert np.abs(ops.convert_to_numpy(var) - np.eye(d)).max() > 0.1  # it did move


def test_capped_steps_drift_and_reorthogonalization():
    """At the α cap (α‖W‖_F = 1) the two-iteration approximation drifts; re-orthogonalising bounds it."""
    d = 8
    g = 10 * np.random.default_rng(3).standard_normal((200, d, d)).astype("float32")
    drifting = keras.Variable(np.eye(d, dtype="float32"))
    _run_steps(CayleySGD(0.02), drifting, lambda i: g[i], 200)
    fixed = keras.Variable(np.eye(d, dtype="float32"))
    # 100 steps (two re-orthogonalisations): eager JAX compiles the `ops.cond` of every step (~0.1 s each).
    _run_steps(CayleySGD(0.02, reorthogonalize_every=50), fixed, lambda i: g[i], 100)
    exact = keras.Variable(np.eye(d, dtype="float32"))
    _run_steps(CayleySGD(0.02, fixed_point_iters=None), exact, lambda i: g[i], 200)
    assert _orth_error(ops.convert_to_numpy(drifting)) > 1e-3  # the documented failure mode of 2 iterations
    assert np.all(np.isfinite(ops.convert_to_numpy(drifting)))
    assert _orth_error(ops.convert_to_numpy(fixed)) < 1e-5
    assert _orth_error(ops.convert_to_numpy(exact)) < 1e-5


def test_descends_procrustes_objective():
    """min_X ‖X A − B‖² over O(d): the loss falls to near the polar-factor optimum."""
    d = 5
    rng = np.random.default_rng(4)
    a = rng.standard_normal((d, 20)).astype("float32")
    target = _random_orthogonal(d, 5)
    if np.linalg.det(target) < 0:  # Cayley steps from I stay in SO(d)
        target[:, 0] *= -1
    b = target @ a
    var = keras.Variable(np.eye(d, dtype="float32"))
    opt = CayleySGD(0.02)

    def loss_fn():
        # Scaled so that steps stay in the typical regime (α‖W‖_F well below the cap).
        # stop_gradient: PyTorch would otherwise record autograd history of the trainable variable.
        return ops.sum(ops.square(ops.matmul(ops.stop_gradient(var), a) - b)) / 500.0

    def grad(_):  # closed form: ∂/∂X ‖XA − B‖² / 500 = 2 (XA − B) Aᵀ / 500
        return 2.0 * ops.matmul(ops.matmul(ops.stop_gradient(var), a) - b, a.T) / 500.0

    start = float(loss_fn())
    _run_steps(opt, var, grad, 1000)
    assert float(loss_fn()) < 0.01 * start
    assert _orth_error(ops.convert_to_numpy(var)) < DRIFT_TOLERANCE_1000_STEPS


def test_blocks_are_updated_independently():
    x0 = np.stack([_random_orthogonal(4, 6), _random_orthogonal(4, 7)])
    grads = [np.random.default_rng(i).standard_normal((2, 4, 4)) for i in range(3)]
    var = keras.Variable(x0)
    opt = CayleySGD(0.1)
    for g in grads:
        opt.apply([ops.convert_to_tensor(g, "float32")], [var])
    for k in range(2):
        expected = np_cayley_sgd(x0[k], [g[k] for g in grads], 0.1)
        np.testing.assert_allclose(ops.convert_to_numpy(var)[k], expected, atol=1e-5)


def test_pure_update_function_matches_reference():
    x0 = _random_orthogonal(4, 8)
    g = np.random.default_rng(9).standard_normal((4, 4))
    new_x, _ = cayley_sgd.cayley_sgd_update(
        ops.convert_to_tensor(x0), ops.convert_to_tensor(g, "float32"), ops.zeros((4, 4)), 0.02
    )
    np.testing.assert_allclose(ops.convert_to_numpy(new_x), np_cayley_sgd(x0, [g], 0.02), atol=1e-6)


def test_config_roundtrip_and_bad_arguments():
    opt = CayleySGD(0.05, momentum=0.8, fixed_point_iters=3, reorthogonalize_every=10)
    clone = keras.optimizers.deserialize(keras.optimizers.serialize(opt))
    assert isinstance(clone, CayleySGD)
    assert (clone.momentum, clone.fixed_point_iters, clone.reorthogonalize_every) == (0.8, 3, 10)
    assert float(clone.learning_rate) == pytest.approx(0.05)
    with pytest.raises(ValueError, match="Invalid value for argument `momentum`"):
        CayleySGD(momentum=1.0)
    with pytest.raises(ValueError, match="Invalid value for argument `fixed_point_iters`"):
        CayleySGD(fixed_point_iters=0)
    with pytest.raises(ValueError, match="Invalid value for argument `reorthogonalize_every`"):
        CayleySGD(reorthogonalize_every=0)
    with pytest.raises(ValueError, match="Invalid value for argument `weight_decay`"):
        CayleySGD(weight_decay=1e-4)
    with pytest.raises(ValueError, match="square matrices"):
        CayleySGD().build([keras.Variable(np.zeros((3, 4), "float32"))])
