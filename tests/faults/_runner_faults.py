"""Shared by the fault tests of damaged checkpoints, full disks and non-finite values (test_damaged_checkpoints.py,
test_full_disk.py, test_nonfinite_and_labels.py): a short runner config over a tiny Fashion-MNIST folder, a run
stopped right after a given step, the uninterrupted reference run, what a checkpoint consists of on each backend,
and the ways a file is damaged.

The config trains one epoch of 6 steps and checkpoints every 2 (`checkpoints/train/` then holds the checkpoints
of steps 4 and 6, the runner keeping two); precise BN is off, the cheapest run the runner makes, since every case
runs it once or twice on each backend.
"""

import atexit
import contextlib
import glob
import os
import shutil
import tempfile

import keras
import numpy as np
import pytest

from sphere_tf.runners import classifier
from sphere_tf.training import array_checkpoint
from sphere_tf.training import checkpoint
from tests.runners._resume import tiny_config
from tests.runners._resume import write_idx

STEPS = 6  # 60 training images, batches of 10, one epoch
EVERY = 2


def tensorflow():
    return keras.backend.backend() == "tensorflow"


_FOLDERS = {}


def scratch(name):
    """A folder of this process, removed when it exits (shared by the test modules, like the reference run)."""
    if "root" not in _FOLDERS:
        _FOLDERS["root"] = tempfile.mkdtemp(prefix="sphere_tf_faults_")
        atexit.register(shutil.rmtree, _FOLDERS["root"], True)
    path = os.path.join(_FOLDERS["root"], name)
    os.makedirs(path, exist_ok=True)
    return path


def data_dir():
    """The tiny Fashion-MNIST folder of tests/runners/_resume.py (60 + 20 images), made once per process."""
    folder = os.path.join(scratch("data"), "fashion_mnist")
    if not os.path.isdir(folder):
        os.makedirs(folder)
        rng = np.random.default_rng(7)  # the images of `_resume.idx_dir`
        for split, count in (("train", 60), ("t10k", 20)):
            labels = rng.integers(0, 10, size=count)
            images = np.clip(labels[:, None, None] * 20 + rng.integers(0, 60, size=(count, 28, 28)), 0, 255)
            write_idx(os.path.join(folder, f"{split}-images-idx3-ubyte.gz"), images)
            write_idx(os.path.join(folder, f"{split}-labels-idx1-ubyte.gz"), labels)
    return folder


def config(folder=None, **train):
    base = tiny_config(folder or data_dir(), **{"epochs": 1, **train})
    return {**base, "evaluation": {"precise_bn_batches": 0}}


def state_dir(workdir):
    return os.path.join(workdir, "checkpoints", "train")


class Interrupted(Exception):
    """Stands for the end of a process (a kill) right after a step: raised by `stopped_after`."""


@contextlib.contextmanager
def stopped_after(step):
    """The runner's `StepCheckpoint` raises `Interrupted` at the end of global step `step` (after its save)."""
    original = checkpoint.StepCheckpoint.on_train_batch_end

    def on_train_batch_end(self, batch, logs=None):
        original(self, batch, logs)
        if self.step == step:
            raise Interrupted(f"stopped after step {step}")

    checkpoint.StepCheckpoint.on_train_batch_end = on_train_batch_end
    try:
        yield
    finally:
        checkpoint.StepCheckpoint.on_train_batch_end = original


def interrupted_run(workdir, step=4, run_config=None):
    """A run of `config()` ended right after the checkpoint of `step`: checkpoints of steps `step` - 2 and
    `step`, no results."""
    with stopped_after(step), pytest.raises(Interrupted):
        classifier.train_and_evaluate(run_config or config(), workdir)
    assert checkpoint.latest_step(state_dir(workdir)) == step
    return workdir


def copy(workdir, destination):
    shutil.copytree(workdir, destination)
    return str(destination)


_REFERENCE = {}


def reference():
    """`(workdir, results, final state)` of the uninterrupted run of `config()`, once per process and backend."""
    backend = keras.backend.backend()
    if backend not in _REFERENCE:
        workdir = os.path.join(scratch(f"reference_{backend}"), "run")
        results = classifier.train_and_evaluate(config(), workdir)
        _REFERENCE[backend] = (workdir, results, final_state(workdir))
    return _REFERENCE[backend]


