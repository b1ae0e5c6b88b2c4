"""Runner processes for the kill -9 and workdir-lock tests: a tiny config, a child program that logs what it does
and dies with SIGKILL at a chosen point, and the uninterrupted reference run they are compared with.

Every child runs `classifier.train_and_evaluate` under the test process's own interpreter and `KERAS_BACKEND`, so
one test file runs on every backend. The child appends one JSON line per event to a log (each training step's
end, each checkpoint save, each evaluation batch, each `.keras` save, each export stage) with the global step and
the stage (`fit`, or `after_fit` for the final evaluation and export); the reference run's log is the schedule the
tests draw kill points from. A kill point is `{"event": ..., "index": n}`: die at the n-th such event of the
process (the tests count only the events a process resumed at step r still meets), plus the sub-point of a
checkpoint write or an export.
"""

import fcntl
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest

from sphere_tf.training import array_checkpoint
from sphere_tf.training import checkpoint as checkpoint_lib
from tests.runners._resume import tiny_config
from tests.runners._resume import write_idx

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BACKEND = keras.backend.backend()
EVERY_STEPS = 2  # checkpoint_every_steps of the tiny config: 6 steps an epoch, 2 epochs, 12 steps
TOTAL_STEPS = 12


def has_tensorflow():
    """Whether TensorFlow is importable here: the TF Serving export (`export=True`) needs it on every backend."""
    import importlib.util  # noqa: PLC0415

    return importlib.util.find_spec("tensorflow") is not None


def run_config(data_dir, export=False):
    """The tiny classifier config, evaluated on the test set after every epoch (periodic evaluation is one of the
    kill points) and exported when `export`."""
    config = tiny_config(data_dir)
    config["evaluation"] = {"eval_every_steps": 6}
    config["export"] = export
    return config


