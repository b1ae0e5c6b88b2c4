"""`classifier.dry_run` / `sphere_tf_cli.train_classifier --dry_run`: the resolved recipe, the step count and a measured
time estimate, before anything trains or is written."""

import os
import subprocess
import sys

import pytest

from sphere_tf.runners import classifier

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TINY_MODEL = {"name": "small_cnn", "widths": [4], "convs_per_stage": 1, "dense_units": 8}


@pytest.mark.parametrize("data,train,want", [
    # One pass of the published 60,000 images at batch 128, whole batches only: 468 steps.
    ({"name": "fashion_mnist"}, {"batch_size": 128, "epochs": 20}, (468, 20, 9360)),
    # 6,000 images: 46 whole batches of 128 a pass; a budget of 282 steps in epochs of 47.
    ({"name": "fashion_mnist", "train_limit": 6000}, {"batch_size": 128, "steps": 282, "steps_per_epoch": 47},
     (47, 6, 282)),
    # A budget in steps with the epoch left to the data: the largest divisor of 300 up to one pass (390).
    ({"name": "cifar10"}, {"batch_size": 128, "steps": 300}, (300, 1, 300)),
])
def test_step_count_without_reading_the_data(data, train, want):
    plan = classifier.dry_run({"data": data, "model": TINY_MODEL, "train": train}, probe_steps=0)
    assert (plan["steps_per_epoch"], plan["epochs"], plan["total_steps"]) == want
    assert plan["evaluations"] == 1 and "seconds_per_step" not in plan


def test_unknown_data_size_is_said_not_guessed():
    plan = classifier.dry_run({"data": {"name": "face_folder"}, "model": TINY_MODEL,
                               "train": {"batch_size": 8, "epochs": 2}}, probe_steps=0)
    assert plan["train_images"] is None and plan["total_steps"] is None
    assert "steps            unknown until the data is read" in classifier.dry_run_lines(plan)


def test_measured_estimate_and_evaluations():
    config = {"data": {"name": "mnist"}, "model": TINY_MODEL,
              "train": {"batch_size": 16, "steps": 40, "steps_per_epoch": 10}, "evaluation": {"eval_every_steps": 20}}
    plan = classifier.dry_run(config, probe_steps=2)
    assert plan["evaluations"] == 2 and plan["total_steps"] == 40
    assert plan["seconds_per_step"] > 0 and plan["compile_seconds"] > 0 and plan["parameters"] > 0
    assert plan["estimated_train_seconds"] == pytest.approx(plan["compile_seconds"] + 40 * plan["seconds_per_step"])
    with pytest.raises(classifier.ConfigError, match="evaluation.eval_every_steps=15"):
        classifier.dry_run({**config, "evaluation": {"eval_every_steps": 15}}, probe_steps=0)


def test_the_trainer_flag_prints_the_plan_and_writes_nothing(tmp_path):
    workdir = tmp_path / "never"
    result = subprocess.run(
        [sys.executable, "-m", "sphere_tf_cli.train_classifier", "--config=sphere_tf/configs/repro/fashion_mnist_mhe.py:full=True",
         "--dry_run", "--dry_run_steps=1", f"--workdir={workdir}"],
        cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert '"train_limit": 0' in result.stdout and "steps            9360 (20 epochs of 468)" in result.stdout
    assert "estimated time" in result.stdout
    assert not workdir.exists()
