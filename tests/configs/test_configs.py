"""Every config under configs/ loads, validates, and its `quick` variant trains two steps."""

import glob
import importlib.util
import os

import pytest

from configs import common
from sphere_tf.training import classifier

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CONFIG_FILES = sorted(
    p for p in glob.glob(os.path.join(ROOT, "configs", "**", "*.py"), recursive=True)
    if os.path.basename(p) not in ("__init__.py", "common.py")
)


def _load(path):
    spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_there_are_configs():
    assert CONFIG_FILES


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: os.path.relpath(p, ROOT))
def test_config_loads_and_validates(path):
    module = _load(path)
    assert module.__doc__ and "python -m trainers." in module.__doc__
    classifier.validate(module.get_config())
    classifier.validate(module.get_config("quick"))


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: os.path.relpath(p, ROOT))
def test_quick_variant_trains_two_steps(path, tmp_path):
    config = _load(path).get_config("quick")
    config.export = False
    config.train.verbose = 0
    results = classifier.train_and_evaluate(config, str(tmp_path))
    assert len(results["history"]["loss"]) == 1
    assert 0.0 <= results["test_accuracy"] <= 1.0


def test_parse_arg():
    arg = common.parse_arg("quick,epochs=7", quick=False, epochs=3)
    assert arg.quick is True and arg.epochs == 7
    with pytest.raises(ValueError, match="Unknown config argument 'epoch'"):
        common.parse_arg("epoch=2", quick=False, epochs=3)


def test_typos_fail_before_data_is_read():
    config = _load(CONFIG_FILES[0]).get_config("quick")
    config.model.operator.magnitude = "tnah"
    with pytest.raises(ValueError, match="Unknown magnitude function 'tnah'"):
        classifier.validate(config)
