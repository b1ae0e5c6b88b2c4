"""examples/feature_picture.py runs from any working directory and leaves the committed figure alone."""

# bazel-size: large

import hashlib
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "examples", "feature_picture.py")
COMMITTED = os.path.join(ROOT, "docs", "img", "feature_picture.png")


def _digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def test_feature_picture_from_another_directory(tmp_path):
    before = _digest(COMMITTED)
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    helped = subprocess.run([sys.executable, SCRIPT, "--help"], cwd=tmp_path, capture_output=True, text=True,
                            env=env, timeout=300)
    # absl's --help exits with status 1 after printing the flags. The default is under the repository's git-ignored runs/, whatever the working directory.
    assert repr(os.path.join(ROOT, "runs", "feature_picture.png")) in helped.stdout
    done = subprocess.run([sys.executable, SCRIPT, "--output=figures/picture.png", "--num_train=64", "--num_test=40",
                           "--epochs=1", "--margins=1,2"], cwd=tmp_path, capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    written = tmp_path / "figures" / "picture.png"
    assert written.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"wrote {written}" in done.stdout
    assert _digest(COMMITTED) == before
