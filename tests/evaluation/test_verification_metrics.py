"""LFW 10-fold accuracy, threshold selection, ROC and TAR@FAR against explicit-loop NumPy references
(`lfw_reference`, tests/evaluation/conftest.py)."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from sphere_tf.evaluation import verification


def _lfw_like(rng, folds=10, per_kind=30, separation=1.0):
    same = np.tile(np.r_[np.ones(per_kind, bool), np.zeros(per_kind, bool)], folds)
    fold = np.repeat(np.arange(folds), 2 * per_kind)
    scores = rng.normal(size=same.size) * 0.3 + separation * 0.3 * same
    return scores, same, fold


def test_kfold_matches_loop_reference_on_lfw_like_scores(lfw_reference):
    scores, same, fold = _lfw_like(np.random.default_rng(0), per_kind=8)
    result = verification.kfold_accuracy(scores, same, fold)
    mean, std, accuracies = lfw_reference.kfold(list(scores), list(same), list(fold))
    assert result["accuracy"] == pytest.approx(mean, abs=1e-12)
    assert result["std"] == pytest.approx(std, abs=1e-12)
    np.testing.assert_allclose(result["fold_accuracies"], accuracies, atol=1e-12)
    assert 0.6 < mean < 0.95


def test_chosen_threshold_is_optimal_over_a_dense_grid(lfw_reference):
    """Independent of the candidate construction: no threshold anywhere does better on the training folds."""
    scores, same, _ = _lfw_like(np.random.default_rng(1), folds=2, per_kind=25)
    threshold, accuracy = verification.best_threshold(scores, same)
    assert accuracy == pytest.approx(lfw_reference.accuracy(scores, same, threshold))
    grid = np.concatenate([np.linspace(scores.min() - 1, scores.max() + 1, 1001), scores, scores - 1e-9])
    assert max(lfw_reference.accuracy(scores, same, t) for t in grid) <= accuracy + 1e-12


def test_ties_and_all_equal_scores(lfw_reference):
    # Ties across matched and mismatched pairs: 0.5 appears twice in each kind.
    scores = np.array([0.9, 0.5, 0.5, 0.2, 0.5, 0.5, 0.1, 0.0])
    same = np.array([1, 1, 1, 1, 0, 0, 0, 0], bool)
    threshold, accuracy = verification.best_threshold(scores, same)
    # threshold 0.35 (between 0.2 and 0.5): 1+2 TP, 2 TN -> 5/8; 0.15: 4 TP 2 TN -> 6/8; 0.7: 1 TP 4 TN -> 5/8.
    assert threshold == pytest.approx(0.15) and accuracy == pytest.approx(6 / 8)
    # All scores equal: "all same" and "all different" tie; the lower threshold (all same) is kept.
    flat = np.full(8, 0.3)
    threshold, accuracy = verification.best_threshold(flat, same)
    assert threshold < 0.3 and accuracy == 0.5
    fold = np.array([0, 0, 0, 1, 1, 1, 1, 1])
    result = verification.kfold_accuracy(flat, same, fold)
    # fold 0 (three matched) is tested at fold 1's threshold (1 matched + 4 mismatched: "all different" is
    # strictly best) -> 0; fold 1 at fold 0's ("all same", strictly best on three matched) -> 1/5.
    np.testing.assert_allclose(result["fold_accuracies"], [0.0, 0.2])
    mean, std, _ = lfw_reference.kfold(list(flat), list(same), list(fold))
    assert result["accuracy"] == pytest.approx(mean) and result["std"] == pytest.approx(std)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.booleans(), st.integers(0, 2)), min_size=6, max_size=30))
def test_kfold_matches_reference_on_heavily_tied_scores(lfw_reference, rows):
    scores = np.array([r[0] / 4.0 for r in rows])
    same = np.array([r[1] for r in rows])
    fold = np.array([r[2] for r in rows])
    if len(set(fold)) < 2:
        with pytest.raises(ValueError, match="fold"):
            verification.kfold_accuracy(scores, same, fold)
        return
    result = verification.kfold_accuracy(scores, same, fold)
    mean, std, accuracies = lfw_reference.kfold(list(scores), list(same), list(fold))
    np.testing.assert_allclose(result["fold_accuracies"], accuracies, atol=1e-12)
    assert result["accuracy"] == pytest.approx(mean) and result["std"] == pytest.approx(std, abs=1e-12)


def test_roc_and_tar_at_far_against_a_hand_computed_curve():
    # matched: 0.9 0.8 0.6 0.4 ; mismatched: 0.7 0.5 0.3 0.2 0.1
    scores = np.array([0.9, 0.8, 0.6, 0.4, 0.7, 0.5, 0.3, 0.2, 0.1])
    same = np.array([1, 1, 1, 1, 0, 0, 0, 0, 0], bool)
    far, tar, thresholds = verification.roc_curve(scores, same)
    # threshold (accept >= t): inf 0.9 0.8 0.7 0.6 0.5 0.4 0.3 0.2 0.1
    np.testing.assert_allclose(thresholds[1:], [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1])
    np.testing.assert_allclose(tar, [0, 1 / 4, 2 / 4, 2 / 4, 3 / 4, 3 / 4, 1, 1, 1, 1])
    np.testing.assert_allclose(far, [0, 0, 0, 1 / 5, 1 / 5, 2 / 5, 2 / 5, 3 / 5, 4 / 5, 1])
    rates = verification.tar_at_far(scores, same, far_targets=(1e-3, 0.2, 0.3, 0.4, 1.0))
    assert rates == {1e-3: 0.5, 0.2: 0.75, 0.3: 0.75, 0.4: 1.0, 1.0: 1.0}


def test_tar_at_far_with_ties_counts_a_tied_score_as_one_threshold():
    scores = np.array([0.8, 0.5, 0.5, 0.5])
    same = np.array([1, 1, 0, 0], bool)
    # accepting 0.5 brings both mismatched pairs at once (FAR 1.0); below FAR 1 only 0.8 is accepted.
    assert verification.tar_at_far(scores, same, (0.5, 1.0)) == {0.5: 0.5, 1.0: 1.0}


def test_plot_roc_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")  # optional (the test extra); .venv-torch has none
    scores, same, _ = _lfw_like(np.random.default_rng(2), folds=2)
    far, tar, _ = verification.roc_curve(scores, same)
    path = tmp_path / "roc.png"
    verification.plot_roc(far, tar, str(path), label="test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cosine_scores_and_zero_embeddings():
    embeddings = np.array([[1.0, 0.0], [0.0, 2.0], [3.0, 3.0], [0.0, 0.0]])
    scores = verification.cosine_scores(embeddings, [0, 0, 2, 3], [1, 2, 2, 0])
    np.testing.assert_allclose(scores, [0.0, 1 / math.sqrt(2), 1.0, 0.0], atol=1e-12)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="scores"):
        verification.kfold_accuracy([0.1, 0.2], [True], [0, 1])
    with pytest.raises(ValueError, match="scores"):
        verification.best_threshold([0.1, np.nan], [True, False])
    with pytest.raises(ValueError, match="same"):
        verification.best_threshold([0.1, 0.2], [2, 0])
    with pytest.raises(ValueError, match="fold"):
        verification.kfold_accuracy([0.1, 0.2], [True, False], [0, 0])
    with pytest.raises(ValueError, match="both matched and mismatched"):
        verification.roc_curve([0.1, 0.2], [True, True])
    with pytest.raises(ValueError, match="far_targets"):
        verification.tar_at_far([0.1, 0.2], [True, False], (0.0,))
