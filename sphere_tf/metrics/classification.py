"""Test-set error rates as the papers report them: per class, over a set of minority classes, top-k.

* `per_class_error`: the error rate of each class over its test examples;
* `class_set_error`: the error rate over the test examples whose label is in a set of classes, the
  minority-class error "Err. (S)" of W. Liu's thesis (2020), Table 5.7 (imbalanced CIFAR-10: "the error rate
  (denoted by Err. (S)) on the imbalance class (single imbalance setting) in the full testing set", §5.5.1;
  the minority class is class 0, App. D.1);
* `top_k_error`: the fraction of examples whose label is not among the k highest scores, the top-5 error of
  Decoupled Networks (Liu et al., CVPR 2018), Table 6 (ImageNet-2012).

All are functions of integer labels and predictions (`keras.ops`, every backend); rates are fractions in
[0, 1] as float32. A class with no test example has no error rate: `per_class_error` returns NaN there (and
the counts say why), `class_set_error` returns NaN when none of the set's classes has an example. Callers
that write results (the runner's `results.json`) turn those NaN into `null` and say so; nothing here
averages a NaN away.
"""

from keras import ops

from sphere_tf import validation


def _flat_labels(labels):
    return ops.reshape(ops.cast(labels, "int32"), (-1,))


def class_counts(labels, predictions, num_classes):
    """Test examples and errors per class.

    Args:
        labels: `(N,)` or `(N, 1)` integer labels in [0, num_classes).
        predictions: `(N,)` integer predicted classes (e.g. the argmax of the logits).
        num_classes: int >= 1, C.

    Returns:
        `(examples, errors)`: two float32 `(C,)` tensors, the number of examples of each class and how many of
        them were predicted wrong.
    """
    num_classes = validation.positive_int(num_classes, "num_classes")
    labels = _flat_labels(labels)
    wrong = ops.cast(ops.not_equal(labels, _flat_labels(predictions)), "float32")
    onehot = ops.one_hot(labels, num_classes, dtype="float32")
    return ops.sum(onehot, axis=0), ops.matmul(wrong, onehot)


def per_class_error(labels, predictions, num_classes):
    """Error rate of each class over its test examples.

    ```
    err_c = #{i : y_i = c, ŷ_i ≠ c} / #{i : y_i = c}
    ```

    Args:
        labels: `(N,)` or `(N, 1)` integer labels in [0, num_classes).
        predictions: `(N,)` integer predicted classes.
        num_classes: int >= 1, C.

    Returns:
        float32 `(C,)`, fractions in [0, 1]; NaN for a class with no example (its rate is undefined; see
        `class_counts` for the counts).
    """
    examples, errors = class_counts(labels, predictions, num_classes)
    return ops.where(examples > 0, errors / ops.maximum(examples, 1.0), float("nan"))


def class_set_error(labels, predictions, classes, num_classes):
    """Error rate over the test examples whose label is in `classes` (pooled, not a mean of per-class rates).

    ```
    err_S = #{i : y_i ∈ S, ŷ_i ≠ y_i} / #{i : y_i ∈ S}
    ```

    The minority-class error Err. (S) of thesis Table 5.7 with S = {0}. On a balanced test set (CIFAR: 1,000
    or 100 images per class) it equals the mean of the classes' `per_class_error`.

    Args:
        labels: `(N,)` or `(N, 1)` integer labels in [0, num_classes).
        predictions: `(N,)` integer predicted classes.
        classes: non-empty list of distinct ints in [0, num_classes), the set S.
        num_classes: int >= 1, C.

    Returns:
        float32 scalar in [0, 1]; NaN when no example has a label in S.

    Raises:
        ValueError: `classes` empty, repeated, or out of range.
    """
    classes = check_classes(classes, num_classes)
    examples, errors = class_counts(labels, predictions, num_classes)
    member = ops.convert_to_tensor([1.0 if c in classes else 0.0 for c in range(num_classes)], "float32")
    total = ops.sum(examples * member)
    return ops.where(total > 0, ops.sum(errors * member) / ops.maximum(total, 1.0), float("nan"))


def top_k_error(labels, scores, k=5):
    """Fraction of examples whose label is not among the `k` highest scores (top-k error).

    An example counts as correct when fewer than k classes score strictly higher than its label, so a tie at
    the k-th place counts in its favour (as `tf.math.in_top_k`). A non-finite score of the label counts as an
    error. With k >= C every example with a finite label score is correct.

    Args:
        labels: `(N,)` or `(N, 1)` integer labels in [0, C).
        scores: `(N, C)` float logits or probabilities (any monotone map gives the same result).
        k: int >= 1.

    Returns:
        float32 scalar in [0, 1]; NaN for N = 0.
    """
    k = validation.positive_int(k, "k")
    scores = ops.cast(scores, "float32")
    labels = _flat_labels(labels)
    own = ops.take_along_axis(scores, ops.expand_dims(labels, -1), axis=-1)
    higher = ops.sum(ops.cast(scores > own, "float32"), axis=-1)
    correct = ops.logical_and(higher < k, ops.isfinite(ops.squeeze(own, -1)))
    n = ops.shape(labels)[0]
    if n == 0:
        return ops.convert_to_tensor(float("nan"), "float32")
    return 1.0 - ops.mean(ops.cast(correct, "float32"))


def check_classes(classes, num_classes, name="classes"):
    """`classes` as a tuple of distinct ints in [0, num_classes).

    Raises:
        ValueError: not a non-empty list of distinct ints in range (naming `name`).
    """
    expected = f"a non-empty list of distinct class indices in [0, {num_classes})"
    if not isinstance(classes, (list, tuple)) or not classes:
        raise validation.invalid_argument(name, expected, classes)
    checked = tuple(validation.integer(c, f"{name}[{i}]", minimum=0) for i, c in enumerate(classes))
    if len(set(checked)) != len(checked) or max(checked) >= num_classes:
        raise validation.invalid_argument(name, expected, classes)
    return checked
