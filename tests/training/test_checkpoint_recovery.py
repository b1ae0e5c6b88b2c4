"""A corrupt step checkpoint gives way to the previous complete one, with a warning naming the file, on every
backend (TensorFlow: tf.train checkpoints; JAX, PyTorch: array checkpoints); none readable is an error naming
them, never a silent fresh start."""

import glob
import os

import keras
import numpy as np
import pytest

from sphere_tf.training import array_checkpoint
from sphere_tf.training import checkpoint

STEPS_PER_EPOCH, BATCH = 4, 8


def _model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.build((None, 5))
    return model


def _stream(step):
    """Batches from global step `step` on: a pure function of the step (what the runner's pipelines give)."""
    def batches():
        for s in range(step, 10_000):
            rng = np.random.default_rng(s)
            yield rng.normal(size=(BATCH, 5)).astype("float32"), rng.integers(0, 3, size=BATCH)
    return batches()


def _fit(directory, epochs):
    model = _model()
    result = checkpoint.fit_resumable(model, _stream, epochs=epochs, directory=directory,
                                      steps_per_epoch=STEPS_PER_EPOCH, every_steps=2, max_to_keep=3, verbose=0)
    return model, result


def _files_of_step(directory, step):
    if keras.backend.backend() == "tensorflow":
        return glob.glob(os.path.join(directory, f"ckpt-{step}.data-*"))
    return [os.path.join(directory, f"state-{step}.npz")]


def _truncate(path):
    with open(path, "r+b") as f:
        f.truncate(max(1, os.path.getsize(path) // 3))


def test_a_truncated_latest_checkpoint_falls_back_to_the_previous_one(tmp_path, capsys):
    directory = str(tmp_path / "ckpt")
    _fit(directory, epochs=1)  # checkpoints at steps 2 and 4
    for path in _files_of_step(directory, 4):
        _truncate(path)
    reference, _ = _fit(str(tmp_path / "reference"), epochs=1)
    half, _ = _model(), None
    saver = checkpoint.StepCheckpoint(directory, every_steps=2, max_to_keep=3)
    saver.set_model(half)
    assert saver.restore() == 2  # step 4's file is unreadable: step 2's state, named in the warning
    out = capsys.readouterr().out
    assert "Warning: checkpoint" in out and "4" in out and "trying the previous checkpoint" in out
    # Training on from step 2 over the same batches ends where the uninterrupted run did.
    model, result = _fit(directory, epochs=1)
    assert result["initial_step"] == 2 and result["step"] == 4
    for got, want in zip(model.weights, reference.weights):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(got), keras.ops.convert_to_numpy(want),
                                   rtol=1e-6, atol=1e-7)


def test_no_readable_checkpoint_is_an_error_naming_the_files(tmp_path):
    directory = str(tmp_path / "ckpt")
    _fit(directory, epochs=1)
    for step in (2, 4):
        for path in _files_of_step(directory, step):
            _truncate(path)
    saver = checkpoint.StepCheckpoint(directory, every_steps=2)
    saver.set_model(_model())
    with pytest.raises(array_checkpoint.CorruptCheckpointError, match="no checkpoint in .* can be read") as raised:
        saver.restore()
    assert "Not starting afresh" in str(raised.value)
