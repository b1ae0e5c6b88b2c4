"""Both face CLIs end to end on a generated folder of synthetic identities; every face config validates."""

import glob
import importlib.util
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import sphere_tf  # noqa: F401  (registers the layers for load_model)
from sphere_tf.runners import face
from sphere_tf.runners import classifier

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = sorted(p for p in glob.glob(os.path.join(ROOT, "sphere_tf", "configs", "face", "*.py"))
                 if os.path.basename(p) not in ("__init__.py", "recipe.py"))


def _load(path):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_identities(tmp_path, identities=4, per_identity=6, shape=(24, 20, 3)):
    """JPEG identity folder for training, PNG LFW-style folder for the pairs (the same faces), pairs.txt."""
    rng = np.random.default_rng(0)
    prototypes = rng.integers(0, 256, (identities,) + shape)
    train, test = tmp_path / "train", tmp_path / "lfw"
    names = [f"Person_{chr(65 + i)}" for i in range(identities)]
    for i, name in enumerate(names):
        for k in range(1, per_identity + 1):
            image = np.clip(prototypes[i] + rng.normal(0, 25, shape), 0, 255).astype(np.uint8)
            os.makedirs(train / name, exist_ok=True)
            os.makedirs(test / name, exist_ok=True)
            tf.io.write_file(str(train / name / f"{k:03d}.jpg"), tf.io.encode_jpeg(image, quality=95))
            tf.io.write_file(str(test / name / f"{name}_{k:04d}.png"), tf.io.encode_png(image))
    lines = ["10 2"]
    for fold in range(10):
        a, b = names[fold % identities], names[(fold + 1) % identities]
        lines += [f"{a} 1 {2 + fold % 5}", f"{b} 2 {3 + fold % 4}"]
        lines += [f"{a} {1 + fold % 6} {b} {1 + (fold + 2) % 6}", f"{b} 4 {names[(fold + 2) % identities]} 5"]
    (tmp_path / "pairs.txt").write_text("\n".join(lines) + "\n")
    return str(train), str(test), str(tmp_path / "pairs.txt")


def _run(*args):
    proc = subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _reference_accuracy(model, images_dir, pairs_path, reference):
    """Flip-concatenated cosine scores and the 10-fold accuracy recomputed with NumPy loops."""
    embedder = keras.Model(model.input["images"] if isinstance(model.input, dict) else model.input,
                           model.get_layer("embedding").output)
    with open(pairs_path) as f:
        rows = [line.split() for line in f][1:]
    cache = {}

    def feature(name, index):
        if (name, index) not in cache:
            raw = tf.io.decode_png(tf.io.read_file(os.path.join(images_dir, name, f"{name}_{int(index):04d}.png")))
            x = (raw.numpy().astype(np.float32) - 127.5) / 128.0
            both = np.stack([x, x[:, ::-1]])
            f = keras.ops.convert_to_numpy(embedder(both))
            cache[(name, index)] = np.concatenate([f[0], f[1]]).astype(np.float64)
        return cache[(name, index)]

    return reference.pairs_kfold(rows, feature)


def test_train_face_and_eval_verification_clis(tmp_path, lfw_reference):
    train, images, pairs = _write_identities(tmp_path)
    config = os.path.join(ROOT, "sphere_tf", "configs", "face", "sphereface_margins.py")
    workdir = str(tmp_path / "run")
    out = _run("sphere_tf_cli.train_face", f"--config={config}:quick,depth=4", f"--workdir={workdir}",
               f"--config.data.manual_dir={train}", f"--config.verification.pairs={pairs}",
               f"--config.verification.images={images}", "--config.verification.image_pattern={name}/{name}_"
               "{index:04d}.png")
    assert "Verification:" in out
    with open(os.path.join(workdir, "results.json")) as f:
        trained = json.load(f)
    assert trained["steps"] == 2 and set(trained["tar_at_far"]) == {"0.001", "0.0001"}
    model = keras.models.load_model(os.path.join(workdir, "checkpoints", "model.keras"))
    assert model.name == "sphereface4" and int(model.optimizer.iterations) == 2

    # The evaluation CLI in its own process (absl flags are process-global: mains are not imported in tests).
    out = _run("sphere_tf_cli.eval_verification", f"--workdir={workdir}", f"--pairs={pairs}", f"--images={images}",
               "--image_pattern={name}/{name}_{index:04d}.png")
    assert "Verification accuracy:" in out
    with open(os.path.join(workdir, "results.json")) as f:
        results = json.load(f)
    assert results["test_accuracy"] == trained["test_accuracy"]  # merged, not replaced
    mean, std, accuracies = _reference_accuracy(model, images, pairs, lfw_reference)
    assert results["lfw_accuracy"] == pytest.approx(100 * mean, abs=1e-6)
    assert results["lfw_std"] == pytest.approx(100 * std, abs=1e-6)
    np.testing.assert_allclose(results["fold_accuracies"], 100 * np.asarray(accuracies), atol=1e-6)
    assert results["num_pairs"] == 40 and results["angular_fisher_score"] > 0
    with open(os.path.join(workdir, "roc.png"), "rb") as f:
        assert f.read(4) == b"\x89PNG"


