"""The classifier runner on the JAX backend, driven from the TensorFlow suite in subprocesses (main venv: TF + JAX).

A two-step run through the trainer with `--backend jax` (results, a `.keras` file TensorFlow loads, the TF
Serving export made under TensorFlow), exact resume after `kill -9` on JAX, and the strategy and
missing-TensorFlow messages.
"""

import json
import os
import signal
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import sphere_tf  # noqa: F401  (registers the layers for load_model)
from sphere_tf import layers
from sphere_tf.data import archive_writers
from sphere_tf.export import serving
from sphere_tf.training import array_checkpoint
from tests.runners._resume import CHILD
from tests.runners._resume import idx_dir  # noqa: F401  (a fixture)
from tests.runners._resume import tiny_config

pytestmark = pytest.mark.tensorflow_only

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(REPO, "sphere_tf", "configs", "dcnet", "fashion_mnist_tanh_cosine.py")
TORCH_PYTHON = os.path.join(os.path.dirname(sys.prefix), ".venv-torch", "bin", "python")  # beside this venv
TINY_MODEL = ["--config.model.widths=[4]", "--config.model.convs_per_stage=1", "--config.model.dense_units=8"]


def env(backend, **extra):
    return dict(os.environ, KERAS_BACKEND=backend, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO, **extra)


def trainer(*args, backend="tensorflow", python=sys.executable, **run):
    return subprocess.run([python, "-m", "sphere_tf_cli.train_classifier", f"--config={CONFIG}:quick", *args],
                          cwd=REPO, env=env(backend), capture_output=True, text=True, **run)


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("fashion_mnist"))
    archive_writers.write_mnist(folder, n_train=64, n_test=8, seed=0)  # the Fashion-MNIST file layout
    return folder


def test_two_step_run_on_jax_exports_under_tensorflow(archives, tmp_path):
    workdir = str(tmp_path / "run")
    proc = trainer(f"--workdir={workdir}", "--backend=jax", f"--config.data.manual_dir={archives}", *TINY_MODEL,
                   timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(workdir, "results.json")) as f:
        results = json.load(f)
    assert results["backend"] == "jax"
    assert "on Keras backend jax" in proc.stdout
    assert len(results["test_per_class_error"]) == 10 and "test_top5_error" in results  # error_rates on JAX
    # The JAX run's state is an array checkpoint; its step and optimizer count are the run's two steps.
    step, path = array_checkpoint.latest(os.path.join(workdir, "checkpoints", "train"))
    state = array_checkpoint.read(path)
    iterations = [value for name, value in state.items() if name.endswith("/iteration")]
    assert step == 2 and int(state["step"]) == 2 and [int(i) for i in iterations] == [2]
    assert os.listdir(os.path.join(workdir, "tensorboard", "train"))  # tf.summary writes for any backend
    # The .keras file saved on JAX loads here, under TensorFlow, with the checkpoint's weights.
    model = keras.models.load_model(os.path.join(workdir, "checkpoints", "model.keras"))
    kernel = next(v for v in model.trainable_variables if v.path.endswith("kernel"))
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(kernel), state[f"model_variables/{kernel.path}"])
    # The SavedModel (exported by a TensorFlow child process) computes what the Keras model computes.
    assert results["export_dir"] == os.path.join(workdir, "export", "small_cnn", "1")
    pixels = serving.sample_pixels(3, (28, 28, 1), seed=5)
    served = tf.saved_model.load(results["export_dir"]).signatures["serving_default"](images=tf.constant(pixels))
    # Raw pixels in both: the model's first layer normalises them (centered_128, the run's data.normalization).
    assert layers.model_normalization(model) == ("centered_128", None)
    expected = model(pixels.astype("float32"), training=False)
    np.testing.assert_allclose(served["logits"].numpy(), keras.ops.convert_to_numpy(expected), rtol=1e-5, atol=1e-5)


RUN_CHILD = r"""
import json, sys
from sphere_tf.runners import classifier
classifier.train_and_evaluate(json.loads(sys.argv[1]), sys.argv[2])
"""


def final_state(workdir):
    step, path = array_checkpoint.latest(os.path.join(workdir, "checkpoints", "train"))
    return step, array_checkpoint.read(path)


