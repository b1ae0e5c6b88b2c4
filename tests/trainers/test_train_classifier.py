"""The absl trainer runs the DCNet Fashion-MNIST config end to end on real data (a small slice)."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import tensorflow as tf

import sphere_tf  # noqa: F401  (registers the layers for load_model)
from sphere_tf.data import fashion_mnist

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "sphere_tf", "configs", "dcnet", "fashion_mnist_tanh_cosine.py")


def test_quick_run_trains_evaluates_and_exports(tmp_path):
    workdir = str(tmp_path / "run")
    proc = subprocess.run(
        [sys.executable, "-m", "sphere_tf_cli.train_classifier", f"--config={CONFIG}:quick", f"--workdir={workdir}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Test accuracy:" in proc.stdout
    # Quiet by default, and one line per epoch with no carriage-return updates when stdout is a pipe.
    assert "oneDNN" not in proc.stderr and "I0000" not in proc.stderr, proc.stderr[-3000:]
    assert "\r" not in proc.stdout and "\x08" not in proc.stdout
    assert [line.split(" - ")[0] for line in proc.stdout.splitlines() if line.startswith("epoch ")] == ["epoch 1/1"]
    with open(os.path.join(workdir, "config.json")) as f:
        assert json.load(f)["model"]["operator"]["magnitude"] == "tanh"
    with open(os.path.join(workdir, "results.json")) as f:
        results = json.load(f)
    assert f"Test accuracy: {results['test_accuracy']:.2f}% (loss {results['test_loss']:.4f}, 32 images)" in proc.stdout
    assert results["test_error"] == 100.0 - results["test_accuracy"]
    assert f"error {results['test_error']:.2f}%" in proc.stdout  # the end-of-run summary
    assert os.listdir(os.path.join(workdir, "tensorboard"))
    # The exported SavedModel computes what the trained Keras model computes, on real images.
    model = keras.models.load_model(os.path.join(workdir, "checkpoints", "model.keras"))
    assert int(model.optimizer.iterations) == 2
    (_, _), (x_test, _) = fashion_mnist.load_fashion_mnist()
    x = x_test[:3, :, :, None].astype(np.float32)  # raw pixels: the model's first layer normalises them
    # TF Serving layout export/<model name>/<version>/; the signature takes raw uint8 pixels.
    assert results["export_dir"] == os.path.join(workdir, "export", "small_cnn", "1")
    loaded = tf.saved_model.load(results["export_dir"])
    logits = loaded.signatures["serving_default"](images=tf.constant(x_test[:3, :, :, None]))["logits"].numpy()
    assert logits.shape == (3, 10)
    np.testing.assert_allclose(logits, keras.ops.convert_to_numpy(model(x, training=False)), rtol=1e-5, atol=1e-5)

    # The same workdir with another config is refused before anything is written, naming the key.
    with open(os.path.join(workdir, "config.json")) as f:
        recorded = f.read()
    proc = subprocess.run(
        [sys.executable, "-m", "sphere_tf_cli.train_classifier", f"--config={CONFIG}:quick", f"--workdir={workdir}",
         f"--config.seed={json.loads(recorded)['seed'] + 1}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode != 0 and "seed" in proc.stderr, proc.stderr[-3000:]
    with open(os.path.join(workdir, "config.json")) as f:
        assert f.read() == recorded


def test_strategy_flag_and_data_folder_override(tmp_path):
    """`--strategy` and `--config.data.manual_dir` reach the run (recorded in config.json), through the runner's
    main (`sphere_tf_cli.run`, which `train_classifier` is for classification configs)."""
    from sphere_tf.data import archive_writers

    folder = str(tmp_path / "idx")
    os.makedirs(folder)
    archive_writers.write_mnist(folder, n_train=70, n_test=5)
    workdir = str(tmp_path / "run")
    proc = subprocess.run(
        [sys.executable, "-m", "sphere_tf_cli.run", f"--config={CONFIG}:quick", f"--workdir={workdir}",
         "--strategy=one_device", f"--config.data.manual_dir={folder}", "--config.export=False"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(workdir, "config.json")) as f:
        recorded = json.load(f)
    assert recorded["strategy"] == "one_device"
    assert "5 images" in proc.stdout  # the generated test split, not Fashion-MNIST's


def test_missing_flags_are_a_usage_error(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "sphere_tf_cli.train_classifier", f"--config={CONFIG}:quick"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode != 0 and "workdir" in proc.stderr


def test_train_classifier_refuses_a_config_of_another_task(tmp_path):
    adversarial = os.path.join(ROOT, "sphere_tf", "configs", "adversarial", "fashion_mnist_cnn9.py")
    proc = subprocess.run(
        [sys.executable, "-m", "sphere_tf_cli.train_classifier", f"--config={adversarial}:quick",
         f"--workdir={tmp_path / 'run'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "Error: The config's task is 'adversarial', not 'classification': run it with sphere-tf run.")
    assert not os.path.exists(tmp_path / "run")
