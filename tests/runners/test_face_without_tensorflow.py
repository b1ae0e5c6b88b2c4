"""The face task on JAX and PyTorch without TensorFlow (the backend suites run it in `.venv-torch`).

A user of either backend trains a SphereFace net with a margin head (and a Partial FC head) on an identity folder,
then verifies it on an LFW-format pair list: Grain reads the folder, `keras.ops` embeds the pairs. Each run is a
child process with the backend's `KERAS_BACKEND`, which reports the TensorFlow modules it imported (none may be).
The 10-fold accuracy is checked against an independent NumPy computation (Pillow-decoded pixels, the saved model's
embedding layer, explicit-loop LFW protocol: tests/evaluation/conftest.py).
"""

import importlib.util
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from PIL import Image

import sphere_tf  # noqa: F401  (registers the layers for load_model)

pytestmark = pytest.mark.backend_only("jax", "torch")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MARGINS = os.path.join(REPO, "sphere_tf", "configs", "face", "sphereface_margins.py")
PARTIAL_FC = os.path.join(REPO, "sphere_tf", "configs", "face", "partial_fc_webface.py")
BACKEND = keras.backend.backend()
PNG_PATTERN = "{name}/{name}_{index:04d}.png"
TENSORFLOW_INSTALLED = importlib.util.find_spec("tensorflow") is not None

# Runs a module's main (`sphere_tf_cli.train_face`, ...) with the given argv, then prints the TensorFlow modules loaded.
CLI_CHILD = r"""
import json, runpy, sys
sys.argv = sys.argv[1:]
try:
    runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
finally:
    print("TF_MODULES", json.dumps(sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow")), flush=True)
"""


def _env():
    return dict(os.environ, KERAS_BACKEND=BACKEND, PYTHONPATH=REPO)


