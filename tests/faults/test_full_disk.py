"""A full disk (errno ENOSPC) during a checkpoint write, a `model.keras` write and an export, on every backend.

Required: the run stops with one error, `checkpoint.DiskFullError`, that names the file and says "No space left on
device" (the CLI prints it as one line, no traceback); what was written before stays valid, since nothing partly
written becomes the latest (a temporary name renamed into place; TensorFlow's checkpoint list updated last); a rerun
once space is free resumes and ends as the uninterrupted run.

A tmpfs of a few kilobytes would be the real thing, but mounting one needs root. The faults are injected at the
lowest write each path makes from Python instead: `open` for the files Python writes (the array archives, JSON
files, `.keras` files), and TensorFlow's `SaveV2` / `MergeV2Checkpoints` ops for its checkpoints and
`tf.saved_model.save` for SavedModels, which write from C++. Those raise what TensorFlow raises on a full disk,
`ResourceExhaustedError` with ``<file>; No space left on device`` (its POSIX file system maps ENOSPC so;
`test_a_real_full_disk_through_the_c_library` checks that through an `LD_PRELOAD` library that makes the C
library's writes fail, where a C compiler is installed).
"""

import builtins
import contextlib
import errno
import glob
import io
import json
import os
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest

from sphere_tf import saving
from sphere_tf.runners import classifier
from sphere_tf.training import array_checkpoint
from sphere_tf.training import checkpoint
from tests.faults import _runner_faults as runs

BACKEND = keras.backend.backend()
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NO_SPACE = "No space left on device"


class _FullFile:
    """A file opened for writing on a full disk: the first write stores half its bytes, then fails."""

    def __init__(self, f, path):
        self._f, self._path = f, path

    def write(self, data):
        self._f.write(data[: len(data) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), self._path)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self._f.close()


@contextlib.contextmanager
def full_disk(match, skip=0):
    """Writes to files whose path contains `match` fail with ENOSPC (the `skip` first such files are written).

    Python's own writes go through `open` (`io.open` is the same function under another name); TensorFlow's
    checkpoint and SavedModel writes through its ops, patched on the TensorFlow backend.
    """
    original = builtins.open
    seen = []

    def failing(path):
        if match not in os.fspath(path):
            return False
        seen.append(path)
        return len(seen) > skip

    def opener(file, mode="r", *args, **kwargs):
        f = original(file, mode, *args, **kwargs)
        if isinstance(file, (str, os.PathLike)) and any(c in mode for c in "wax+") and failing(file):
            return _FullFile(f, os.fspath(file))
        return f

    with contextlib.ExitStack() as stack:
        patch = pytest.MonkeyPatch()
        stack.callback(patch.undo)
        patch.setattr(builtins, "open", opener)
        patch.setattr(io, "open", opener)
        if BACKEND == "tensorflow":
            import tensorflow as tf  # noqa: PLC0415
            from tensorflow.python.ops import gen_io_ops  # noqa: PLC0415
            from tensorflow.python.ops import io_ops  # noqa: PLC0415

            def no_space(path):
                return tf.errors.ResourceExhaustedError(None, None, f"{path}; {NO_SPACE} [Op:SaveV2]")

            save_v2, merge, save_model = io_ops.save_v2, gen_io_ops.merge_v2_checkpoints, tf.saved_model.save

            def failing_save_v2(prefix, *args, **kwargs):
                path = prefix.numpy().decode() if hasattr(prefix, "numpy") else str(prefix)
                if failing(path):  # the shard in `<prefix>_temp/`, as TensorFlow leaves it
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    raise no_space(f"{path}.data-00000-of-00001.tempstate1")
                return save_v2(prefix, *args, **kwargs)

            def failing_merge(prefixes, destination, *args, **kwargs):
                path = destination.numpy().decode() if hasattr(destination, "numpy") else str(destination)
                result = merge(prefixes, destination, *args, **kwargs)
                if failing(path + ".index"):  # the index is written in place: half of it stays
                    runs.truncate_half(path + ".index")
                    raise no_space(f"{path}.index")
                return result

            def failing_save_model(obj, export_dir, *args, **kwargs):
                save_model(obj, export_dir, *args, **kwargs)
                variables = os.path.join(export_dir, "variables", "variables.data-00000-of-00001")
                if failing(variables):
                    runs.truncate_half(variables)
                    raise no_space(variables)

            patch.setattr(io_ops, "save_v2", failing_save_v2)
            patch.setattr(gen_io_ops, "merge_v2_checkpoints", failing_merge)
            patch.setattr(tf.saved_model, "save", failing_save_model)
        yield seen


