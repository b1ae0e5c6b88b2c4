"""`bench.bench_backends` on the TensorFlow backend with Keras's trainer: every case (ConvNorm and OPT included)
gets a row per trainer and mode, timed against Conv2D under the same trainer (the JAX and PyTorch runs are
tests/bench/test_gpu_script.py's)."""

import json
import os
import subprocess
import sys

import pytest

from tests.backends import interpreters


EVERY_CASE = "conv2d,sphere_linear,tanh_cosine,tanh_cosine:reference,conv_norm,opt"
OPT_VARIANTS = "conv2d,opt_householder,opt_lowdin,opt_lowdin_newton_schulz,opt_cayley,opt_exp"


# The fast tier runs the baseline, one operator on the plug-in and on the reference path, and OPT (84 s for every
# case); every case under both trainers, and the other OPT orthogonalisations, are in the slow tier (keras_jit
# XLA-compiles six CNN-9 steps and forwards).
@pytest.mark.parametrize("trainer,jit_compile,cases", [
    ("keras", False, "conv2d,tanh_cosine,tanh_cosine:reference,opt"),
    ("keras", False, EVERY_CASE),
    ("keras_jit", True, EVERY_CASE),
    ("keras", False, OPT_VARIANTS),
], ids=["keras-some", "keras-every", "keras_jit-every", "keras-opt-variants"])
def test_keras_trainer_rows_for_every_case(tmp_path, trainer, jit_compile, cases):
    results = tmp_path / "rows.jsonl"
    command = [sys.executable, "-m", "bench.bench_backends", f"--trainers={trainer}", "--batch_sizes=4",
               "--image_size=8", "--widths=4,4,4", "--steps=1", "--rounds=1", "--warmup=0", "--dtypes=float32",
               f"--cases={cases}", "--modes=train,forward", f"--results_file={results}"]
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    done = subprocess.run(command, cwd=interpreters.REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(rows) == 2 * len(cases.split(","))
    assert {(r["trainer"], r["jit_compile"], r["mode"]) for r in rows} == {
        (trainer, jit_compile, "train"), (trainer, jit_compile, "forward")}
    for r in rows:
        assert r["backend"] == "tensorflow" and r["median_step_s"] > 0 and r["tensorflow"]
        baseline = [b for b in rows if b["case"] == "conv2d" and b["trainer"] == r["trainer"]
                    and b["mode"] == r["mode"]]
        assert r["ratio_to_conv2d"] == r["median_step_s"] / baseline[0]["median_step_s"]


def test_single_layer_network_rows(tmp_path):
    """`--network=layer`: one CNN-9 layer alone with the requested channels, a row per case with the channels."""
    results = tmp_path / "rows.jsonl"
    command = [sys.executable, "-m", "bench.bench_backends", "--network=layer", "--layer_channels=3,4",
               "--trainers=keras", "--batch_sizes=2", "--image_size=6", "--steps=1", "--rounds=1", "--warmup=0",
               "--dtypes=float32", "--cases=conv2d,conv_norm,conv_norm_no_affine", "--modes=train",
               f"--results_file={results}"]
    env = dict(os.environ, KERAS_BACKEND="tensorflow")
    done = subprocess.run(command, cwd=interpreters.REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["case"] for r in rows] == ["conv2d", "conv_norm", "conv_norm_no_affine"]
    assert all(r["network"] == "layer" and r["layer_channels"] == [3, 4] and r["median_step_s"] > 0 for r in rows)
