"""The runner's periodic test evaluation (`evaluation.eval_every_steps`), its test-error curve in results.json and
TensorBoard, best-checkpoint selection (`evaluation.select_best`), and both across a kill -9 and resume."""

import json
import os
import signal
import subprocess
import sys

import keras
import numpy as np
import pytest

from sphere_tf import callbacks as callbacks_lib
from sphere_tf import data as data_lib
from sphere_tf.training import checkpoint
from sphere_tf.runners import classifier
from tests.runners._resume import CHILD
from tests.runners._resume import idx_dir  # noqa: F401  (a fixture)
from tests.runners._resume import tiny_config
from tests.runners.test_classifier import _scalars

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def periodic_config(data_dir, every, select_best=False, epochs=3):
    config = tiny_config(data_dir, epochs=epochs, steps_per_epoch=2)
    # No BN and no E{‖x‖} average: the curve's last point and the saved model are the same weights (no precise BN).
    config["model"] = {**config["model"], "batch_norm": False, "operator": "conv2d"}
    config["evaluation"] = {"eval_every_steps": every, "select_best": select_best}
    return config


def saved_model_accuracy(workdir, config):
    """Percent accuracy of `checkpoints/model.keras` on the test split, by argmax over its logits (NumPy)."""
    model = keras.models.load_model(os.path.join(workdir, "checkpoints", "model.keras"))
    _, test_ds, _ = data_lib.get_datasets("fashion_mnist", batch_size=7, manual_dir=config["data"]["manual_dir"])
    hits, count = 0, 0
    for x, y in test_ds:
        logits = keras.ops.convert_to_numpy(model(x, training=False))
        hits += int(np.sum(np.argmax(logits, axis=1) == y.numpy()))
        count += len(y)
    return 100.0 * hits / count


def test_every_four_steps_gives_the_test_error_curve(idx_dir, tmp_path):  # noqa: F811
    config = periodic_config(idx_dir, every=4, epochs=4)  # epochs of 2 steps: evaluations at steps 4 and 8
    workdir = str(tmp_path / "run")
    results = classifier.train_and_evaluate(config, workdir)
    curve = results["test_curve"]
    assert [point["step"] for point in curve] == [4, 8]
    for point in curve:
        assert point["test_error"] == pytest.approx(100.0 - point["test_accuracy"], abs=1e-4)
        assert np.isfinite(point["test_loss"])
    # The last evaluation is of the final weights: the saved model's accuracy, recomputed by argmax.
    assert curve[-1]["test_accuracy"] == pytest.approx(saved_model_accuracy(workdir, config), abs=1e-4)
    assert curve[-1]["test_accuracy"] == pytest.approx(results["test_accuracy"], abs=1e-4)
    assert results["selection"] == "final"
    assert _scalars(workdir, "epoch_error", run="validation") == pytest.approx([p["test_error"] for p in curve], abs=1e-4)
    with open(os.path.join(workdir, "results.json")) as f:
        assert json.load(f)["test_curve"] == curve


def test_select_best_keeps_the_best_evaluated_weights(idx_dir, tmp_path, monkeypatch):  # noqa: F811
    config = periodic_config(idx_dir, every=2, select_best=True, epochs=3)
    workdir = str(tmp_path / "best")
    # The test accuracies the run will see, steered: the middle evaluation is the best.
    seen = iter([0.3, 0.9, 0.5])
    original = callbacks_lib.BestCheckpoint.on_epoch_end

    def steered(self, epoch, logs=None):
        if logs is not None and "val_accuracy" in logs:
            logs["val_accuracy"] = next(seen)
        return original(self, epoch, logs)

    monkeypatch.setattr(callbacks_lib.BestCheckpoint, "on_epoch_end", steered)
    saved_weights = {}
    original_save = keras.Model.save_weights

    def remember(self, filepath, *args, **kwargs):
        saved_weights[int(self.optimizer.iterations)] = [np.array(w) for w in self.get_weights()]
        return original_save(self, filepath, *args, **kwargs)

    monkeypatch.setattr(keras.Model, "save_weights", remember)
    results = classifier.train_and_evaluate(config, workdir)
    assert sorted(saved_weights) == [2, 4]  # saved at the first evaluation and at the better second one only
    assert results["selection"] == "best of 3 evaluations (step 4)"
    model = keras.models.load_model(os.path.join(workdir, "checkpoints", "model.keras"))
    for got, want in zip(model.get_weights(), saved_weights[4]):
        np.testing.assert_array_equal(got, want)


