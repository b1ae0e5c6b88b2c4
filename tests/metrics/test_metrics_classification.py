"""Tests for sphere_tf.metrics.classification: per-class, minority-class (thesis Table 5.7) and top-k (DCNet
Table 6) error against NumPy loops that count explicitly."""

import math

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from sphere_tf import metrics


def np_per_class_error(labels, predictions, num_classes):
    """Counts each class's examples and errors one example at a time; None for a class with no example."""
    examples = [0] * num_classes
    errors = [0] * num_classes
    for y, p in zip(labels, predictions):
        examples[y] += 1
        errors[y] += int(p != y)
    return [errors[c] / examples[c] if examples[c] else None for c in range(num_classes)]


def np_class_set_error(labels, predictions, classes):
    examples = errors = 0
    for y, p in zip(labels, predictions):
        if y in classes:
            examples += 1
            errors += int(p != y)
    return errors / examples if examples else None


def np_top_k_error(labels, scores, k):
    """Correct when fewer than k classes score strictly higher than the label (ties in its favour)."""
    wrong = 0
    for y, row in zip(labels, scores):
        if not math.isfinite(row[y]):
            wrong += 1
            continue
        higher = sum(1 for c in range(len(row)) if row[c] > row[y])
        wrong += int(higher >= k)
    return wrong / len(labels)


def _np(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


def _as_list(values):
    return [None if math.isnan(v) else float(v) for v in _np(values)]


def _random_case(seed, n=200, classes=10):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, classes, n).astype(np.int32)
    scores = rng.normal(size=(n, classes)).astype(np.float32)
    scores[np.arange(n), labels] += rng.uniform(0, 2, n).astype(np.float32)  # better than chance
    return labels, scores


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_per_class_error_matches_counting(seed):
    labels, scores = _random_case(seed)
    predictions = scores.argmax(axis=1)
    got = _as_list(metrics.per_class_error(labels, predictions, 10))
    np.testing.assert_allclose(got, np_per_class_error(labels, predictions, 10), rtol=1e-6)


def test_class_counts_sum_to_the_whole_test_set():
    labels, scores = _random_case(3)
    predictions = scores.argmax(axis=1)
    examples, errors = (_np(t) for t in metrics.class_counts(labels, predictions, 10))
    assert examples.sum() == len(labels)
    assert errors.sum() == np.sum(predictions != labels)


@pytest.mark.parametrize("classes", [[0], [0, 3], list(range(10))])
def test_class_set_error_matches_counting(classes):
    labels, scores = _random_case(4)
    predictions = scores.argmax(axis=1)
    got = float(_np(metrics.class_set_error(labels, predictions, classes, 10)))
    assert got == pytest.approx(np_class_set_error(labels, predictions, classes), rel=1e-6)


def test_class_set_error_of_every_class_is_the_overall_error():
    labels, scores = _random_case(5)
    predictions = scores.argmax(axis=1)
    got = float(_np(metrics.class_set_error(labels, predictions, list(range(10)), 10)))
    assert got == pytest.approx(np.mean(predictions != labels), rel=1e-6)


def test_class_set_error_is_the_mean_of_per_class_errors_on_a_balanced_set():
    rng = np.random.default_rng(6)
    labels = np.repeat(np.arange(10), 30).astype(np.int32)  # balanced, as CIFAR's test sets
    predictions = np.where(rng.uniform(size=300) < 0.3, rng.integers(0, 10, 300), labels)
    per_class = _np(metrics.per_class_error(labels, predictions, 10))
    pooled = float(_np(metrics.class_set_error(labels, predictions, [0, 1, 2], 10)))
    assert pooled == pytest.approx(per_class[:3].mean(), rel=1e-6)


@pytest.mark.parametrize("k", [1, 2, 5, 10, 12])
def test_top_k_error_matches_counting(k):
    labels, scores = _random_case(7)
    got = float(_np(metrics.top_k_error(labels, scores, k)))
    assert got == pytest.approx(np_top_k_error(labels, scores, k), abs=1e-6)


