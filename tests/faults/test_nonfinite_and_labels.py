"""Non-finite values and out-of-range labels, on every backend: one documented behaviour each.

* A non-finite training loss (a storm of NaN images in the data) stops the run at the first such step with
  `checkpoint.NonFiniteError` naming the global step and what to do; nothing of that step or after is saved, so
  the latest checkpoint holds the last finite state, from which a rerun (on repaired data) resumes.
* A variable that became non-finite while the loss stayed finite (a NaN gradient: the derivative of a square root
  at 0, as in the norms of hyperspherical layers) is never saved: the save raises `NonFiniteError` naming the
  variable and the step.
* Under a `LossScaleOptimizer` (mixed precision) a non-finite step is skipped by the optimizer, as loss scaling
  intends: reported once, not stopped.
* A restored checkpoint whose model or optimizer variables hold NaN (written by another program or an older
  release) is refused with a warning naming the variable, and the previous checkpoint restored.
* A label that is not a class index (< 0, >= the class count, not an integer) is refused when the data is read,
  naming the file or the split and the value, before anything is written: backends differ on what such a label
  does in training (an error on TensorFlow's CPU, NaN on its GPU, a silent zero loss on JAX).
"""

import os
import shutil

import keras
import numpy as np
import pytest

from sphere_tf import data as data_lib
from sphere_tf.data import datasets as datasets_lib
from sphere_tf.data.errors import CorruptDataError
from sphere_tf.runners import classifier
from sphere_tf.training import checkpoint
from tests.faults import _runner_faults as runs
from tests.runners._resume import write_idx

BACKEND = keras.backend.backend()


def _poison_from(monkeypatch, first_step):
    """The runner's training batches of global step `first_step` (1-based) and after hold only NaN images.

    A tf.data stream (TensorFlow) is mapped in the pipeline, keeping its static shapes: through a Python
    generator the train step is traced for unknown shapes, and its kernels round the last bits differently, which
    a bitwise comparison with the reference run would see. A Grain stream (JAX, PyTorch) is iterated in Python
    anyway.
    """
    original = checkpoint.fit_resumable

    def fit_resumable(model, train_data, *args, **kwargs):
        def stream(step):
            source = train_data(step)
            if hasattr(source, "as_numpy_iterator"):
                import tensorflow as tf  # noqa: PLC0415 (a tf.data stream: TensorFlow is there)

                return source.enumerate().map(lambda offset, batch: (
                    tf.where(step + offset + 1 >= first_step, tf.fill(tf.shape(batch[0]), np.nan), batch[0]),
                    batch[1]))

            def poisoned():
                for offset, (images, labels) in enumerate(source):
                    if step + offset + 1 >= first_step:
                        images = np.full_like(images, np.nan)
                    yield images, labels
            return poisoned()
        return original(model, stream, *args, **kwargs)

    monkeypatch.setattr(checkpoint, "fit_resumable", fit_resumable)


def _finite(state):
    return all(np.isfinite(value).all() for value in state.values() if np.asarray(value).dtype.kind == "f")


def _storm(monkeypatch, tmp_path):
    """A run whose images are NaN from step 5 on: returns the workdir and the error."""
    workdir = str(tmp_path / "run")
    with monkeypatch.context() as patch:
        _poison_from(patch, 5)
        with pytest.raises(checkpoint.NonFiniteError) as raised:
            classifier.train_and_evaluate(runs.config(), workdir)
    message = str(raised.value)
    assert "training loss is nan at global step 5" in message and "Check the training data" in message
    assert ("ckpt-4 (step 4)" in message) != ("state-4.npz (step 4)" in message)  # the latest checkpoint, named
    directory = runs.state_dir(workdir)
    assert checkpoint.latest_step(directory) == 4 and _finite(runs.final_state(workdir))
    assert not [name for name in os.listdir(directory) if "-5" in name or "-6" in name]
    assert not os.path.exists(os.path.join(workdir, "results.json"))
    return workdir


def test_a_storm_of_nan_images_stops_the_run_at_its_first_step(monkeypatch, tmp_path, tally):
    _storm(monkeypatch, tmp_path)
    tally("non-finite values", "NaN images in every batch from step 5 on (runner)",
          lost="stopped at step 5; the latest checkpoint (step 4) holds the last finite state")


@pytest.mark.slow
def test_after_a_storm_the_repaired_data_resumes_from_the_last_finite_checkpoint(monkeypatch, tmp_path, capsys,
                                                                                 tally):
    runs.reference()
    workdir = _storm(monkeypatch, tmp_path)
    capsys.readouterr()
    results = classifier.train_and_evaluate(runs.config(), workdir)
    assert "Resumed from step 4 of 6" in capsys.readouterr().out
    runs.assert_ends_as_the_reference(workdir, results)
    tally("non-finite values", "NaN images from step 5 on, then the data repaired (runner)",
          lost="0 steps: resumed from step 4")


