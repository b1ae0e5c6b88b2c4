"""The runner finds a user's registrations: a config imports the user's module (a data set reader + spec and
a model builder, no edit of the package), and `train_and_evaluate` trains it for two steps."""

import json
import os

import numpy as np
import pytest

from sphere_tf.runners import classifier
from tests.runners import user_extension
from sphere_tf_cli import _config_flags


@pytest.fixture
def user_config(tmp_path):
    folder = str(tmp_path / "project")
    os.makedirs(folder)
    yield user_extension.write_user_project(folder)
    user_extension.forget_user_project(folder)


def test_a_config_importing_user_registrations_trains_through_the_runner(user_config, tmp_path):
    config = _config_flags.load_config_file(user_config)  # the runner's own loading: imports the module
    workdir = str(tmp_path / "run")
    results = classifier.train_and_evaluate(config, workdir)
    assert results["steps"] == 2 and np.isfinite(results["test_loss"])
    with open(os.path.join(workdir, "config.json")) as f:
        recorded = json.load(f)
    assert recorded["data"]["name"] == user_extension.DATASET
    assert recorded["model"] == {"name": user_extension.MODEL, "units": 8}


def test_the_user_model_is_checked_like_a_builtin(user_config):
    config = _config_flags.load_config_file(user_config)
    config["model"]["widths"] = [4]
    with pytest.raises(ValueError, match="Unknown config key 'model.widths' for model 'user_mlp'; expected one of "
                                         r"\['units'\]"):
        classifier.validate(config)
    plan = classifier.dry_run(_config_flags.load_config_file(user_config), probe_steps=1)
    assert plan["train_images"] is None and plan["total_steps"] == 2
    assert plan["parameters"] == (64 * 8 + 8) + (8 * 3 + 3)
