"""`bench/gpu/run.sh` runs on CPU with small shapes where TensorFlow is not installed (its GPU host has none).

The GPU check (parity subset, the CNN-9 benchmarks on JAX and PyTorch, the README's main job through the runner
on JAX) is run by hand on a GPU host; here
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
    env = dict(interpreters.environment("jax"), SMALL="1", PATH=python_dir + os.pathsep + os.environ["PATH"])
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
