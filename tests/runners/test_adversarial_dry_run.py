"""`experiment.dry_run` / `sphere_tf_cli.train_adversarial --dry_run`: every model the experiment would train (targets and
black-box sources), their steps and a measured time estimate; nothing trained, nothing written."""

import importlib.util
import os

import pytest

from sphere_tf.runners import adversarial as experiment

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def quick_config():
    path = os.path.join(REPO, "sphere_tf", "configs", "adversarial", "fashion_mnist_cnn9.py")
    spec = importlib.util.spec_from_file_location("adv_config", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config("quick")


def test_every_trained_model_is_listed_with_its_steps():
    config = quick_config()
    resolved = experiment.validate(config)
    plan = experiment.dry_run(config, probe_steps=0)
    seeds, models, trainings = resolved["seeds"], resolved["models"], resolved["trainings"]
    sources = len({t if resolved["black_box"]["source_training"] == "matched" else "natural" for t in trainings})
    assert len(plan["trainings"]) == len(seeds) * (len(models) * len(trainings) + sources)
    assert {(t["training"], t["model"]) for t in plan["trainings"] if t["role"] == "target"} == {
        (t, m) for t in trainings for m in models}
    per_model = resolved["train"]["steps_per_epoch"] * resolved["train"]["epochs"]  # quick: fixed epochs
    assert all(t["total_steps"] == per_model for t in plan["trainings"])
    assert plan["total_steps"] == per_model * len(plan["trainings"])
    assert plan["estimated_train_seconds"] is None


def test_the_estimate_sums_the_measured_steps():
    config = quick_config()
    config.models = ["baseline"]
    config.trainings = ["fgsm"]
    plan = experiment.dry_run(config, probe_steps=1)
    assert {t["role"] for t in plan["trainings"]} == {"source", "target"}
    assert all(t["seconds_per_step"] > 0 for t in plan["trainings"])
    assert plan["estimated_train_seconds"] == pytest.approx(sum(
        t["compile_seconds"] + t["seconds_per_step"] * t["total_steps"] for t in plan["trainings"]))