def _cli(module, *args, expect_rc=0):
    proc = subprocess.run([sys.executable, "-c", CLI_CHILD, module, *args], cwd=REPO, env=_env(),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == expect_rc, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


@pytest.fixture(scope="module")
def face_data(tmp_path_factory):
    """A JPEG identity folder to train on, a PNG LFW-style folder of the same faces, a 10-fold pairs.txt.

    Written with Pillow (no TensorFlow here); 24x20 crops, 4 identities of 6 images.
    """
    root = tmp_path_factory.mktemp("faces")
    rng = np.random.default_rng(0)
    shape, names = (24, 20, 3), [f"Person_{chr(65 + i)}" for i in range(4)]
    prototypes = rng.integers(0, 256, (len(names),) + shape)
    for i, name in enumerate(names):
        (root / "train" / name).mkdir(parents=True)
        (root / "lfw" / name).mkdir(parents=True)
        for k in range(1, 7):
            image = np.clip(prototypes[i] + rng.normal(0, 25, shape), 0, 255).astype(np.uint8)
            Image.fromarray(image).save(root / "train" / name / f"{k:03d}.jpg", quality=95)
            Image.fromarray(image).save(root / "lfw" / name / f"{name}_{k:04d}.png")
    lines = ["10 2"]
    for fold in range(10):
        a, b = names[fold % 4], names[(fold + 1) % 4]
        lines += [f"{a} 1 {2 + fold % 5}", f"{b} 2 {3 + fold % 4}"]
        lines += [f"{a} {1 + fold % 6} {b} {1 + (fold + 2) % 6}", f"{b} 4 {names[(fold + 2) % 4]} 5"]
    (root / "pairs.txt").write_text("\n".join(lines) + "\n")
    return str(root / "train"), str(root / "lfw"), str(root / "pairs.txt")


def _reference_kfold(workdir, images_dir, pairs_path, reference):
    """The run's 10-fold accuracy recomputed: Pillow pixels, the model's 'embedding' layer on each image and its
    mirror (NumPy column reversal), cosine in float64, the explicit-loop protocol."""
    model = keras.models.load_model(os.path.join(workdir, "checkpoints", "model.keras"))
    inputs = model.input["images"] if isinstance(model.input, dict) else model.input
    embedder = keras.Model(inputs, model.get_layer("embedding").output)
    # The runner puts the normalisation into the model (its first layer); an older model gets (x - 127.5) / 128.
    normalises = any(type(layer).__name__ == "PixelNormalization" for layer in model.layers)
    with open(pairs_path) as f:
        rows = [line.split() for line in f][1:]
    cache = {}

    def feature(name, index):
        if (name, index) not in cache:
            x = np.asarray(Image.open(os.path.join(images_dir, name, f"{name}_{int(index):04d}.png")), np.float32)
            x = x if normalises else (x - 127.5) / 128.0
            out = keras.ops.convert_to_numpy(embedder(np.stack([x, np.ascontiguousarray(x[:, ::-1])])))
            cache[(name, index)] = np.concatenate([out[0], out[1]]).astype(np.float64)
        return cache[(name, index)]

    return reference.pairs_kfold(rows, feature)


def _tensorflow_modules(proc):
    line = [line for line in proc.stdout.splitlines() if line.startswith("TF_MODULES ")][-1]
    return json.loads(line[len("TF_MODULES "):])


def test_train_then_verify_a_sphereface_margin_run(face_data, tmp_path, lfw_reference):
    train, images, pairs = face_data
    workdir = str(tmp_path / "run")
    proc = _cli("sphere_tf_cli.train_face", f"--config={MARGINS}:quick,depth=4", f"--workdir={workdir}",
                f"--backend={BACKEND}", f"--config.data.manual_dir={train}", f"--config.verification.pairs={pairs}",
                f"--config.verification.images={images}", f"--config.verification.image_pattern={PNG_PATTERN}")
    assert _tensorflow_modules(proc) == [], proc.stdout[-2000:]
    assert "Verification:" in proc.stdout and "FAR" in proc.stdout
    with open(os.path.join(workdir, "results.json")) as f:
        results = json.load(f)
    assert results["backend"] == BACKEND and results["steps"] == 2
    assert results["num_pairs"] == 40 and set(results["tar_at_far"]) == {"0.001", "0.0001"}
    mean, std, accuracies = _reference_kfold(workdir, images, pairs, lfw_reference)
    assert results["lfw_accuracy"] == pytest.approx(100 * mean, abs=1e-6)
    assert results["lfw_std"] == pytest.approx(100 * std, abs=1e-6)
    np.testing.assert_allclose(results["fold_accuracies"], 100 * np.asarray(accuracies), atol=1e-6)
    assert results["angular_fisher_score"] > 0

    # The evaluation CLI on the finished run, in its own process: the same figures, still no TensorFlow.
    proc = _cli("sphere_tf_cli.eval_verification", f"--workdir={workdir}", f"--pairs={pairs}", f"--images={images}")
    assert _tensorflow_modules(proc) == [] and "Verification accuracy:" in proc.stdout
    with open(os.path.join(workdir, "results.json")) as f:
        again = json.load(f)
    assert again["lfw_accuracy"] == results["lfw_accuracy"] and again["fold_accuracies"] == results["fold_accuracies"]


def test_partial_fc_run_trains_and_verifies(face_data, tmp_path):
    """Partial FC (An et al., ICCV-W 2021): class centres sampled at r = 0.1. JAX shards the classes over its
    devices (one here); PyTorch cannot shard, so there the run keeps them whole (`shard_classes=False`)."""
    train, images, pairs = face_data
    workdir = str(tmp_path / "run")
    shard = [] if BACKEND == "jax" else ["--config.model.head.shard_classes=False"]
    proc = _cli("sphere_tf_cli.train_face", f"--config={PARTIAL_FC}:quick", f"--workdir={workdir}",
                f"--config.data.manual_dir={train}", f"--config.verification.pairs={pairs}",
                f"--config.verification.images={images}", f"--config.verification.image_pattern={PNG_PATTERN}",
                *shard)
    assert _tensorflow_modules(proc) == [], proc.stdout[-2000:]
    assert "Partial FC head: sample_rate 0.1" in proc.stdout
    with open(os.path.join(workdir, "results.json")) as f:
        results = json.load(f)
    assert results["steps"] == 2 and results["num_pairs"] == 40 and 0 <= results["lfw_accuracy"] <= 100


@pytest.mark.backend_only("torch")
def test_class_sharding_on_pytorch_fails_in_one_line_before_data_is_read(tmp_path):
    workdir = str(tmp_path / "run")
    proc = _cli("sphere_tf_cli.train_face", f"--config={PARTIAL_FC}:quick", f"--workdir={workdir}",
                "--config.data.manual_dir=/nonexistent", expect_rc=1)
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: Invalid value for argument `model.head.shard_classes`"), last
    assert "'torch'" in last and "JAX" in last, last
    assert not os.path.exists(workdir)


@pytest.mark.skipif(TENSORFLOW_INSTALLED, reason="checks the message where TensorFlow is not installed "
                    "(the backend suites' .venv-torch)")
def test_without_tensorflow_the_export_fails_in_one_line_before_data_is_read(tmp_path):
    workdir = str(tmp_path / "run")
    proc = _cli("sphere_tf_cli.train_face", f"--config={MARGINS}:quick,depth=4", f"--workdir={workdir}",
                "--config.data.manual_dir=/nonexistent", "--config.export=True", expect_rc=1)
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: Invalid value for argument `export`") and f"{BACKEND!r}" in last, last
    assert not os.path.exists(workdir)