def _checkpoint_write(step):
    """The write of a checkpoint's values: the array archive's temporary file, TensorFlow's data shard."""
    return f"ckpt-{step}_temp" if BACKEND == "tensorflow" else f"state-{step}.npz{array_checkpoint._TEMPORARY}"


def test_a_full_disk_during_a_checkpoint_write_stops_the_run_and_a_rerun_resumes(tmp_path, capsys, tally):
    runs.reference()
    workdir = str(tmp_path / "run")
    with full_disk(_checkpoint_write(6)) as failed, pytest.raises(checkpoint.DiskFullError) as raised:
        classifier.train_and_evaluate(runs.config(), workdir)
    message = str(raised.value)
    assert failed and raised.value.errno == errno.ENOSPC
    assert NO_SPACE in message and "step 6" in message and os.path.basename(raised.value.filename) in message
    assert _checkpoint_write(6) in raised.value.filename
    directory = runs.state_dir(workdir)
    assert "nothing of step 6 replaced the latest checkpoint" in message and "-4" in message
    # The previous checkpoint is the latest, complete; nothing of step 6 is left in its way.
    assert checkpoint.latest_step(directory) == 4
    assert not glob.glob(os.path.join(directory, "state-6*")) and not glob.glob(os.path.join(directory, "ckpt-6.*"))
    assert not os.path.exists(os.path.join(workdir, "results.json"))
    capsys.readouterr()
    results = classifier.train_and_evaluate(runs.config(), workdir)  # space freed: the same command
    assert "Resumed from step 4 of 6" in capsys.readouterr().out
    runs.assert_ends_as_the_reference(workdir, results)
    tally("full disk", "during a checkpoint's data write (runner)",
          lost="2 steps: resumed from the previous checkpoint")


# The library-level cases: the driver of tests/training/test_checkpoint_recovery.py, checkpoints every 2 steps.
def _fit(directory, steps=6):
    model = runs.dense_model()
    result = checkpoint.fit_resumable(model, runs.dense_stream, epochs=1, directory=directory, steps_per_epoch=steps,
                                      every_steps=2, verbose=0)
    return model, result


# Each write of the save of step 4, in the order the save makes them: (what the file's path holds, how many such
# files the save of step 2 wrote before). Every one leaves the checkpoint of step 2 the latest: `partial_epoch.json`
# and TensorFlow's version record are written before the checkpoint, its list (or the array index) after it.
WRITES = ({"partial_epoch.json": (checkpoint.PARTIAL_FILE + ".tmp", 1),
           "versions record": (checkpoint.TF_VERSIONS_FILE + ".tmp", 1), "data shard": ("ckpt-4_temp", 0),
           "index (merge)": ("ckpt-4.index", 0)}
          if BACKEND == "tensorflow" else
          {"partial_epoch.json": (checkpoint.PARTIAL_FILE + ".tmp", 1), "archive": ("state-4.npz.tmp", 0),
           "index": (array_checkpoint.INDEX_FILE + ".tmp", 1)})


@pytest.mark.parametrize("write", list(WRITES))
def test_a_full_disk_at_each_write_of_a_save_leaves_a_valid_latest_checkpoint(tmp_path, write, tally):
    (match, skip), latest = WRITES[write], 2
    directory = str(tmp_path / "ckpt")
    with full_disk(match, skip) as failed, pytest.raises(checkpoint.DiskFullError) as raised:
        _fit(directory)
    assert len(failed) > skip and NO_SPACE in str(raised.value) and match.split(".tmp")[0] in str(raised.value)
    assert checkpoint.latest_step(directory) == latest
    saver = checkpoint.StepCheckpoint(directory, every_steps=2)
    saver.set_model(runs.dense_model())
    assert saver.restore() == latest  # complete, and restored without a warning
    assert not [name for name in os.listdir(directory) if name.endswith(".tmp")]  # partial files removed
    reference, _ = _fit(str(tmp_path / "reference"))
    resumed, result = _fit(directory)
    assert result["initial_step"] == latest and result["step"] == 6
    for got, want in zip(resumed.variables + resumed.optimizer.variables,
                         reference.variables + reference.optimizer.variables):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(got), keras.ops.convert_to_numpy(want))
    tally("full disk", f"during a checkpoint's {write} write (library)", lost=f"{4 - latest} steps")


