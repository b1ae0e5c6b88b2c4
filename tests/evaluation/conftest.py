"""The NumPy references of the face tests: LFW threshold selection and 10-fold accuracy with explicit loops."""

import math
import types

import pytest


def accuracy_loop(scores, same, threshold):
    """Fraction of pairs where "score > threshold" equals "same", counted one pair at a time."""
    correct = 0
    for s, y in zip(scores, same):
        correct += int((s > threshold) == bool(y))
    return correct / len(scores)


def best_threshold_loop(scores, same):
    """The lowest threshold of best accuracy among: below all, between neighbouring distinct scores, above all."""
    values = sorted(set(float(s) for s in scores))
    span = max(1.0, values[-1] - values[0])
    candidates = [values[0] - span]
    for a, b in zip(values[:-1], values[1:]):
        candidates.append((a + b) / 2.0)
    candidates.append(values[-1] + span)
    best_t, best_acc = None, -1.0
    for t in candidates:  # ascending: the first maximum is the lowest threshold
        acc = accuracy_loop(scores, same, t)
        if acc > best_acc:
            best_t, best_acc = t, acc
    return best_t, best_acc


def kfold_loop(scores, same, fold):
    """(mean, population std, per-fold accuracies): each fold at the threshold of the other folds."""
    accuracies = []
    for k in sorted(set(fold)):
        train = [i for i in range(len(scores)) if fold[i] != k]
        test = [i for i in range(len(scores)) if fold[i] == k]
        t, _ = best_threshold_loop([scores[i] for i in train], [same[i] for i in train])
        accuracies.append(accuracy_loop([scores[i] for i in test], [same[i] for i in test], t))
    mean = sum(accuracies) / len(accuracies)
    std = math.sqrt(sum((a - mean) ** 2 for a in accuracies) / len(accuracies))
    return mean, std, accuracies


def pairs_kfold_loop(rows, feature):
    """10-fold accuracy of LFW pairs.txt rows (`name i j` same, `name i name j` different, 4 rows a fold here)
    from `feature(name, index)` vectors, scored by cosine in plain NumPy loops."""
    scores, same, folds = [], [], []
    for k, row in enumerate(rows):
        a, b = (feature(row[0], row[1]), feature(row[0], row[2])) if len(row) == 3 else \
            (feature(row[0], row[1]), feature(row[2], row[3]))
        scores.append(float(a @ b / math.sqrt((a @ a) * (b @ b))))
        same.append(len(row) == 3)
        folds.append(k // 4)
    return kfold_loop(scores, same, folds)


@pytest.fixture(scope="session")
def lfw_reference():
    """The reference functions above, as attributes."""
    return types.SimpleNamespace(accuracy=accuracy_loop, best_threshold=best_threshold_loop, kfold=kfold_loop,
                                 pairs_kfold=pairs_kfold_loop)
