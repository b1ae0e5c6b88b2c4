"""`bench.bench_partial_fc` runs end to end with tiny shapes on the current backend (JAX or TensorFlow)."""

import json
import os
import subprocess
import sys

import keras
import pytest

from tests.backends import interpreters


@pytest.mark.skipif(keras.backend.backend() not in ("jax", "tensorflow"), reason="JAX and TensorFlow only")
def test_tiny_run_writes_a_row_per_case(tmp_path):
    results = tmp_path / "partial_fc.jsonl"
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", KERAS_BACKEND=keras.backend.backend(),
               PYTHONPATH=os.pathsep.join([interpreters.REPO, os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run(
        [sys.executable, "-m", "bench.bench_partial_fc", "--num_classes=300", "--batch_size=8", "--feature_dim=4",
         "--cases=dense,pfc_r0.1,pfc_r0.1:no_update", "--passes=1", "--steps=1", "--warmup=0",
         f"--results_file={results}"],
        cwd=interpreters.REPO, capture_output=True, text=True, timeout=600, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = {r["case"]: r for r in map(json.loads, results.read_text().splitlines())}
    assert sorted(rows) == ["dense", "pfc_r0.1", "pfc_r0.1:no_update"]
    assert all("error" not in r for r in rows.values()), rows
    assert rows["dense"]["ratio_to_dense"] == 1.0 and rows["dense"]["columns"] == 300
    assert rows["pfc_r0.1"]["columns"] == 30  # max(ceil(0.1·300), 8)
    assert rows["pfc_r0.1"]["logits_mb"] == 8 * 30 * 4 / 2**20
    assert rows["pfc_r0.1"]["peak_rss_mb"] >= rows["pfc_r0.1"]["rss_before_mb"] > 0
    assert rows["dense"]["backend"] == keras.backend.backend()


@pytest.mark.tensorflow_only  # drives the JAX venv from the main suite (keras.distribution's ModelParallel is JAX's)
def test_sharded_case_halves_the_per_device_state(tmp_path):
    results = tmp_path / "partial_fc.jsonl"
    env = dict(interpreters.environment("jax"), CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run(
        [interpreters.python_for("jax"), "-m", "bench.bench_partial_fc", "--num_classes=2000", "--batch_size=8", "--feature_dim=64",
         "--cases=pfc_r0.1,sharded2_r0.1", "--passes=1", "--steps=1", "--warmup=0", "--profile_ops=4",
         f"--results_file={results}"],
        cwd=interpreters.REPO, capture_output=True, text=True, timeout=600, env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    rows = {r["case"]: r for r in map(json.loads, results.read_text().splitlines())}
    assert all("error" not in r for r in rows.values()), rows
    single, sharded = rows["pfc_r0.1"], rows["sharded2_r0.1"]
    assert (single["devices"], sharded["devices"]) == (1, 2)
    # --profile_ops: the traced step's longest XLA operations, longest first, each named with its JAX origin.
    ops = single["profile_ops"]
    assert 0 < len(ops) <= 4 and [op["ms"] for op in ops] == sorted((op["ms"] for op in ops), reverse=True)
    assert all(op["jax_op"].startswith("jit(train_step)") and op["count"] >= 1 for op in ops)
    assert single["columns"] == sharded["columns"] == 200  # 2 blocks of max(ceil(0.1·1000), 8)
    assert sharded["logits_mb_per_device"] == single["logits_mb_per_device"] / 2
    # Kernel and momentum split by class; the step counters stay whole on every device.
    assert 0.5 <= sharded["param_mb_per_device"] / single["param_mb_per_device"] <= 0.51
