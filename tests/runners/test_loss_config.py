"""The runner's `loss` section: `loss.name` ('crossentropy' or 'hinge') picks the training loss on the logits."""

import json
import math
import os

import pytest

from sphere_tf import losses
from sphere_tf.data import archive_writers
from sphere_tf.runners import classifier
from sphere_tf.runners import recipe


def _config(manual_dir, **loss):
    return {
        "seed": 1,
        "data": {"name": "mnist", "manual_dir": manual_dir},
        "model": {"name": "small_cnn", "widths": [4], "convs_per_stage": 1, "dense_units": 8},
        "loss": loss,
        "optimizer": {"name": "sgd", "learning_rate": 0.01},
        "train": {"batch_size": 4, "epochs": 1, "steps_per_epoch": 2, "verbose": 0},
        "strategy": "one_device",
        "export": False,
    }


def test_defaults_and_the_built_losses():
    resolved = classifier.validate(_config("/nonexistent"))
    assert resolved["loss"]["name"] == "crossentropy" and resolved["loss"]["hinge_norm"] == "l1"
    loss = recipe.build_loss(classifier.validate(_config("/nonexistent", label_smoothing=0.01)))
    assert isinstance(loss, losses.SparseCrossentropy) and loss.label_smoothing == 0.01
    for norm in ("l1", "l2"):
        loss = recipe.build_loss(classifier.validate(_config("/nonexistent", name="hinge", hinge_norm=norm)))
        assert isinstance(loss, losses.SparseHinge) and loss.norm == norm


@pytest.mark.parametrize("loss,key,hint", [
    ({"name": "hing"}, "loss.name", "'hinge'"),
    ({"name": "hinge", "hinge_norm": "l3"}, "loss.hinge_norm", "('l1', 'l2')"),
    ({"name": "hinge", "label_smoothing": 0.01}, "loss.label_smoothing", "loss.name='hinge'"),
])
def test_bad_loss_values_name_the_key(loss, key, hint):
    with pytest.raises(classifier.ConfigError) as raised:
        classifier.validate(_config("/nonexistent", **loss))
    assert key in str(raised.value) and hint in str(raised.value)


def test_a_hinge_run_trains_and_evaluates(tmp_path):
    folder = str(tmp_path / "mnist")
    os.makedirs(folder)
    archive_writers.write_mnist(folder, n_train=16, n_test=6, seed=0)
    workdir = str(tmp_path / "run")
    results = classifier.train_and_evaluate(_config(folder, name="hinge"), workdir)
    assert results["steps"] == 2
    assert all(math.isfinite(v) for v in results["history"]["loss"]) and math.isfinite(results["test_loss"])
    with open(os.path.join(workdir, "config.json")) as f:
        assert json.load(f)["loss"]["name"] == "hinge"
