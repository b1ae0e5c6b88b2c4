"""Angular feature-quality measures: what the margin losses are meant to improve.

* `angular_fisher_score`: the Angular Fisher Score of SphereFace App. A.5
  [T-A.1], AFS = S_w / S_b, lower is better;
* `min_interclass_angle`: the smallest angle between the mean directions of two
  classes in a batch (larger is better), with `max_intraclass_angle` the largest
  angle between a sample and its class direction; the thesis's open-set
  criterion [T §2.3] asks for max intra-class angle < min inter-class angle.

All are functions of one batch of features `(N, d)` and integer labels,
computed in float32; angles go through `angles.safe_acos` and are in radians.
The `keras.metrics.Metric` wrappers average the per-batch values over batches.
"""

import keras
from keras import ops

from sphere_tf import saving
from sphere_tf import validation
from sphere_tf.ops import angles
from sphere_tf.ops import runtime_checks

# ε inside the norms (zero features and empty classes stay finite).
EPSILON = 1e-12


def _one_hot(labels, num_classes):
    labels = ops.reshape(ops.cast(labels, "int32"), (-1,))
    return ops.one_hot(labels, num_classes, dtype="float32")


def _unit(v, epsilon):
    return angles.normalize(v, axis=-1, epsilon=epsilon)[0]


def class_directions(features, labels, num_classes, epsilon=EPSILON):
    """Unit mean direction of each class: normalise(Σ_{i∈class} x_i/‖x_i‖).

    Returns:
        `(directions, counts)`: float32 `(C, d)` (zero rows for absent classes) and `(C,)`.
    """
    x = _unit(ops.cast(features, "float32"), epsilon)
    onehot = _one_hot(labels, num_classes)
    sums = ops.matmul(ops.transpose(onehot), x)
    return _unit(sums, epsilon), ops.sum(onehot, axis=0)


def interclass_angles(features, labels, num_classes, epsilon=EPSILON):
    """Angles (radians) between the class mean directions, `(C, C)` float32."""
    directions, _ = class_directions(features, labels, num_classes, epsilon)
    return angles.safe_acos(ops.matmul(directions, ops.transpose(directions)))


def min_interclass_angle(features, labels, num_classes, epsilon=EPSILON):
    """Minimum angle between the mean directions of two different classes in the batch.

    Only classes present in the batch count; with fewer than two classes the
    result is +inf.

    Args:
        features: `(N, d)` float tensor.
        labels: `(N,)` or `(N, 1)` integer labels in [0, num_classes).
        num_classes: int, C.

    Returns:
        float32 scalar, radians in [0, π].
    """
    theta = interclass_angles(features, labels, num_classes, epsilon)
    _, counts = class_directions(features, labels, num_classes, epsilon)
    present = counts > 0
    pair = ops.logical_and(ops.expand_dims(present, 0), ops.expand_dims(present, 1))
    pair = ops.logical_and(pair, ops.logical_not(ops.eye(num_classes, dtype="bool")))
    return ops.min(ops.where(pair, theta, float("inf")))


def max_intraclass_angle(features, labels, num_classes, epsilon=EPSILON):
    """Largest angle between a sample and the mean direction of its class (radians)."""
    x = _unit(ops.cast(features, "float32"), epsilon)
    directions, _ = class_directions(features, labels, num_classes, epsilon)
    own = ops.matmul(_one_hot(labels, num_classes), directions)
    return ops.max(angles.safe_acos(ops.sum(x * own, axis=-1)))


