"""TensorBoard scalars on every Keras backend: `ScalarTensorBoard`, `tensorboard_callback` and `scalar_writer`.

`keras.callbacks.TensorBoard` writes through `tf.summary`, so it needs TensorFlow installed whatever the Keras
backend. `ScalarTensorBoard` writes the scalars it writes, with the same tags, steps and folders, through
tensorboardX (`pip install tensorboardX`), which needs neither TensorFlow nor TensorBoard:

- `<log_dir>/train`: `epoch_<name>` at the epoch index for every epoch-log entry that does not start with `val_`,
  plus `epoch_learning_rate` (the optimizer's current rate; `epoch_learning_rate_<optimizer name>` for each
  optimizer of a multi-optimizer); with an int `update_freq` (or 'batch', i.e. 1), `batch_<name>` for every
  batch-log entry at global batches 1, 2, ... (counted from each `fit`'s start) that are multiples of it.
- `<log_dir>/validation`: `epoch_<name>` for the `val_<name>` entries at the epoch index, and, at the end of every
  evaluation (inside `fit` or `model.evaluate(callbacks=[...])`), `evaluation_<name>_vs_iterations` at the
  optimizer's `iterations`.

Values are float32, as `tf.summary.scalar` writes them; tags are written verbatim (tensorboardX's `add_scalar`
would rewrite characters outside `[-/\\w.]`, `tf.summary` does not). The payload is the classic `simple_value`
(what tensorboardX and PyTorch write) where `tf.summary` writes a float32 `tensor` under the 'scalars' plugin;
TensorBoard shows both as the same scalar series.

One difference from `keras.callbacks.TensorBoard`, on purpose: with an int `update_freq`, Keras's callback
leaves the `tf.summary.record_if` of the last training batch active, so it writes the epoch scalars only when
that batch's global index is a multiple of `update_freq` (and `evaluation_*` only when the running count of
evaluation batches is); tensorflow/tensorflow#49109. `ScalarTensorBoard` writes them for every epoch and every
evaluation. Graphs, histograms, images, embeddings and profiles are not written: `tensorboard_callback` gives
Keras's own callback where the backend is TensorFlow.
"""

import importlib.util
import itertools
import numbers
import os

import keras
import numpy as np
from keras import ops

from sphere_tf import saving
from sphere_tf import validation

INSTALL_TENSORBOARDX = "pip install tensorboardX"

# Distinguishes the event files of one process: tensorboardX names a file after the second it was opened and
# the host, and a second writer opened in the same folder within that second would overwrite the first.
_FILE_NUMBERS = itertools.count()


def tensorboardx_message(user):
    """The one line that says `user` needs tensorboardX and what to install."""
    return (f"{user} writes TensorBoard event files with tensorboardX, which is not installed: "
            f"{INSTALL_TENSORBOARDX} (it needs neither TensorFlow nor TensorBoard).")


def require_tensorboardx(user):
    """Raises `ImportError` (`tensorboardx_message`) where tensorboardX cannot be imported; imports nothing.

    Callbacks call it at construction, so that a run without tensorboardX fails before training, not at the end
    of its first epoch.
    """
    if importlib.util.find_spec("tensorboardX") is None:
        raise ImportError(tensorboardx_message(user))


def check_log_dir(value, name="log_dir", allow_none=False):
    """`value` as a str path (`os.fspath`): a non-empty str or `os.PathLike`.

    Raises:
        ValueError: anything else, naming the argument (``Invalid value for argument `log_dir`...``).
    """
    if value is None and allow_none:
        return None
    path = os.fspath(value) if isinstance(value, (str, os.PathLike)) else None
    if not isinstance(path, str) or not path:
        raise validation.invalid_argument(
            name, "a non-empty str or os.PathLike folder" + (" or None" if allow_none else ""), value)
    return path


def check_update_freq(value, name="update_freq"):
    """'epoch', 'batch' or a positive int (a number of batches), as `keras.callbacks.TensorBoard` takes it."""
    if isinstance(value, str) and value in ("epoch", "batch"):
        return value
    if validation.is_int(value) and value > 0:
        return int(value)
    raise validation.invalid_argument(name, "'epoch', 'batch' or a positive int", value)


def _number(value):
    """A variable's or tensor's value as NumPy. A `keras.Variable` is read with its own `numpy()`: on TensorFlow
    that skips the variable's `__array__`, which NumPy 2 warns about when `ops.convert_to_numpy` calls it."""
    return value.numpy() if isinstance(value, keras.Variable) else ops.convert_to_numpy(value)


