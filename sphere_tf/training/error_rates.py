"""The test set's error rates beyond top-1 that `results.json` records (no TensorFlow here).

* `test_per_class_error`: every run; a list of C percentages, `null` for a class with no test example.
* `test_top5_error`: every run whose data set has more than 5 classes (with 5 or fewer it is 0 by definition);
  the top-5 column of Decoupled Networks (Liu et al., CVPR 2018), Table 6 and OPT's ImageNet table (W. Liu's
  thesis, Table 7.9).
* `test_minority_error`: when the config names minority classes (`evaluation.minority_classes`); the error over
  their test examples, Err. (S) of the thesis's Table 5.7 (imbalanced CIFAR-10, class 0).

All in percent, like `test_error`. The formulas are `sphere_tf.metrics.classification`'s.
"""

import math

import keras
import numpy as np
from absl import logging

from sphere_tf.metrics import classification
from sphere_tf.training import multi_device

# `test_top5_error` is recorded when the data set has more classes than this.
TOP_K = 5


def collect_predictions(model, batches):
    """The model's scores and the labels over `batches` (an iterable of `(inputs, labels)`, in order).

    Returns:
        `(labels, scores)`: NumPy int32 `(N,)` and float32 `(N, C)`.
    """
    strategy = getattr(model, "distribute_strategy", None)  # TensorFlow: the run's tf.distribute strategy
    distributed = keras.backend.backend() == "jax" and keras.distribution.distribution() is not None
    if distributed:
        # keras.distribution (JAX): each process holds its rows of a batch; the predictions of the global batch
        # are gathered, so every process scores the whole test set in order.
        def forward(inputs):
            return multi_device.gather(model(multi_device.global_batch(inputs), training=False))
    elif strategy is not None and strategy.num_replicas_in_sync > 1:
        # `predict_on_batch` would split each batch over the replicas; one plain forward pass per batch
        # sees every example once, in order, on every worker.
        def forward(inputs):
            return model(inputs, training=False)
    else:
        forward = model.predict_on_batch  # compiled
    labels, scores = [], []
    for inputs, batch_labels in batches:
        inputs = keras.tree.map_structure(np.asarray, inputs)  # tf.data tensors -> NumPy for any backend
        scores.append(np.asarray(keras.ops.convert_to_numpy(forward(inputs)), np.float32))
        batch_labels = np.asarray(keras.ops.convert_to_numpy(batch_labels))
        if distributed:
            batch_labels = multi_device.gather(multi_device.global_batch(batch_labels))
        labels.append(batch_labels.reshape(-1).astype(np.int32))
    if not labels:
        return np.zeros((0,), np.int32), np.zeros((0, 0), np.float32)
    return np.concatenate(labels), np.concatenate(scores)


def _percent(value):
    value = float(value)
    return None if math.isnan(value) else 100.0 * value


def error_rates(labels, scores, num_classes, minority_classes=()):
    """The `results.json` entries of the module docstring, in percent.

    Args:
        labels: `(N,)` integer labels.
        scores: `(N, C)` logits or probabilities.
        num_classes: int, C.
        minority_classes: list of class indices (empty: no `test_minority_error`).

    Returns:
        dict with `test_per_class_error` (list, `None` for a class with no example), `test_top5_error` when
        C > 5, `test_minority_error` (`None` when no test example is in those classes) when classes are named.
    """
    predictions = np.argmax(scores, axis=-1) if len(labels) else np.zeros((0,), np.int32)
    per_class = [_percent(v) for v in keras.ops.convert_to_numpy(
        classification.per_class_error(labels, predictions, num_classes))]
    missing = [c for c, v in enumerate(per_class) if v is None]
    if missing:
        logging.warning("No test example of classes %s: their test_per_class_error is null.", missing)
    results = {"test_per_class_error": per_class}
    if num_classes > TOP_K:
        results[f"test_top{TOP_K}_error"] = _percent(keras.ops.convert_to_numpy(
            classification.top_k_error(labels, scores, TOP_K)))
    if minority_classes:
        results["test_minority_error"] = _percent(keras.ops.convert_to_numpy(
            classification.class_set_error(labels, predictions, list(minority_classes), num_classes)))
        if results["test_minority_error"] is None:
            logging.warning("No test example of the minority classes %s: test_minority_error is null.",
                            list(minority_classes))
    return results


def evaluate_error_rates(model, batches, num_classes, minority_classes=()):
    """`error_rates` of `model` over the test `batches` (`collect_predictions`)."""
    labels, scores = collect_predictions(model, batches)
    return error_rates(labels, scores, num_classes, minority_classes)


__all__ = ["TOP_K", "collect_predictions", "error_rates", "evaluate_error_rates"]
