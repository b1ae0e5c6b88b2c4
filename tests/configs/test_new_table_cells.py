"""Two-step runs of table cells that are not their config's default (the default's run is in
test_paper_configs_b.py): L-Softmax's hinge row, CoMHE Table 6.7's ResNet-50 column, OPT Table 7.3's MLP under
both initializations and with OGD's optimizer, OPT Table 7.7's baseline with unit-norm neurons."""

# bazel-size: large

import importlib
import math
import os

import pytest

from sphere_tf import losses
from sphere_tf.data import archive_writers
from sphere_tf.runners import classifier
from sphere_tf.runners import recipe


@pytest.fixture(scope="module")
def archives(tmp_path_factory):
    root = tmp_path_factory.mktemp("archives")
    folders = {}
    for name, kwargs in (("mnist", dict(n_train=70, n_test=8)), ("cifar100", dict(n_train=70, n_test=8)),
                         ("imagenet2012", dict(per_class=2, n_val=3, size=(24, 30)))):
        folder = str(root / name)
        os.makedirs(folder)
        written = archive_writers.write(name, folder, seed=1, **kwargs)
        folders[name] = (folder, written.get("labels_file", "") if isinstance(written, dict) else "")
    return folders


CELLS = [
    ("losses.lsoftmax_table2_1", "data=mnist,loss=hinge"),
    ("comhe.table6_7_imagenet", "model=resnet50,method=random"),
    ("opt.table7_3_mnist_mlp", "method=baseline,init=normal"),
    ("opt.table7_3_mnist_mlp", "method=ogd,init=xavier"),
    ("opt.table7_7_unit_norm", "method=baseline,norm=on"),
]


@pytest.mark.parametrize("module,variants", CELLS, ids=lambda v: str(v))
def test_quick_cell_trains_two_steps(module, variants, archives, tmp_path):
    config = importlib.import_module(f"sphere_tf.configs.{module}").get_config(f"quick,{variants}")
    folder, labels_file = archives[config.data.name]
    config.data.manual_dir = folder
    if config.data.name == "imagenet2012":
        config.data.val_labels_file = labels_file
    results = classifier.train_and_evaluate(config, str(tmp_path))
    assert results["steps"] == 2
    assert all(math.isfinite(v) for v in results["history"]["loss"]) and math.isfinite(results["test_loss"])


def test_the_cells_build_what_the_tables_name():
    hinge = classifier.validate(importlib.import_module("sphere_tf.configs.losses.lsoftmax_table2_1").get_config(
        "data=cifar10,loss=hinge"))
    assert isinstance(recipe.build_loss(hinge), losses.SparseHinge) and hinge["model"].get("head") is None
    softmax = classifier.validate(importlib.import_module("sphere_tf.configs.losses.lsoftmax_table2_1").get_config(
        "data=cifar10,loss=softmax"))
    # The hinge row differs from the softmax row in the loss only.
    assert {k: v for k, v in hinge.items() if k != "loss"} == {k: v for k, v in softmax.items() if k != "loss"}
    assert isinstance(recipe.build_loss(softmax), losses.SparseCrossentropy)

    comhe = importlib.import_module("sphere_tf.configs.comhe.table6_7_imagenet")
    assert comhe.get_config("model=resnet50").model.name == "resnet50"
    assert tuple(comhe.get_config("model=resnet50").model.blocks_per_stage) == (3, 4, 6, 3)

    mlp = importlib.import_module("sphere_tf.configs.opt.table7_3_mnist_mlp")
    config = mlp.get_config("method=gs,init=normal")
    assert config.model.name == "opt_mlp" and config.model.operator.orthogonalization == "gram_schmidt"
    assert config.model.operator.fixed_kernel_initializer.config.stddev == 1.0
    assert config.model.head.kernel_initializer.config.stddev == 1.0
    # App. F.3: SGD 0.01, momentum 0.9, batch 100, 100 epochs of the 60k training images.
    assert (config.optimizer.name, config.optimizer.learning_rate, config.optimizer.momentum) == ("sgd", 0.01, 0.9)
    assert config.train.batch_size == 100 and config.train.steps == 100 * 600
    assert "rotation_regularizer" not in config.model.operator and not config.regularizers
    assert mlp.get_config("method=baseline,init=xavier").model.operator.kernel_initializer == "glorot_uniform"
    assert mlp.get_config("method=ogd").paradigm.opt_optimizer is True


def test_opt_baseline_with_norm_is_the_baseline_with_unit_norm_initial_neurons():
    """Thesis Table 7.7, "Baseline w/ Norm": the plain CNN-6 of the "w/o Norm" cell, its conv and FC 64 neurons
    drawn as before and rescaled to unit norm (the classifier untouched); plain trainable convs, no OPT."""
    import keras  # noqa: PLC0415
    import numpy as np  # noqa: PLC0415

    from sphere_tf import models  # noqa: PLC0415

    module = importlib.import_module("sphere_tf.configs.opt.table7_7_unit_norm")
    on = classifier.validate(module.get_config("method=baseline,norm=on"))
    off = classifier.validate(module.get_config("method=baseline,norm=off"))
    assert {k: v for k, v in on.items() if k != "model"} == {k: v for k, v in off.items() if k != "model"}
    assert off["model"]["operator"] == {"layer": "conv2d", "kernel_initializer": "he_normal"}
    assert "fc_operator" not in off["model"]  # Keras's Dense: Glorot uniform
    unit = "sphere_tf>UnitNormNeurons"
    assert on["model"]["operator"]["kernel_initializer"] == {"class_name": unit, "config": {"base": "he_normal"}}
    assert on["model"]["fc_operator"]["kernel_initializer"] == {"class_name": unit,
                                                               "config": {"base": "glorot_uniform"}}
    model_cfg = {k: v for k, v in on["model"].items() if k != "name"}
    model = models.create_model("opt_cnn6", input_shape=(32, 32, 3), num_classes=100, width_multiplier=1 / 8,
                                **model_cfg)
    for layer in model.layers:
        if isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense)):
            kernel = keras.ops.convert_to_numpy(layer.kernel)
            norms = np.linalg.norm(kernel.reshape(-1, kernel.shape[-1]), axis=0)
            if layer.name == "logits":
                assert not np.allclose(norms, 1.0, atol=1e-3)
            else:
                np.testing.assert_allclose(norms, 1.0, rtol=1e-5, err_msg=layer.name)
                assert layer.kernel.trainable
