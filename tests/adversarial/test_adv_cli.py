"""`python -m sphere_tf_cli.train_adversarial` end to end on the quick variant (generated Fashion-MNIST idx files)."""

import gzip
import json
import os
import struct
import subprocess
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _write_idx(folder, prefix, n, rng, label=None):
    """Random idx images; random labels, or all `label`."""
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, size=n, dtype=np.uint8) if label is None else np.full(n, label, np.uint8)
    with gzip.open(os.path.join(folder, f"{prefix}-images-idx3-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes())
    with gzip.open(os.path.join(folder, f"{prefix}-labels-idx1-ubyte.gz"), "wb") as f:
        f.write(struct.pack(">II", 2049, n) + labels.tobytes())


def test_quick_variant_writes_results_tables_and_plot(tmp_path):
    data = tmp_path / "fashion"
    data.mkdir()
    rng = np.random.default_rng(0)
    _write_idx(str(data), "train", 64, rng)
    _write_idx(str(data), "t10k", 32, rng)
    workdir = tmp_path / "run"
    cmd = [sys.executable, "-m", "sphere_tf_cli.train_adversarial",
           "--config", os.path.join(REPO, "sphere_tf", "configs", "adversarial", "fashion_mnist_cnn9.py") + ":quick",
           "--workdir", str(workdir), f"--config.data.manual_dir={data}"]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads((workdir / "results.json").read_text())
    assert results["seeds"] == [0]
    for box in ("white_box", "black_box"):
        assert set(results[box]) == {"natural", "fgsm"}
        for training in ("natural", "fgsm"):
            assert set(results[box][training]) == {"baseline", "sphereconv", "ballconv", "tanhconv"}
            for accs in results[box][training].values():
                assert set(accs) == {"none", "fgsm", "bim"}
                assert all(0.0 <= v <= 100.0 for v in accs.values())
    # Clean accuracy does not depend on where the (unused) attack was crafted.
    assert results["white_box"]["natural"]["tanhconv"]["none"] == results["black_box"]["natural"]["tanhconv"]["none"]
    assert results["data"]["test_size"] == 24
    assert set(results["deepfool"]) == {"baseline", "sphereconv", "ballconv", "tanhconv"}
    tables = (workdir / "tables.md").read_text()
    assert "| FGSM-adv | BIM |" in tables and "(7.96)" in tables  # Table 7's paper number beside ours
    assert "| FGSM-adv | BIM |" in done.stdout  # printed at the end
    assert (workdir / "accuracy_vs_epsilon.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "[seed 0] training tanhconv (fgsm)" in done.stdout
    # One trace per model and attack is not reported as TensorFlow "retracing"; no warning is printed twice.
    assert "retracing" not in done.stderr, done.stderr[-3000:]
    warnings = [line.split("] ", 1)[-1] for line in done.stderr.splitlines() if line.startswith("W")]
    assert len(warnings) == len(set(warnings)), done.stderr[-3000:]
    # The same command again only loads the finished checkpoints and says so.
    again = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert " training " not in again.stdout and "[seed 0] loading tanhconv (fgsm) (trained, 2 steps)" in again.stdout
    assert json.loads((workdir / "results.json").read_text())["white_box"] == results["white_box"]