@pytest.mark.slow
def test_a_full_disk_while_saving_model_keras_keeps_the_previous_file(tmp_path, capsys, tally):
    """`checkpoints/model.keras` (what the JAX and PyTorch runs export, and what `paradigm.pretrained` reads) is
    replaced whole: a full disk at the end of epoch 2 leaves epoch 1's file; the rerun, which has no step left to
    train, writes the final one."""
    config = runs.config(epochs=2)
    workdir = str(tmp_path / "run")
    path = os.path.join(workdir, "checkpoints", "model.keras")
    with full_disk(".model.tmp-", skip=1) as failed, pytest.raises(checkpoint.DiskFullError) as raised:
        classifier.train_and_evaluate(config, workdir)
    assert len(failed) == 2 and NO_SPACE in str(raised.value) and ".model.tmp-" in str(raised.value)
    assert sorted(os.listdir(os.path.dirname(path))) == ["model.keras", "train"]  # the temporary file removed
    epoch_1 = saving.load_model(path)  # complete: epoch 1's
    capsys.readouterr()
    results = classifier.train_and_evaluate(config, workdir)
    final = saving.load_model(path)
    state = runs.final_state(workdir)
    kernel = keras.ops.convert_to_numpy(final.get_layer("logits").kernel)
    assert any(value.shape == kernel.shape and np.array_equal(value, kernel) for value in state.values())
    assert not np.array_equal(kernel, keras.ops.convert_to_numpy(epoch_1.get_layer("logits").kernel))
    assert results["steps"] == 12
    tally("full disk", "while saving model.keras (runner)", lost="0 steps: the previous file stays, then replaced")


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_a_full_disk_during_an_export_keeps_the_previous_export(tmp_path, tally):
    from sphere_tf.export import serving  # noqa: PLC0415 (TensorFlow)

    model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(), keras.layers.Dense(3)])
    base = str(tmp_path / "export")
    first = serving.export_model(model, base, model_name="m", verify=False)
    snapshot = {p: open(p, "rb").read() for p in glob.glob(os.path.join(base, "**"), recursive=True)
                if os.path.isfile(p)}
    with full_disk("variables.data") as failed, pytest.raises(Exception) as raised:
        serving.export_model(model, base, model_name="m", verify=False)
    assert failed and checkpoint.disk_full_file(raised.value) is not None
    after = {p: open(p, "rb").read() for p in glob.glob(os.path.join(base, "**"), recursive=True)
             if os.path.isfile(p)}
    assert after == snapshot and serving.existing_versions(os.path.dirname(first.path)) == [1]
    assert not [p for p in glob.glob(os.path.join(base, "**"), recursive=True) if ".tmp-" in p]
    assert serving.export_model(model, base, model_name="m", verify=False).version == 2
    tally("full disk", "during a SavedModel export (library)", lost="nothing: the previous version stays")


@pytest.mark.slow
@pytest.mark.tensorflow_only
def test_a_full_disk_during_the_runs_export_is_one_error_and_a_rerun_exports(tmp_path, tally):
    config = {**runs.config(), "export": True}
    workdir = str(tmp_path / "run")
    with full_disk("variables.data") as failed, pytest.raises(checkpoint.DiskFullError) as raised:
        classifier.train_and_evaluate(config, workdir)
    assert failed and NO_SPACE in str(raised.value) and "variables.data" in str(raised.value)
    assert not os.path.exists(os.path.join(workdir, "results.json"))
    assert not [p for p in glob.glob(os.path.join(workdir, "export", "**"), recursive=True)
                if os.path.basename(p).isdigit() or ".tmp-" in p]
    results = classifier.train_and_evaluate(config, workdir)
    assert results["export_dir"] and os.path.isdir(results["export_dir"])
    tally("full disk", "during the run's SavedModel export (runner)", lost="0 steps: the rerun only exports")