CHILD = r"""
import json, os, signal, sys
plan = json.loads(sys.argv[1])
kill = plan.get("kill") or {}
import keras
from sphere_tf import json_files
from sphere_tf.runners import classifier
from sphere_tf.training import array_checkpoint, checkpoint

state = {"step": 0, "stage": "setup", "counts": {}, "save_phase": None}

def log(event, **fields):
    with open(plan["log"], "a") as f:
        f.write(json.dumps({"event": event, "step": state["step"], "stage": state["stage"], **fields}) + "\n")

def die(where):
    log("killed", where=where)
    os.kill(os.getpid(), signal.SIGKILL)

def hit(event):
    # Counts and logs `event`; True when it is the kill's (the n-th of this process).
    n = state["counts"][event] = state["counts"].get(event, 0) + 1
    log(event, index=n)
    return kill.get("event") == event and kill.get("index") == n

original_fit = checkpoint.fit_resumable
def fit_resumable(*args, **kwargs):
    state["stage"] = "fit"
    try:
        return original_fit(*args, **kwargs)
    finally:
        state["stage"] = "after_fit"
checkpoint.fit_resumable = fit_resumable

original_restore = checkpoint.StepCheckpoint.restore
def restore(self):
    state["step"] = original_restore(self)
    return state["step"]
checkpoint.StepCheckpoint.restore = restore

# (a) During a training step: before step s computes, after it computed but before the checkpoint callback (so
# a save due at s is lost), or after that callback.
def on_train_batch_begin(self, batch, logs=None):
    if kill.get("event") == "step" and kill["where"] == "begin" and state["step"] + 1 == kill["step"]:
        die("before step %d" % kill["step"])
checkpoint.StepCheckpoint.on_train_batch_begin = on_train_batch_begin
original_batch_end = checkpoint.StepCheckpoint.on_train_batch_end
def on_train_batch_end(self, batch, logs=None):
    step = self._epoch_start + batch + 1
    if kill.get("event") == "step" and kill["where"] == "before_save" and step == kill["step"]:
        state["step"] = step
        die("step %d computed, its checkpoint callback not run" % step)
    state["step"] = step  # the step a save inside the callback belongs to
    original_batch_end(self, batch, logs)
    state["step"] = self.step
    log("step_end")
    if kill.get("event") == "step" and kill["where"] == "after_save" and self.step == kill["step"]:
        die("after step %d and its checkpoint callback" % step)
checkpoint.StepCheckpoint.on_train_batch_end = on_train_batch_end

# (b) During a checkpoint write, between its files: `phase` says which have been written.
original_save = checkpoint.StepCheckpoint.save
def save(self):
    state["save_phase"] = kill.get("phase") if hit("save") else None
    return original_save(self)
checkpoint.StepCheckpoint.save = save
def armed(phase):
    return state["save_phase"] == phase

if keras.backend.backend() == "tensorflow":
    import tensorflow as tf
    from tensorflow.python.checkpoint import checkpoint_management as cm
    manager = cm.CheckpointManager
    original_manager_save, original_record, original_sweep = manager.save, manager._record_state, manager._sweep
    def manager_save(self, *args, **kwargs):
        if armed(0):
            die("version record and partial_epoch.json entry written, no checkpoint file yet")
        path = original_manager_save(self, *args, **kwargs)
        if armed(3):
            die("checkpoint complete and the latest, its save not yet returned")
        return path
    def record_state(self):
        if armed(1):
            die("checkpoint files written, not yet the latest")
        return original_record(self)
    def sweep(self):
        if armed(2):
            die("checkpoint the latest, older ones not yet deleted")
        return original_sweep(self)
    manager.save, manager._record_state, manager._sweep = manager_save, record_state, sweep
else:
    import io
    import numpy as np
    original_archive, original_write_json = array_checkpoint._write_archive, json_files.write_json
    original_arrays_save = array_checkpoint.ArrayCheckpoints.save
    def write_archive(path, values):
        if armed(0):
            buffer = io.BytesIO()
            np.savez(buffer, **values)
            with open(path + array_checkpoint._TEMPORARY, "wb") as f:  # half an archive, as a kill mid-write leaves
                f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
            die("temporary archive half written")
        original_archive(path, values)
        if armed(1):
            die("archive renamed into place, the index not yet naming it")
    def write_json(path, value, indent=2):
        written = original_write_json(path, value, indent)
        if armed(2) and os.path.basename(path) == array_checkpoint.INDEX_FILE:
            die("index names the archive, older archives not yet deleted")
        return written
    def arrays_save(self, step):
        path = original_arrays_save(self, step)
        if armed(3):
            die("checkpoint complete and the latest, its save not yet returned")
        return path
    array_checkpoint._write_archive, json_files.write_json = write_archive, write_json
    array_checkpoint.ArrayCheckpoints.save = arrays_save

# (c) During evaluation: the periodic test evaluation inside fit, the final one, the error-rate pass.
for name in ("on_test_batch_end", "on_predict_batch_end"):
    def batch_end(self, batch, logs=None, _original=getattr(keras.callbacks.CallbackList, name)):
        _original(self, batch, logs)
        if hit("eval_batch"):
            die("evaluation batch %d" % state["counts"]["eval_batch"])
    setattr(keras.callbacks.CallbackList, name, batch_end)

# (d) During export: a `.keras` save (each epoch's, and the final one after precise BN) cut short, and on
# TensorFlow the SavedModel export before and after its version folder is renamed into place.
from keras.src.saving import saving_lib
original_save_state = saving_lib._save_state
def save_state(saveable, *args, **kwargs):
    if kwargs.get("inner_path", args[2] if len(args) > 2 else None) == "" and hit("keras_save"):
        die(".keras file half written")
    return original_save_state(saveable, *args, **kwargs)
saving_lib._save_state = save_state
original_export = classifier._export
def export(*args, **kwargs):
    from sphere_tf.export import serving
    original_warmup, original_models_config = serving.write_warmup_requests, serving.write_models_config
    def warmup(*a, **k):
        if hit("export_written"):
            die("SavedModel written to its temporary folder, not yet renamed")
        return original_warmup(*a, **k)
    def models_config(*a, **k):
        if hit("export_renamed"):
            die("version folder renamed into place, models.config not yet written")
        return original_models_config(*a, **k)
    serving.write_warmup_requests, serving.write_models_config = warmup, models_config
    path = original_export(*args, **kwargs)
    if hit("export_done"):
        die("export complete, results.json not yet written")
    return path
classifier._export = export

classifier.train_and_evaluate(plan["config"], plan["workdir"])
log("finished")
"""


def child_env():
    return dict(os.environ, KERAS_BACKEND=BACKEND, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO)


def run_child(config, workdir, log, kill=None, timeout=600):
    """Runs the CHILD program to its end (or its kill); returns the `CompletedProcess`."""
    plan = {"config": config, "workdir": str(workdir), "log": str(log), "kill": kill}
    return subprocess.run([sys.executable, "-c", CHILD, json.dumps(plan)], cwd=REPO, env=child_env(),
                          capture_output=True, text=True, timeout=timeout)


