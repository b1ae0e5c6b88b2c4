"""The adversarial experiment's `results.json` is strict JSON, DeepFool's undefined medians included."""

import json

import pytest

from sphere_tf.configs.adversarial import fashion_mnist_cnn9
from sphere_tf.runners import adversarial as experiment
from tests.adversarial.test_adv_cli import _write_idx


def _refuse_constant(name):
    raise ValueError(f"not strict JSON: bare {name}")


def test_tiny_run_writes_strict_json_with_per_norm_deepfool_rates(tmp_path, rng):
    # Every training label is 0 and every test label 1: after two steps at a large learning rate the
    # model predicts class 0 for every test image, so DeepFool attacks nothing and its medians and
    # success rates are undefined (they were bare NaN in results.json).
    data = tmp_path / "fashion"
    data.mkdir()
    _write_idx(str(data), "train", 32, rng, label=0)
    _write_idx(str(data), "t10k", 24, rng, label=1)
    config = fashion_mnist_cnn9.get_config("quick")
    config.models, config.trainings = ["baseline"], ["natural"]
    config.data.manual_dir = str(data)
    config.optimizer.learning_rate = 1.0
    results = experiment.run_experiment(config, str(tmp_path / "run"))
    text = (tmp_path / "run" / "results.json").read_text()
    written = json.loads(text, parse_constant=_refuse_constant)
    assert written["white_box"]["natural"]["baseline"]["none"] == pytest.approx(0.0)  # the premise above
    (strength,) = written["deepfool"]["baseline"]
    assert strength["attacked"] == 0
    for norm in ("l2", "linf"):
        assert strength[f"{norm}_median"] is None and strength[f"{norm}_success_rate"] is None
        assert strength[f"{norm}_fooled"] == 0
    assert "none was attacked" in strength["note"]
    assert results["deepfool"] == written["deepfool"]