def test_bad_periodic_evaluation_is_refused_before_data_is_read(idx_dir, tmp_path):  # noqa: F811
    with pytest.raises(classifier.ConfigError, match="evaluation.eval_every_steps=3 must be a positive multiple"):
        classifier.validate(periodic_config(idx_dir, every=3))
    with pytest.raises(classifier.ConfigError, match="evaluation.select_best"):
        classifier.validate(periodic_config(idx_dir, every=0, select_best=True))
    with pytest.raises(classifier.ConfigError, match="evaluation.eval_every_steps"):
        classifier.validate(periodic_config(idx_dir, every=-2))
    # An epoch length that comes from the data (one pass: 6 steps) is checked once the data is read, before training.
    config = periodic_config(idx_dir, every=4)
    config["train"]["steps_per_epoch"] = 0
    with pytest.raises(classifier.ConfigError, match="epoch of 6 steps"):
        classifier.train_and_evaluate(config, str(tmp_path / "from_data"))
    assert not os.path.exists(os.path.join(str(tmp_path / "from_data"), "checkpoints", "train", "history.json"))


def test_keep_epochs_drops_the_evaluations_a_checkpoint_predates(tmp_path):
    saver = checkpoint.StepCheckpoint(str(tmp_path), every_steps=2)
    saver._history = {"loss": [3.0, 2.0, 1.0], "val_loss": [2.5, 1.5], "val_step": [4.0, 8.0]}
    saver.keep_epochs(3, steps_per_epoch=2)  # restored at step 6: the evaluation at step 8 had not happened
    assert saver.history == {"loss": [3.0, 2.0, 1.0], "val_loss": [2.5], "val_step": [4.0]}


def test_kill_then_resume_keeps_the_curve_and_the_best(idx_dir, tmp_path):  # noqa: F811
    # 6-step epochs, 2 epochs, checkpoints every 2 steps; evaluations at steps 6 and 12; killed at step 9.
    config = tiny_config(idx_dir)
    config["evaluation"] = {"eval_every_steps": 6, "select_best": True}
    killed = str(tmp_path / "killed")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO)
    process = subprocess.run([sys.executable, "-c", CHILD, json.dumps(config), killed, "9"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=180)
    assert process.returncode == -signal.SIGKILL, process.stderr[-2000:]
    resumed = classifier.train_and_evaluate(config, killed)
    straight = classifier.train_and_evaluate(config, str(tmp_path / "straight"))
    assert [p["step"] for p in resumed["test_curve"]] == [6, 12]
    assert resumed["test_curve"] == straight["test_curve"]
    assert resumed["selection"] == straight["selection"]
    assert resumed["test_accuracy"] == straight["test_accuracy"]


def test_the_evaluation_callbacks_round_trip_through_their_config(tmp_path):
    log = callbacks_lib.TestErrorLog("margin_accuracy", 47)
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(log))
    assert type(again) is callbacks_lib.TestErrorLog and again.get_config() == log.get_config()
    best = callbacks_lib.BestCheckpoint(str(tmp_path / "best.weights.h5"), monitor="val_accuracy")
    again = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(best))
    assert type(again) is callbacks_lib.BestCheckpoint and again.get_config() == best.get_config()
    assert again.best_value == float("-inf")