def angular_fisher_score(features, labels, num_classes, epsilon=EPSILON):
    """Angular Fisher Score AFS = S_w / S_b   [T-A.1] (SphereFace App. A.5); lower is better.

    ```
    S_w = Σ_i Σ_{x_j ∈ X_i} (1 − cos⟨x_j, m_i⟩)
    S_b = Σ_i n_i (1 − cos⟨m_i, m⟩)
    ```

    m_i is the mean feature of class i, m the mean of all features, n_i the
    class count; absent classes contribute nothing. If S_b = 0 (one class, or all
    means aligned) the result is S_w / ε-sized, i.e. very large.

    Returns:
        float32 scalar.
    """
    x = ops.cast(features, "float32")
    onehot = _one_hot(labels, num_classes)
    counts = ops.sum(onehot, axis=0)
    means = ops.matmul(ops.transpose(onehot), x) / ops.expand_dims(ops.maximum(counts, 1.0), -1)
    global_mean = ops.mean(x, axis=0, keepdims=True)
    own_mean = ops.matmul(onehot, means)
    s_w = ops.sum(1.0 - ops.sum(_unit(x, epsilon) * _unit(own_mean, epsilon), axis=-1))
    cos_b = ops.sum(_unit(means, epsilon) * _unit(global_mean, epsilon), axis=-1)
    s_b = ops.sum(counts * (1.0 - cos_b))
    return s_w / ops.maximum(s_b, 1e-12)


class _BatchAverage(keras.metrics.Metric):
    """Average over batches of a per-batch feature statistic (private base)."""

    _fn = None

    def __init__(self, num_classes, name=None, dtype=None):
        # Keras's own checks fail with an AttributeError on a non-str name; the statistic is a float.
        validation.text(name, "name", allow_none=True)
        if dtype is not None:
            try:
                compute_dtype = getattr(keras.dtype_policies.get(dtype), "compute_dtype", None)
            except (ValueError, TypeError):
                compute_dtype = None
            if not isinstance(compute_dtype, str) or "float" not in compute_dtype:
                raise validation.invalid_argument("dtype", "None or a float dtype (policy)", dtype)
        super().__init__(name=name, dtype=dtype)
        self.num_classes = validation.integer(num_classes, "num_classes", minimum=2, maximum=validation.MAX_INT32)
        self.total = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="total")
        self.count = self.add_variable(shape=(), initializer="zeros", dtype="float32", name="count")

    def update_state(self, y_true, y_pred, sample_weight=None):
        """`y_true`: integer labels; `y_pred`: the features `(N, d)`; `sample_weight` ignored."""
        del sample_weight
        # A label past `num_classes` would be a zero one-hot row (TensorFlow, JAX) or a RuntimeError from inside
        # PyTorch's one_hot: refused here, naming the range (eagerly and in graphs; see `runtime_checks`).
        y_true = runtime_checks.assert_all(
            ops.logical_and(ops.greater_equal(y_true, 0), ops.less(y_true, self.num_classes)),
            lambda labels: (f"{type(self).__name__}: labels must be class ids in [0, num_classes={self.num_classes})"
                            + ("" if labels is None else f"; received labels {sorted(set(labels.ravel().tolist()))}")),
            ops.convert_to_tensor(y_true))
        value = type(self)._fn(y_pred, y_true, self.num_classes)
        valid = ops.isfinite(value)
        self.total.assign_add(ops.where(valid, value, 0.0))
        self.count.assign_add(ops.cast(valid, "float32"))

    def result(self):
        return self.total / ops.maximum(self.count, 1.0)

    def reset_state(self):
        self.total.assign(0.0)
        self.count.assign(0.0)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes}


@saving.register_serializable()
class AngularFisherScore(_BatchAverage):
    """Batch-averaged Angular Fisher Score [T-A.1] of features (`y_pred`) and labels (`y_true`).

    Batches where the score is not finite are skipped.

    Args:
        num_classes: int >= 2.
        name, dtype: as for `keras.metrics.Metric`.
    """

    _fn = staticmethod(angular_fisher_score)

    def __init__(self, num_classes, name="angular_fisher_score", dtype=None):
        super().__init__(num_classes, name=name, dtype=dtype)


@saving.register_serializable()
class MinInterclassAngle(_BatchAverage):
    """Batch-averaged minimum inter-class angle (radians) of features (`y_pred`).

    Batches with fewer than two classes are skipped.

    Args:
        num_classes: int >= 2.
        name, dtype: as for `keras.metrics.Metric`.
    """

    _fn = staticmethod(min_interclass_angle)

    def __init__(self, num_classes, name="min_interclass_angle", dtype=None):
        super().__init__(num_classes, name=name, dtype=dtype)