# A shared library that makes the C library's writes to files whose path contains $FAIL_MATCH fail with ENOSPC:
# `write`, `pwrite64`, `writev` (Python's file objects, NumPy) and `fwrite` / `fwrite_unlocked` (TensorFlow's
# POSIX file system writes through stdio).
SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#undef fwrite_unlocked
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>
static int full(int fd) {
    const char *match = getenv("FAIL_MATCH");
    char link[64], target[4096];
    if (!match) return 0;
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n <= 0) return 0;
    target[n] = 0;
    if (!strstr(target, match)) return 0;
    errno = ENOSPC;
    return 1;
}
#define NEXT(name) static __typeof__(name) *next; if (!next) next = dlsym(RTLD_NEXT, #name)
ssize_t write(int fd, const void *b, size_t n) { NEXT(write); return full(fd) ? -1 : next(fd, b, n); }
ssize_t pwrite64(int fd, const void *b, size_t n, off_t o) { NEXT(pwrite64); return full(fd) ? -1 : next(fd, b, n, o); }
ssize_t writev(int fd, const struct iovec *v, int c) { NEXT(writev); return full(fd) ? -1 : next(fd, v, c); }
size_t fwrite(const void *b, size_t s, size_t c, FILE *f) {
    NEXT(fwrite); return full(fileno(f)) ? 0 : next(b, s, c, f);
}
size_t fwrite_unlocked(const void *b, size_t s, size_t c, FILE *f) {
    NEXT(fwrite_unlocked); return full(fileno(f)) ? 0 : next(b, s, c, f);
}
"""


@pytest.mark.slow
def test_a_real_full_disk_through_the_c_library(tmp_path, tally):
    """The CLI over a C library whose writes to step 6's checkpoint fail with ENOSPC: one line, no traceback."""
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None or not sys.platform.startswith("linux"):
        pytest.skip("needs a C compiler and Linux's /proc to build the LD_PRELOAD library")
    source, shim = tmp_path / "enospc.c", tmp_path / "enospc.so"
    source.write_text(SHIM)
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(shim), str(source), "-ldl"], check=True)
    config_file = tmp_path / "tiny.py"
    config_file.write_text("import json\n\n\ndef get_config():\n"
                           f"    return json.loads({json.dumps(runs.config())!r})\n")
    workdir = str(tmp_path / "run")
    command = [sys.executable, "-m", "sphere_tf_cli.train_classifier", f"--config={config_file}",
               f"--workdir={workdir}"]
    env = dict(os.environ, KERAS_BACKEND=BACKEND, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="3")
    failing = dict(env, LD_PRELOAD=str(shim), FAIL_MATCH=_checkpoint_write(6))
    process = subprocess.run(command, env=failing, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert process.returncode == 1, process.stderr[-3000:]
    last = process.stderr.strip().splitlines()[-1]
    assert last.startswith(f"Error: {NO_SPACE} while writing the checkpoint of step 6"), process.stderr[-3000:]
    assert _checkpoint_write(6) in last and "Traceback" not in process.stderr
    assert checkpoint.latest_step(runs.state_dir(workdir)) == 4
    process = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert process.returncode == 0, process.stderr[-3000:]
    assert "Resumed from step 4 of 6" in process.stdout
    tally("full disk", "ENOSPC from the C library during a checkpoint write (CLI)",
          lost="2 steps: resumed from the previous checkpoint")


def test_disk_full_file_reads_every_form_of_the_error():
    assert checkpoint.disk_full_file(OSError(errno.ENOSPC, "No space left on device", "/w/a.json")) == "/w/a.json"
    assert checkpoint.disk_full_file(OSError(errno.EDQUOT, "Disk quota exceeded")) == ""
    assert checkpoint.disk_full_file(OSError(errno.EACCES, "Permission denied", "/w/a.json")) is None
    # TensorFlow's message (tensorflow/tsl's POSIX file system: the file, then strerror(ENOSPC)).
    message = "{{function_node __wrapped__SaveV2}} /w/ckpt-6_temp/part-00000-of-00001.data-00000-of-00001" \
              ".tempstate123; No space left on device [Op:SaveV2]"
    assert checkpoint.disk_full_file(RuntimeError(message)) == \
        "/w/ckpt-6_temp/part-00000-of-00001.data-00000-of-00001.tempstate123"
    assert checkpoint.disk_full_file(ValueError("shape mismatch")) is None
    error = checkpoint.DiskFullError("No space left on device while writing x", "/w/x")
    assert isinstance(error, OSError) and error.errno == errno.ENOSPC and str(error).startswith("No space")
