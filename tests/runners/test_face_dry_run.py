"""`face.dry_run` / `sphere_tf_cli.train_face --dry_run`: the resolved face config, the step count (the identity folder's
images, else the config's published `training_set`), the class matrix's memory and a measured time estimate,
before anything trains or is written."""

import glob
import importlib.util
import json
import os
import re
import subprocess
import sys

import pytest

from bench import synthetic_identities
from sphere_tf.configs.face import partial_fc_ms1m
from sphere_tf.configs.face import recipe
from sphere_tf.configs.face import sphereface_margins
from sphere_tf.runners import face
from sphere_tf.runners import classifier

pytestmark = pytest.mark.tensorflow_only

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIGS = sorted(p for p in glob.glob(os.path.join(ROOT, "sphere_tf", "configs", "face", "*.py"))
                 if os.path.basename(p) not in ("__init__.py", "recipe.py"))
IDENTITIES, PER_IDENTITY, SHAPE = 5, 5, (12, 10, 3)
EPOCHS = 3


@pytest.fixture(scope="module")
def identities(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("identities"))
    synthetic_identities.write_identity_folder(root, IDENTITIES, PER_IDENTITY, SHAPE, seed=0)
    return root


def _listing(root):
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, files in os.walk(root) for f in files)


def _load(path):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _printed(stdout):
    """`(resolved config, {label: text})` of a dry run's stdout: the JSON, then one `label  text` line each."""
    head, _, tail = stdout.partition("\ndata ")
    lines = {}
    for line in ("data " + tail).splitlines():
        label, text = line[:17].strip(), line[17:]
        lines[label] = text
    return json.loads(head), lines


# The command line end to end (a subprocess, the Partial FC config); every config runs in process in
# test_library_dry_run_counts_each_quick_config.
CLI_CONFIGS = [p for p in CONFIGS if os.path.basename(p) == "partial_fc_webface.py"]


@pytest.mark.parametrize("path", CONFIGS, ids=os.path.basename)
def test_library_dry_run_counts_each_quick_config(path, identities):
    config = _load(path).get_config("quick")
    config.data.manual_dir = identities
    config.train.update(steps=0, steps_per_epoch=0, epochs=EPOCHS)
    plan = face.dry_run(config, probe_steps=0)  # no model built: the count and the class matrix only
    lines = dict((line[:17].strip(), line[17:]) for line in face.dry_run_lines(plan))
    images = len(_listing(identities))
    per_epoch = min(images, config.data.train_limit or images) // config.train.batch_size
    assert plan["data_source"] == "folder" and plan["identities"] == IDENTITIES
    assert lines["steps"] == f"{per_epoch * EPOCHS} ({EPOCHS} epochs of {per_epoch})"
    assert lines["class matrix"].startswith(f"512 x {IDENTITIES}: ")


