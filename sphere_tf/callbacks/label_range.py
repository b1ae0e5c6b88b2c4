"""`LabelRangeCheck`: a clear error for out-of-range labels in compiled training steps (XLA included).

`MarginHead` checks its labels inside the step, but XLA (`jit_compile=True` on
TensorFlow) compiles asserts to nothing, so a label outside [0, num_classes)
would only show up as a NaN loss. The head also counts such labels in a
variable; this callback reads the counts after every training batch, outside
the compiled step, and raises a `ValueError` naming the head and the range.
"""

import keras

from sphere_tf import walk
from sphere_tf.layers.margin_head import MarginHead


def _margin_heads(model):
    return walk.find_layers(model, lambda layer: isinstance(layer, MarginHead))


def has_margin_head(model):
    """bool, whether `model` holds a `sphere_tf.layers.MarginHead` (at any depth)."""
    return bool(_margin_heads(model))


class LabelRangeCheck(keras.callbacks.Callback):
    """Stops `fit` with a `ValueError` when a `MarginHead` saw a label outside [0, num_classes).

    Add it to `fit` for a model with a margin head compiled with
    `jit_compile=True` (`SphereModel.fit` adds it itself):

    >>> model.fit(x, y, callbacks=[sphere_tf.callbacks.LabelRangeCheck()])  # doctest: +SKIP

    The check costs one read of a scalar per head and training batch.
    """

    def on_train_begin(self, logs=None):
        self._heads = _margin_heads(self.model)

    def on_train_batch_end(self, batch, logs=None):
        self.model  # noqa: B018  (on JAX, reading `model` syncs the variables from the train step)
        for head in self._heads:
            count = head.invalid_label_count()
            if count:
                raise head.label_range_error(count)
