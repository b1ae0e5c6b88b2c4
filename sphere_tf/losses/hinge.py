"""The one-vs-all multi-class hinge loss of Caffe's `HingeLoss` layer, from integer labels and logits.

The "Hinge Loss" rows of L-Softmax's result tables (Liu, Wen, Yu, Yang, "Large-Margin Softmax Loss for
Convolutional Neural Networks", ICML 2016, Tables 2-4; W. Liu's PhD thesis 2020, Tables 2.2-2.4: MNIST 0.47,
CIFAR-10 9.91, CIFAR-10+ 6.96, CIFAR-100 32.90 % error) train the same networks as the softmax rows with a hinge
loss on the classifier's outputs instead of the softmax loss. The paper's experiments run in Caffe ("We implement
the CNNs using the Caffe library"), whose hinge loss is `HingeLossLayer` (BVLC/caffe
`src/caffe/layers/hinge_loss_layer.cpp`, `HingeLossParameter` in `src/caffe/proto/caffe.proto`): every class
is a binary SVM with target t_j = +1 for the label and −1 otherwise,

```
L_i = Σ_j max(0, 1 − t_ij · f_ij)^p,    t_ij = +1 if j = y_i else −1
L   = (1/N) Σ_i L_i                       p = 1 ('l1', Caffe's default) or p = 2 ('l2', the L2-SVM)
```

Caffe's layer sums over every class of every sample and divides by the batch size N; the per-sample loss here
is the inner sum, and the Keras reduction `sum_over_batch_size` divides by N, so the value and the gradient are
Caffe's. The class is then predicted, as with softmax, by the largest logit.

Note: the paper does not say which norm its hinge row used; `'l1'` is Caffe's default
(`optional Norm norm = 1 [default = L1]`) and ours.
"""

import keras
from keras import ops

from sphere_tf import saving
from sphere_tf import validation
from sphere_tf.losses import margin_softmax

NORMS = ("l1", "l2")


def sparse_hinge(y_true, logits, norm="l1"):
    """Per-sample one-vs-all hinge loss of Caffe's `HingeLossLayer` (module docstring), float32.

    Args:
        y_true: `(N,)` or `(N, 1)` integer labels.
        logits: `(N, C)` logits.
        norm: 'l1' (Σ_j max(0, 1 − t_j f_j)) or 'l2' (Σ_j max(0, 1 − t_j f_j)²).

    Returns:
        float32 `(N,)` losses.
    """
    validation.one_of(norm, "norm", NORMS)
    logits = ops.cast(logits, "float32")
    labels = ops.reshape(ops.cast(y_true, "int32"), (-1,))
    signs = 2.0 * ops.one_hot(labels, ops.shape(logits)[-1], dtype="float32") - 1.0  # t_ij ∈ {+1, −1}
    margins = ops.relu(1.0 - signs * logits)
    if norm == "l2":
        margins = ops.square(margins)
    return ops.sum(margins, axis=-1)


@saving.register_serializable()
class SparseHinge(keras.losses.Loss):
    """Caffe's one-vs-all multi-class hinge loss (L1 or L2) from integer labels and logits.

    ```
    L_i = Σ_j max(0, 1 − t_ij f_ij)^p,   t_ij = +1 for j = y_i, −1 otherwise;   p = 1 ('l1') or 2 ('l2')
    ```

    The hinge row of L-Softmax (ICML 2016) Tables 2-4; see `sparse_hinge` and the module docstring. Unlike
    `keras.losses.CategoricalHinge` (Crammer–Singer: only the largest wrong logit counts, one-hot labels),
    every class contributes a binary hinge term, as in Caffe's `HingeLossLayer`.

    Args:
        norm: 'l1' (Caffe's default) or 'l2'.
        reduction, name, dtype: as for `keras.losses.Loss`.

    Example:

    >>> loss = SparseHinge()
    >>> float(loss([0], [[2.0, -3.0]]))
    0.0
    >>> float(loss([1], [[0.5, 0.0]]))
    2.5
    """

    def __init__(self, norm="l1", reduction="sum_over_batch_size", name="sparse_hinge", dtype=None):
        super().__init__(**margin_softmax.loss_arguments(reduction, name, dtype))
        self.norm = validation.one_of(norm, "norm", NORMS)

    def call(self, y_true, y_pred):
        return sparse_hinge(y_true, y_pred, self.norm)

    def get_config(self):
        return {**super().get_config(), "norm": self.norm}
