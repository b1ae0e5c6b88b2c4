"""Tests for sphere_tf.callbacks.tensorboard: ScalarTensorBoard, tensorboard_callback and scalar_writer.

The event files are read back without TensorFlow or TensorBoard, by a reader written here as an independent
reference: an event file is TFRecord-framed (uint64 little-endian length, uint32 masked CRC-32C of those 8 bytes,
the record, uint32 masked CRC-32C of the record), each record a serialized `Event` proto, decoded with
tensorboardX's generated `event_pb2`. The CRC-32C (Castagnoli) is table-driven, below, and every CRC is checked.
`tf.summary` (Keras's own callback) writes scalars as float32 `tensor` payloads under the 'scalars' plugin,
tensorboardX as `simple_value`: the reader takes both.
"""

import ast
import inspect
import os
import pathlib
import sys

import keras
import numpy as np
import pytest
from keras import ops

import sphere_tf
from sphere_tf import callbacks
from sphere_tf.callbacks import energy as energy_module
from sphere_tf.callbacks import tensorboard

from tests.callbacks._events import Scalar
from tests.callbacks._events import crc32c
from tests.callbacks._events import event_files
from tests.callbacks._events import event_records
from tests.callbacks._events import f32
from tests.callbacks._events import masked_crc32c
from tests.callbacks._events import read_scalars
from tests.callbacks._events import series


def test_crc32c_reference_check_values():
    assert crc32c(b"123456789") == 0xE3069283  # RFC 3720 B.4's check value
    assert crc32c(b"") == 0
    assert crc32c(bytes(32)) == 0x8A9136AA  # RFC 3720 B.4: 32 bytes of zeros


# -- fits --------------------------------------------------------------------------------------------------------


def _data(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, 3)).astype(np.float32), rng.integers(0, 2, n).astype(np.int32)


def _model(learning_rate=0.1):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(4, name="hidden"), keras.layers.Dense(2, name="d")])
    model.compile(keras.optimizers.SGD(learning_rate), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                  metrics=["accuracy"])
    return model


class _BatchLogs(keras.callbacks.Callback):
    """Records each training batch's logs (as floats), in order."""

    def __init__(self):
        super().__init__()
        self.batches = []

    def on_train_batch_end(self, batch, logs=None):
        self.batches.append({k: float(np.asarray(ops.convert_to_numpy(v))) for k, v in logs.items()})


def test_epoch_scalars_match_the_history(tmp_path):
    """3 epochs of 3 batches, validation of 2 batches: the epoch scalars in `train` and `validation`, the learning
    rate of a schedule and `evaluation_*_vs_iterations` at the optimizer's iterations, all equal to the fit's
    numbers in float32; the logs of an earlier callback (the energies) are written too."""
    schedule = keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=1, decay_rate=0.5)
    model = _model(schedule)
    x, y = _data(12)
    log_dir = tmp_path / "tb"
    history = model.fit(x, y, batch_size=4, epochs=3, validation_data=_data(8, seed=1), verbose=0,
                        callbacks=[callbacks.HypersphericalEnergy(layer_names=["d"]),
                                   callbacks.ScalarTensorBoard(log_dir)]).history

    assert sorted(os.listdir(log_dir)) == ["train", "validation"]
    for run in ("train", "validation"):
        assert len(event_files(log_dir / run)) == 1
        assert sorted(os.listdir(log_dir / run)) == [os.path.basename(p) for p in event_files(log_dir / run)]
    assert {s.kind for s in read_scalars(log_dir / "train")} == {"simple_value"}

    train = series(log_dir / "train")
    assert sorted(train) == ["epoch_accuracy", "epoch_energy/d", "epoch_energy/total", "epoch_learning_rate",
                             "epoch_loss"]
    for name in ("loss", "accuracy", "energy/d", "energy/total"):
        assert train[f"epoch_{name}"] == list(zip([0, 1, 2], f32(history[name]))), name
    # The schedule's rate after 3, 6, 9 steps, computed in float32 as Keras does.
    rates = [np.float32(0.1) * np.float32(0.5) ** np.float32(3 * (epoch + 1)) for epoch in range(3)]
    assert train["epoch_learning_rate"] == list(zip([0, 1, 2], f32(rates)))

    validation = series(log_dir / "validation")
    assert sorted(validation) == ["epoch_accuracy", "epoch_loss", "evaluation_accuracy_vs_iterations",
                                  "evaluation_loss_vs_iterations"]
    for name in ("loss", "accuracy"):
        assert validation[f"epoch_{name}"] == list(zip([0, 1, 2], f32(history[f"val_{name}"])))
        assert validation[f"evaluation_{name}_vs_iterations"] == list(zip([3, 6, 9], f32(history[f"val_{name}"])))


