"""The adversarial task (DCNet §6.2, Tables 7 and 8) on JAX and PyTorch without TensorFlow (`.venv-torch`).

A child process with the backend set runs the quick config end to end: natural and FGSM adversarial training
(`FGSMAdversarialModel`'s backend-neutral train step), white-box and black-box FGSM/BIM evaluation
(`gradient_attacks`), the accuracy-vs-ε curve and DeepFool (foolbox's model of the backend), on Grain data with
array checkpoints; then the same command again only loads the finished checkpoints. Neither process may import
TensorFlow or cleverhans. The numbers themselves are held to NumPy references and to TensorFlow's in
tests/adversarial (test_adv_train_step.py, test_gradient_attacks.py).
"""

import importlib.util
import json
import os
import subprocess
import sys

import keras
import pytest

from sphere_tf.runners import adversarial as experiment
from sphere_tf.runners import schema
from tests.adversarial.test_adv_cli import _write_idx

pytestmark = pytest.mark.backend_only("jax", "torch")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BACKEND = keras.backend.backend()
MODELS = ["baseline", "tanhconv"]
PLOTS = importlib.util.find_spec("matplotlib") is not None

# The quick config on two models (a plain and a decoupled CNN), then the framework modules the process imported.
RUN_CHILD = r"""
import json, sys
from sphere_tf.configs.adversarial import fashion_mnist_cnn9
from sphere_tf.runners import adversarial
config = fashion_mnist_cnn9.get_config("quick")
config.data.manual_dir = sys.argv[1]
config.models = json.loads(sys.argv[3])
adversarial.run_experiment(config, sys.argv[2])
print("TF_MODULES", json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "cleverhans"))))
"""


@pytest.fixture(scope="module")
def fashion_dir(tmp_path_factory):
    import numpy as np  # noqa: PLC0415

    folder = tmp_path_factory.mktemp("fashion")
    rng = np.random.default_rng(0)
    _write_idx(str(folder), "train", 64, rng)
    _write_idx(str(folder), "t10k", 32, rng)
    return str(folder)


def _run(data, workdir):
    proc = subprocess.run([sys.executable, "-c", RUN_CHILD, data, workdir, json.dumps(MODELS)], cwd=REPO,
                          env=dict(os.environ, KERAS_BACKEND=BACKEND, PYTHONPATH=REPO), capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "TF_MODULES []" in proc.stdout, proc.stdout[-2000:]
    return proc.stdout


def test_quick_adversarial_run_trains_attacks_and_reloads_on_this_backend(fashion_dir, tmp_path):
    workdir = str(tmp_path / "run")
    output = _run(fashion_dir, workdir)
    assert "[seed 0] training tanhconv (fgsm)" in output
    with open(os.path.join(workdir, "results.json")) as f:
        results = json.load(f)
    assert results["backend"] == BACKEND and results["data"]["test_size"] == 24
    for box in ("white_box", "black_box"):
        assert set(results[box]) == {"natural", "fgsm"}
        for training in ("natural", "fgsm"):
            assert set(results[box][training]) == set(MODELS)
            for accs in results[box][training].values():
                assert set(accs) == {"none", "fgsm", "bim"}
                assert all(0.0 <= v <= 100.0 for v in accs.values())
    # Clean accuracy does not depend on where the (unused) attack was crafted.
    for training in ("natural", "fgsm"):
        assert results["white_box"][training]["tanhconv"]["none"] == results["black_box"][training]["tanhconv"]["none"]
    assert len(results["curve"]["white_box"]["fgsm"]["baseline"]) == 2
    assert set(results["deepfool"]) == set(MODELS)
    with open(os.path.join(workdir, "tables.md")) as f:
        assert "| FGSM-adv | BIM |" in f.read()
    # The plot where matplotlib is installed; else a line says why it is missing (results.json has the curve).
    assert os.path.exists(os.path.join(workdir, "accuracy_vs_epsilon.png")) == PLOTS or "not written" in output
    # The same run again loads every model from its array checkpoint and evaluates it the same way.
    again = _run(fashion_dir, workdir)
    assert " training " not in again and "[seed 0] loading tanhconv (fgsm) (trained, 2 steps)" in again
    with open(os.path.join(workdir, "results.json")) as f:
        assert json.load(f)["white_box"] == results["white_box"]


def test_what_cannot_run_here_is_refused_before_data_is_read(monkeypatch):
    config = {"data": {"manual_dir": "/nonexistent"}, "deepfool": {"images": 4}}
    assert experiment.validate(config)["deepfool"]["images"] == 4  # this backend runs every part
    monkeypatch.setattr(experiment, "BACKENDS", ("another",))
    with pytest.raises(schema.ConfigError, match=f"KERAS_BACKEND={BACKEND!r}"):
        experiment.validate(config)
    monkeypatch.undo()
    installed = experiment.dependencies.installed
    monkeypatch.setattr(experiment.dependencies, "installed", lambda name: name != "foolbox" and installed(name))
    with pytest.raises(schema.ConfigError, match="deepfool.images.*foolbox 3, which is not installed"):
        experiment.validate(config)
    assert experiment.validate({**config, "deepfool": {"images": 0}})["deepfool"]["images"] == 0
