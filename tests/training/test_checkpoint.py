"""Tests for sphere_tf.training.checkpoint: step checkpoints, exact resume after kill -9, the config guard."""

import json
import os
import signal
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import sphere_tf
from sphere_tf import data as data_lib
from sphere_tf import models
from sphere_tf.training import checkpoint
from sphere_tf.runners import classifier
from tests.runners._resume import BATCH
from tests.runners._resume import CHILD
from tests.runners._resume import TRAIN_IMAGES
from tests.runners._resume import idx_dir  # noqa: F401  (a fixture)
from tests.runners._resume import tiny_config

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def checkpoint_values(workdir):
    reader = tf.train.load_checkpoint(os.path.join(workdir, "checkpoints", "train"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def test_kill_mid_epoch_then_resume_matches_uninterrupted_run(idx_dir, tmp_path, monkeypatch, capsys):
    config = tiny_config(idx_dir)
    killed = str(tmp_path / "killed")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO)
    process = subprocess.run([sys.executable, "-c", CHILD, json.dumps(config), killed, "9"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=120)
    assert process.returncode == -signal.SIGKILL, process.stderr[-2000:]
    assert checkpoint.latest_step(os.path.join(killed, "checkpoints", "train")) == 8
    assert not os.path.exists(os.path.join(killed, "results.json"))

    said_before_training = []
    fit_resumable = checkpoint.fit_resumable
    monkeypatch.setattr(checkpoint, "fit_resumable", lambda *args, **kwargs: (
        said_before_training.append(capsys.readouterr().out), fit_resumable(*args, **kwargs))[1])
    resumed = classifier.train_and_evaluate(config, killed)  # the same command again
    assert said_before_training and "Resumed from step 8 of 12" in said_before_training[0]
    straight = str(tmp_path / "straight")
    uninterrupted = classifier.train_and_evaluate(config, straight)

    got, want = checkpoint_values(killed), checkpoint_values(straight)
    assert sorted(got) == sorted(want)
    assert int(got["step/.ATTRIBUTES/VARIABLE_VALUE"]) == 12
    optimizer_iterations = [v for k, v in want.items() if k.startswith("optimizer_variables") and v.shape == ()
                            and v.dtype == np.int64]
    assert optimizer_iterations and all(int(v) == 12 for v in optimizer_iterations)
    for name in want:  # bitwise: same variables at step 8, same batches 9..12, deterministic CPU kernels
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert resumed["test_accuracy"] == uninterrupted["test_accuracy"]
    assert resumed["test_loss"] == uninterrupted["test_loss"]
    assert len(resumed["history"]["loss"]) == len(uninterrupted["history"]["loss"]) == 2
    assert resumed["history"]["loss"][0] == uninterrupted["history"]["loss"][0]  # epoch 1 came from the killed run
    # Epoch 2's batch averages cover its steps 7-8 (killed run) and 9-12 (resumed), as the uninterrupted run's.
    for key in ("loss", "accuracy"):
        assert resumed["history"][key][1] == pytest.approx(uninterrupted["history"][key][1], rel=1e-6, abs=1e-7)


def test_backup_and_restore_replays_the_first_shuffle_order(idx_dir):
    """The state today's epoch-level resume loses: the shuffle position of the input pipeline.

    `BackupAndRestore` restores the variables, but the restarted process iterates a new
    dataset, whose first pass has the *first* epoch's order; the uninterrupted run's second
    epoch has another order. `positioned_stream` hands the resumed run the batches the
    uninterrupted one reads.
    """
    def labels(batches, count):
        return [batch[1].numpy().tolist() for batch in batches.take(count)]

    def dataset():  # what a (re)started process builds
        return data_lib.fashion_mnist_datasets(batch_size=BATCH, seed=3, data_dir=idx_dir)[0]

    steps = TRAIN_IMAGES // BATCH
    uninterrupted = labels(checkpoint.positioned_stream(dataset(), 0), 3 * steps)
    epoch_1, epoch_2 = uninterrupted[:steps], uninterrupted[steps:2 * steps]
    restarted = labels(dataset(), steps)  # BackupAndRestore's resumed epoch 2
    assert restarted == epoch_1
    assert restarted != epoch_2
    assert sorted(sum(epoch_2, [])) == sorted(sum(epoch_1, []))  # a reshuffle of the same images
    for step in (steps, steps + 2, 2 * steps + 1):  # epoch boundary and mid-epoch
        assert labels(checkpoint.positioned_stream(dataset(), step), 3 * steps - step) == uninterrupted[step:]


# Regularizers with state outside the model's variables: Adv-CoMHE's learned P, RP-CoMHE's and mini-batch
# MHE's step counters (their random draws depend on it). Kernels: conv 9×4, fc 196×8 (> projection_dim 4).
STATEFUL_REGULARIZERS = [
    {"name": "comhe", "layers": "conv*", "projection": "adversarial", "projection_dim": 4, "factor": 1.0},
    {"name": "comhe", "layers": "fc", "projection": "random", "projection_dim": 4, "factor": 1.0},
    {"name": "mhe", "layers": "logits", "role": "output", "num_samples": 4, "factor": 1.0},
]


def test_kill_then_resume_restores_regularizer_state(idx_dir, tmp_path):
    """A resumed run continues the learned projections and the random streams of the regularizers."""
    config = {**tiny_config(idx_dir), "regularizers": STATEFUL_REGULARIZERS}
    killed = str(tmp_path / "killed")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO)
    process = subprocess.run([sys.executable, "-c", CHILD, json.dumps(config), killed, "9"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=120)
    assert process.returncode == -signal.SIGKILL, process.stderr[-2000:]
    at_kill = checkpoint_values(killed)
    resumed = classifier.train_and_evaluate(config, killed)
    uninterrupted = classifier.train_and_evaluate(config, str(tmp_path / "straight"))

    got, want = checkpoint_values(killed), checkpoint_values(str(tmp_path / "straight"))
    state = sorted(name for name in want if name.startswith("regularizer_"))
    # One learned P (conv1_1) and two step counters, stored with the model's variables.
    assert [n.split("/")[0] for n in state] == ["regularizer_0_projection_conv1_1_kernel", "regularizer_1_step",
                                                "regularizer_2_step"], state
    assert int(want["regularizer_1_step/.ATTRIBUTES/VARIABLE_VALUE"]) == 12
    assert int(at_kill["regularizer_1_step/.ATTRIBUTES/VARIABLE_VALUE"]) == 8
    projection = "regularizer_0_projection_conv1_1_kernel/.ATTRIBUTES/VARIABLE_VALUE"
    assert np.abs(at_kill[projection] - want[projection]).max() > 1e-6  # P kept learning after step 8
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert resumed["test_loss"] == uninterrupted["test_loss"]


def test_model_and_optimizer_state_survive_a_checkpoint(tmp_path):
    """Every model variable (BN and E‖x‖ moving averages included) and optimizer variable is saved."""
    def build():
        keras.utils.set_random_seed(1)
        model = models.create_model("small_cnn", input_shape=(8, 8, 1), num_classes=3, widths=(4,),
                                    convs_per_stage=1, dense_units=6, batch_norm=True,
                                    operator={"layer": "decoupled", "magnitude": "tanh", "angular": "cosine"})
        model.compile(optimizer=keras.optimizers.Adam(0.01),
                      loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(8, 8, 8, 1)).astype("float32"), rng.integers(0, 3, size=8)
    trained = build()
    trained.fit(x, y, batch_size=4, epochs=1, verbose=0)
    saver = checkpoint.StepCheckpoint(str(tmp_path), every_steps=5)
    saver.set_model(trained)
    saver._step.assign(2)
    saver.save()

    fresh = build()
    loader = checkpoint.StepCheckpoint(str(tmp_path))
    loader.set_model(fresh)
    assert loader.restore() == 2
    names = [v.path for v in trained.variables]
    assert any("norm_mean_biased" in n for n in names) and any("moving_variance" in n for n in names)
    for a, b in zip(trained.variables + trained.optimizer.variables, fresh.variables + fresh.optimizer.variables):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=a.path)
    assert int(fresh.optimizer.iterations) == 2

    other = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(), keras.layers.Dense(3)])
    other.compile(optimizer="adam", loss="mse")
    wrong = checkpoint.StepCheckpoint(str(tmp_path))
    wrong.set_model(other)
    with pytest.raises(ValueError, match="does not match this model and optimizer"):
        wrong.restore()