def test_top_1_error_is_the_argmax_error():
    labels, scores = _random_case(8)
    got = float(_np(metrics.top_k_error(labels, scores, 1)))
    assert got == pytest.approx(np.mean(scores.argmax(axis=1) != labels), abs=1e-6)


def test_top_k_error_counts_ties_in_favour_and_non_finite_scores_as_errors():
    scores = np.array([[1.0, 1.0, 1.0, 0.0], [3.0, 2.0, 1.0, 0.0], [np.nan, 1.0, 0.0, 0.0]], np.float32)
    labels = np.array([2, 2, 0], np.int32)
    # Row 0: nothing scores above the label (a three-way tie): correct for k = 1. Row 1: two classes above:
    # wrong for k <= 2. Row 2: the label's score is NaN: wrong for every k.
    assert float(_np(metrics.top_k_error(labels, scores, 1))) == pytest.approx(2 / 3)
    assert float(_np(metrics.top_k_error(labels, scores, 3))) == pytest.approx(1 / 3)


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="`classes`"):
        metrics.class_set_error([0], [0], [], 10)
    with pytest.raises(ValueError, match="`classes`"):
        metrics.class_set_error([0], [0], [1, 1], 10)
    with pytest.raises(ValueError, match="`classes`"):
        metrics.class_set_error([0], [0], [10], 10)
    with pytest.raises(ValueError, match="`k`"):
        metrics.top_k_error([0], [[1.0]], 0)


# Degenerate inputs: few examples, classes with no example, a single class, all right or all wrong.
_cases = st.integers(1, 6).flatmap(
    lambda c: st.tuples(
        st.just(c),
        st.lists(st.tuples(st.integers(0, c - 1), st.integers(0, c - 1)), min_size=1, max_size=12),
    )
)


@settings(max_examples=40, deadline=None)
@given(_cases)
def test_per_class_error_on_degenerate_inputs(case):
    """A class with no test example gives NaN exactly there (never 0, never a NaN elsewhere)."""
    num_classes, pairs = case
    labels = np.array([y for y, _ in pairs], np.int32)
    predictions = np.array([p for _, p in pairs], np.int32)
    got = _as_list(metrics.per_class_error(labels, predictions, num_classes))
    want = np_per_class_error(labels, predictions, num_classes)
    assert [g is None for g in got] == [w is None for w in want]
    np.testing.assert_allclose([g for g in got if g is not None], [w for w in want if w is not None], rtol=1e-6)


@settings(max_examples=40, deadline=None)
@given(_cases, st.data())
def test_class_set_error_on_degenerate_inputs(case, data):
    """NaN exactly when no example has a label in the set."""
    num_classes, pairs = case
    classes = data.draw(st.lists(st.integers(0, num_classes - 1), min_size=1, max_size=num_classes, unique=True))
    labels = np.array([y for y, _ in pairs], np.int32)
    predictions = np.array([p for _, p in pairs], np.int32)
    got = float(_np(metrics.class_set_error(labels, predictions, classes, num_classes)))
    want = np_class_set_error(labels, predictions, set(classes))
    if want is None:
        assert math.isnan(got)
    else:
        assert got == pytest.approx(want, rel=1e-6)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.integers(1, 8), st.integers(1, 8), st.integers(0, 2**16))
def test_top_k_error_on_degenerate_inputs(num_classes, n, k, seed):
    """Few classes (k >= C included), repeated scores (ties), one example."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, n).astype(np.int32)
    scores = rng.integers(0, 3, (n, num_classes)).astype(np.float32)  # many ties
    got = float(_np(metrics.top_k_error(labels, scores, k)))
    assert got == pytest.approx(np_top_k_error(labels, scores, k), abs=1e-6)
    if k >= num_classes:
        assert got == 0.0