@pytest.mark.parametrize("update_freq,every", [("batch", 1), (2, 2)])
def test_batch_scalars_every_update_freq(tmp_path, update_freq, every):
    """`batch_<metric>` at the global batches 1..9 that are multiples of `update_freq`, with the values the batch
    logs had; the epoch scalars still come every epoch (3 batches an epoch is not a multiple of 2: Keras's own
    callback would skip epochs 0 and 2, tensorflow/tensorflow#49109)."""
    model = _model()
    x, y = _data(12)
    recorder = _BatchLogs()
    history = model.fit(x, y, batch_size=4, epochs=3, verbose=0,
                        callbacks=[recorder, callbacks.ScalarTensorBoard(tmp_path, update_freq=update_freq)]).history
    train = series(tmp_path / "train")
    steps = [step for step in range(1, 10) if step % every == 0]
    for name in ("loss", "accuracy"):
        assert train[f"batch_{name}"] == list(zip(steps, f32(recorder.batches[s - 1][name] for s in steps)))
        assert train[f"epoch_{name}"] == list(zip([0, 1, 2], f32(history[name])))
    assert not os.path.exists(tmp_path / "validation")


def test_a_second_fit_and_a_plain_evaluate(tmp_path):
    """A second `fit` (initial_epoch=1) restarts the batch count at 1, as Keras's callback does, and continues the
    epoch index; `model.evaluate(callbacks=[...])` writes `evaluation_*` at the optimizer's iterations and closes
    its file at once. Each writer's file is a new one."""
    model = _model()
    x, y = _data(8)
    cb = callbacks.ScalarTensorBoard(str(tmp_path), update_freq="batch")
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[cb])
    history = model.fit(x, y, batch_size=4, initial_epoch=1, epochs=2, verbose=0, callbacks=[cb]).history
    train = series(tmp_path / "train")
    assert [step for step, _ in train["batch_loss"]] == [1, 2, 1, 2]
    assert [step for step, _ in train["epoch_loss"]] == [0, 1]
    assert train["epoch_loss"][1][1] == f32(history["loss"])[0]
    assert len(event_files(tmp_path / "train")) == 2

    loss, accuracy = model.evaluate(x, y, batch_size=4, verbose=0, callbacks=[cb])
    validation = series(tmp_path / "validation")  # readable now: the plain evaluate closed its writer
    assert validation == {"evaluation_loss_vs_iterations": [(4, f32([loss])[0])],
                          "evaluation_accuracy_vs_iterations": [(4, f32([accuracy])[0])]}


# -- arguments, config, choice of callback -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,match",
    [({"log_dir": ""}, "`log_dir`"), ({"log_dir": None}, "`log_dir`"), ({"log_dir": 3}, "`log_dir`"),
     ({"log_dir": "x", "update_freq": 0}, "`update_freq`"), ({"log_dir": "x", "update_freq": "step"}, "`update_freq`"),
     ({"log_dir": "x", "update_freq": True}, "`update_freq`"), ({"log_dir": "x", "update_freq": 1.5}, "`update_freq`")],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        callbacks.ScalarTensorBoard(**kwargs)
    with pytest.raises(ValueError, match=match):
        callbacks.tensorboard_callback(**kwargs)


def test_config_round_trip_and_serialization(tmp_path):
    cb = callbacks.ScalarTensorBoard(pathlib.Path(tmp_path) / "tb", update_freq=np.int64(5))
    config = cb.get_config()
    assert config == {"log_dir": str(tmp_path / "tb"), "update_freq": 5, "sphere_tf_version": sphere_tf.__version__}
    assert type(config["update_freq"]) is int
    assert callbacks.ScalarTensorBoard.from_config(config).get_config() == config
    serialized = keras.saving.serialize_keras_object(cb)
    assert serialized["registered_name"] == "sphere_tf>ScalarTensorBoard"
    restored = keras.saving.deserialize_keras_object(serialized)
    assert isinstance(restored, callbacks.ScalarTensorBoard) and restored.get_config() == config
    assert callbacks.ScalarTensorBoard("logs", update_freq="batch").get_config()["update_freq"] == "batch"


def test_tensorboard_callback_is_keras_own_on_tensorflow(tmp_path):
    cb = callbacks.tensorboard_callback(tmp_path / "tb", update_freq="batch")
    if keras.backend.backend() == "tensorflow":
        assert type(cb) is keras.callbacks.TensorBoard
        assert (cb.log_dir, cb.update_freq) == (str(tmp_path / "tb"), 1)
    else:
        assert type(cb) is callbacks.ScalarTensorBoard
        assert cb.get_config() == {"log_dir": str(tmp_path / "tb"), "update_freq": "batch",
                                   "sphere_tf_version": sphere_tf.__version__}


