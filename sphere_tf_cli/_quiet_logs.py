"""Quiets TensorFlow's and absl's INFO lines for a trainer run, before TensorFlow is imported.

Every trainer calls `quiet_tensorflow_logs()` first, before anything imports TensorFlow (`import sphere_tf`
does, through Keras):

    from sphere_tf_cli import _quiet_logs

    if __name__ == "__main__":
        _quiet_logs.quiet_tensorflow_logs()  # before anything below imports TensorFlow

TensorFlow reads its C++ log level once, when it is imported, and some lines (the oneDNN notice of
`tensorflow/core/util/port.cc`, written through absl before `absl::InitializeLog`) ignore
`TF_CPP_MIN_LOG_LEVEL` altogether, hence the order. absl's own `--verbosity` convention brings the lines back
(-1, absl's default: warnings and errors only; 0: INFO too; n >= 1: also TensorFlow's VLOG(n) and absl DEBUG).
Called after TensorFlow is imported it still quiets every later line. This module imports the standard
library and absl only (absl does not import TensorFlow).
"""

import logging
import os
import subprocess
import sys

from absl import logging as absl_logging

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

    Call it before TensorFlow is imported (see the module docstring). It installs absl's log handler first:
    TensorFlow gives its "tensorflow" logger a handler of its own when the root logger has none at its first
    log line, and `app.run` adds absl's to the root later, so every TensorFlow warning of a main that imports
    TensorFlow before `app.run` printed twice; with absl's handler there first, it prints once. It sets
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
    absl_logging.use_absl_handler()
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0" if verbosity >= 0 else "1"
    if verbosity >= 1:
        os.environ["TF_CPP_MAX_VLOG_LEVEL"] = str(verbosity)
    else:
        os.environ.pop("TF_CPP_MAX_VLOG_LEVEL", None)
    absl_logging.set_verbosity(verbosity)
    if "tensorflow" in sys.modules:  # TensorFlow's Python logger, if it is already there
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