def test_fit_resumable_saves_every_n_steps_and_does_not_retrain_when_finished(tmp_path, monkeypatch):
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    data = tf.data.Dataset.from_tensor_slices((np.ones((10, 3), "float32"), np.zeros((10, 2), "float32"))).batch(2)
    saved = []
    original = checkpoint.StepCheckpoint.save
    monkeypatch.setattr(checkpoint.StepCheckpoint, "save", lambda self: saved.append(self.step) or original(self))
    out = checkpoint.fit_resumable(model, data, epochs=2, directory=str(tmp_path), every_steps=3, verbose=0)
    assert saved == [3, 6, 9, 10]  # every 3 steps, then the final step
    assert (out["initial_step"], out["step"]) == (0, 10)
    assert len(out["history"]["loss"]) == 2
    assert checkpoint.latest_step(str(tmp_path)) == 10

    monkeypatch.setattr(keras.Model, "fit", lambda *a, **k: pytest.fail("fit called on a finished directory"))
    again = checkpoint.fit_resumable(model, data, epochs=2, directory=str(tmp_path), every_steps=3, verbose=0)
    assert again["initial_step"] == again["step"] == 10
    assert again["history"] == out["history"]
    with pytest.raises(ValueError, match="past this run's 5 steps"):
        checkpoint.fit_resumable(model, data, epochs=1, directory=str(tmp_path), verbose=0)


