"""Quiet TensorFlow logs (`sphere_tf_cli/_quiet_logs.py`), Keras's verbose for the stream, and the one-line-per-epoch logger."""

import io
import json
import os
import re
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest

import sphere_tf
from sphere_tf.training import progress
from sphere_tf_cli import _quiet_logs

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# A training script: quiets the logs as a trainer does (no TensorFlow yet), then imports sphere_tf (hence
# TensorFlow) and fits a tiny model with a jit-compiled step (XLA's "Compiled cluster" INFO line)
# using EpochLogger and fit_verbosity(sys.stdout); prints the History as JSON last.
_SCRIPT = textwrap.dedent(
    """
    import json, sys
    from sphere_tf_cli import _quiet_logs
    assert "tensorflow" not in sys.modules
    _quiet_logs.quiet_tensorflow_logs({verbosity})
    from sphere_tf.training import progress
    import numpy as np
    import keras
    keras.utils.set_random_seed(0)
    x = np.random.default_rng(0).standard_normal((32, 4)).astype("float32")
    y = (x[:, 0] > 0).astype("int32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"], jit_compile=True)
    history = model.fit(x, y, batch_size=8, epochs={epochs}, verbose=progress.fit_verbosity(sys.stdout),
                        callbacks=[progress.EpochLogger(precision=6)])
    print("HISTORY " + json.dumps({{"epoch": history.epoch, "loss": history.history["loss"]}}))
    sys.stderr.write("a plain stderr line\\n")
    """
)

_LINE = re.compile(r"^epoch (\d+)/(\d+) - (\d+) steps - loss (\S+) - accuracy (\S+) - lr (\S+) - \d+\.\d s$")


def _run(tmp_path, verbosity, epochs):
    script = tmp_path / "fit_quietly.py"
    script.write_text(_SCRIPT.format(verbosity=verbosity, epochs=epochs))
    env = {k: v for k, v in os.environ.items() if not k.startswith("TF_CPP_")}
    env["PYTHONPATH"] = os.pathsep.join([_REPO] + [p for p in [env.get("PYTHONPATH")] if p])
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120)


def test_quiet_fit_prints_one_line_per_epoch_and_no_info(tmp_path):
    proc = _run(tmp_path, verbosity=-1, epochs=3)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert "oneDNN" not in out
    assert "I0000" not in out
    assert "absl::InitializeLog" not in out
    assert "\r" not in proc.stdout and "\x08" not in proc.stdout
    assert "a plain stderr line" in proc.stderr  # the filter passes everything else through
    lines = proc.stdout.strip().splitlines()
    history = json.loads(lines[-1][len("HISTORY "):])
    epoch_lines = [_LINE.match(line) for line in lines[:-1]]
    assert all(epoch_lines), lines
    assert [int(m.group(1)) for m in epoch_lines] == [e + 1 for e in history["epoch"]] == [1, 2, 3]
    assert {int(m.group(2)) for m in epoch_lines} == {3}
    assert {int(m.group(3)) for m in epoch_lines} == {4}  # 32 examples / batch 8
    np.testing.assert_allclose([float(m.group(4)) for m in epoch_lines], history["loss"], rtol=1e-5)
    assert {float(m.group(6)) for m in epoch_lines} == {0.1}


def test_verbosity_zero_brings_info_back(tmp_path):
    proc = _run(tmp_path, verbosity=0, epochs=1)
    assert proc.returncode == 0, proc.stderr
    # TensorFlow's INFO lines are back ("oneDNN custom operations are on" only where oneDNN is on: AVX-512 hosts).
    assert "I0000" in proc.stderr
    assert "Compiled cluster using XLA" in proc.stderr


class _Stream(io.StringIO):
    def __init__(self, tty):
        super().__init__()
        self._tty = tty

    def isatty(self):
        return self._tty


def test_resolve_fit_verbosity():
    assert progress.resolve_fit_verbosity(2, _Stream(False)) == (2, [])  # Keras's own values pass through
    assert progress.resolve_fit_verbosity("auto", _Stream(True)) == (1, [])
    verbose, callbacks = progress.resolve_fit_verbosity("auto", _Stream(False))
    assert verbose == 0 and [type(c).__name__ for c in callbacks] == ["EpochLogger"]


def test_fit_verbosity():
    assert progress.fit_verbosity(_Stream(True)) == 1
    assert progress.fit_verbosity(_Stream(False)) == 0
    assert progress.fit_verbosity(object()) == 0  # no isatty
    closed = io.StringIO()
    closed.close()  # isatty raises ValueError
    assert progress.fit_verbosity(closed) == 0


def test_epoch_logger_line_in_process():
    stream = io.StringIO()
    keras.utils.set_random_seed(0)
    x = np.arange(12, dtype="float32").reshape(6, 2) / 10
    y = np.array([0.0, 1.0, 0.0, 1.0, 0.0, 1.0], dtype="float32")
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.05), "mse")
    history = model.fit(x, y, batch_size=4, epochs=2, initial_epoch=0, verbose=0,
                        callbacks=[progress.EpochLogger(precision=8, stream=stream)])
    lines = stream.getvalue().splitlines()
    assert len(lines) == 2
    for epoch, line in zip(history.epoch, lines):
        assert line.startswith(f"epoch {epoch + 1}/2 - 2 steps - loss ")  # ceil(6 / 4) steps
        loss = float(line.split(" - ")[2].split()[1])
        assert loss == pytest.approx(history.history["loss"][epoch], rel=1e-7)
        lr = float(line.split(" - ")[3].split()[1])
        assert line.split(" - ")[3].startswith("lr ") and lr == pytest.approx(0.05, rel=1e-7)  # float32 0.05


def test_epoch_logger_config_round_trip():
    logger = progress.EpochLogger(precision=6)
    assert logger.get_config() == {"precision": 6, "sphere_tf_version": sphere_tf.__version__}
    restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(logger))
    assert isinstance(restored, progress.EpochLogger) and restored.precision == 6


@pytest.mark.parametrize("precision", [0, 2.5, True, "4"])
def test_epoch_logger_rejects_bad_precision(precision):
    with pytest.raises(ValueError, match="precision"):
        progress.EpochLogger(precision=precision)


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["prog"], -1),
        (["prog", "--verbosity=0"], 0),
        (["prog", "--verbosity", "2"], 2),
        (["prog", "-v", "1", "--workdir", "x"], 1),
        (["prog", "-v=0"], 0),
        (["prog", "--v=3"], 3),
        (["prog", "--verbosity=1", "--verbosity=-1"], -1),
        (["prog", "--", "--verbosity=1"], -1),
        (["prog", "--verbosity_level=3"], -1),
    ],
)
def test_verbosity_from_argv(argv, expected):
    assert _quiet_logs.verbosity_from_argv(argv) == expected


def test_bad_verbosity_is_named():
    with pytest.raises(ValueError, match="verbosity"):
        _quiet_logs.verbosity_from_argv(["prog", "--verbosity=loud"])
    with pytest.raises(ValueError, match="verbosity"):
        _quiet_logs.verbosity_from_argv(["prog", "-v"])
    with pytest.raises(ValueError, match="verbosity"):
        _quiet_logs.quiet_tensorflow_logs("0")
    with pytest.raises(ValueError, match="filter_stderr"):
        _quiet_logs.quiet_tensorflow_logs(0, filter_stderr="yes")
