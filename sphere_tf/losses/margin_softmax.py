"""Cross-entropy on `MarginHead` logits, with sparse labels and label smoothing.

`keras.losses.SparseCategoricalCrossentropy(from_logits=True)` is all a
`MarginHead` needs; it has no `label_smoothing`, though, and the authors' TF code
(`loss2` in `loss.py` of wy1iu/SphereNet, wy1iu/DCNets and wy1iu/MHE) trains with a
smoothed cross-entropy (ε = 0.01). `SparseCrossentropy` adds that:

```
q = (1 − ε)·onehot(y) + ε / C
L = −Σ_j q_j · log_softmax(f)_j
```

computed from the logits with a stable log-softmax in float32, so very negative
margin logits never underflow (no "loss = 87.3", the −ln(FLT_MIN) plateau of the
Caffe softmax + log).

Note: upstream computes −Σ q·log(softmax + 1e-4); the 1e-4 floor caps the loss at
9.21 and is not reproduced (it hides the gradient of confidently wrong samples).
"""

import keras
from keras import ops

from sphere_tf import saving
from sphere_tf import validation


# `keras.losses.Loss`'s reductions.
REDUCTIONS = ("sum_over_batch_size", "sum", "mean", "mean_with_sample_weight", "none", None)


def loss_arguments(reduction, name, dtype):
    """The `keras.losses.Loss` arguments of the package's losses, checked naming each: Keras raises a bare
    "unhashable type" for a list `reduction`, and computes the loss in an integer `dtype` (rounding it).

    Returns:
        dict, the keyword arguments for `keras.losses.Loss.__init__`.

    Raises:
        ValueError: a `reduction` not in `REDUCTIONS`, a `name` that is not a non-empty str, or a `dtype` that
            is not a float dtype or a dtype policy (name) computing in one.
    """
    validation.one_of(reduction, "reduction", REDUCTIONS)
    validation.text(name, "name")
    if dtype is not None:
        expected = "None, a float dtype or a dtype policy computing in one ('mixed_float16')"
        try:
            # (Keras returns a config dict's class name as is: no policy, no compute dtype.)
            compute_dtype = getattr(keras.dtype_policies.get(dtype), "compute_dtype", None)
        except (ValueError, TypeError) as error:
            raise ValueError(f"{validation.invalid_argument('dtype', expected, dtype)}: {error}") from None
        if not isinstance(compute_dtype, str) or "float" not in compute_dtype:
            raise validation.invalid_argument("dtype", expected, dtype)
    return {"reduction": reduction, "name": name, "dtype": dtype}


def sparse_crossentropy(y_true, logits, label_smoothing=0.0):
    """Per-sample smoothed cross-entropy from integer labels and logits (float32).

    Args:
        y_true: `(N,)` or `(N, 1)` integer labels.
        logits: `(N, C)` logits.
        label_smoothing: float in [0, 1), ε.

    Returns:
        float32 `(N,)` losses.
    """
    logits = ops.cast(logits, "float32")
    num_classes = ops.shape(logits)[-1]
    labels = ops.reshape(ops.cast(y_true, "int32"), (-1,))
    log_p = ops.log_softmax(logits, axis=-1)
    nll = -ops.sum(ops.one_hot(labels, num_classes, dtype="float32") * log_p, axis=-1)
    if label_smoothing == 0:
        return nll
    uniform = -ops.mean(log_p, axis=-1)
    return (1.0 - label_smoothing) * nll + label_smoothing * uniform


@saving.register_serializable()
class SparseCrossentropy(keras.losses.Loss):
    """Sparse-label softmax cross-entropy from logits, with optional label smoothing.

    Equal to `keras.losses.SparseCategoricalCrossentropy(from_logits=True)` when
    `label_smoothing=0`; see `sparse_crossentropy` for the formula.

    Args:
        label_smoothing: float in [0, 1), ε (wy1iu TF code: 0.01).
        reduction, name, dtype: as for `keras.losses.Loss`.

    Example:

    >>> loss = SparseCrossentropy(label_smoothing=0.01)
    >>> float(loss([0], [[10.0, 0.0]])) > 0
    True
    """

    def __init__(self, label_smoothing=0.0, reduction="sum_over_batch_size", name="sparse_crossentropy", dtype=None):
        super().__init__(**loss_arguments(reduction, name, dtype))
        self.label_smoothing = validation.real(label_smoothing, "label_smoothing", low=0.0, high=1.0, high_open=True)

    def call(self, y_true, y_pred):
        return sparse_crossentropy(y_true, y_pred, self.label_smoothing)

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing}
