"""`WarnOnSkippedNormMean`: says which operators left non-finite batches out of their E{‖x‖} average.

The decoupled operators with a radius (TanhConv, BallConv, SegConv; Liu et al.,
"Decoupled Networks", CVPR 2018, eqs. 19-21) keep a moving average of the batch
mean ‖x‖ for inference. A batch whose mean is not finite is left out of it inside
the compiled train step and counted in the layer's `norm_mean_skipped` weight
(`sphere_tf.layers.DecoupledConv2D`, Note); this callback reads the counts on the
host, where Python can warn, like `keras.callbacks.TerminateOnNaN` reads the loss.
"""

import warnings

import keras
from keras import ops

from sphere_tf import walk


def guarded_layers(model):
    """The layers under `model` that count skipped E{‖x‖} batches (built operators with a radius)."""
    return walk.find_layers(model, lambda layer: getattr(layer, "norm_mean_skipped", None) is not None)


def skipped_counts(model):
    """dict layer name -> number of training batches left out of that layer's E{‖x‖} average (nonzero only).

    Under a distribution strategy the count is averaged over the replicas (a batch
    skipped by one replica of two counts 0.5).
    """
    counts = {}
    for layer in guarded_layers(model):
        count = float(ops.convert_to_numpy(layer.norm_mean_skipped.value))
        if count:
            counts[layer.name] = count
    return counts


class WarnOnSkippedNormMean(keras.callbacks.Callback):
    """Warns once per layer when an operator skipped a non-finite batch in its E{‖x‖} average.

    Checked at the end of every epoch, of training, and at the start of
    `evaluate` / `predict` (when passed to them): reading the counters costs one
    host transfer of a scalar per layer, nothing per step. The warning
    (`RuntimeWarning`, Python `warnings`) names the layer and the count; the
    average itself holds the finite batches only, so inference stays finite, but
    the data that produced a NaN or inf (or a float16 overflow) deserves a look.

    Example:

    >>> callback = WarnOnSkippedNormMean()  # model.fit(..., callbacks=[callback])
    """

    def __init__(self):
        super().__init__()
        self._warned = set()

    def _check(self):
        for name, count in skipped_counts(self.model).items():
            if name in self._warned:
                continue
            self._warned.add(name)
            warnings.warn(
                f"Layer {name!r} left {count:g} training batch(es) with a non-finite mean ‖x‖ (NaN or inf "
                "inputs, or a float16 overflow) out of its E{‖x‖} moving average; the average and inference "
                "use the finite batches only. Check the training data.",
                RuntimeWarning,
                stacklevel=2,
            )

    def on_epoch_end(self, epoch, logs=None):
        self._check()

    def on_train_end(self, logs=None):
        self._check()

    def on_test_begin(self, logs=None):
        self._check()

    def on_predict_begin(self, logs=None):
        self._check()