PNG_PATTERN = "{name}/{name}_{index:04d}.png"


@pytest.fixture(scope="module")
def png_run(tmp_path_factory):
    """A `train_face` run whose verification pairs are PNGs (`verification.image_pattern`), and its stdout."""
    tmp_path = tmp_path_factory.mktemp("png_run")
    train, images, pairs = _write_identities(tmp_path)
    workdir = str(tmp_path / "run")
    out = _run("sphere_tf_cli.train_face", f"--config={os.path.join(ROOT, 'sphere_tf', 'configs', 'face', 'sphereface_margins.py')}"
               ":quick,depth=4", f"--workdir={workdir}", f"--config.data.manual_dir={train}",
               f"--config.verification.pairs={pairs}", f"--config.verification.images={images}",
               f"--config.verification.image_pattern={PNG_PATTERN}")
    return workdir, images, pairs, out


def _printed_table(out):
    """The `FAR  TAR %` table in a CLI's stdout as {far: tar text}; None when there is no header line."""
    lines = out.splitlines()
    starts = [i for i, line in enumerate(lines) if line.split() == ["FAR", "TAR", "%"]]
    if not starts:
        return None
    rows = {}
    for line in lines[starts[0] + 1:]:
        fields = line.split()
        if len(fields) != 2:
            break
        rows[float(fields[0])] = fields[1]
    return rows


def _assert_table_matches(out, tar_at_far):
    table = _printed_table(out)
    assert table is not None, out
    assert table == {float(far): f"{tar:.2f}" for far, tar in tar_at_far.items()}
    assert "{" not in out  # no raw dict


def test_train_face_prints_tar_at_far_as_a_table(png_run):
    workdir, _, _, out = png_run
    with open(os.path.join(workdir, "results.json")) as f:
        results = json.load(f)
    assert set(results["tar_at_far"]) == {"0.001", "0.0001"}
    _assert_table_matches(out, results["tar_at_far"])


def test_eval_verification_reads_the_runs_image_pattern(png_run):
    workdir, images, pairs, _ = png_run
    # No --image_pattern: the run's PNG pattern, not LFW's .jpg default, locates the images.
    out = _run("sphere_tf_cli.eval_verification", f"--workdir={workdir}", f"--pairs={pairs}", f"--images={images}")
    assert "Verification accuracy:" in out
    with open(os.path.join(workdir, "results.json")) as f:
        results = json.load(f)
    assert results["num_pairs"] == 40 and results["lfw_accuracy"] is not None
    _assert_table_matches(out, results["tar_at_far"])


def test_evaluate_workdir_without_a_model_is_named(tmp_path):
    with pytest.raises(FileNotFoundError, match="no trained model in workdir"):
        face.evaluate_workdir(str(tmp_path), str(tmp_path / "pairs.txt"), str(tmp_path))


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_face_configs_validate(path):
    module = _load(path)
    assert module.__doc__ and "sphere-tf train-face" in module.__doc__
    # The quick variant is validated (the model probe at full width costs seconds per config); the full
    # variant differs in sizes, steps and schedule only, checked below.
    runner_config, section = face.split_config(module.get_config("quick"))
    checked = classifier.validate(runner_config)
    assert checked["data"]["name"] == "face_folder" and set(section) == set(face.VERIFICATION_DEFAULTS)
    full = module.get_config()
    assert set(full.to_dict()) == set(module.get_config("quick").to_dict())
    if "partial_fc" in path:  # Partial FC: ArcFace at r = 0.1, classes sharded (tests/runners/test_partial_fc_runner.py)
        assert full.model.head.to_dict() == {"layer": "margin", "loss_type": "arcface", "scale": 64.0, "margin": 0.5,
                                             "sample_rate": 0.1, "shard_classes": True}
        assert full.export_class_matrix is False and full.optimizer.momentum == 0.9
    elif "fashion_mnist" not in path:  # the thesis recipe
        assert (full.train.steps, list(full.schedule.boundaries), full.optimizer.learning_rate) in (
            (28000, [16000, 24000], 0.1), (12000, [8000], 0.01))
        assert full.train.batch_size == 128 and full.data.augmentation == "flip"


def test_split_config_refuses_unknown_verification_keys():
    with pytest.raises(ValueError, match="verification.pair"):
        face.split_config({"verification": {"pair": "x"}})
