"""The absl mains' `--config` handling: overrides of absent keys, one-line errors, no workdir left, fast --help."""

import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG = os.path.join(ROOT, "sphere_tf", "configs", "dcnet", "fashion_mnist_tanh_cosine.py")
ADVERSARIAL_CONFIG = os.path.join(ROOT, "sphere_tf", "configs", "adversarial", "fashion_mnist_cnn9.py")


def _run(main, *args, python_flags=()):
    return subprocess.run([sys.executable, *python_flags, "-m", main, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def test_absent_keys_are_overridable_and_missing_data_is_one_line(tmp_path):
    """Keys the config file lacks (`model.relu`, a whole `model.head`) pass; the run stops at the missing
    archives with their message alone and writes nothing."""
    workdir = str(tmp_path / "run")
    missing = str(tmp_path / "no_archives")
    proc = _run("sphere_tf_cli.train_classifier", f"--config={CONFIG}:quick", f"--workdir={workdir}",
                "--config.model.relu=False", "--config.model.head.layer=margin",
                "--config.model.head.loss_type=cosface", f"--config.data.manual_dir={missing}")
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("Error: fashion_mnist train split:") and missing in lines[0]
    assert not os.path.exists(workdir)


def test_command_line_typo_is_one_line_with_did_you_mean(tmp_path):
    workdir = str(tmp_path / "run")
    proc = _run("sphere_tf_cli.train_classifier", f"--config={CONFIG}:quick", f"--workdir={workdir}",
                "--config.data.augmentaton=flip")
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "Error: Unknown config key 'data.augmentaton'; expected one of ['augmentation', 'class_limits', "
        "'data_dir', 'eval_augmentation', 'label_mode', 'label_noise', 'label_noise_type', 'manual_dir', 'name', "
        "'normalization', 'pipeline', 'source', "
        "'test_limit', 'train_limit', 'val_labels_file']. Did you mean 'augmentation'?"]
    assert not os.path.exists(workdir)
    # A misspelt value gets the valid choices and the closest one.
    proc = _run("sphere_tf_cli.train_classifier", f"--config={CONFIG}:quick", f"--workdir={workdir}",
                "--config.data.augmentation=flp")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr[-3000:]
    assert "`data.augmentation`: expected one of (" in lines[0] and lines[0].endswith("Did you mean 'flip'?")


def test_adversarial_command_line_typo_is_one_line(tmp_path):
    workdir = str(tmp_path / "run")
    proc = _run("sphere_tf_cli.train_adversarial", f"--config={ADVERSARIAL_CONFIG}:quick", f"--workdir={workdir}",
                "--config.atack.epsilon=0.1")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 1 and len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith("Error: Unknown config key 'atack'") and lines[0].endswith("Did you mean 'attack'?")
    assert not os.path.exists(workdir)


def test_help_does_not_import_tensorflow():
    for main in ("sphere_tf_cli.train_classifier", "sphere_tf_cli.train_adversarial"):
        proc = _run(main, "--help", python_flags=("-X", "importtime"))
        assert "--workdir" in proc.stdout, proc.stderr[-3000:]  # absl exits 1 after --help
        imported = {line.split("|")[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time")}
        assert "tensorflow" not in imported and "keras" not in imported and "sphere_tf" not in imported
