"""Precise BN: the recomputed statistics are the plain means over the batches of each batch's statistic."""

import keras
import numpy as np
import pytest

from sphere_tf import layers
from sphere_tf.training import precise_bn


def _model():
    keras.utils.set_random_seed(3)
    inputs = keras.Input((5,))
    h = keras.layers.Dense(6, name="fc")(inputs)
    h = keras.layers.BatchNormalization(name="bn", beta_initializer="ones")(h)
    out = layers.DecoupledDense(3, magnitude="tanh", angular="cosine", name="tanh")(h)
    return keras.Model(inputs, out)


def _reference(model, batches):
    """NumPy: per batch, BN's batch mean and biased variance of its input, and the batch mean of ‖x‖ of the
    decoupled layer's input (BN's training-mode output); then plain means over the batches."""
    w, b = (keras.ops.convert_to_numpy(v) for v in model.get_layer("fc").weights)
    bn = model.get_layer("bn")
    gamma, beta = keras.ops.convert_to_numpy(bn.gamma), keras.ops.convert_to_numpy(bn.beta)
    eps = float(keras.ops.convert_to_numpy(model.get_layer("tanh")._sqrt_epsilon))
    means, variances, norms = [], [], []
    for x in batches:
        h = x.astype(np.float64) @ w + b
        mean, var = h.mean(axis=0), h.var(axis=0)
        y = gamma * (h - mean) / np.sqrt(var + bn.epsilon) + beta
        means.append(mean)
        variances.append(var)
        norms.append(np.sqrt((y**2).sum(axis=1) + eps).mean())
    return np.mean(means, axis=0), np.mean(variances, axis=0), np.mean(norms)


def test_statistics_are_plain_means_over_the_batches():
    model = _model()
    rng = np.random.default_rng(0)
    batches = [rng.normal(2.0, 3.0, (8, 5)).astype("float32") for _ in range(4)]
    labels = np.zeros((8,), "int32")
    # One training step's worth of stale averages, as after a short run.
    model(batches[0][:3], training=True)
    mean, var, norm = _reference(model, batches[:3])

    used = precise_bn.recompute_statistics(model, [(x, labels) for x in batches], num_batches=3)

    assert used == 3
    bn, tanh = model.get_layer("bn"), model.get_layer("tanh")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(bn.moving_mean), mean, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(bn.moving_variance), var, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(float(keras.ops.convert_to_numpy(tanh.norm_mean())), norm, rtol=1e-5)
    # Momenta restored; the inference output now uses the recomputed statistics.
    assert bn.momentum == 0.99 and tanh.norm_momentum == layers.decoupled.DEFAULT_NORM_MOMENTUM


def test_young_averages_and_bad_arguments():
    model = _model()
    young = precise_bn.young_averages(model, steps=100)
    assert ("bn", 0.99, 500) in young and any(name == "tanh" for name, _, _ in young)
    assert precise_bn.young_averages(model, steps=10**6) == []
    with pytest.raises(ValueError, match="num_batches"):
        precise_bn.recompute_statistics(model, [], num_batches=0)
    with pytest.raises(ValueError, match="no batch"):
        precise_bn.recompute_statistics(model, [], num_batches=2)


def test_other_training_side_effects_are_undone():
    """A margin head counts its annealing steps in training-mode calls: the pass leaves the count alone."""
    from sphere_tf import models as models_lib

    model = models_lib.create_model("small_cnn", input_shape=(8, 8, 1), num_classes=3, widths=[2],
                                    convs_per_stage=1, dense_units=4,
                                    head={"layer": "margin", "loss_type": "asoftmax", "annealing": "mnist"})
    head = [layer for layer in model.layers if isinstance(layer, layers.MarginHead)][0]
    before = float(keras.ops.convert_to_numpy(head.current_lambda()))
    rng = np.random.default_rng(1)
    batches = [(models_lib.pack_inputs(rng.normal(size=(4, 8, 8, 1)).astype("float32"),
                                       np.arange(4) % 3), None) for _ in range(3)]
    assert precise_bn.recompute_statistics(model, batches, num_batches=3) == 3
    assert float(keras.ops.convert_to_numpy(head.current_lambda())) == before