def test_scalar_writer_writes_tags_verbatim_in_float32(tmp_path):
    """Tags as given (tensorboardX's `add_scalar` would rewrite them, `tf.summary` does not), values rounded to
    float32 from Python, NumPy and backend numbers; two writers opened in the same folder within a second keep
    two files."""
    with callbacks.scalar_writer(tmp_path) as first, callbacks.scalar_writer(tmp_path) as second:
        first.scalar("a b:c(d)", 0.1, step=3)
        first.scalar("energy/total", np.float64(2.5), step=np.int64(4))
        second.scalar("x", ops.convert_to_tensor(1.25), step=0)
        second.scalar("y", np.array([7.0]), step=1)
        with pytest.raises(ValueError, match="'z' has shape \\(2,\\)"):
            second.scalar("z", np.ones(2), step=1)
    assert first.closed and second.closed
    with pytest.raises(RuntimeError, match="is closed"):
        first.scalar("late", 1.0, step=5)
    first.close()  # idempotent
    assert len(event_files(tmp_path)) == 2
    assert sorted(read_scalars(tmp_path)) == sorted([
        Scalar("a b:c(d)", 3, float(np.float32(0.1)), "simple_value"),
        Scalar("energy/total", 4, 2.5, "simple_value"),
        Scalar("x", 0, 1.25, "simple_value"),
        Scalar("y", 1, 7.0, "simple_value"),
    ])


def test_missing_tensorboardx_is_one_line(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "tensorboardX", None)  # `import tensorboardX` raises ImportError
    for make in (lambda: callbacks.ScalarTensorBoard(tmp_path), lambda: callbacks.scalar_writer(tmp_path),
                 lambda: callbacks.HypersphericalEnergy(log_dir=tmp_path)):
        with pytest.raises(ImportError, match="pip install tensorboardX") as caught:
            make()
        assert "\n" not in str(caught.value)
    callbacks.HypersphericalEnergy()  # no log_dir, no tensorboardX needed
    if keras.backend.backend() == "tensorflow":
        assert type(callbacks.tensorboard_callback(tmp_path)) is keras.callbacks.TensorBoard


def test_the_writers_import_no_tensorflow():
    """Neither module imports TensorFlow, at module level or inside a function (the JAX and PyTorch suites run
    where TensorFlow is not installed)."""
    for module in (tensorboard, energy_module):
        tree = ast.parse(inspect.getsource(module))
        imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
        imported += [node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
        assert not [name for name in imported if name.split(".")[0] == "tensorflow"], module.__name__


# -- the same scalars as Keras's own callback --------------------------------------------------------------------


@pytest.mark.tensorflow_only  # keras.callbacks.TensorBoard writes through tf.summary
@pytest.mark.parametrize("update_freq", ["epoch", "batch", 3])
def test_same_scalars_as_keras_tensorboard(tmp_path, update_freq):
    """One fit, both callbacks: the same scalar tags, steps and float32 values in `train` and `validation`.

    3 training and 3 validation batches an epoch, so that an int `update_freq` of 3 does not meet Keras's
    `record_if` quirk (module docstring of sphere_tf.callbacks.tensorboard).
    """
    model = _model(keras.optimizers.schedules.ExponentialDecay(0.1, decay_steps=2, decay_rate=0.9))
    x, y = _data(12)
    keras_dir, ours_dir = tmp_path / "keras", tmp_path / "ours"
    model.fit(x, y, batch_size=4, epochs=2, validation_data=_data(12, seed=1), verbose=0,
              callbacks=[callbacks.HypersphericalEnergy(layer_names=["d"]),
                         keras.callbacks.TensorBoard(str(keras_dir), update_freq=update_freq),
                         callbacks.ScalarTensorBoard(ours_dir, update_freq=update_freq)])
    assert sorted(os.listdir(keras_dir)) == sorted(os.listdir(ours_dir)) == ["train", "validation"]
    for run in ("train", "validation"):
        keras_scalars = read_scalars(keras_dir / run)
        assert {s.kind for s in keras_scalars} == {"tensor"}
        ours = sorted((s.tag, s.step, s.value) for s in read_scalars(ours_dir / run))
        assert ours == sorted((s.tag, s.step, s.value) for s in keras_scalars), run
    tags = {s.tag for s in read_scalars(ours_dir / "train")}
    assert {"epoch_loss", "epoch_learning_rate", "epoch_energy/total"} <= tags
    assert ("batch_loss" in tags) == (update_freq != "epoch")