# The library-level cases: a Dense layer whose output is scaled by 1 + sqrt(|w| z), z the input's last column.
# With z = 0 the scale is 1 and the loss finite, but the gradient of w is 0 * inf = NaN (the derivative of the
# square root at 0): w is NaN after that step while its loss was finite.
@keras.saving.register_keras_serializable(package="sphere_tf_fault_tests")
class GatedScale(keras.layers.Layer):
    def build(self, input_shape):
        self.w = self.add_weight(name="w", shape=(), initializer="ones")

    def call(self, inputs):
        logits, gate = inputs
        return logits * (1.0 + keras.ops.sqrt(keras.ops.abs(self.w) * gate))


def _gated_model(optimizer=None):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6,))
    logits = keras.layers.Dense(3)(inputs[:, :5])
    model = keras.Model(inputs, GatedScale()([logits, inputs[:, 5:]]))
    model.compile(optimizer=optimizer or keras.optimizers.SGD(0.1, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _gated_stream(zero_gate_step=None, nan_step=None):
    """Batches by global step (1-based): the gate 0 at `zero_gate_step`, NaN inputs at `nan_step`."""
    def stream(step):
        def batches():
            for s in range(step + 1, 10_000):
                rng = np.random.default_rng(s)
                x = np.concatenate([rng.normal(size=(8, 5)), np.ones((8, 1))], axis=1).astype("float32")
                if s == zero_gate_step:
                    x[:, 5] = 0.0
                if s == nan_step:
                    x[:, :5] = np.nan
                yield x, rng.integers(0, 3, size=8)
        return batches()
    return stream


def test_a_variable_gone_nan_with_a_finite_loss_is_never_saved(tmp_path, capsys, tally):
    directory = str(tmp_path / "ckpt")
    model = _gated_model()
    with pytest.raises(checkpoint.NonFiniteError) as raised:
        checkpoint.fit_resumable(model, _gated_stream(zero_gate_step=3), epochs=1, directory=directory,
                                 steps_per_epoch=6, every_steps=1, max_to_keep=3, verbose=0)
    message = str(raised.value)
    assert "At global step 3 variable 'model_variables/" in message and "/w'" in message and "1 NaN" in message
    assert "the loss was still finite" in message
    assert ("ckpt-2 (step 2)" in message) != ("state-2.npz (step 2)" in message)
    assert checkpoint.latest_step(directory) == 2
    saver = checkpoint.StepCheckpoint(directory, every_steps=1)
    restored = _gated_model()
    saver.set_model(restored)
    capsys.readouterr()
    assert saver.restore() == 2 and "Warning" not in capsys.readouterr().out
    assert all(np.isfinite(keras.ops.convert_to_numpy(v)).all() for v in restored.variables)
    tally("non-finite values", "a weight NaN after a step whose loss was finite (library)",
          lost="the step's checkpoint refused; the previous one stays the latest")


def test_loss_scaling_skips_a_nan_step_and_training_goes_on(tmp_path, capsys, tally):
    directory = str(tmp_path / "ckpt")
    model = _gated_model(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)))
    capsys.readouterr()
    result = checkpoint.fit_resumable(model, _gated_stream(nan_step=3), epochs=1, directory=directory,
                                      steps_per_epoch=6, every_steps=2, verbose=0)
    out = capsys.readouterr().out
    assert result["step"] == 6 and checkpoint.latest_step(directory) == 6
    assert out.count("Warning: the training loss is nan at global step 3") == 1 and "skips such steps" in out
    assert all(np.isfinite(keras.ops.convert_to_numpy(v)).all() for v in model.variables)
    tally("non-finite values", "one NaN batch under a LossScaleOptimizer (library)",
          lost="that step skipped by the optimizer, reported once")


def _write_with_a_nan(directory, step):
    """Rewrites the checkpoint of `step` with a NaN in the Dense kernel, as a writer without sphere_tf's check
    (another program, an older release) would."""
    model = runs.dense_model()
    saver = checkpoint.StepCheckpoint(directory, every_steps=2, max_to_keep=3)
    saver.set_model(model)
    saver.restore()
    kernel = model.layers[0].kernel
    kernel.assign(np.where(np.eye(5, 3) > 0, np.nan, keras.ops.convert_to_numpy(kernel)).astype("float32"))
    saver._step.assign(step)
    if BACKEND == "tensorflow":
        saver._manager.save(checkpoint_number=step)
    else:
        saver._manager.finite = ()
        saver._manager.save(step)
    return kernel.path


