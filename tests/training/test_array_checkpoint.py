"""sphere_tf.training.array_checkpoint: the step checkpoints of the JAX and PyTorch backends (runs on every backend)."""

import json
import os

import keras
import numpy as np
import pytest

from sphere_tf.training import array_checkpoint


def variables():
    return {"model/dense/kernel": keras.Variable(np.zeros((2, 3), "float32")),
            "optimizer/iteration": keras.Variable(0, dtype="int32", trainable=False),
            "step": keras.Variable(0, dtype="int32", trainable=False)}


def set_values(store, step):
    store["model/dense/kernel"].assign(np.full((2, 3), step, "float32"))
    store["optimizer/iteration"].assign(step)
    store["step"].assign(step)


def test_save_restore_and_keep_the_newest(tmp_path):
    directory = str(tmp_path / "train")
    written = variables()
    saver = array_checkpoint.ArrayCheckpoints(written, directory, max_to_keep=2)
    assert saver.latest_checkpoint is None and array_checkpoint.latest(directory) is None
    for step in (2, 4, 6):
        set_values(written, step)
        saver.save(step)
    assert sorted(os.listdir(directory)) == ["checkpoint.json", "state-4.npz", "state-6.npz"]
    with open(os.path.join(directory, "checkpoint.json")) as f:
        assert [entry["step"] for entry in json.load(f)["checkpoints"]] == [4, 6]
    assert array_checkpoint.latest(directory) == (6, os.path.join(directory, "state-6.npz"))

    fresh = variables()
    array_checkpoint.ArrayCheckpoints(fresh, directory, max_to_keep=2).restore(os.path.join(directory, "state-4.npz"))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(fresh["model/dense/kernel"]), np.full((2, 3), 4.0))
    assert int(keras.ops.convert_to_numpy(fresh["optimizer/iteration"])) == 4
    assert int(keras.ops.convert_to_numpy(fresh["step"])) == 4


def test_a_save_killed_before_its_index_leaves_the_previous_checkpoint(tmp_path, monkeypatch):
    directory = str(tmp_path)
    store = variables()
    saver = array_checkpoint.ArrayCheckpoints(store, directory, max_to_keep=1)
    set_values(store, 2)
    saver.save(2)
    # Killed while writing the archive of step 4: a partial temporary file, the index untouched.
    with open(os.path.join(directory, "state-4.npz.tmp"), "wb") as f:
        f.write(b"PK\x03\x04 half an archive")
    assert array_checkpoint.latest(directory)[0] == 2
    # Killed after the archive's rename, before the index: still step 2, whose archive exists.
    original = array_checkpoint.json_files.write_json
    monkeypatch.setattr(array_checkpoint.json_files, "write_json", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt))
    set_values(store, 4)
    with pytest.raises(KeyboardInterrupt):
        saver.save(4)
    monkeypatch.setattr(array_checkpoint.json_files, "write_json", original)
    step, path = array_checkpoint.latest(directory)
    assert step == 2 and float(array_checkpoint.read(path)["step"]) == 2
    set_values(store, 6)
    saver.save(6)  # the next save cleans up: only the newest archive and the index remain
    assert sorted(os.listdir(directory)) == ["checkpoint.json", "state-6.npz"]


def test_restore_refuses_another_model(tmp_path):
    store = variables()
    saver = array_checkpoint.ArrayCheckpoints(store, str(tmp_path), max_to_keep=1)
    path = saver.save(1)
    # Default names numbered differently in the resuming process: matched by position within each group.
    renamed = variables()
    renamed["model/dense_1/kernel"] = renamed.pop("model/dense/kernel")
    store["model/dense/kernel"].assign(np.ones((2, 3), "float32"))
    path = saver.save(2)
    array_checkpoint.ArrayCheckpoints(renamed, str(tmp_path), 1).restore(path)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(renamed["model/dense_1/kernel"]), np.ones((2, 3)))
    other = {**variables(), "model/dense/bias": keras.Variable(np.zeros(3, "float32"))}
    with pytest.raises(ValueError, match=r"missing \['model/dense/bias'\]"):
        array_checkpoint.ArrayCheckpoints(other, str(tmp_path), 1).restore(path)
    reshaped = {**variables(), "model/dense/kernel": keras.Variable(np.zeros((3, 3), "float32"))}
    with pytest.raises(ValueError, match=r"'model/dense/kernel' has shape \(2, 3\) in the checkpoint, \(3, 3\) here"):
        array_checkpoint.ArrayCheckpoints(reshaped, str(tmp_path), 1).restore(path)
    with pytest.raises(ValueError, match="'counter' is a int, not a variable"):
        array_checkpoint.ArrayCheckpoints({"counter": 3}, str(tmp_path), 1)
