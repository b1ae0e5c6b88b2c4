"""What a run prints: quiet TensorFlow logs, a progress bar on a terminal, one line per epoch otherwise.

* `quiet_tensorflow_logs(verbosity)` keeps TensorFlow's C++ INFO lines (oneDNN
  notices, "Compiled cluster using XLA!", SavedModel signature renames,
  sharding-callback timings) and absl's Python INFO lines out of a normal run's
  output; absl's own `--verbosity` convention brings them back (-1, absl's
  default: warnings and errors only; 0: INFO too; n >= 1: also TensorFlow's
  VLOG(n) and absl DEBUG).
* `fit_verbosity(stream)` is Keras's `verbose` for `fit`: 1 (the progress bar)
  when `stream` is a terminal, 0 otherwise, where `EpochLogger` prints exactly
  one line per epoch instead of the bar's carriage-return updates.

TensorFlow reads its C++ log level once, when it is imported, and some lines
(the oneDNN notice of `tensorflow/core/util/port.cc`, written through absl
before `absl::InitializeLog`) ignore `TF_CPP_MIN_LOG_LEVEL` altogether, so
`quiet_tensorflow_logs` must run before the first `import tensorflow`
(hence before `import sphere_tf`, whose package imports TensorFlow). This
module's top level imports the standard library only and `EpochLogger` is
built on first use, so an entry point can load this file on its own first:

    import importlib.util, os, sys
    _spec = importlib.util.spec_from_file_location(
        "sphere_tf_progress", os.path.join(REPO, "sphere_tf", "training", "progress.py"))
    _progress = importlib.util.module_from_spec(_spec)
    _spec.loader.exec_module(_progress)
    _progress.quiet_tensorflow_logs()  # verbosity from sys.argv's --verbosity / -v
    import tensorflow  # now quiet

Called after TensorFlow is imported it still quiets every later line.
"""

import os
import re
import subprocess
import sys
import time

# absl's --verbosity: -1 (its default) WARNING, 0 INFO, 1 DEBUG, n > 1 VLOG(n).
QUIET = -1

# An absl / glog C++ line: severity letter, MMDD, time, thread id, file:line].
_CPP_INFO_LINE = r"^I\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^ \]]+:\d+\] "  # seconds may be a Unix time
_PRE_INIT_NOTICE = r"^WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
# Lines of a conversion that succeeded (written by C++, past TF_CPP_MIN_LOG_LEVEL): the TFLite converter's
# notices of options it ignores, and the TFLite interpreter's XNNPACK notice, printed at every model load.
_CONVERTER_NOTICES = (r"^W\d{4} \d\d:\d\d:\d+\.\d+ +\d+ tf_tfl_flatbuffer_helpers\.cc:\d+\] Ignored "
                      r"(output_format|drop_control_dependency)\.$"
                      r"|^INFO: Created TensorFlow Lite XNNPACK delegate for CPU\.$")

# The stderr filter, run as `python -c`: drops the lines matching the pattern in argv[1], passes the
# rest through unchanged and at once; it ends when every writer has closed the pipe, so it outlives a
# crash of the process it filters (whose last words are not lost), and it ignores Ctrl-C, which reaches
# the whole process group, so the traceback of an interrupted run still gets through.
_FILTER_PROGRAM = """
import re, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
pattern = re.compile(sys.argv[1].encode())
out = sys.stdout.buffer
for line in sys.stdin.buffer:
    if not pattern.match(line):
        out.write(line)
        out.flush()
"""

_filter_process = None


def verbosity_from_argv(argv=None, default=QUIET):
    """absl's `--verbosity` / `-v` value in `argv` (default `sys.argv`), read before absl parses flags.

    Accepts `--verbosity=N`, `--verbosity N`, `-v=N`, `-v N` and `--v=N`; the last one given wins.

    Raises:
        ValueError: the value is not an integer.
    """
    argv = sys.argv if argv is None else argv
    value = default
    names = ("--verbosity", "-v", "--v")
    for i, arg in enumerate(argv):
        if arg == "--":
            break
        name, eq, text = arg.partition("=")
        if name not in names:
            continue
        if not eq:
            if i + 1 >= len(argv):
                raise ValueError(f"verbosity: {arg} needs a value (an integer).")
            text = argv[i + 1]
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"verbosity: expected an integer after {name}, got {text!r}.") from None
    return value