def test_kill_mid_epoch_then_resume_on_jax_matches_uninterrupted_run(idx_dir, tmp_path):  # noqa: F811
    config = json.dumps(tiny_config(idx_dir))  # 2 epochs of 6 steps, a checkpoint every 2 steps
    killed, straight = str(tmp_path / "killed"), str(tmp_path / "straight")
    process = subprocess.run([sys.executable, "-c", CHILD, config, killed, "9"], cwd=REPO, env=env("jax"),
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == -signal.SIGKILL, process.stderr[-2000:]
    assert final_state(killed)[0] == 8
    assert not os.path.exists(os.path.join(killed, "results.json"))
    outputs = []
    for workdir in (killed, straight):  # the same command again; an uninterrupted run
        process = subprocess.run([sys.executable, "-c", RUN_CHILD, config, workdir], cwd=REPO, env=env("jax"),
                                 capture_output=True, text=True, timeout=300)
        assert process.returncode == 0, process.stderr[-2000:]
        outputs.append(process.stdout)
    assert "Resumed from step 8 of 12" in outputs[0] and "Resumed" not in outputs[1]
    (got_step, got), (want_step, want) = final_state(killed), final_state(straight)
    assert got_step == want_step == 12 and sorted(got) == sorted(want)
    assert [int(v) for name, v in want.items() if name.endswith("/iteration")] == [12]
    assert any("moving_variance" in name for name in want) and any("norm_mean" in name for name in want)
    for name in want:  # bitwise: the same variables at step 8, the same batches 9..12
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    with open(os.path.join(killed, "results.json")) as f, open(os.path.join(straight, "results.json")) as g:
        resumed, uninterrupted = json.load(f), json.load(g)
    assert resumed["backend"] == uninterrupted["backend"] == "jax"
    assert resumed["test_loss"] == uninterrupted["test_loss"]


def test_replicating_strategy_on_jax_is_refused_naming_the_backend(archives, tmp_path):
    workdir = str(tmp_path / "run")
    proc = trainer(f"--workdir={workdir}", "--backend=jax", "--strategy=mirrored",
                   f"--config.data.manual_dir={archives}", timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "Error: strategy='mirrored' is a tf.distribute strategy and needs the TensorFlow backend; this run's Keras "
        "backend is 'jax'."), proc.stderr[-2000:]
    assert not os.path.exists(workdir)


def test_a_tensorflow_checkpoint_is_not_resumed_on_jax(idx_dir, tmp_path):  # noqa: F811
    workdir = str(tmp_path / "run")
    config = json.dumps(tiny_config(idx_dir, epochs=1))
    process = subprocess.run([sys.executable, "-c", CHILD, config, workdir, "3"], cwd=REPO, env=env("tensorflow"),
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == -signal.SIGKILL, process.stderr[-2000:]
    process = subprocess.run([sys.executable, "-c", RUN_CHILD, config, workdir], cwd=REPO, env=env("jax"),
                             capture_output=True, text=True, timeout=300)
    assert process.returncode != 0
    assert "holds tf.train checkpoints written on the 'tensorflow' Keras backend; this run is on 'jax'" in \
        process.stderr, process.stderr[-2000:]


@pytest.mark.skipif(not os.path.exists(TORCH_PYTHON), reason="needs the PyTorch venv without TensorFlow")
def test_without_tensorflow_the_export_says_what_to_install(tmp_path):
    proc = trainer(f"--workdir={tmp_path / 'run'}", "--backend=torch", python=TORCH_PYTHON, timeout=300)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith(
        "Error: Invalid value for argument `export`: expected False here: the TF Serving export writes a "
        "SavedModel with TensorFlow, which is not installed (Keras backend 'torch')"), proc.stderr[-2000:]
    assert not os.path.exists(tmp_path / "run")
    proc = subprocess.run([TORCH_PYTHON, "-c", "import sphere_tf.export"], cwd=REPO, env=env("torch"),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1
    assert ("ImportError: sphere_tf.export writes TensorFlow SavedModels and needs TensorFlow, which is not "
            "installed (Keras backend 'torch')") in proc.stderr, proc.stderr[-2000:]


@pytest.mark.skipif(not os.path.exists(TORCH_PYTHON), reason="needs the PyTorch venv without TensorFlow")
def test_a_run_trained_without_tensorflow_exports_for_serving_in_one_command(archives, tmp_path):
    """The documented route (docs/runner.md, Backends): train on PyTorch where TensorFlow is not installed, then
    `python -m sphere_tf_cli.export` where it is; the SavedModel serves what the .keras file computes."""
    workdir, base = str(tmp_path / "run"), str(tmp_path / "models")
    proc = trainer(f"--workdir={workdir}", "--backend=torch", "--config.export=False",
                   f"--config.data.manual_dir={archives}", *TINY_MODEL, python=TORCH_PYTHON, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    proc = subprocess.run([sys.executable, "-m", "sphere_tf_cli.export", f"--workdir={workdir}", f"--export_base={base}"],
                          cwd=REPO, env=env("tensorflow"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    # compile=False: the file records PyTorch's Adam class (keras.src.backend.torch.optimizers), which Keras can
    # only rebuild where torch is installed; the export reads the weights the same way.
    model = keras.models.load_model(os.path.join(workdir, "checkpoints", "model.keras"), compile=False)
    pixels = serving.sample_pixels(3, (28, 28, 1), seed=2)
    served = tf.saved_model.load(os.path.join(base, "small_cnn", "1")).signatures["serving_default"](
        images=tf.constant(pixels))
    expected = model(pixels.astype("float32"), training=False)
    np.testing.assert_allclose(served["logits"].numpy(), keras.ops.convert_to_numpy(expected), rtol=1e-5, atol=1e-5)