def _scalar(value, tag):
    if isinstance(value, numbers.Real):
        return float(value)
    array = np.asarray(_number(value))
    if array.size != 1:
        raise ValueError(f"TensorBoard scalar {tag!r} has shape {array.shape}; a scalar summary takes one value.")
    return float(array.reshape(()))


class ScalarWriter:
    """Writes scalar summaries to one new TensorBoard event file in `log_dir`, on any Keras backend.

    A thin layer over tensorboardX's `SummaryWriter`: the tag is written as given and the value as float32
    (`tf.summary.scalar`'s tag and precision), the event file's name is unique within the process, and tensors of
    any backend are accepted. Use it as a context manager, or `close()` it: tensorboardX writes from a background
    thread, and only `close()` waits for every queued value to reach the file (`flush()` writes what that thread
    has received).

    Args:
        log_dir: str or os.PathLike, the folder of the event file (created if missing).

    Raises:
        ImportError: tensorboardX is not installed (one line: `pip install tensorboardX`).
        ValueError: `log_dir` is not a non-empty path.
    """

    def __init__(self, log_dir):
        self.log_dir = check_log_dir(log_dir)
        try:
            # Optional: only the callbacks that write event files need it.
            from tensorboardX import SummaryWriter  # noqa: PLC0415
            from tensorboardX.proto.summary_pb2 import Summary  # noqa: PLC0415
        except ImportError:
            raise ImportError(tensorboardx_message("sphere_tf.callbacks.scalar_writer")) from None
        self._summary = Summary
        self._writer = SummaryWriter(self.log_dir, filename_suffix=f".{os.getpid()}.{next(_FILE_NUMBERS)}")

    @property
    def closed(self):
        """Whether `close()` was called."""
        return self._writer is None

    def scalar(self, tag, value, step):
        """Writes `value` (a Python or NumPy number, or a one-element tensor) under `tag` at int `step`.

        Raises:
            RuntimeError: the writer is closed.
            ValueError: `value` has more than one element.
        """
        if self._writer is None:
            raise RuntimeError(f"ScalarWriter({self.log_dir!r}) is closed; open a new one with scalar_writer().")
        summary = self._summary(value=[self._summary.Value(tag=str(tag), simple_value=_scalar(value, tag))])
        # `SummaryWriter.add_scalar` would rewrite the tag (`_clean_tag`); the file writer writes it as given.
        self._writer.file_writer.add_summary(summary, global_step=int(step))

    def flush(self):
        """Flushes what the writer thread has written to the event file (a no-op once closed)."""
        if self._writer is not None:
            self._writer.flush()

    def close(self):
        """Writes every queued value and closes the event file; idempotent."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()


def scalar_writer(log_dir):
    """A `ScalarWriter` for a new event file in `log_dir`: scalars at a step, on any backend (tensorboardX).

    Example:

    ```python
    with scalar_writer("logs/energy") as writer:
        writer.scalar("energy/total", 3.25, step=0)
    ```

    Raises:
        ImportError: tensorboardX is not installed (one line: `pip install tensorboardX`).
        ValueError: `log_dir` is not a non-empty path.
    """
    return ScalarWriter(log_dir)


def _learning_rates(optimizer):
    """The rates Keras's TensorBoard logs: the optimizer's `learning_rate` (inside a loss-scale wrapper), or
    `learning_rate_<name>` for each optimizer of one that holds several."""
    if hasattr(optimizer, "inner_optimizer"):
        optimizer = optimizer.inner_optimizer
    if hasattr(optimizer, "optimizers"):
        return {f"learning_rate_{opt.name}": float(_number(opt.learning_rate)) for opt in optimizer.optimizers}
    if isinstance(optimizer, keras.optimizers.Optimizer):
        return {"learning_rate": float(_number(optimizer.learning_rate))}
    return {}


@saving.register_serializable()
class ScalarTensorBoard(keras.callbacks.Callback):
    """Writes the scalars of `keras.callbacks.TensorBoard` without TensorFlow (through tensorboardX).

    Same folders (`<log_dir>/train`, `<log_dir>/validation`), tags (`epoch_<metric>`, `epoch_learning_rate`,
    `evaluation_<metric>_vs_iterations`, `batch_<metric>`) and steps (the epoch index; the optimizer's
    iterations; the global batch) as Keras's callback: see the module docstring, which also names the one
    difference (epoch scalars with an int `update_freq`). Place it after the callbacks that add to the logs.

    Example:

    ```python
    model.fit(x, y, epochs=3, validation_data=(x_val, y_val),
              callbacks=[ScalarTensorBoard("logs/run1")])
    ```

    Args:
        log_dir: str or os.PathLike, the run's folder; `train/` and `validation/` are created under it.
        update_freq: 'epoch' (epoch scalars only), 'batch' (also `batch_<metric>` after every batch) or an int
            n > 0 (also `batch_<metric>` after every n-th batch).

    Raises:
        ImportError: tensorboardX is not installed (one line: `pip install tensorboardX`).
        ValueError: an argument is invalid (naming it).
    """

    def __init__(self, log_dir, update_freq="epoch"):
        super().__init__()
        self.log_dir = check_log_dir(log_dir)
        self.update_freq = check_update_freq(update_freq)
        require_tensorboardx(f"ScalarTensorBoard(log_dir={self.log_dir!r})")
        self._batch_freq = {"epoch": None, "batch": 1}.get(self.update_freq, self.update_freq)
        self._writers = {}
        self._global_train_batch = 0
        self._training = False

    def _writer(self, run):
        if run not in self._writers:
            self._writers[run] = scalar_writer(os.path.join(self.log_dir, run))
        return self._writers[run]

    def _write(self, run, scalars, step):
        writer = self._writer(run)
        for tag, value in scalars.items():
            writer.scalar(tag, value, step)

    def _close_writers(self):
        for writer in self._writers.values():
            writer.close()
        self._writers = {}

    def set_model(self, model):
        super().set_model(model)
        # Writers left open by an interrupted fit or a plain evaluate belong to the previous model's run.
        self._close_writers()

    def on_train_begin(self, logs=None):
        self._global_train_batch = 0
        self._training = True

    def on_train_batch_begin(self, batch, logs=None):
        self._global_train_batch += 1

    def on_train_batch_end(self, batch, logs=None):
        if self._batch_freq is None or self._global_train_batch % self._batch_freq or not isinstance(logs, dict):
            return
        self._write("train", {f"batch_{name}": value for name, value in logs.items()}, self._global_train_batch)

    def on_test_end(self, logs=None):
        optimizer = self.model.optimizer
        if logs and optimizer is not None and hasattr(optimizer, "iterations"):
            step = int(_number(optimizer.iterations))
            self._write("validation", {f"evaluation_{name}_vs_iterations": value for name, value in logs.items()},
                        step)
        if not self._training:
            # A plain `evaluate` has no train end to close at: close now so that the file is complete.
            self._close_writers()

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        train_logs = {name: value for name, value in logs.items() if not name.startswith("val_")}
        val_logs = {name[len("val_"):]: value for name, value in logs.items() if name.startswith("val_")}
        train_logs.update(_learning_rates(self.model.optimizer))
        if train_logs:
            self._write("train", {f"epoch_{name}": value for name, value in train_logs.items()}, epoch)
        if val_logs:
            self._write("validation", {f"epoch_{name}": value for name, value in val_logs.items()}, epoch)
        for writer in self._writers.values():
            writer.flush()

    def on_train_end(self, logs=None):
        self._training = False
        self._close_writers()

    def get_config(self):
        return {"log_dir": self.log_dir, "update_freq": self.update_freq}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def tensorboard_callback(log_dir, update_freq="epoch"):
    """The TensorBoard callback for the current Keras backend.

    `keras.callbacks.TensorBoard(log_dir, update_freq=update_freq)` where the backend is TensorFlow (it also
    writes the model's graph), `ScalarTensorBoard(log_dir, update_freq)` elsewhere (the same scalars, through
    tensorboardX). With an int `update_freq`, Keras's callback writes epoch scalars only in epochs that end on a
    multiple of it (module docstring).

    Args:
        log_dir: str or os.PathLike, the run's TensorBoard folder.
        update_freq: 'epoch', 'batch' or a positive int (`keras.callbacks.TensorBoard`'s argument).

    Returns:
        A `keras.callbacks.Callback`.

    Raises:
        ImportError: off TensorFlow, tensorboardX is not installed.
        ValueError: an argument is invalid (naming it).
    """
    log_dir = check_log_dir(log_dir)
    update_freq = check_update_freq(update_freq)
    if keras.backend.backend() == "tensorflow":
        return keras.callbacks.TensorBoard(log_dir, update_freq=update_freq)
    return ScalarTensorBoard(log_dir, update_freq=update_freq)


__all__ = ["INSTALL_TENSORBOARDX", "ScalarTensorBoard", "ScalarWriter", "check_log_dir", "check_update_freq",
           "require_tensorboardx", "scalar_writer", "tensorboard_callback", "tensorboardx_message"]