def quiet_tensorflow_logs(verbosity=None, filter_stderr=True):
    """Sets TensorFlow's C++ and absl's log levels from an absl-style verbosity; returns the verbosity.

    Call it before TensorFlow is imported (see the module docstring): it sets
    `TF_CPP_MIN_LOG_LEVEL` (1: no INFO, unless `verbosity >= 0`) and
    `TF_CPP_MAX_VLOG_LEVEL` (`verbosity` when >= 1), absl's Python verbosity, and, with
    `filter_stderr` and `verbosity < 0`, routes this process's file descriptor 2 through a
    filter process that drops C++ INFO lines (`I0000 ... file.cc:N] ...`) and absl's
    "All log messages before absl::InitializeLog()" notice, which TensorFlow prints
    whatever `TF_CPP_MIN_LOG_LEVEL` says, and the TFLite converter's and interpreter's
    notices of a successful conversion (`_CONVERTER_NOTICES`). Warnings, errors, tracebacks and everything else
    written to stderr pass through unchanged. A second call changes the levels; the filter is
    installed once. The filter is for entry points (a trainer's `main` module): it rewires the
    whole process's stderr, so library code and in-process tests pass `filter_stderr=False`.

    Args:
        verbosity: int, absl's `--verbosity` convention (-1 quiet, 0 INFO, n >= 1 VLOG(n));
            None reads `--verbosity` / `-v` from `sys.argv` (default -1).
        filter_stderr: bool, install the stderr filter when quiet.

    Returns:
        The verbosity applied.

    Raises:
        ValueError: `verbosity` is not an integer.
    """
    if verbosity is None:
        verbosity = verbosity_from_argv()
    if isinstance(verbosity, bool) or not isinstance(verbosity, int):
        raise ValueError(f"verbosity: expected an integer (absl's --verbosity), got {verbosity!r}.")
    if not isinstance(filter_stderr, bool):
        raise ValueError(f"filter_stderr: expected a bool, got {filter_stderr!r}.")
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0" if verbosity >= 0 else "1"
    if verbosity >= 1:
        os.environ["TF_CPP_MAX_VLOG_LEVEL"] = str(verbosity)
    else:
        os.environ.pop("TF_CPP_MAX_VLOG_LEVEL", None)
    from absl import logging as absl_logging  # absl does not import TensorFlow

    absl_logging.set_verbosity(verbosity)
    if "tensorflow" in sys.modules:  # TensorFlow's Python logger, if it is already there
        import logging

        logging.getLogger("tensorflow").setLevel(logging.WARNING if verbosity < 0 else logging.INFO)
    if filter_stderr and verbosity < 0:
        _install_stderr_filter()
    return verbosity


def _install_stderr_filter():
    global _filter_process
    if _filter_process is not None and _filter_process.poll() is None:
        return
    sys.stderr.flush()
    pattern = f"{_CPP_INFO_LINE}|{_PRE_INIT_NOTICE}|{_CONVERTER_NOTICES}"
    original = os.dup(2)
    _filter_process = subprocess.Popen(
        [sys.executable, "-c", _FILTER_PROGRAM, pattern], stdin=subprocess.PIPE, stdout=original,
        stderr=original, close_fds=True,
    )
    os.close(original)
    os.dup2(_filter_process.stdin.fileno(), 2)
    _filter_process.stdin.close()  # fd 2 now holds the write end


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
    return verbose, ([] if verbose else [__getattr__("EpochLogger")()])  # built on first use


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


def _build_epoch_logger():
    import keras

    @keras.saving.register_keras_serializable(package="sphere_tf")
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

    EpochLogger.__module__ = __name__
    return EpochLogger


def __getattr__(name):
    # EpochLogger is built (and registered with Keras) on first use, so that importing this file
    # does not import TensorFlow (see the module docstring).
    if name == "EpochLogger":
        cls = _build_epoch_logger()
        globals()["EpochLogger"] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