@pytest.mark.parametrize("path", CLI_CONFIGS, ids=os.path.basename)
def test_trainer_dry_run_of_each_quick_config(path, identities, tmp_path):
    workdir = tmp_path / "never"
    before = _listing(identities)
    # Epochs of one pass over the folder (not the quick variant's fixed 2 steps), so the count depends on the data.
    proc = subprocess.run(
        [sys.executable, "-m", "sphere_tf_cli.train_face", f"--config={path}:quick", "--dry_run", "--dry_run_steps=1",
         f"--workdir={workdir}", f"--config.data.manual_dir={identities}", "--config.train.steps=0",
         "--config.train.steps_per_epoch=0", f"--config.train.epochs={EPOCHS}"],
        cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    config, lines = _printed(proc.stdout)

    quick = _load(path).get_config("quick").to_dict()
    assert config["data"]["manual_dir"] == identities and config["train"]["epochs"] == EPOCHS
    assert config["train"]["batch_size"] == quick["train"]["batch_size"] == 8
    assert config["model"]["name"] == quick["model"]["name"] and config["seed"] == quick["seed"]
    assert config["training_set"] == quick["training_set"] and config["verification"] == quick["verification"]
    assert config["export_class_matrix"] is False

    # Independently: the image files on disk, `data.train_limit` of them, whole batches only.
    images = len(_listing(identities))
    per_epoch = min(images, quick["data"]["train_limit"] or images) // 8
    assert lines["data"].startswith(f"identity folder {identities}: {images} images of {IDENTITIES} identities, "
                                    "12x10x3")
    assert lines["steps"] == f"{per_epoch * EPOCHS} ({EPOCHS} epochs of {per_epoch})"
    assert float(re.match(r"([0-9.]+) ms measured", lines["step time"]).group(1)) > 0
    assert lines["class matrix"].startswith(f"512 x {IDENTITIES}: ")
    assert "estimated time" in lines
    assert not workdir.exists() and _listing(identities) == before  # nothing trained or written


@pytest.mark.parametrize("module,want", [
    # CASIA-WebFace as published: 494,414 // 128 = 3,862 steps a pass; 28,000 steps in epochs of the largest
    # divisor of 28,000 up to one pass, 3,500.
    (sphereface_margins, (494414, 10575, (112, 96, 3), 3500, 8)),
    # MS1M-ArcFace: 16 epochs of 5,822,653 // 512 = 11,372 steps.
    (partial_fc_ms1m, (5822653, 85742, (112, 112, 3), 11372, 16)),
])
def test_published_size_without_the_folder(module, want, tmp_path):
    images, classes, shape, per_epoch, epochs = want
    config = module.get_config()
    config.data.manual_dir = str(tmp_path / "absent")
    plan = face.dry_run(config, probe_steps=0)
    assert plan["data_source"] == "training_set" and plan["train_images"] == images
    assert (plan["identities"], plan["image_shape"]) == (classes, shape)
    assert (plan["steps_per_epoch"], plan["epochs"]) == (per_epoch, epochs)
    assert plan["total_steps"] == per_epoch * epochs == config.train.steps
    lines = face.dry_run_lines(plan)
    assert f"as published (training_set): {images:,} images of {classes:,} identities" in lines[0]
    # SGD with momentum: the (512, C) float32 kernel and one slot.
    assert plan["class_matrix"]["total_bytes"] == 2 * 512 * classes * 4
    assert not os.path.exists(tmp_path / "absent")


def test_a_class_matrix_over_the_limit_is_reported_not_built():
    config = partial_fc_ms1m.get_config("quick")
    plan = face.dry_run(config, probe_steps=1, class_memory_limit=2**20)
    need = 2 * 512 * recipe.MS1M_ARCFACE["identities"] * 4
    assert plan["class_matrix"]["total_bytes"] == need and "seconds_per_step" not in plan
    assert "exceed the dry run's limit" in plan["probe_skipped"]
    lines = face.dry_run_lines(plan)
    assert any(line.startswith("step time        not measured: the class matrix") for line in lines)
    assert "split over the devices" in [line for line in lines if line.startswith("class matrix")][0]
    assert plan["total_steps"] == 2


def test_unstated_size_is_unknown():
    config = sphereface_margins.get_config()
    config.training_set.images = 0
    plan = face.dry_run(config, probe_steps=0)
    assert plan["data_source"] == "unknown" and plan["train_images"] is None and plan["total_steps"] is None


@pytest.mark.parametrize("change,error,match", [
    (lambda c: c.data.update(augmentaton="flip"), classifier.ConfigError, "data.augmentaton"),
    (lambda c: c.training_set.update(images=-1), ValueError, "training_set.images"),
    (lambda c: c.verification.update(pair="x"), ValueError, "verification.pair"),
])
def test_bad_input_fails_as_the_run_does(change, error, match, tmp_path):
    config = sphereface_margins.get_config("quick")
    with config.unlocked():
        change(config)
    with pytest.raises(error, match=match):
        face.dry_run(config, probe_steps=0)
    with pytest.raises(error, match=match):
        face.train_face(config, str(tmp_path / "run"))
