"""Face verification: flip-concatenated embeddings, cosine scores, LFW 10-fold accuracy, ROC, TAR@FAR.

The protocol of SphereFace (Liu et al., CVPR 2017, §4.1; W. Liu's thesis 2020
§2.3 "Face setup"): the feature of a face is the embedding of the image
concatenated with the embedding of its horizontal flip; a pair is scored by the
cosine similarity of the two features. LFW View 2 accuracy (Huang et al. 2007):
10 folds; for each fold the threshold is the one that maximises the accuracy on
the 9 other folds, and the fold's accuracy is measured with it; the mean and
the standard deviation (over the 10 folds, `np.std`, as the authors' and
insightface's evaluation scripts report it) are the result.

Threshold search is exact: the candidates are the midpoints between
consecutive distinct training scores plus one point below the lowest and one
above the highest (a pair is predicted "same" when its score is above the
threshold). Among thresholds of equal training accuracy the lowest is chosen.

ROC: every distinct score s is a threshold ("same" when score >= s), plus the
point (0, 0); TAR@FAR=f is the highest true-accept rate over the thresholds
whose false-accept rate is at most f (with N mismatched pairs a FAR below 1/N
means no false accept at all).

The maths here is NumPy on scores; the network part (`embedding_model`,
`flip_embedding_fn`, `extract_embeddings`) is one compiled batched function in `keras.ops`, on every Keras
backend (`EmbeddingFunction`): on TensorFlow a `tf.function` with a batch-size-free input signature (one trace
for every batch, the same graph, hence the same numbers, as the TensorFlow-only version before it); on JAX one
`jax.jit` of a pure function of the embedder's variable values (`stateless_call`: it always sees the current
weights; one compilation per batch shape, so a last, smaller batch adds one); PyTorch runs eagerly under
`torch.no_grad()` (inference keeps no autograd graph).
"""

import keras
import numpy as np
from keras import ops

from sphere_tf import validation
from sphere_tf.ops import autodiff

DEFAULT_FAR_TARGETS = (1e-3, 1e-4)


def _scores_and_labels(scores, same):
    scores = np.asarray(scores, np.float64).reshape(-1)
    same = np.asarray(same).reshape(-1)
    if scores.shape != same.shape or not scores.size:
        raise validation.invalid_argument("scores", f"a non-empty vector as long as `same` ({same.size})",
                                          scores.shape)
    if not np.all(np.isfinite(scores)):
        raise validation.invalid_argument("scores", "finite values", scores[~np.isfinite(scores)][:5])
    if same.dtype != bool:
        if not np.all(np.isin(same, (0, 1))):
            raise validation.invalid_argument("same", "booleans (or 0/1)", np.unique(same)[:5])
        same = same.astype(bool)
    return scores, same


def threshold_accuracies(scores, same):
    """Every candidate threshold and the accuracy of "same iff score > threshold" at it.

    Args:
        scores: float array (n,), the pair scores.
        same: bool array (n,), True for matched pairs.

    Returns:
        `(thresholds, accuracies)`: float64 arrays (k + 1,) for k distinct scores, thresholds ascending
        (below the lowest score, the midpoints, above the highest).

    Raises:
        ValueError: shapes differ, empty input, non-finite scores or non-boolean labels.
    """
    scores, same = _scores_and_labels(scores, same)
    values, inverse = np.unique(scores, return_inverse=True)
    positives = np.bincount(inverse, weights=same, minlength=len(values))
    negatives = np.bincount(inverse, weights=~same, minlength=len(values))
    # threshold i lies below values[i:]: the first i distinct values are predicted "different".
    below_pos = np.concatenate([[0.0], np.cumsum(positives)])
    below_neg = np.concatenate([[0.0], np.cumsum(negatives)])
    correct = (below_pos[-1] - below_pos) + below_neg
    span = max(1.0, float(values[-1] - values[0]))
    thresholds = np.concatenate([[values[0] - span], (values[:-1] + values[1:]) / 2.0, [values[-1] + span]])
    return thresholds, correct / scores.size


def best_threshold(scores, same):
    """The threshold with the highest accuracy on (`scores`, `same`), the lowest among ties.

    Returns:
        `(threshold, accuracy)`: floats, accuracy in [0, 1].
    """
    thresholds, accuracies = threshold_accuracies(scores, same)
    best = int(np.argmax(accuracies))
    return float(thresholds[best]), float(accuracies[best])


def accuracy_at(scores, same, threshold):
    """The fraction of pairs classified correctly by "same iff score > threshold"."""
    scores, same = _scores_and_labels(scores, same)
    return float(np.mean((scores > threshold) == same))


