"""Tests for sphere_tf.optimizers.OPTOptimizer (Cayley SGD for 'ogd' rotations, the user's optimizer elsewhere)."""

import keras
import numpy as np
import pytest
from keras import ops

from sphere_tf import testing
from sphere_tf.layers import opt as opt_lib
from sphere_tf.optimizers import CayleySGD
from sphere_tf.optimizers import OPTOptimizer
from sphere_tf.optimizers import is_rotation_variable


LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)


def _mlp():
    return keras.Sequential(
        [
            keras.Input((5,)),
            opt_lib.OPTDense(4, orthogonalization="ogd", activation="tanh", seed=0, name="opt"),
            keras.layers.Dense(3, name="head"),
        ]
    )


def _data(n=16):
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 5)).astype("float32"), rng.integers(0, 3, n).astype("int32")


def test_routes_rotation_to_cayley_and_rest_to_sgd():
    model = _mlp()
    opt_layer, head = model.layers
    assert is_rotation_variable(opt_layer.rotation_param)
    assert not any(is_rotation_variable(v) for v in head.trainable_variables)
    x, y = _data()
    _, _, grads = testing.gradients(lambda: LOSS(y, model(x, training=True)), [], model.trainable_variables)
    before = [ops.convert_to_numpy(v).copy() for v in model.trainable_variables]
    optimizer = OPTOptimizer(keras.optimizers.SGD(0.1), CayleySGD(0.02))
    optimizer.apply([ops.convert_to_tensor(g) for g in grads], model.trainable_variables)
    for v, g, b in zip(model.trainable_variables, grads, before):
        if is_rotation_variable(v):
            np.testing.assert_allclose(ops.convert_to_numpy(v), testing.numpy_cayley_sgd_step(b, np.zeros_like(b), g, 0.02)[0], atol=1e-6)
        else:  # plain SGD
            np.testing.assert_allclose(ops.convert_to_numpy(v), b - 0.1 * g, atol=1e-6)
    assert int(optimizer.iterations) == 1
    assert int(optimizer.rotation_optimizer.iterations) == 1


def test_fit_keeps_rotation_orthogonal_and_v_fixed_and_learns():
    model = _mlp()
    model.compile(optimizer=OPTOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)), loss=LOSS)
    x, y = _data(64)
    v0 = ops.convert_to_numpy(model.layers[0].fixed_kernel).copy()
    first = model.evaluate(x, y, verbose=0)
    model.fit(x, y, batch_size=16, epochs=5, verbose=0)
    r = ops.convert_to_numpy(model.layers[0].rotation_param).astype(np.float64)
    assert np.abs(r.T @ r - np.eye(5)).max() < 1e-5
    assert np.abs(r - np.eye(5)).max() > 1e-3
    np.testing.assert_array_equal(ops.convert_to_numpy(model.layers[0].fixed_kernel), v0)
    assert model.evaluate(x, y, verbose=0) < first


def test_learning_rate_and_iterations_delegate_to_main_optimizer():
    optimizer = OPTOptimizer(keras.optimizers.SGD(0.1))
    assert float(optimizer.learning_rate) == pytest.approx(0.1)
    optimizer.learning_rate = 0.05
    assert float(optimizer.optimizer.learning_rate) == pytest.approx(0.05)
    assert float(optimizer.rotation_optimizer.learning_rate) == pytest.approx(0.02)  # upstream default


def test_serialization_and_saved_optimizer_state(tmp_path):
    optimizer = OPTOptimizer(keras.optimizers.Adam(1e-3), CayleySGD(0.01, momentum=0.8))
    clone = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert isinstance(clone, OPTOptimizer)
    assert isinstance(clone.optimizer, keras.optimizers.Adam)
    assert isinstance(clone.rotation_optimizer, CayleySGD) and clone.rotation_optimizer.momentum == 0.8

    model = _mlp()
    model.compile(optimizer=optimizer, loss=LOSS)
    x, y = _data()
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    path = str(tmp_path / "m.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    assert isinstance(reloaded.optimizer, OPTOptimizer)
    assert len(reloaded.optimizer.variables) == len(model.optimizer.variables)
    for a, b in zip(reloaded.optimizer.variables, model.optimizer.variables):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b))
    np.testing.assert_allclose(reloaded.predict(x, verbose=0), model.predict(x, verbose=0), atol=1e-6)


def test_mixed_precision_with_loss_scale_optimizer():
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = _mlp()
    optimizer = keras.optimizers.LossScaleOptimizer(OPTOptimizer(keras.optimizers.SGD(0.1)))
    model.compile(optimizer=optimizer, loss=LOSS)
    x, y = _data(32)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    r = ops.convert_to_numpy(model.layers[0].rotation_param).astype(np.float64)
    assert model.layers[0].rotation_param.dtype == "float32"
    assert np.abs(r.T @ r - np.eye(5)).max() < 1e-5
    assert np.abs(r - np.eye(5)).max() > 1e-4


def test_bad_arguments():
    with pytest.raises(ValueError, match="does not take base optimizer arguments"):
        OPTOptimizer("sgd", clipnorm=1.0)
    sgd = keras.optimizers.SGD()
    with pytest.raises(ValueError, match="Invalid value for argument `rotation_optimizer`"):
        OPTOptimizer(sgd, sgd)
