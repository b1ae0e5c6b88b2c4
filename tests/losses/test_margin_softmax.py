"""Tests for sphere_tf.losses.SparseCrossentropy (label smoothing) vs a NumPy reference."""

import keras
import numpy as np
import pytest

from sphere_tf import losses

from tests.gradient_helpers import value_and_grads


def np_smoothed_xent(logits, y, eps):
    """−Σ_j q_j log softmax_j, q = (1 − ε)·onehot + ε/C, with explicit loops (float64)."""
    logits = logits.astype(np.float64)
    out = []
    for row, label in zip(logits, y):
        lse = row.max() + np.log(np.sum(np.exp(row - row.max())))
        q = np.full(len(row), eps / len(row))
        q[label] += 1.0 - eps
        out.append(-np.sum(q * (row - lse)))
    return np.array(out)


@pytest.mark.parametrize("eps", (0.0, 0.01, 0.1))
def test_matches_reference_and_keras(rng, eps):
    logits = (rng.normal(size=(16, 7)) * 5).astype(np.float32)
    y = rng.integers(0, 7, size=16)
    got = keras.ops.convert_to_numpy(losses.sparse_crossentropy(y, logits, eps))
    np.testing.assert_allclose(got, np_smoothed_xent(logits, y, eps), rtol=1e-5)
    loss = losses.SparseCrossentropy(label_smoothing=eps)
    assert float(loss(y, logits)) == pytest.approx(np_smoothed_xent(logits, y, eps).mean(), rel=1e-5)
    if eps == 0.0:
        keras_loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        assert float(loss(y, logits)) == pytest.approx(float(keras_loss(y, logits)), rel=1e-5)


def test_no_underflow_for_very_negative_target_logit():
    logits = np.array([[-700.0, 100.0]], np.float32)
    got = float(losses.SparseCrossentropy()(np.array([0]), logits))
    assert got == pytest.approx(800.0, rel=1e-6)


def test_config_and_bad_argument():
    loss = losses.SparseCrossentropy(label_smoothing=0.01)
    rebuilt = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert isinstance(rebuilt, losses.SparseCrossentropy) and rebuilt.label_smoothing == 0.01
    with pytest.raises(ValueError, match=r"Invalid value for argument `label_smoothing`.*Received: label_smoothing=1"):
        losses.SparseCrossentropy(label_smoothing=1)


@pytest.mark.parametrize("eps", (0.0, 0.01, 0.3))
def test_gradient_is_softmax_minus_smoothed_target(rng, eps):
    """d L_i / d f_ij = softmax(f_i)_j − q_ij, q = (1 − ε)·onehot + ε/C (closed form, float64)."""
    logits = (rng.normal(size=(6, 5)) * 4).astype(np.float32)
    y = rng.integers(0, 5, size=6)
    _, (grad,) = value_and_grads(lambda f: keras.ops.sum(losses.sparse_crossentropy(y, f, eps)), logits)
    z = logits.astype(np.float64)
    softmax = np.exp(z - z.max(axis=1, keepdims=True))
    softmax /= softmax.sum(axis=1, keepdims=True)
    q = np.full((6, 5), eps / 5)
    q[np.arange(6), y] += 1.0 - eps
    np.testing.assert_allclose(grad, softmax - q, atol=1e-6)