def test_finished_workdir_is_not_trained_again(idx_dir, tmp_path, monkeypatch):
    config = tiny_config(idx_dir, epochs=1)
    first = classifier.train_and_evaluate(config, str(tmp_path))
    monkeypatch.setattr(checkpoint, "fit_resumable", lambda *a, **k: pytest.fail("retrained a finished workdir"))
    again = classifier.train_and_evaluate(config, str(tmp_path))
    assert again == json.loads(json.dumps(first))


def test_workdir_with_another_config_is_refused_naming_the_keys(idx_dir, tmp_path):
    config = tiny_config(idx_dir)
    checkpoint.record_config(str(tmp_path), classifier.validate(config))  # as the runner records it
    changed = tiny_config(idx_dir, batch_size=5)
    changed["model"]["operator"]["magnitude"] = "linear"
    changed["export"] = True
    with pytest.raises(checkpoint.ConfigMismatchError) as error:
        classifier.train_and_evaluate(changed, str(tmp_path))
    message = str(error.value)
    assert "differing keys: export, model.operator.magnitude, train.batch_size." in message
    assert "model.operator.magnitude: 'tanh' in the workdir, 'linear' now" in message
    assert "export: False in the workdir, True now" in message
    assert not os.path.exists(os.path.join(tmp_path, "checkpoints"))  # refused before anything was written
    # Verbosity and data folders do not change the computation.
    same = classifier.validate(tiny_config(idx_dir, verbose=2))
    same["data"]["data_dir"] = "/elsewhere"
    assert checkpoint.check_workdir_config(str(tmp_path), same) is True
    assert checkpoint.check_workdir_config(str(tmp_path / "new"), changed) is False


