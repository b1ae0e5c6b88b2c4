"""`python -m sphere_tf_cli.train_classifier --config USER_CONFIG` with a config beside the user's own module: the
config imports it (the config's folder is on the path), and the run trains the user's data set and model."""

import json
import os
import subprocess
import sys

from tests.runners import user_extension

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_trainer_runs_a_user_dataset_and_model(tmp_path):
    folder = tmp_path / "my_project"
    folder.mkdir()
    config = user_extension.write_user_project(str(folder))
    workdir = str(tmp_path / "run")
    proc = subprocess.run(
        [sys.executable, "-m", "sphere_tf_cli.train_classifier", f"--config={config}", f"--workdir={workdir}"],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(os.path.join(workdir, "results.json")) as f:
        results = json.load(f)
    assert results["steps"] == 2
    assert f"data        {user_extension.DATASET} (24 train / 9 test" in proc.stdout
    assert f"model       {user_extension.MODEL}" in proc.stdout
