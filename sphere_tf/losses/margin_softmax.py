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
        super().__init__(reduction=reduction, name=name, dtype=dtype)
        self.label_smoothing = validation.real(label_smoothing, "label_smoothing", low=0.0, high=1.0, high_open=True)

    def call(self, y_true, y_pred):
        return sparse_crossentropy(y_true, y_pred, self.label_smoothing)

    def get_config(self):
        return {**super().get_config(), "label_smoothing": self.label_smoothing}
