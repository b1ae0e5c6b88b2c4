"""The classifier runner on JAX and PyTorch without TensorFlow (the backend suites run it in `.venv-torch`).

The README's main job as a user of either backend runs it: Grain reads the data, array checkpoints hold the
state, tensorboardX writes the scalars. Each run is a child process (`sphere_tf_cli.train_classifier`, or
`classifier.train_and_evaluate` killed with SIGKILL mid-run), so the backend and what it imports are the user's.
"""

import importlib.util
import json
import os
import signal
import subprocess
import sys

import keras
import numpy as np
import pytest

from sphere_tf.training import array_checkpoint
from tests.runners._resume import CHILD
from tests.runners._resume import idx_dir  # noqa: F401  (a fixture)
from tests.runners._resume import tiny_config

pytestmark = pytest.mark.backend_only("jax", "torch")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(REPO, "sphere_tf", "configs", "dcnet", "fashion_mnist_tanh_cosine.py")
BACKEND = keras.backend.backend()
TINY_MODEL = ["--config.model.widths=[4]", "--config.model.convs_per_stage=1", "--config.model.dense_units=8"]
TENSORFLOW_INSTALLED = importlib.util.find_spec("tensorflow") is not None

# A run, then the TensorFlow modules the process imported (none may be).
RUN_CHILD = r"""
import json, sys
from sphere_tf.runners import classifier
classifier.train_and_evaluate(json.loads(sys.argv[1]), sys.argv[2])
print("TF_MODULES", json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow")))
"""


def env(**extra):
    return dict(os.environ, KERAS_BACKEND=BACKEND, PYTHONPATH=REPO, **extra)


def final_state(workdir):
    step, path = array_checkpoint.latest(os.path.join(workdir, "checkpoints", "train"))
    return step, array_checkpoint.read(path)


def test_trainer_runs_the_main_job_config_on_this_backend(idx_dir, tmp_path):  # noqa: F811
    workdir = str(tmp_path / "run")
    proc = subprocess.run(
        [sys.executable, "-m", "sphere_tf_cli.train_classifier", f"--config={CONFIG}:quick", f"--workdir={workdir}",
         f"--backend={BACKEND}", f"--config.data.manual_dir={idx_dir}", "--config.export=False", *TINY_MODEL],
        cwd=REPO, env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"on Keras backend {BACKEND}" in proc.stdout
    with open(os.path.join(workdir, "results.json")) as f:
        results = json.load(f)
    assert results["backend"] == BACKEND and results["steps"] == 2 and results["export_dir"] is None
    assert 0.0 <= results["test_accuracy"] <= 100.0 and len(results["test_per_class_error"]) == 10
    step, state = final_state(workdir)
    assert step == 2 and int(state["step"]) == 2
    events = os.listdir(os.path.join(workdir, "tensorboard", "train"))
    assert events and all(os.path.getsize(os.path.join(workdir, "tensorboard", "train", e)) > 0 for e in events)
    # The .keras file loads back with the checkpoint's weights.
    model = keras.models.load_model(os.path.join(workdir, "checkpoints", "model.keras"))
    kernel = next(v for v in model.trainable_variables if v.path.endswith("kernel"))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(kernel), state[f"model_variables/{kernel.path}"])


def test_kill_mid_epoch_then_resume_matches_the_uninterrupted_run(idx_dir, tmp_path):  # noqa: F811
    config = json.dumps(tiny_config(idx_dir))  # 2 epochs of 6 steps, a checkpoint every 2 steps
    killed, straight = str(tmp_path / "killed"), str(tmp_path / "straight")
    process = subprocess.run([sys.executable, "-c", CHILD, config, killed, "9"], cwd=REPO, env=env(),
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == -signal.SIGKILL, process.stderr[-2000:]
    assert final_state(killed)[0] == 8 and not os.path.exists(os.path.join(killed, "results.json"))
    outputs = []
    for workdir in (killed, straight):  # the same run again; an uninterrupted one
        process = subprocess.run([sys.executable, "-c", RUN_CHILD, config, workdir], cwd=REPO, env=env(),
                                 capture_output=True, text=True, timeout=300)
        assert process.returncode == 0, process.stderr[-2000:]
        outputs.append(process.stdout)
    assert "Resumed from step 8 of 12" in outputs[0] and "Resumed" not in outputs[1]
    for output in outputs:  # the whole run, data to evaluation, without TensorFlow
        assert "TF_MODULES []" in output, output[-2000:]
    (got_step, got), (want_step, want) = final_state(killed), final_state(straight)
    assert got_step == want_step == 12 and sorted(got) == sorted(want)
    assert any("moving_variance" in name for name in want) and any("norm_mean" in name for name in want)
    for name in want:  # bitwise: the same variables at step 8, the same batches 9..12
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    with open(os.path.join(killed, "results.json")) as f, open(os.path.join(straight, "results.json")) as g:
        resumed, uninterrupted = json.load(f), json.load(g)
    assert resumed["test_loss"] == uninterrupted["test_loss"]
    # The resumed epoch's metrics merge the running means before and after the kill (float64 weighted means,
    # `StepCheckpoint`): equal to float32 rounding.
    assert sorted(resumed["history"]) == sorted(uninterrupted["history"])
    for key, values in uninterrupted["history"].items():
        np.testing.assert_allclose(resumed["history"][key], values, rtol=1e-6, err_msg=key)


@pytest.mark.skipif(TENSORFLOW_INSTALLED, reason="checks the message where TensorFlow is not installed "
                    "(the backend suites' .venv-torch)")
def test_without_tensorflow_a_tensorflow_only_request_fails_before_data_is_read(tmp_path):
    for flag, start in (("--config.export=True", "Error: Invalid value for argument `export`: expected False here: "
                                                 "the TF Serving export writes a SavedModel with TensorFlow"),
                        ("--config.data.pipeline=tf_data", "Error: Invalid value for argument `data.pipeline`"),
                        ("--config.data.data_dir=/nonexistent", "Error: Invalid value for argument `data.data_dir`")):
        workdir = str(tmp_path / "run")
        proc = subprocess.run(
            [sys.executable, "-m", "sphere_tf_cli.train_classifier", f"--config={CONFIG}:quick", f"--workdir={workdir}",
             "--config.data.manual_dir=/nonexistent", flag],
            cwd=REPO, env=env(), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 1, proc.stderr[-2000:]
        last = proc.stderr.strip().splitlines()[-1]
        assert last.startswith(start) and f"{BACKEND!r}" in last, last
        assert not os.path.exists(workdir)


@pytest.mark.backend_only("torch")
def test_several_processes_on_pytorch_fail_before_data_is_read(tmp_path):
    workdir = str(tmp_path / "run")
    proc = subprocess.run(
        [sys.executable, "-m", "sphere_tf_cli.train_classifier", f"--config={CONFIG}:quick", f"--workdir={workdir}",
         "--config.export=False", "--config.data.manual_dir=/nonexistent", "--num_processes=2", "--process_id=0",
         "--coordinator_address=localhost:12345"],
        cwd=REPO, env=env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: 2 devices requested on the PyTorch backend") and "KERAS_BACKEND=jax" in last, last
    assert not os.path.exists(workdir)
