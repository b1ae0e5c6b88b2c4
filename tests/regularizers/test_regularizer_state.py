"""Regularizer state inside `fit` on every backend (`sphere_tf.regularizers.track_state`).

On JAX, Keras's train step is pure: it calls each regularizer with the kernel's
value and carries over only model-tracked variables. These tests run `fit` with a
zero learning rate and a zero data loss, so the reported loss of step s is the
regularization term alone, and check that the counters end at the number of steps
and that step s used the draw of step s (the same draw an eager call at step s
makes, and for MHE one of the exact NumPy subset energies).
"""

import itertools
import os

import keras
import numpy as np
from keras import ops

from sphere_tf import regularizers

from tests.regularizers.test_mhe import np_mhe

STEPS = 6
DATA = os.path.join(os.path.dirname(__file__), "data")


def _two_layer_model(reg, rng):
    inputs = keras.Input((4,))
    hidden = keras.layers.Dense(6, kernel_regularizer=reg, name="a")(inputs)
    outputs = keras.layers.Dense(6, kernel_regularizer=reg, name="b")(hidden)
    model = keras.Model(inputs, outputs)
    for layer in model.layers[1:]:
        layer.kernel.assign(rng.standard_normal(layer.kernel.shape).astype(np.float32))
    return model


def _per_step_losses(model):
    """Fits `STEPS` single-sample steps at learning rate 0 with a zero data loss; the loss of each step."""
    regularizers.track_state(model)
    model.compile(keras.optimizers.SGD(0.0), loss=lambda y, p: 0.0 * ops.mean(p))
    means = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            means.append(float(logs["loss"]))  # running mean over the epoch

    x = np.zeros((STEPS, 4), np.float32)
    model.fit(x, np.zeros((STEPS, 6), np.float32), batch_size=1, epochs=1, verbose=0, callbacks=[Record()])
    return [s * m - (s - 1) * (means[s - 2] if s > 1 else 0.0) for s, m in enumerate(means, start=1)]


def _eager_losses(model, reg, counter):
    """The regularization loss of steps 1..STEPS, by eager calls with the counter set to s − 1."""
    values = []
    for step in range(1, STEPS + 1):
        counter.assign(step - 1)
        values.append([float(reg(model.get_layer(name).kernel)) for name in ("a", "b")])  # leader "a" first
    return values


def test_mhe_subset_counter_advances_in_fit(rng):
    reg = regularizers.MHE(num_samples=3, factor=1.0, seed=3)
    model = _two_layer_model(reg, rng)
    fitted = _per_step_losses(model)
    assert int(ops.convert_to_numpy(reg.checkpoint_state()["step"])) == STEPS
    assert reg.get_config()["step"] == STEPS
    eager = _eager_losses(model, reg, reg.checkpoint_state()["step"])
    np.testing.assert_allclose(fitted, [sum(pair) for pair in eager], rtol=1e-5)
    assert len({round(v, 5) for v in fitted}) > 1  # a new subset each step
    for name, column in (("a", 0), ("b", 1)):
        w = ops.convert_to_numpy(model.get_layer(name).kernel)
        subsets = [np_mhe(w, 2, columns=c) for c in itertools.combinations(range(6), 3)]
        for pair in eager:
            assert min(abs(pair[column] - ref) / ref for ref in subsets) < 2e-5


def test_random_comhe_counter_advances_in_fit(rng):
    reg = regularizers.CoMHE(projection="random", projection_dim=2, num_projections=2, factor=1.0, seed=5)
    model = _two_layer_model(reg, rng)
    fitted = _per_step_losses(model)
    counter = reg.checkpoint_state()["step"]
    assert int(ops.convert_to_numpy(counter)) == STEPS
    np.testing.assert_allclose(fitted, [sum(pair) for pair in _eager_losses(model, reg, counter)], rtol=1e-5)
    assert len({round(v, 5) for v in fitted}) == STEPS  # a fresh draw every step


def test_angle_preserving_projection_updates_in_fit(rng):
    config = dict(projection="angle_preserving", projection_dim=2, factor=1.0, seed=7, inner_lr=0.5)
    reg = regularizers.CoMHE(**config)
    model = _two_layer_model(reg, rng)
    kernels = [model.get_layer(name).kernel for name in ("a", "b")]
    initial = {key: ops.convert_to_numpy(v) for key, v in reg.checkpoint_state(kernels).items()}
    _per_step_losses(model)
    # Reference: a fresh regularizer called eagerly STEPS times on the same kernels
    # takes the same STEPS own steps of P (the kernels do not move at learning rate 0).
    reference = regularizers.CoMHE(**config)
    for _ in range(STEPS):
        for name in ("a", "b"):
            reference(model.get_layer(name).kernel)
    for key, variable in reg.projection_variables().items():
        fitted = ops.convert_to_numpy(variable)
        assert np.max(np.abs(fitted - initial[f"projection/{key}"])) > 1e-4  # P moved
        np.testing.assert_allclose(fitted, ops.convert_to_numpy(reference.projection_variables()[key]), atol=1e-5)


def test_state_is_layer_state_not_weights(rng):
    reg = regularizers.MHE(num_samples=3, seed=3)
    model = _two_layer_model(reg, rng)
    weights = len(model.weights)
    regularizers.track_state(model)
    regularizers.track_state(model)  # idempotent
    counter = reg.checkpoint_state()["step"]
    assert len(model.weights) == weights
    assert sum(v is counter for v in model.non_trainable_variables) == 1
    assert any(v is counter for v in model.get_layer("a").non_trainable_variables)


def test_model_saved_before_tracking_loads_with_same_outputs_and_state():
    """`.keras` file written by the code before `track_state` (see data/make_pre_tracking_model.py)."""
    expected = np.load(os.path.join(DATA, "pre_tracking_regularizers.npz"))
    model = keras.models.load_model(os.path.join(DATA, "pre_tracking_regularizers.keras"))
    np.testing.assert_allclose(ops.convert_to_numpy(model(expected["x"])), expected["y"], rtol=1e-6, atol=1e-6)
    mhe, rp, ap = (model.get_layer(name).kernel_regularizer for name in ("mhe_dense", "rp_dense", "ap_dense"))
    assert mhe.get_config()["step"] == int(expected["mhe_step"]) == 3
    assert rp.get_config()["step"] == int(expected["rp_step"]) == 3
    regularizers.track_state(model)
    projection = ap.projection_variables()["ap_dense/kernel"]
    np.testing.assert_allclose(ops.convert_to_numpy(projection), expected["ap_projection"], rtol=1e-6)
    # The tracked model trains on (a step on every backend) and the file's weights are unchanged in number.
    assert len(model.weights) == 6
