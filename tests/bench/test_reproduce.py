"""`bench/gpu/reproduce.py`, the full-data reproductions' driver for hosts without TensorFlow.

It runs here in `.venv-torch` (JAX, no TensorFlow installed) in its `quick` mode, so the driver, the configs'
recipes and `sphere_tf.runners.recipe` cannot come to need TensorFlow between GPU runs; the interval arithmetic
of the early training curve is checked against a hand computation.
"""

import json
import subprocess

import pytest

from bench.gpu import full_data
from tests.backends import interpreters


def test_early_curve_turns_running_means_into_interval_means():
    curve = full_data.EarlyTrainingCurve("accuracy")
    curve.set_params({"epochs": 1})
    # Keras's running mean of the pass so far: 0.5 after 25 steps, 0.6 after 50, 0.65 after 75.
    for step, mean in ((25, 0.5), (50, 0.6), (75, 0.65)):
        curve.on_train_batch_end(step - 1, {"accuracy": mean})
    curve.on_train_batch_end(9, {"accuracy": 0.99})  # not an interval's end: ignored
    curve.on_epoch_end(0)
    curve.on_train_batch_end(24, {"accuracy": 0.0})  # a later pass: ignored
    # Steps 26-50: (0.6·50 − 0.5·25) / 25 = 0.7; steps 51-75: (0.65·75 − 0.6·50) / 25 = 0.75.
    assert [i["steps"] for i in curve.intervals()] == [[1, 25], [26, 50], [51, 75]]
    assert [i["accuracy"] for i in curve.intervals()] == pytest.approx([50.0, 70.0, 75.0])


@pytest.mark.tensorflow_only  # drives .venv-torch from the main suite
def test_quick_reproduction_runs_on_jax_without_tensorflow(tmp_path):
    command = [interpreters.python_for("jax"), "-m", "bench.gpu.reproduce", f"--out={tmp_path}", "--mode=quick",
               "--jobs=configs/repro/fashion_mnist_margin_2d.py|loss=lsoftmax_m2,recipe=paper",
               "--seeds=0", "--workers=1"]
    result = subprocess.run(command, env=interpreters.environment("jax"), cwd=interpreters.REPO,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    records = [json.loads(line) for line in (tmp_path / "runs.jsonl").read_text().splitlines()]
    # The variant holds a comma (the reason for --jobs) and the authors' recipe, whose mean subtraction needs the
    # training images' channel mean.
    assert [r["variant"] for r in records] == ["loss=lsoftmax_m2,recipe=paper"]
    for record in records:
        assert record["backend"] == "jax" and record["mode"] == "quick" and record["steps"] == 2
        assert 0.0 <= record["test_accuracy"] <= 100.0
        assert record["best_pass_test_accuracy"] == max(record["test_accuracy_per_pass"])
        assert record["angular_fisher_score"] >= 0.0  # the 2-D feature statistics of the `fc` layer
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["fashion_mnist_margin_2d"]["loss=lsoftmax_m2,recipe=paper"]["test_accuracy"]["n"] == 1


def test_summary_leaves_out_and_counts_a_diverged_seed():
    def record(seed, accuracy, fisher):
        return {"claim": "c", "variant": "v", "seed": seed, "device": "cpu", "steps": 2, "history_last": {},
                "test_accuracy": accuracy, "angular_fisher_score": fisher}

    summary = full_data.summarize([record("0", 80.0, 0.1), record("1", 10.0, float("nan")), record("2", 82.0, 0.3)])
    entry = summary["c"]["v"]
    assert entry["test_accuracy"]["n"] == 3 and entry["test_accuracy"]["mean"] == pytest.approx(172.0 / 3)
    assert entry["angular_fisher_score"]["n"] == 2 and entry["angular_fisher_score"]["mean"] == pytest.approx(0.2)
    assert entry["angular_fisher_score_nonfinite"] == 1 and "test_accuracy_nonfinite" not in entry