def test_config_differences_on_nested_and_tuple_values():
    stored = {"a": {"b": [1, 2], "c": 1.0}, "d": "x"}
    assert checkpoint.config_differences(stored, {"a": {"b": (1, 2), "c": 1.0}, "d": "x"}) == []
    assert checkpoint.config_differences(stored, {"a": {"b": (1, 3), "c": 1.0}, "e": 1}) == [
        ("a.b", [1, 2], [1, 3]), ("d", "x", "<missing>"), ("e", "<missing>", 1)]
    assert checkpoint.config_differences(stored, {"a": {"b": [1, 2], "c": 2.0}, "d": "x"}, ignore=("a",)) == []


def test_keys_the_schema_gained_since_a_run_began_compare_equal_at_their_defaults():
    stored = {"train": {"steps": 10}}  # written before the schema had `evaluation`
    defaults = {"train": {"steps": 0}, "evaluation": {"eval_every_steps": 0, "select_best": False}}
    at_default = {"train": {"steps": 10}, "evaluation": {"eval_every_steps": 0, "select_best": False}}
    assert checkpoint.config_differences(stored, at_default, defaults=defaults) == []
    changed = {"train": {"steps": 10}, "evaluation": {"eval_every_steps": 5, "select_best": False}}
    assert checkpoint.config_differences(stored, changed, defaults=defaults) == [
        ("evaluation.eval_every_steps", "<missing>", 5)]
    assert checkpoint.config_differences(stored, at_default) == [  # without the schema: every new key differs
        ("evaluation.eval_every_steps", "<missing>", 0), ("evaluation.select_best", "<missing>", False)]


def test_bad_arguments_name_the_argument(tmp_path):
    with pytest.raises(ValueError, match="every_steps"):
        checkpoint.StepCheckpoint(str(tmp_path), every_steps=0)
    with pytest.raises(ValueError, match="max_to_keep"):
        checkpoint.StepCheckpoint(str(tmp_path), max_to_keep=-1)
    with pytest.raises(ValueError, match="directory"):
        checkpoint.StepCheckpoint("")
    with pytest.raises(ValueError, match="step"):
        checkpoint.positioned_stream(tf.data.Dataset.range(3), -1)
    with pytest.raises(ValueError, match="steps_per_epoch"):
        checkpoint.steps_per_pass(tf.data.Dataset.range(3).repeat())
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    with pytest.raises(ValueError, match="optimizer"):
        checkpoint.StepCheckpoint(str(tmp_path)).set_model(model)
    model.compile(optimizer="sgd", loss="mse")
    with pytest.raises(ValueError, match="train_data"):
        checkpoint.fit_resumable(model, [1, 2], epochs=1, directory=str(tmp_path))
    with pytest.raises(ValueError, match="steps_per_epoch"):
        checkpoint.fit_resumable(model, lambda step: None, epochs=1, directory=str(tmp_path))


def test_step_checkpoint_config_round_trip(tmp_path):
    callback = checkpoint.StepCheckpoint(str(tmp_path), every_steps=7, max_to_keep=3)
    config = callback.get_config()
    assert config == {"directory": str(tmp_path), "every_steps": 7, "max_to_keep": 3,
                      "sphere_tf_version": sphere_tf.__version__}
    clone = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(callback))
    assert isinstance(clone, checkpoint.StepCheckpoint) and clone.get_config() == config


def test_mismatch_found_by_the_snapshot_beside_the_checkpoints(idx_dir, tmp_path):
    """A workdir `config.json` that agrees is not enough: the copy kept with the checkpoints still refuses."""
    config = tiny_config(idx_dir)
    checkpoint.record_config(str(tmp_path / "checkpoints" / "train"), classifier.validate(config))
    changed = tiny_config(idx_dir, epochs=3)
    checkpoint.record_config(str(tmp_path), classifier.validate(changed))  # a workdir copy that agrees
    with pytest.raises(checkpoint.ConfigMismatchError, match=r"differing keys: train.epochs.\n  train.epochs: 2 in"):
        classifier.train_and_evaluate(changed, str(tmp_path))