def kfold_accuracy(scores, same, fold):
    """LFW-protocol accuracy: each fold tested at the threshold chosen on the other folds.

    Args:
        scores: float array (n,), the pair scores.
        same: bool array (n,), True for matched pairs.
        fold: int array (n,), the fold of each pair (at least 2 folds).

    Returns:
        dict: `accuracy` and `std` (mean and `np.std` of the fold accuracies, in [0, 1]),
        `fold_accuracies`, `thresholds` (lists, one per fold in ascending fold order).

    Raises:
        ValueError: bad shapes or values, fewer than 2 folds.
    """
    scores, same = _scores_and_labels(scores, same)
    fold = np.asarray(fold).reshape(-1)
    if fold.shape != scores.shape:
        raise validation.invalid_argument("fold", f"a vector as long as `scores` ({scores.size})", fold.shape)
    folds = np.unique(fold)
    if len(folds) < 2:
        raise validation.invalid_argument("fold", "at least 2 distinct folds", folds)
    accuracies, thresholds = [], []
    for k in folds:
        test = fold == k
        threshold, _ = best_threshold(scores[~test], same[~test])
        thresholds.append(threshold)
        accuracies.append(accuracy_at(scores[test], same[test], threshold))
    accuracies = np.asarray(accuracies)
    return {
        "accuracy": float(accuracies.mean()),
        "std": float(accuracies.std()),
        "fold_accuracies": accuracies.tolist(),
        "thresholds": thresholds,
    }


def roc_curve(scores, same):
    """The ROC of "same iff score >= t" over every distinct score t, from (0, 0) to (1, 1).

    Args:
        scores: float array (n,); same: bool array (n,), with both kinds present.

    Returns:
        `(far, tar, thresholds)`: float64 arrays; `thresholds[0]` is +inf (nothing accepted), then the
        distinct scores descending; FAR and TAR non-decreasing.

    Raises:
        ValueError: bad input, or only one kind of pair.
    """
    scores, same = _scores_and_labels(scores, same)
    num_pos, num_neg = int(same.sum()), int((~same).sum())
    if not num_pos or not num_neg:
        raise validation.invalid_argument("same", "both matched and mismatched pairs", (num_pos, num_neg))
    values, inverse = np.unique(scores, return_inverse=True)
    positives = np.bincount(inverse, weights=same, minlength=len(values))[::-1]
    negatives = np.bincount(inverse, weights=~same, minlength=len(values))[::-1]
    tar = np.concatenate([[0.0], np.cumsum(positives)]) / num_pos
    far = np.concatenate([[0.0], np.cumsum(negatives)]) / num_neg
    return far, tar, np.concatenate([[np.inf], values[::-1]])


def tar_at_far(scores, same, far_targets=DEFAULT_FAR_TARGETS):
    """The highest true-accept rate at a false-accept rate of at most each target.

    Args:
        scores, same: as `roc_curve`.
        far_targets: floats in (0, 1].

    Returns:
        dict `{far_target: tar}` (floats in [0, 1]).
    """
    far, tar, _ = roc_curve(scores, same)
    results = {}
    for target in far_targets:
        target = validation.real(target, "far_targets", low=0.0, high=1.0, low_open=True)
        results[float(target)] = float(tar[far <= target + 1e-12].max())
    return results


def plot_roc(far, tar, path, *, label=None, far_targets=DEFAULT_FAR_TARGETS, title="ROC"):
    """Writes the ROC (log-scaled FAR axis) as a PNG.

    Args:
        far, tar: arrays from `roc_curve`.
        path: str, the PNG file.
        label: str or None, the curve's legend entry.
        far_targets: FARs marked by vertical lines.
        title: str.
    """
    import matplotlib  # noqa: PLC0415 (plotting only when asked)

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt  # noqa: PLC0415

    far, tar = np.asarray(far), np.asarray(tar)
    positive = far > 0
    figure, axis = plt.subplots(figsize=(5, 4))
    floor = min([f for f in far_targets] + [far[positive].min() if positive.any() else 1.0]) / 2
    axis.step(np.maximum(far, floor), tar, where="post", label=label)
    for target in far_targets:
        axis.axvline(target, color="gray", linestyle=":", linewidth=1)
    axis.set_xscale("log")
    axis.set_xlim(floor, 1.0)
    axis.set_ylim(0.0, 1.01)
    axis.set_xlabel("false accept rate")
    axis.set_ylabel("true accept rate")
    axis.set_title(title)
    axis.grid(True, which="both", alpha=0.3)
    if label:
        axis.legend(loc="lower right")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)


def embedding_model(model):
    """The image -> embedding part of a classifier: images input to the layer 'embedding' (SphereFace
    nets; 'embedding_relu' after it when the net keeps the last ReLU, thesis Table A.1 row A, so that
    the features are those the classifier sees), else to the input of the classifier layer 'logits'.

    Args:
        model: a functional `keras.Model` of `sphere_tf.models` (one or two inputs).

    Returns:
        `keras.Model` from the images to the embedding.

    Raises:
        ValueError: no layer 'embedding' or 'logits'.
    """
    images = model.input["images"] if isinstance(model.input, dict) else model.input
    names = {layer.name for layer in model.layers}
    if "embedding_relu" in names:
        features = model.get_layer("embedding_relu").output
    elif "embedding" in names:
        features = model.get_layer("embedding").output
    elif "logits" in names:
        features = model.get_layer("logits").input
        if isinstance(features, (list, tuple)):
            features = features[0]
    else:
        raise validation.invalid_argument("model", "a model with a layer named 'embedding' or 'logits'", model.name)
    return keras.Model(images, features, name=f"{model.name}_embedding")