def read_log(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def final_state(workdir):
    """`(step, {name: array})` of the newest checkpoint of the run in `workdir`, in either format."""
    directory = os.path.join(workdir, "checkpoints", "train")
    found = array_checkpoint.latest(directory)
    if found is not None:
        return found[0], array_checkpoint.read(found[1])
    import tensorflow as tf  # noqa: PLC0415  (only the TensorFlow backend writes tf.train checkpoints)

    prefix = tf.train.latest_checkpoint(directory)
    reader = tf.train.load_checkpoint(prefix)
    return (checkpoint_lib.latest_step(directory),
            {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()})


def keras_weights(path):
    """{name: array} of the weights inside a `.keras` file (its HDF5 member, read without building the model)."""
    import io  # noqa: PLC0415
    import zipfile  # noqa: PLC0415

    import h5py  # noqa: PLC0415

    with zipfile.ZipFile(path) as archive:
        data = archive.read("model.weights.h5")
    weights = {}
    with h5py.File(io.BytesIO(data), "r") as f:
        f.visititems(lambda name, item: weights.__setitem__(name, item[()]) if isinstance(item, h5py.Dataset)
                     else None)
    return weights


def results(workdir):
    with open(os.path.join(workdir, "results.json")) as f:
        return json.load(f)


def assert_same_run(got_dir, want_dir):
    """The run in `got_dir` ended where the uninterrupted one in `want_dir` did: every variable of the final
    checkpoint and of `model.keras` bitwise, the same test figures, the same history (its batch-averaged metrics
    of an epoch cut by a kill are merged from two processes' running means, equal to rounding)."""
    (got_step, got), (want_step, want) = final_state(got_dir), final_state(want_dir)
    assert got_step == want_step == TOTAL_STEPS
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    got_model = keras_weights(os.path.join(got_dir, "checkpoints", "model.keras"))
    want_model = keras_weights(os.path.join(want_dir, "checkpoints", "model.keras"))
    assert sorted(got_model) == sorted(want_model)
    for name in want_model:
        np.testing.assert_array_equal(got_model[name], want_model[name], err_msg=f"model.keras {name}")
    got_results, want_results = results(got_dir), results(want_dir)
    for key in ("test_loss", "test_accuracy", "test_per_class_error", "test_top5_error", "bn_statistics",
                "test_curve", "steps"):
        assert got_results[key] == want_results[key], key
    assert sorted(got_results["history"]) == sorted(want_results["history"])
    for key, values in want_results["history"].items():
        np.testing.assert_allclose(got_results["history"][key], values, rtol=1e-6, err_msg=f"history {key}")


def _shared_folder(tmp_path_factory):
    """A folder all xdist workers of this session share (the session's base temp), else this process's."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _once(folder, name, make):
    """`make(path)` run once per session for `folder/name` (xdist workers wait on a flock for the first)."""
    path = os.path.join(folder, name)
    with open(os.path.join(folder, f"{name}.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(os.path.join(path, ".done")):
            os.makedirs(path, exist_ok=True)
            make(path)
            open(os.path.join(path, ".done"), "w").close()
    return path


@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    """The tiny Fashion-MNIST folder of tests/runners/_resume.py: 60 + 20 images."""
    def make(folder):
        rng = np.random.default_rng(7)
        for split, count in (("train", 60), ("t10k", 20)):
            labels = rng.integers(0, 10, size=count)
            images = np.clip(labels[:, None, None] * 20 + rng.integers(0, 60, size=(count, 28, 28)), 0, 255)
            write_idx(os.path.join(folder, f"{split}-images-idx3-ubyte.gz"), images)
            write_idx(os.path.join(folder, f"{split}-labels-idx1-ubyte.gz"), labels)

    return _once(str(_shared_folder(tmp_path_factory)), "fashion_mnist", make)


@pytest.fixture(scope="session")
def reference(tmp_path_factory, data_dir):
    """`reference()`: the workdir of the uninterrupted run of `run_config(data_dir)` on this backend, beside its
    `events.jsonl`, the schedule of what a run does. Made on the first call of the session (shared by the xdist
    workers, the others wait for it): a test starts its own runs first where it can, so that one worker's
    reference run overlaps the other's work instead of holding both up."""
    def make(folder):
        process = run_child(run_config(data_dir), os.path.join(folder, "run"), os.path.join(folder, "events.jsonl"))
        assert process.returncode == 0, process.stderr[-3000:]

    return lambda: os.path.join(_once(str(_shared_folder(tmp_path_factory)), f"reference_{BACKEND}", make), "run")


def schedule(reference_dir):
    return read_log(os.path.join(os.path.dirname(reference_dir), "events.jsonl"))
