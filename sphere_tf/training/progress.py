"""What a run prints: a progress bar on a terminal, one line per epoch otherwise.

`fit_verbosity(stream)` is Keras's `verbose` for `fit`: 1 (the progress bar) when `stream` is a terminal, 0
otherwise, where `EpochLogger` prints exactly one line per epoch instead of the bar's carriage-return updates.

Quieting TensorFlow's own log lines is an entry point's job, done before TensorFlow is imported:
`trainers/_quiet_logs.py`.
"""

import contextlib
import logging
import sys
import time

import keras

from sphere_tf import saving


def fit_verbosity(stream=None):
    """Keras's `verbose` for `fit`: 1 (progress bar) when `stream` (default stdout) is a terminal, else 0.

    With 0, add an `EpochLogger` to the callbacks for one line per epoch.
    """
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    try:
        return 1 if isatty is not None and isatty() else 0
    except (OSError, ValueError):  # closed or detached
        return 0


def resolve_fit_verbosity(verbose, stream=None):
    """`(verbose, callbacks)` for `fit` from a config's `verbose`: 'auto' becomes `fit_verbosity(stream)`
    plus an `EpochLogger` where that is 0; any other value is Keras's own, with no callback."""
    if verbose != "auto":
        return verbose, []
    verbose = fit_verbosity(stream)
    return verbose, ([] if verbose else [EpochLogger()])


def _format_value(value, precision):
    try:
        value = float(value)
    except (TypeError, ValueError):
        return str(value)
    return f"{value:.{precision}g}"


def _current_learning_rate(model):
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        return None
    try:
        return float(optimizer.learning_rate)
    except (TypeError, ValueError, AttributeError):
        return None


@saving.register_serializable()
class EpochLogger(keras.callbacks.Callback):
    """Prints one line per epoch: epoch, steps, loss, metrics, learning rate, seconds.

    For output that is not a terminal (a CI log, `> file`), with `fit(verbose=0)`
    (`fit_verbosity`); the line looks like

        epoch 3/10 - 469 steps - loss 0.3121 - accuracy 0.8875 - val_loss 0.3304 - lr 0.001 - 12.4 s

    Epochs are numbered from 1 as Keras's progress bar does (`History.epoch` + 1), counted from
    `initial_epoch` on a resumed run. Every value of the epoch's `logs` is printed in the
    order Keras gives them, loss first; `lr` is the optimizer's current learning rate (after a schedule)
    unless the logs already hold `learning_rate`.

    Args:
        precision: int >= 1, significant digits of every value.
        stream: a text stream (default: `sys.stdout` at each print); not part of the config.
    """

    def __init__(self, precision=4, stream=None):
        super().__init__()
        if isinstance(precision, bool) or not isinstance(precision, int) or precision < 1:
            raise ValueError(f"precision: expected an integer >= 1, got {precision!r}.")
        self.precision = precision
        self.stream = stream
        self._epochs = None
        self._steps = 0
        self._start = None

    def on_train_begin(self, logs=None):
        self._epochs = (self.params or {}).get("epochs")

    def on_epoch_begin(self, epoch, logs=None):
        self._steps = 0
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self._steps += 1

    def on_epoch_end(self, epoch, logs=None):
        seconds = time.perf_counter() - self._start if self._start is not None else 0.0
        total = f"/{self._epochs}" if self._epochs else ""
        parts = [f"epoch {epoch + 1}{total}", f"{self._steps} steps"]
        logs = dict(logs or {})
        names = sorted(logs, key=lambda name: name != "loss")  # loss first, then Keras's order
        parts += [f"{name} {_format_value(logs[name], self.precision)}" for name in names]
        if "learning_rate" not in logs and "lr" not in logs:
            lr = _current_learning_rate(self.model)
            if lr is not None:
                parts.append(f"lr {_format_value(lr, self.precision)}")
        parts.append(f"{seconds:.1f} s")
        stream = self.stream if self.stream is not None else sys.stdout
        print(" - ".join(parts), file=stream, flush=True)

    def get_config(self):
        return {"precision": self.precision}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


class _RetracingFilter(logging.Filter):
    def __init__(self, function_names):
        super().__init__()
        self.function_names = tuple(function_names)

    def filter(self, record):
        message = record.getMessage()
        return not ("triggered tf.function retracing" in message
                    and any(name in message for name in self.function_names))


@contextlib.contextmanager
def quiet_retracing(function_names):
    """Within it, TensorFlow's "N out of the last M calls to <f> triggered tf.function retracing" warning is
    dropped for the functions named in `function_names` (functions made once per model, such as Keras's train
    function of each new model: one trace each, which TensorFlow's detector, counting per code object, reports
    as retracing). Every other warning, and that one for any other function, passes. Usable as a decorator."""
    logger = logging.getLogger("tensorflow")
    quiet = _RetracingFilter(function_names)
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)
