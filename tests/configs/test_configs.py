"""Every config under sphere_tf/configs/ loads, validates, and its `quick` variant trains two steps of the configured model."""

import glob
import importlib.util
import json
import os

import keras
import numpy as np
import pytest

from sphere_tf.configs import common
from sphere_tf import layers
from sphere_tf.data import fashion_mnist
from sphere_tf.runners import classifier

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The Fashion-MNIST small-CNN configs of the main job. The other configs have their own modules, which
# validate every variant and run every quick variant on generated archives: tests/configs/test_paper_configs_a.py
# (spherenet, dcnet tables, convnorm), test_paper_configs_b.py (losses, mhe, comhe, opt), test_repro_configs.py
# (repro), tests/evaluation (face), tests/adversarial (adversarial).
CONFIG_FILES = sorted(glob.glob(os.path.join(ROOT, "sphere_tf", "configs", "dcnet", "fashion_mnist_*.py")))


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
    assert module.__doc__ and "sphere-tf " in module.__doc__
    classifier.validate(module.get_config())
    classifier.validate(module.get_config("quick"))


def _quick_test_subset(config):
    """The quick run's test images, chosen as `get_datasets` documents (NumPy only).

    `test_limit=k` keeps the first k test images in file order, as raw pixels: the runner's model normalises them
    itself (its first layer).
    """
    (_, _), (x_test, y_test) = fashion_mnist.load_fashion_mnist()
    index = np.arange(config.data.test_limit)
    return x_test[index, :, :, None].astype(np.float32), y_test[index].astype(np.int64)


def _np_cross_entropy(logits, labels):
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.sum(np.exp(shifted), axis=1, keepdims=True))
    return float(-np.mean(log_probs[np.arange(len(labels)), labels]))


# The Fashion-MNIST configs (README jobs); the paper configs' quick runs (CIFAR / ImageNet archives) are
# tested in tests/configs/test_paper_configs_*.py.
FASHION_MNIST_FILES = [p for p in CONFIG_FILES if "fashion_mnist" in os.path.basename(p)]


@pytest.mark.parametrize("path", FASHION_MNIST_FILES, ids=lambda p: os.path.relpath(p, ROOT))
def test_quick_variant_trains_two_steps(path, tmp_path):
    """The quick run trains exactly two steps of the configured network and reports its true test scores."""
    config = _load(path).get_config("quick")
    config.export = False
    results = classifier.train_and_evaluate(config, str(tmp_path))
    assert len(results["history"]["loss"]) == 1

    model = keras.models.load_model(os.path.join(str(tmp_path), "checkpoints", "model.keras"))
    assert int(model.optimizer.iterations) == config.train.steps_per_epoch == 2
    assert layers.model_normalization(model) == (config.data.normalization, None)
    # The operator the config names, with the options it gives, in every conv layer.
    operator = dict(config.model.operator)
    expected_type = {"conv2d": keras.layers.Conv2D, "decoupled": layers.DecoupledConv2D,
                     "sphere": layers.SphereConv2D}[operator.pop("layer")]
    convs = [layer for layer in model.layers if layer.name.startswith("conv")]
    widths = config.model.widths
    assert [c.filters for c in convs] == [w for w in widths for _ in range(config.model.convs_per_stage)]
    for conv in convs:
        assert type(conv) is expected_type, conv.name
        conv_config = conv.get_config()
        for key, value in operator.items():
            assert conv_config[key] == value, (conv.name, key)

    # The reported test scores are those of the trained model on the configured test subset.
    x, y = _quick_test_subset(config)
    logits = keras.ops.convert_to_numpy(model(x, training=False))
    accuracy = 100.0 * float(np.mean(np.argmax(logits, axis=1) == y))
    assert results["test_accuracy"] == pytest.approx(accuracy, abs=1e-4)  # percent, as the papers report
    assert results["test_error"] == pytest.approx(100.0 - accuracy, abs=1e-4)
    assert results["test_loss"] == pytest.approx(_np_cross_entropy(logits, y), rel=1e-4)
    with open(os.path.join(str(tmp_path), "results.json")) as f:
        assert json.load(f) == results


def test_parse_arg():
    arg = common.parse_arg("quick,epochs=7", quick=False, epochs=3)
    assert arg.quick is True and arg.epochs == 7
    with pytest.raises(ValueError, match="Unknown config argument 'epoch'"):
        common.parse_arg("epoch=2", quick=False, epochs=3)


@pytest.mark.parametrize("path", CONFIG_FILES, ids=lambda p: os.path.relpath(p, ROOT))
def test_every_config_holds_every_schema_key(path):
    """So `--config.data.manual_dir=...`, `--config.data.data_dir=...` etc. work for every config."""
    config = _load(path).get_config().to_dict()
    for section, defaults in classifier.DEFAULTS.items():
        assert section in config, section
        if isinstance(defaults, dict) and section not in ("model", "optimizer"):
            assert set(config[section]) == set(defaults), section


def test_base_config_refuses_unknown_sections_and_keys():
    with pytest.raises(ValueError, match="Unknown config section 'trian'"):
        common.base_config(trian={})
    with pytest.raises(ValueError, match=r"Unknown keys \['batch'\] in config section 'train'"):
        common.base_config(train={"batch": 3})


def test_typos_fail_before_data_is_read():
    config = _load(FASHION_MNIST_FILES[0]).get_config("quick")
    config.model.operator.magnitude = "tnah"
    with pytest.raises(ValueError, match="Unknown magnitude function 'tnah'"):
        classifier.validate(config)
