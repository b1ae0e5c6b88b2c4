"""Tests for sphere_tf.losses.SparseHinge (Caffe's one-vs-all hinge loss) vs a NumPy loop reference."""

import os

import keras
import numpy as np
import pytest

from sphere_tf import losses

from tests.gradient_helpers import value_and_grads


def np_caffe_hinge(logits, y, norm):
    """Caffe `HingeLossLayer::Forward_cpu`, per sample: copy the logits, negate the label's entry, take
    max(0, 1 + value) for every entry, then sum (L1) or sum the squares (L2); float64 loops."""
    out = []
    for row, label in zip(logits.astype(np.float64), y):
        diff = row.copy()
        diff[label] *= -1
        total = 0.0
        for value in diff:
            hinge = max(0.0, 1.0 + value)
            total += hinge if norm == "l1" else hinge * hinge
        out.append(total)
    return np.array(out)


def np_caffe_hinge_gradient(logits, y, norm):
    """Caffe `HingeLossLayer::Backward_cpu` for loss weight 1: the hinge values with the label's entry negated,
    then sign(·)/N (L1) or 2·(·)/N (L2)."""
    n = len(y)
    grad = np.zeros(logits.shape)
    for i, (row, label) in enumerate(zip(logits.astype(np.float64), y)):
        for j, value in enumerate(row):
            t = 1.0 if j == label else -1.0
            hinge = max(0.0, 1.0 - t * value)
            d = hinge * -t  # d hinge / d f = -t where the hinge is positive
            grad[i, j] = (np.sign(hinge) * -t if norm == "l1" else 2.0 * d) / n
    return grad


@pytest.mark.parametrize("norm", ("l1", "l2"))
def test_matches_caffe_reference(rng, norm):
    logits = (rng.normal(size=(16, 7)) * 2).astype(np.float32)
    y = rng.integers(0, 7, size=16)
    got = keras.ops.convert_to_numpy(losses.sparse_hinge(y, logits, norm))
    np.testing.assert_allclose(got, np_caffe_hinge(logits, y, norm), rtol=1e-5)
    loss = losses.SparseHinge(norm=norm)
    # Caffe: the sum over the batch divided by N.
    assert float(loss(y, logits)) == pytest.approx(np_caffe_hinge(logits, y, norm).mean(), rel=1e-5)
    assert float(loss(y.reshape(-1, 1), logits)) == pytest.approx(float(loss(y, logits)), rel=1e-6)


@pytest.mark.parametrize("norm", ("l1", "l2"))
def test_gradient_matches_caffe_backward(rng, norm):
    logits = (rng.normal(size=(6, 5)) * 2).astype(np.float32)
    y = rng.integers(0, 5, size=6)
    _, (grad,) = value_and_grads(lambda f: losses.SparseHinge(norm=norm)(y, f), logits)
    np.testing.assert_allclose(grad, np_caffe_hinge_gradient(logits, y, norm), atol=1e-6)


def test_zero_when_every_margin_holds_and_known_values():
    loss = losses.SparseHinge()
    assert float(loss(np.array([0, 1]), np.array([[1.0, -1.0], [-3.0, 2.5]], np.float32))) == 0.0
    # label 1 at 0 (hinge 1), class 0 at 0.5 (hinge 1.5): 2.5; squared: 1 + 2.25.
    logits = np.array([[0.5, 0.0]], np.float32)
    assert float(loss(np.array([1]), logits)) == pytest.approx(2.5)
    assert float(losses.SparseHinge(norm="l2")(np.array([1]), logits)) == pytest.approx(3.25)


def test_half_precision_logits_give_a_float32_loss():
    logits = np.array([[0.5, -0.25, 2.0]], np.float16)
    got = losses.sparse_hinge(np.array([2]), logits)
    assert keras.backend.standardize_dtype(got.dtype) == "float32"
    assert float(keras.ops.convert_to_numpy(got)[0]) == pytest.approx(1.5 + 0.75)


def test_config_round_trip_and_bad_norm():
    loss = losses.SparseHinge(norm="l2", name="svm")
    rebuilt = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert isinstance(rebuilt, losses.SparseHinge) and rebuilt.norm == "l2" and rebuilt.name == "svm"
    assert keras.saving.get_registered_name(losses.SparseHinge) == "sphere_tf>SparseHinge"
    with pytest.raises(ValueError, match=r"Invalid value for argument `norm`.*one of \('l1', 'l2'\).*'l3'"):
        losses.SparseHinge(norm="l3")


def test_trains_a_linear_classifier_and_saves_with_the_model(rng, tmp_path):
    """A separable toy problem: a Dense layer trained with the hinge loss classifies it; the compiled loss
    travels in the `.keras` file."""
    x = rng.normal(size=(64, 4)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + 2 * (x[:, 1] > 0).astype(np.int32)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=losses.SparseHinge(), metrics=["accuracy"])
    history = model.fit(x, y, epochs=30, batch_size=16, verbose=0).history
    assert history["loss"][-1] < history["loss"][0]
    assert history["accuracy"][-1] >= 0.9
    path = os.path.join(str(tmp_path), "m.keras")
    model.save(path)
    assert isinstance(keras.models.load_model(path).loss, losses.SparseHinge)