class EmbeddingFunction(autodiff.ModelFunction):
    """`images -> features` of one embedder: `body(model_fn, images)` compiled once by the backend
    (`sphere_tf.ops.autodiff.ModelFunction`, the compiled function the attacks use too; no gradient is taken).

    Calling it converts the images to a float32 tensor and returns the backend's tensor
    (`keras.ops.convert_to_numpy` reads it on every backend). `traces` counts the runs of the Python body.
    """

    def __init__(self, embedder, body, jit_compile=False):
        shape = (None,) + tuple(embedder.input.shape[1:])
        super().__init__(embedder, body, [(shape, "float32")], jit_compile=jit_compile, gradients=False)


def _flip_concatenated(model_fn, images):
    # The image and its mirror in one batch of 2b (one pass through the net), then side by side.
    both = ops.concatenate([images, ops.flip(images, axis=2)], axis=0)
    features = ops.cast(model_fn(both), "float32")
    plain, flipped = ops.split(features, 2, axis=0)
    return ops.concatenate([plain, flipped], axis=-1)


def _plain(model_fn, images):
    return ops.cast(model_fn(images), "float32")


def flip_embedding_fn(embedder, *, jit_compile=False):
    """One compiled function `images -> concat(f(images), f(flip(images)))` (batch of both in one pass).

    The flip is horizontal (the width axis of channels-last images), as SphereFace's evaluation flips the
    aligned crop (Liu et al., CVPR 2017, §4.1).

    Args:
        embedder: `keras.Model` images -> embedding (see `embedding_model`), static image shape.
        jit_compile: bool, XLA-compile the function on TensorFlow (JAX always compiles with XLA, PyTorch
            runs eagerly).

    Returns:
        `EmbeddingFunction` of a float32 batch (b, h, w, c) returning (b, 2 * embedding_dim), float32.
    """
    return EmbeddingFunction(embedder, _flip_concatenated, jit_compile)


def plain_embedding_fn(embedder, *, jit_compile=False):
    """The same as `flip_embedding_fn` without the flip: `images -> f(images)` (for comparisons)."""
    return EmbeddingFunction(embedder, _plain, jit_compile)


def extract_embeddings(embed_fn, images):
    """Runs `embed_fn` over an iterable of image batches (or of (images, ...) tuples): NumPy arrays or tensors
    (a list, a generator, a Grain or `tf.data` dataset).

    Returns:
        float32 NumPy array (n, d), in batch order.

    Raises:
        ValueError: no batch.
    """
    outputs = []
    for batch in images:
        if isinstance(batch, (tuple, list)):
            batch = batch[0]
        outputs.append(np.asarray(ops.convert_to_numpy(embed_fn(batch)), np.float32))
    if not outputs:
        raise validation.invalid_argument("images", "a non-empty iterable of image batches", images)
    return np.concatenate(outputs, axis=0)


def mean_unit_embeddings(embeddings, owner, count, epsilon=1e-12):
    """Per group, the mean of its members' L2-normalised embeddings (a video's feature from its frames).

    Args:
        embeddings: float array (n, d).
        owner: int array (n,), the group of each row, in [0, count).
        count: int, the number of groups; every group must have a member.

    Returns:
        float32 array (count, d).
    """
    embeddings = np.asarray(embeddings, np.float64)
    owner = np.asarray(owner)
    members = np.bincount(owner, minlength=count)
    if len(members) != count or members.min() < 1:
        raise validation.invalid_argument("owner", f"every group 0..{count - 1} with at least one member", members)
    unit = embeddings / np.maximum(np.sqrt(np.sum(embeddings**2, axis=1, keepdims=True)), epsilon)
    sums = np.zeros((count, unit.shape[1]))
    np.add.at(sums, owner, unit)
    return (sums / members[:, None]).astype(np.float32)


def cosine_scores(embeddings, left, right, epsilon=1e-12):
    """Cosine similarity of `embeddings[left[k]]` and `embeddings[right[k]]` for each pair k.

    A zero embedding scores 0 with anything (no NaN).

    Returns:
        float64 array (len(left),).
    """
    embeddings = np.asarray(embeddings, np.float64)
    norms = np.sqrt(np.sum(embeddings**2, axis=1, keepdims=True))
    unit = embeddings / np.maximum(norms, epsilon)
    left, right = np.asarray(left), np.asarray(right)
    return np.sum(unit[left] * unit[right], axis=1)
