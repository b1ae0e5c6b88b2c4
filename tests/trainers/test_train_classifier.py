"""The main job: the absl trainer runs end to end on real Fashion-MNIST (a small slice)."""

import json
import os
import subprocess
import sys

import numpy as np
import tensorflow as tf

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "configs", "dcnet", "fashion_mnist_tanh_cosine.py")


def test_main_job_trains_evaluates_and_exports(tmp_path):
    workdir = str(tmp_path / "run")
    proc = subprocess.run(
        [sys.executable, "-m", "trainers.train_classifier", f"--config={CONFIG}:quick", f"--workdir={workdir}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Test accuracy:" in proc.stdout
    with open(os.path.join(workdir, "config.json")) as f:
        assert json.load(f)["model"]["operator"]["magnitude"] == "tanh"
    with open(os.path.join(workdir, "results.json")) as f:
        results = json.load(f)
    assert np.isfinite(results["test_loss"])
    assert os.path.exists(os.path.join(workdir, "checkpoints", "model.keras"))
    assert os.listdir(os.path.join(workdir, "tensorboard"))
    loaded = tf.saved_model.load(os.path.join(workdir, "export"))
    logits = loaded.serve(tf.zeros((3, 28, 28, 1)))
    assert logits.shape == (3, 10)


def test_missing_flags_are_a_usage_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "trainers.train_classifier", f"--config={CONFIG}:quick"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode != 0 and "workdir" in proc.stderr
