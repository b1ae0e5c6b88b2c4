"""`bench/gpu/run.sh` runs on CPU with small shapes where TensorFlow is not installed (its GPU host has none).

The GPU check (parity subset, the CNN-9 benchmarks on JAX and PyTorch, the README's main job and the full-data
reproductions through the runner on JAX) is run by hand on a GPU host; here
it runs with `SMALL=1` in `.venv-torch` (JAX, PyTorch, no TensorFlow), so the script and `bench.bench_backends`
cannot rot between GPU runs.
"""

import json
import os
import subprocess

import pytest

from tests.backends import interpreters

SCRIPT = os.path.join(interpreters.REPO, "bench", "gpu", "run.sh")


@pytest.mark.tensorflow_only  # drives .venv-torch from the main suite
def test_gpu_script_runs_small_on_cpu_without_tensorflow(tmp_path):
    python_dir = os.path.dirname(interpreters.python_for("jax"))
    env = dict(interpreters.environment("jax"), SMALL="1", REPRO_BUDGET="1", PATH=python_dir + os.pathsep + os.environ["PATH"])
    result = subprocess.run(["bash", SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "passed" in (tmp_path / "parity_jax.txt").read_text()
    for backend in ("jax", "torch"):
        rows = [json.loads(line) for line in (tmp_path / f"bench_{backend}.jsonl").read_text().splitlines()]
        assert {r["case"] for r in rows} >= {"conv2d", "sphere_cosine", "sphere_linear", "tanh_cosine"}
        assert all(r["backend"] == backend and r["median_step_s"] > 0 for r in rows)
        assert all(r["ratio_to_conv2d"] == 1.0 for r in rows if r["case"] == "conv2d")
    # The README's main job through the runner on JAX, without TensorFlow.
    results = json.loads((tmp_path / "main_job" / "results.json").read_text())
    assert results["backend"] == "jax" and results["steps"] == 2 and results["export_dir"] is None
    assert json.loads((tmp_path / "main_job_time.json").read_text())["main_job_wall_s"] >= 0
    # The full-data reproductions' driver through the runner, in its quick mode on the generated archives.
    records = [json.loads(line) for line in (tmp_path / "reproductions" / "runs.jsonl").read_text().splitlines()]
    # The variant holds a comma (the reason for --jobs) and the authors' recipe, whose mean subtraction needs the
    # training images' channel mean.
    assert [r["variant"] for r in records] == ["loss=lsoftmax_m2,recipe=paper"]
    [record] = records
    assert record["backend"] == "jax" and record["mode"] == "quick" and record["steps"] == 2
    assert 0.0 <= record["test_accuracy"] <= 100.0
    assert record["best_pass_test_accuracy"] == max(record["test_accuracy_per_pass"])
    assert record["angular_fisher_score"] >= 0.0  # the 2-D feature statistics of the `fc` layer
    # Through the runner itself: its workdir, results and step checkpoints.
    results = json.loads((tmp_path / "reproductions" / "runs" / "fashion_mnist_margin_2d"
                          / "loss-lsoftmax_m2_recipe-paper" / "seed_0" / "results.json").read_text())
    assert results["backend"] == "jax" and results["export_dir"] is None
    assert record["test_accuracy"] == results["test_accuracy"] and record["workdir"].endswith("seed_0")
    assert [p["test_accuracy"] for p in results["test_curve"]] == record["test_accuracy_per_pass"]
    assert os.listdir(os.path.join(record["workdir"], "checkpoints", "train"))
    summary = json.loads((tmp_path / "reproductions" / "summary.json").read_text())
    assert summary["fashion_mnist_margin_2d"]["loss=lsoftmax_m2,recipe=paper"]["test_accuracy"]["n"] == 1