def test_a_restored_checkpoint_holding_nan_falls_back_naming_the_variable(tmp_path, capsys, tally):
    directory = str(tmp_path / "ckpt")
    stream = _gated_stream()
    model = runs.dense_model()
    checkpoint.fit_resumable(model, lambda step: ((x[:, :5], y) for x, y in stream(step)), epochs=1,
                             directory=directory, steps_per_epoch=4, every_steps=2, max_to_keep=3, verbose=0)
    path = _write_with_a_nan(directory, 4)
    restored = runs.dense_model()
    saver = checkpoint.StepCheckpoint(directory, every_steps=2, max_to_keep=3)
    saver.set_model(restored)
    capsys.readouterr()
    assert saver.restore() == 2
    out = capsys.readouterr().out
    # The variable named as the restoring model calls it (TensorFlow) or as the archive does (JAX, PyTorch):
    # Keras numbers the default layer names per process, so `path` (the writer's) differs in its numbers.
    assert "holds non-finite values" in out and "model_variables/" in out and path.split("/")[-1] in out
    assert "3 NaN" in out and "trying the previous" in out
    assert all(np.isfinite(keras.ops.convert_to_numpy(v)).all() for v in restored.variables)
    tally("non-finite values", "a NaN in the latest checkpoint's weights (library)",
          lost="2 steps: resumed from the previous checkpoint")
    _write_with_a_nan(directory, 2)  # the checkpoint of step 2 too: nothing finite left
    saver = checkpoint.StepCheckpoint(directory, every_steps=2, max_to_keep=3)
    saver.set_model(runs.dense_model())
    with pytest.raises(checkpoint.CorruptCheckpointError, match="no checkpoint in .* can be read"):
        saver.restore()


def _labels_folder(tmp_path, label):
    """The tiny Fashion-MNIST folder with the training label of example 7 set to `label`."""
    folder = str(tmp_path / "fashion_mnist")
    shutil.copytree(runs.data_dir(), folder)
    rng = np.random.default_rng(7)  # the labels `runs.data_dir` drew first
    labels = rng.integers(0, 10, size=60)
    labels[7] = label
    write_idx(os.path.join(folder, "train-labels-idx1-ubyte.gz"), labels)
    return folder


def test_an_out_of_range_label_in_the_files_is_refused_naming_the_file(tmp_path, tally):
    folder = _labels_folder(tmp_path, 10)
    workdir = str(tmp_path / "run")
    with pytest.raises(CorruptDataError) as raised:
        classifier.train_and_evaluate(runs.config(folder), workdir)
    message = str(raised.value)
    assert os.path.join(folder, "train-labels-idx1-ubyte.gz") in message and "label 10" in message
    assert not os.path.exists(workdir)  # refused before anything is written
    tally("out-of-range labels", "label 10 of 10 classes in an idx label file (runner)", lost="nothing: refused")


BAD_LABELS = {"negative": -1, "the class count": 10, "not an integer": 2.5, "NaN": float("nan")}


@pytest.mark.parametrize("case", list(BAD_LABELS))
def test_a_label_that_is_no_class_index_is_refused_whatever_the_reader(tmp_path, case, tally):
    """A user's reader (`register_dataset`) gives the labels: checked by `get_datasets`, and so by the runner."""
    name = f"faults_labels_{case.replace(' ', '_')}"
    images = np.random.default_rng(0).integers(0, 255, size=(40, 8, 8, 1)).astype("uint8")
    labels = np.arange(40) % 10
    labels = labels.astype("float32") if isinstance(BAD_LABELS[case], float) else labels
    labels[13] = BAD_LABELS[case]

    def reader(**options):
        return (images, labels), (images[:20], np.arange(20) % 10)

    datasets_lib.register_dataset(name, datasets_lib.DatasetSpec((8, 8, 1), 10, None, ("arrays",), reader=reader))
    try:
        with pytest.raises(CorruptDataError) as raised:
            data_lib.get_datasets(name, batch_size=10, seed=0)
        message = str(raised.value)
        assert f"training split of data set {name!r}" in message and "example 13" in message
        assert repr(labels[13].item()) in message and "10 classes" in message
        config = {**runs.config(), "data": {"name": name}}
        workdir = str(tmp_path / "run")
        with pytest.raises(CorruptDataError, match="example 13"):
            classifier.train_and_evaluate(config, workdir)
        assert not os.path.exists(workdir)
    finally:
        datasets_lib.DATASETS.pop(name, None)
    tally("out-of-range labels", f"a label that is {case} from a registered reader (get_datasets, runner)",
          lost="nothing: refused")