def final_state(workdir):
    """dict name -> array of the latest checkpoint of a run (every variable it saved, the step included)."""
    directory = state_dir(workdir)
    if tensorflow():
        import tensorflow as tf  # noqa: PLC0415 (TensorFlow backend only)

        reader = tf.train.load_checkpoint(directory)
        return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
                if name != "_CHECKPOINTABLE_OBJECT_GRAPH"}
    _, path = array_checkpoint.latest(directory)
    return array_checkpoint.read(path)


def assert_ends_as_the_reference(workdir, results):
    """The run of `workdir` ended where the uninterrupted one did: the same final variables (bitwise: the same
    state at the resumed step, the same batches after it, deterministic CPU kernels) and the same test results."""
    _, want_results, want = reference()
    assert checkpoint.latest_step(state_dir(workdir)) == STEPS
    got = final_state(workdir)
    # In the saved order: Keras numbers default names per process (`adam`, then `adam_1`), so the array format's
    # names differ between two runs of one process while their order does not (TensorFlow's object paths do not).
    assert [name.split("/")[0] for name in got] == [name.split("/")[0] for name in want]
    for (name, value), expected in zip(got.items(), want.values()):
        np.testing.assert_array_equal(value, expected, err_msg=name)
    assert results["test_loss"] == want_results["test_loss"]
    assert results["test_accuracy"] == want_results["test_accuracy"]


def checkpoint_files(directory, step):
    """The files one checkpoint consists of, by kind: its own files and the lists naming it."""
    if tensorflow():
        data = glob.glob(os.path.join(directory, f"ckpt-{step}.data-*"))
        assert len(data) == 1, data
        return {"ckpt.index": os.path.join(directory, f"ckpt-{step}.index"), "ckpt.data": data[0],
                "checkpoint (TensorFlow's list)": os.path.join(directory, checkpoint.TF_INDEX_FILE),
                checkpoint.TF_VERSIONS_FILE: os.path.join(directory, checkpoint.TF_VERSIONS_FILE)}
    return {"state.npz": os.path.join(directory, f"state-{step}.npz"),
            array_checkpoint.INDEX_FILE: os.path.join(directory, array_checkpoint.INDEX_FILE)}


# The files that hold the checkpoint's values (the others list checkpoints): their damage loses the checkpoint.
VALUE_FILES = ("ckpt.index", "ckpt.data", "state.npz")


def truncate_half(path):
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)


def empty(path):
    open(path, "wb").close()


def flip_bit(path, bit):
    with open(path, "r+b") as f:
        f.seek(bit // 8)
        byte = f.read(1)[0]
        f.seek(bit // 8)
        f.write(bytes([byte ^ (1 << (bit % 8))]))


def flip_one_bit(path, step, kind):
    """One flipped bit: in a value file its middle byte's lowest bit; in a list, the lowest bit of the last digit
    of the first mention of the checkpoint of `step` (`"ckpt-4"` -> `"ckpt-5"`, `"state-4.npz"` ->
    `"state-5.npz"`), a bit that changes what the list says (a random bit of a list often changes nothing that is
    read: tests/faults/test_damaged_checkpoints.py sweeps those)."""
    with open(path, "rb") as f:
        data = f.read()
    if kind not in VALUE_FILES:
        for token in (f"state-{step}.npz", f"ckpt-{step}"):
            at = data.find(token.encode())
            if at >= 0:
                flip_bit(path, (at + len(token.split(".")[0]) - 1) * 8)
                return
        raise AssertionError(f"{path} does not name the checkpoint of step {step}")
    flip_bit(path, len(data) // 2 * 8)


DAMAGES = {"truncated to half": lambda path, step, kind: truncate_half(path),
           "emptied": lambda path, step, kind: empty(path),
           "one bit flipped": flip_one_bit}


# The library-level cases (below the runner): a Dense layer under SGD with momentum, trained by `fit_resumable`
# from a stream that is a pure function of the global step (the driver of tests/training/test_checkpoint_recovery.py).
def dense_model():
    """A freshly seeded 5 -> 3 Dense classifier, compiled and built (every call the same initial weights)."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.build((None, 5))
    return model


def dense_stream(step, batch=8):
    """Batches of 5 features and 3 classes from global step `step` on, each drawn from a generator keyed by its step."""
    def batches():
        for s in range(step, 10_000):
            rng = np.random.default_rng(s)
            yield rng.normal(size=(batch, 5)).astype("float32"), rng.integers(0, 3, size=batch)
    return batches()
