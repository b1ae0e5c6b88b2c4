"""Tests for sphere_tf.training.error_rates: the results.json entries, in percent, from explicit counting."""

import keras
import numpy as np
import pytest

from sphere_tf.training import error_rates


def test_entries_in_percent_with_null_for_absent_classes(caplog):
    labels = np.array([0, 0, 0, 0, 2, 2, 3], np.int32)
    scores = np.zeros((7, 8), np.float32)
    predicted = [0, 1, 0, 0, 2, 5, 1]
    scores[np.arange(7), predicted] = 1.0
    with caplog.at_level("WARNING"):
        rates = error_rates.error_rates(labels, scores, 8, minority_classes=[0, 3])
    per_class = [25.0, None, 50.0, 100.0, None, None, None, None]
    assert rates["test_per_class_error"] == pytest.approx(per_class)
    assert [v is None for v in rates["test_per_class_error"]] == [v is None for v in per_class]
    assert "No test example of classes [1, 4, 5, 6, 7]" in caplog.text
    assert rates["test_minority_error"] == pytest.approx(100.0 * 2 / 5)  # 1 of 4 zeros, the one 3
    # Top-5 of 8 classes: the six zero-score classes tie below the predicted one; a label scoring 0 has one
    # class above it (correct), a label scoring 1 none.
    assert rates["test_top5_error"] == pytest.approx(0.0)


def test_top5_only_above_five_classes_and_minority_only_when_named():
    labels = np.array([0, 1, 2], np.int32)
    scores = np.eye(3, 5, dtype=np.float32)
    rates = error_rates.error_rates(labels, scores, 5)
    assert set(rates) == {"test_per_class_error"}
    rates = error_rates.error_rates(labels, np.eye(3, 6, dtype=np.float32), 6, minority_classes=[5])
    assert rates["test_minority_error"] is None and rates["test_top5_error"] == 0.0


def test_evaluate_error_rates_over_batches_of_a_model():
    inputs = keras.Input((4,))
    model = keras.Model(inputs, keras.layers.Dense(7, name="logits")(inputs))
    rng = np.random.default_rng(0)
    x = rng.normal(size=(10, 4)).astype(np.float32)
    y = rng.integers(0, 7, 10).astype(np.int32)
    batches = [(x[:4], y[:4]), (x[4:], y[4:])]
    rates = error_rates.evaluate_error_rates(model, batches, 7, minority_classes=[1, 2])
    scores = keras.ops.convert_to_numpy(model(x))
    predicted = scores.argmax(axis=1)
    members = np.isin(y, [1, 2])
    want = 100.0 * np.mean(predicted[members] != y[members]) if members.any() else None
    assert rates["test_minority_error"] == pytest.approx(want)
    higher = (scores > scores[np.arange(10), y][:, None]).sum(axis=1)
    assert rates["test_top5_error"] == pytest.approx(100.0 * np.mean(higher >= 5))
