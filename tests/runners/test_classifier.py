"""The config-driven runner: schema validation, schedules, and two-step runs on generated archives."""

import glob
import json
import math
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from sphere_tf import data as data_lib
from sphere_tf import layers
from sphere_tf import models as models_lib
from sphere_tf.data import archive_writers
from sphere_tf.data import datasets as datasets_lib
from sphere_tf.data import preprocessing
from sphere_tf.layers import MarginHead
from sphere_tf.models import blocks
from sphere_tf.models import operators
from sphere_tf.ops import margin as margin_lib
from sphere_tf.runners import classifier
from sphere_tf.training import distribute
from sphere_tf.training import optimization
from sphere_tf.training import regularization


def tiny_config(manual_dir, name="mnist", **sections):
    config = {
        "seed": 1,
        "data": {"name": name, "manual_dir": manual_dir},
        "model": {"name": "small_cnn", "widths": [4], "convs_per_stage": 1, "dense_units": 8},
        "optimizer": {"name": "adam", "learning_rate": 0.01},
        "train": {"batch_size": 4, "epochs": 1, "steps_per_epoch": 2, "verbose": 0},
        "strategy": "one_device",
        "export": False,
    }
    for key, value in sections.items():
        if isinstance(value, dict) and key in config and key != "model":
            config[key] = {**config[key], **value}
        elif key == "model":
            config[key] = {**config[key], **value}
        else:
            config[key] = value
    return config


@pytest.fixture(scope="module")
def mnist_dir(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("mnist"))
    archive_writers.write_mnist(folder, n_train=16, n_test=6, seed=0)
    return folder


# -- every registry choice the schema names resolves -------------------------------------------------------------

REGISTRY_CHOICES = (
    [("data", {"name": n}) for n in datasets_lib.DATASETS]
    + [("data", {"augmentation": n}) for n in preprocessing.AUGMENTATIONS]
    + [("data", {"normalization": n}) for n in preprocessing.NORMALIZATIONS]
    + [("model", {"name": n}) for n in models_lib.MODELS]
    + [("model", {"operator": {"layer": k}}) for k in operators.KINDS]
    + [("model", {"head": {"layer": h}}) for h in blocks.HEADS if h != "margin"]
    + [("model", {"head": {"layer": "margin", "loss_type": t}}) for t in margin_lib.LOSS_TYPES]
    + [("model", {"head": {"layer": "margin", "loss_type": "asoftmax", "annealing": a}})
       for a in margin_lib.ANNEALING_PRESETS]
    + [("regularizers", [{"name": n, "layers": "conv*"}]) for n in regularization.REGULARIZERS]
    + [("optimizer", {"name": n, "learning_rate": 0.1}) for n in optimization.OPTIMIZERS]
    + [("schedule", {"name": n, "boundaries": [10]}) for n in optimization.SCHEDULES]
    + [("strategy", s) for s in distribute.STRATEGIES]
    + [("mixed_precision", p) for p in classifier.MIXED_PRECISION]
)


@pytest.mark.parametrize("section,value", REGISTRY_CHOICES, ids=str)
def test_every_registry_choice_validates(section, value):
    config = tiny_config("/nonexistent")
    if section == "model" and "name" in value:
        config["model"] = dict(value)
    elif isinstance(value, dict):
        config[section] = {**config[section], **value} if section in config else value
    else:
        config[section] = value
    resolved = classifier.validate(config)
    if isinstance(value, dict):
        assert {k: resolved[section][k] for k in value} == value
    else:
        assert resolved[section] == value
    assert set(resolved) == set(classifier.DEFAULTS)


# -- typos and bad values fail before any data is read -------------------------------------------------------------

TYPOS = [
    ({"data": {"augmentaton": "flip"}}, "data.augmentaton", "augmentation"),
    ({"data": {"name": "cifar11"}}, "data.name", "cifar10"),
    ({"data": {"augmentation": "cifar+"}}, "data.augmentation", "cifar_plus"),
    ({"data": {"normalization": "centred"}}, "data.normalization", "centered_128"),
    ({"model": {"name": "resnet33"}}, "model", "resnet32"),
    ({"model": {"widthz": [4]}}, "model", "widthz"),
    ({"model": {"name": "cnn9", "widthz": [4]}}, "model", "widthz"),  # through **kwargs to build_plain_cnn
    ({"model": {"name": "sphereface4", "residual_unitz": [1]}}, "model", "residual_units"),
    ({"model": {"operator": {"layer": "decoupld"}}}, "operator", "decoupled"),
    ({"model": {"head": {"layer": "margin", "loss_type": "arcfase"}}}, "loss_type", "arcface"),
    ({"model": {"head": {"layer": "margn"}}}, "head['layer']", "margin"),
    ({"regularizers": [{"name": "mhee", "layers": "conv*"}]}, "regularizers[0].name", "mhe"),
    ({"regularizers": [{"name": "mhe"}]}, "regularizers[0].layers", "pattern"),
    ({"optimizer": {"name": "adma", "learning_rate": 0.1}}, "optimizer.name", "adam"),
    ({"optimizer": {"name": "sgd", "learning_rate": 0.1, "momentun": 0.9}}, "optimizer", "momentun"),
    ({"schedule": {"name": "stepp"}}, "schedule.name", "step"),
    ({"schedule": {"name": "step", "boundaries": [5, 3]}}, "schedule.boundaries", "increasing"),
    ({"strategy": "mirored"}, "strategy", "mirrored"),
    ({"mixed_precision": "float16"}, "mixed_precision", "mixed_float16"),
    ({"train": {"batch_size": 0}}, "train.batch_size", ""),
    ({"trian": {}}, "trian", "train"),
    ({"loss": {"data_dependent_mhe": 1.0}}, "loss.data_dependent_mhe", "margin head"),
    ({"data": {"source": "manual", "data_dir": "/x"}}, "data.data_dir", "manual_dir"),
    ({"data": {"source": "tdfs"}}, "data.source", "tfds"),
    ({"paradigm": {"pretrained": "/no/such/run"}}, "paradigm.pretrained", "model.keras"),
    ({"paradigm": {"pretrained_match": "index"}}, "paradigm.pretrained_match", "position"),
    ({"evaluation": {"minority_classes": [10]}}, "evaluation.minority_classes", "[0, 10)"),
    ({"evaluation": {"minority_classes": [0, 0]}}, "evaluation.minority_classes", "distinct"),
    ({"train": {"energy_layers": ["conv*", ""]}}, "train.energy_layers", "pattern"),
    ({"train": {"energy_layers": 3}}, "train.energy_layers", "pattern"),
    ({"train": {"energy_layers": {"layers": "conv*"}}}, "train.energy_layers", "pattern"),
    ({"train": {"energy_power": -1}}, "train.energy_power", ">= 0"),
    ({"train": {"energy_half_space": "yes"}}, "train.energy_half_space", "True"),
]


@pytest.mark.parametrize("change,key,choice", TYPOS, ids=lambda v: str(v)[:40])
def test_typos_fail_before_data_is_read(change, key, choice, monkeypatch, tmp_path):
    def no_data(*args, **kwargs):
        raise AssertionError("data was read before the config was validated")

    monkeypatch.setattr(data_lib, "get_datasets", no_data)
    config = tiny_config(str(tmp_path))
    for section, value in change.items():
        if isinstance(value, dict) and section in config:
            config[section] = {**config[section], **value}
        else:
            config[section] = value
    with pytest.raises(ValueError) as raised:
        classifier.train_and_evaluate(config, str(tmp_path / "run"))
    assert key in str(raised.value) and choice in str(raised.value)
    assert not os.path.exists(tmp_path / "run" / "results.json")


# What only the model can tell (a pattern matching none of its layers, an option a `**kwargs` model function
# refuses): checked when the run builds its one model, after the data are read and before anything is written.
MODEL_CHECKS = [
    ({"train": {"energy_layers": ["conv*", "fcc"]}}, "train.energy_layers", "'fcc' matches no layer"),
    ({"model": {"name": "passes_on_untold", "widthz": 3}}, "model", "widthz"),
]


@pytest.fixture
def untold_builder():
    """A user's builder whose `**kwargs` go where the registry was not told (`register_model` without
    `passes_kwargs_to`): its options can only be checked by building it."""
    def passes_on_untold(input_shape, num_classes, **kwargs):
        return models_lib.get_model_fn("small_cnn")(input_shape, num_classes, widths=(4,), convs_per_stage=1,
                                                    dense_units=8, **kwargs)

    models_lib.register_model(passes_on_untold)
    assert models_lib.model_options("passes_on_untold") is None
    yield
    del models_lib.MODELS["passes_on_untold"]


@pytest.mark.parametrize("change,key,choice", MODEL_CHECKS, ids=lambda v: str(v)[:40])
def test_model_checks_fail_when_the_model_is_built_before_anything_is_written(change, key, choice, mnist_dir,
                                                                                 tmp_path, untold_builder):
    config = tiny_config(mnist_dir)
    for section, value in change.items():
        config[section] = {**config[section], **value} if section in config and section != "model" else value
    builds = []
    real = models_lib.create_model

    def counted(*args, **kwargs):
        builds.append(args)
        return real(*args, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(models_lib, "create_model", counted)
        classifier.validate(config)  # the config's own keys pass: no model is built to check them
        assert builds == []
        with pytest.raises(classifier.ConfigError) as raised:
            classifier.train_and_evaluate(config, str(tmp_path / "run"))
    assert key in str(raised.value) and choice in str(raised.value)
    assert len(builds) == 1 and not os.path.exists(tmp_path / "run")


# -- schedules and run lengths against hand values -----------------------------------------------------------------

def _rate(rate, step):
    return float(keras.ops.convert_to_numpy(rate(step))) if callable(rate) else rate


def test_step_schedule_boundaries_as_spherenet():
    rate = optimization.build_learning_rate(0.1, {"name": "step", "boundaries": [34000, 54000],
                                                  "decay_factor": 0.1}, 64000)
    # PiecewiseConstantDecay: values[i] while step <= boundaries[i].
    for step, want in [(0, 0.1), (34000, 0.1), (34001, 0.01), (54000, 0.01), (54001, 0.001), (63999, 0.001)]:
        assert _rate(rate, step) == pytest.approx(want, rel=1e-6), step


def test_cosine_schedule_matches_the_formula():
    rate = optimization.build_learning_rate(0.2, {"name": "cosine", "alpha": 0.1, "decay_steps": 0}, 100)
    for step in (0, 25, 50, 100, 150):
        t = min(step, 100) / 100
        want = 0.2 * ((1 - 0.1) * 0.5 * (1 + math.cos(math.pi * t)) + 0.1)
        assert _rate(rate, step) == pytest.approx(want, rel=1e-5), step


def test_constant_and_plateau():
    assert optimization.build_learning_rate(0.3, {"name": "constant"}, 10) == 0.3
    assert optimization.build_learning_rate(0.3, {"name": "plateau"}, 10) == 0.3
    (callback,) = optimization.schedule_callbacks({"name": "plateau", "decay_factor": 0.5, "patience": 2})
    assert isinstance(callback, keras.callbacks.ReduceLROnPlateau)
    assert callback.factor == 0.5 and callback.patience == 2
    assert optimization.schedule_callbacks({"name": "cosine"}) == []


def test_sgd_nesterov_and_adamw_options_reach_the_optimizer():
    sgd = optimization.build_optimizer({"name": "sgd", "momentum": 0.9, "nesterov": True}, 0.1)
    assert isinstance(sgd, keras.optimizers.SGD) and sgd.momentum == 0.9 and sgd.nesterov
    adamw = optimization.build_optimizer({"name": "adamw", "weight_decay": 5e-4}, 1e-3)
    assert isinstance(adamw, keras.optimizers.AdamW) and adamw.weight_decay == 5e-4


@pytest.mark.parametrize("train,data_steps,want", [
    ({"steps": 0, "steps_per_epoch": 0, "epochs": 3}, 390, (390, 3)),
    ({"steps": 0, "steps_per_epoch": 7, "epochs": 2}, 390, (7, 2)),
    ({"steps": 64000, "steps_per_epoch": 0, "epochs": 1}, 390, (320, 200)),  # 64000 = 2^9·5^3: largest divisor <= 390 is 320
    ({"steps": 10, "steps_per_epoch": 5, "epochs": 1}, 390, (5, 2)),
])
def test_run_length(train, data_steps, want):
    assert classifier.run_length(train, data_steps) == want


def test_steps_not_a_multiple_of_steps_per_epoch():
    with pytest.raises(ValueError, match="train.steps=10 is not a multiple of train.steps_per_epoch=4"):
        classifier.run_length({"steps": 10, "steps_per_epoch": 4}, 100)


# -- two-step runs: heads, regularizers, paradigms ----------------------------------------------------------------

def _recomputed_accuracy(workdir, config):
    """Percent accuracy of the saved model on the test split, from `model.evaluate` of the saved file."""
    model = keras.models.load_model(os.path.join(workdir, "checkpoints", "model.keras"))
    assert layers.model_normalization(model) == (config["data"].get("normalization", "centered_128"), None)
    # Raw pixels: the saved model's first layer normalises them.
    _, test_ds, _ = data_lib.get_datasets(config["data"]["name"], batch_size=4, manual_dir=config["data"]["manual_dir"],
                                          normalize=False)
    if models_lib.needs_labels(model):
        test_ds = test_ds.map(lambda x, y: (models_lib.pack_inputs(x, y), y))
    predictions, labels = [], []
    for x, y in test_ds:
        predictions.append(np.argmax(keras.ops.convert_to_numpy(model(x, training=False)), axis=1))
        labels.append(y.numpy())
    return 100.0 * float(np.mean(np.concatenate(predictions) == np.concatenate(labels))), model


RUNS = {
    "asoftmax_annealed_sphereface_plus": dict(
        model={"head": {"layer": "margin", "loss_type": "asoftmax", "annealing": "mnist"}},
        loss={"data_dependent_mhe": 1.0}),
    "lsoftmax": dict(model={"head": {"layer": "margin", "loss_type": "lsoftmax", "margin": 2}}),
    "wsoftmax": dict(model={"head": {"layer": "margin", "loss_type": "wsoftmax"}}),
    "gasoftmax": dict(model={"head": {"layer": "margin", "loss_type": "gasoftmax"}}),
    "ssoftmax": dict(model={"head": {"layer": "margin", "loss_type": "ssoftmax"}}),
    "cosface_cosine": dict(model={"head": {"layer": "margin", "loss_type": "cosface"}},
                           schedule={"name": "cosine"}),
    "arcface_step": dict(model={"head": {"layer": "margin", "loss_type": "arcface"}},
                         optimizer={"name": "sgd", "learning_rate": 0.01, "momentum": 0.9, "nesterov": True},
                         schedule={"name": "step", "boundaries": [1]}),
    "combined_plateau": dict(model={"head": {"layer": "margin", "loss_type": "combined"}},
                             schedule={"name": "plateau", "patience": 0}),
    "mhe_orthogonality_weight_decay_projection": dict(
        regularizers=[{"name": "mhe", "layers": "conv*", "half_space": True},
                      {"name": "orthogonality", "layers": "fc*"},
                      {"name": "mhe", "layers": "logits", "role": "output"}],
        paradigm={"weight_projection_every": 1}),
    "comhe_weighted_gradients_adamw": dict(
        model={"operator": {"layer": "decoupled", "magnitude": "tanh", "angular": "cosine"}},
        regularizers=[{"name": "comhe", "layers": "conv*"}, {"name": "weight_decay", "layers": "logits"}],
        paradigm={"weighted_gradients": True}, optimizer={"name": "adamw", "learning_rate": 0.01}),
    "srip_authors_schedule": dict(regularizers=[{"name": "srip", "layers": ["conv*", "fc*"], "schedule": "authors"}]),
    "opt_sopt": dict(model={"operator": {"layer": "opt", "stochastic_dims": 2}},
                     paradigm={"opt_optimizer": True, "sopt_episode_length": 1}),
}


@pytest.mark.parametrize("name", sorted(RUNS))
def test_two_step_run(name, mnist_dir, tmp_path):
    config = tiny_config(mnist_dir, **RUNS[name])
    workdir = str(tmp_path / name)
    results = classifier.train_and_evaluate(config, workdir)
    assert results["steps"] == 2 and len(results["history"]["loss"]) == 1
    assert np.isfinite(results["history"]["loss"][0]) and np.isfinite(results["test_loss"])
    with open(os.path.join(workdir, "results.json")) as f:
        assert json.load(f) == results
    accuracy, model = _recomputed_accuracy(workdir, config)
    assert results["test_accuracy"] == pytest.approx(accuracy, abs=1e-4)
    assert results["test_error"] == pytest.approx(100.0 - accuracy, abs=1e-4)
    assert int(model.optimizer.iterations) == 2
    assert _scalars(workdir, "epoch_learning_rate")
    heads = [layer for layer in model.layers if isinstance(layer, MarginHead)]
    # A margin head's training logits carry the margin: their accuracy is named for it.
    assert ("margin_accuracy" if heads else "accuracy") in results["history"]
    assert ("accuracy" if heads else "margin_accuracy") not in results["history"]
    if heads:
        assert _scalars(workdir, f"epoch_lambda/{heads[0].name}") == pytest.approx(
            [float(keras.ops.convert_to_numpy(heads[0].current_lambda()))])
    for entry in config.get("regularizers", []):
        assert entry["name"] in results["regularized_layers"].values()
    for layer in results["regularized_layers"]:
        assert len(_scalars(workdir, f"epoch_energy/{layer}")) == 1
    # results.json's history holds what TensorBoard shows, per epoch.
    history = results["history"]
    assert history["learning_rate"] == pytest.approx(_scalars(workdir, "epoch_learning_rate"))
    for head in heads:
        assert history[f"lambda/{head.name}"] == pytest.approx(_scalars(workdir, f"epoch_lambda/{head.name}"))
    for layer in results["regularized_layers"]:
        assert history[f"energy/{layer}"] == pytest.approx(_scalars(workdir, f"epoch_energy/{layer}"))
    if name.startswith("srip"):  # λ of epoch 1 under the authors' schedule (Bansal et al.'s code: 0.01)
        assert history["srip_factor"] == pytest.approx([0.01])


def test_step_schedule_rate_is_logged_after_the_boundary(mnist_dir, tmp_path):
    config = tiny_config(mnist_dir, optimizer={"name": "sgd", "learning_rate": 0.1},
                         schedule={"name": "step", "boundaries": [1], "decay_factor": 0.5},
                         train={"epochs": 2, "steps_per_epoch": 1})
    classifier.train_and_evaluate(config, str(tmp_path / "run"))
    # After 1 step the rate at step 1 is still 0.1 (step <= boundary); after 2 steps it is 0.05.
    assert _scalars(str(tmp_path / "run"), "epoch_learning_rate") == pytest.approx([0.1, 0.05])


def _scalars(workdir, tag, run="train"):
    """The per-epoch values of TensorBoard scalar `tag` in the run's `tensorboard/<run>` event files (`train`, or
    `validation` for the periodic test evaluation)."""
    values = {}
    for path in sorted(glob.glob(os.path.join(workdir, "tensorboard", run, "events.out.tfevents.*"))):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == tag:
                    values[event.step] = float(tf.make_ndarray(value.tensor))
    return [values[step] for step in sorted(values)]


def test_cifar_mixed_bfloat16(tmp_path):
    folder = str(tmp_path / "cifar")
    os.makedirs(folder)
    archive_writers.write_cifar10(folder, per_batch=2, n_test=3)
    config = tiny_config(folder, name="cifar10", data={"augmentation": "cifar_plus"},
                         mixed_precision="mixed_bfloat16", train={"steps_per_epoch": 2})
    results = classifier.train_and_evaluate(config, str(tmp_path / "run"))
    assert np.isfinite(results["test_loss"])
    assert keras.mixed_precision.global_policy().name == "float32"  # restored after the run


def test_data_source_auto():
    assert classifier.data_kwargs({**classifier.DEFAULTS["data"], "data_dir": "/t"})["source"] == "tfds"
    kwargs = classifier.data_kwargs({**classifier.DEFAULTS["data"], "manual_dir": "/m"})
    assert kwargs["source"] == "manual" and kwargs["manual_dir"] == "/m" and kwargs["data_dir"] is None


def test_attach_puts_the_penalty_on_the_matched_kernels_only():
    model = models_lib.create_model("small_cnn", input_shape=(8, 8, 1), num_classes=3, widths=[2], convs_per_stage=1,
                                    dense_units=4)
    attached = regularization.attach(model, [{"name": "weight_decay", "layers": ["logits"], "factor": 0.5}])
    assert attached == {"logits": "weight_decay"}
    kernel = keras.ops.convert_to_numpy(model.get_layer("logits").kernel)
    (penalty,) = [float(keras.ops.convert_to_numpy(loss)) for loss in model.losses]
    assert penalty == pytest.approx(0.5 * float(np.sum(kernel.astype(np.float64) ** 2)), rel=1e-5)
    with pytest.raises(ValueError, match=r"regularizers\[0\].layers=\['conv9\*'\] matches no layer"):
        regularization.attach(model, [{"name": "mhe", "layers": "conv9*"}])


def test_initialise_from_a_pretrained_run(mnist_dir, tmp_path):
    """A DCNet run starts from a finished CNN run's kernels [Decoupled Networks, CVPR 2018, §4.3]."""
    cnn = str(tmp_path / "cnn")
    classifier.train_and_evaluate(tiny_config(mnist_dir), cnn)
    source = keras.models.load_model(classifier.pretrained_model_path(cnn))
    # A vanishing learning rate keeps the copied kernels as they were.
    config = tiny_config(mnist_dir, model={"operator": {"layer": "decoupled", "magnitude": "linear",
                                                        "angular": "cosine"}},
                         optimizer={"name": "sgd", "learning_rate": 1e-30}, paradigm={"pretrained": cnn})
    dcnet = str(tmp_path / "dcnet")
    classifier.train_and_evaluate(config, dcnet)
    target = keras.models.load_model(classifier.pretrained_model_path(dcnet))
    for name in ("conv1_1", "fc", "logits"):
        np.testing.assert_allclose(keras.ops.convert_to_numpy(target.get_layer(name).kernel),
                                   keras.ops.convert_to_numpy(source.get_layer(name).kernel), rtol=1e-6)


def test_per_class_top5_and_minority_errors_are_recorded(mnist_dir, tmp_path):
    """`test_per_class_error` (every run), `test_top5_error` (10 classes > 5) and `test_minority_error` (the
    config names minority classes) match explicit counting over the saved model's test predictions."""
    config = tiny_config(mnist_dir, evaluation={"minority_classes": [0, 3]})
    workdir = str(tmp_path / "rates")
    results = classifier.train_and_evaluate(config, workdir)
    with open(os.path.join(workdir, "results.json")) as f:
        assert json.load(f) == results
    model = keras.models.load_model(os.path.join(workdir, "checkpoints", "model.keras"))
    _, test_ds, _ = data_lib.get_datasets("mnist", batch_size=4, manual_dir=mnist_dir, normalize=False)  # raw: the model normalises
    labels, scores = [], []
    for x, y in test_ds:
        scores.append(keras.ops.convert_to_numpy(model(x, training=False)))
        labels.append(y.numpy())
    labels, scores = np.concatenate(labels), np.concatenate(scores)
    predictions = scores.argmax(axis=1)
    per_class = results["test_per_class_error"]
    assert len(per_class) == 10
    for c in range(10):
        members = [i for i in range(len(labels)) if labels[i] == c]
        if not members:  # 6 test images: most classes have none, and say so with null
            assert per_class[c] is None
        else:
            wrong = sum(1 for i in members if predictions[i] != c)
            assert per_class[c] == pytest.approx(100.0 * wrong / len(members), abs=1e-4)
    minority = [i for i in range(len(labels)) if labels[i] in (0, 3)]
    if minority:
        wrong = sum(1 for i in minority if predictions[i] != labels[i])
        assert results["test_minority_error"] == pytest.approx(100.0 * wrong / len(minority), abs=1e-4)
    else:
        assert results["test_minority_error"] is None
    top5_wrong = sum(1 for i in range(len(labels)) if np.sum(scores[i] > scores[i, labels[i]]) >= 5)
    assert results["test_top5_error"] == pytest.approx(100.0 * top5_wrong / len(labels), abs=1e-4)
    assert "test_minority_error" not in classifier.train_and_evaluate(tiny_config(mnist_dir), str(tmp_path / "b"))


def test_precise_bn_statistics_are_recorded(mnist_dir, tmp_path, caplog):
    """Two steps leave BN's averages young: 'auto' recomputes them over one pass (16 images / 4 = 4 batches),
    the saved model holds them, and `model.bn_momentum` reaches every BN layer; 0 keeps them, with a warning."""
    config = tiny_config(mnist_dir, model={"bn_momentum": 0.9})
    results = classifier.train_and_evaluate(config, str(tmp_path / "auto"))
    assert results["bn_statistics"] == "precise (4 batches)"
    accuracy, model = _recomputed_accuracy(str(tmp_path / "auto"), config)
    assert results["test_accuracy"] == pytest.approx(accuracy, abs=1e-4)
    bns = [layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization)]
    assert bns and all(layer.momentum == 0.9 for layer in bns)

    config = tiny_config(mnist_dir, evaluation={"precise_bn_batches": 0})
    with caplog.at_level("WARNING"):
        results = classifier.train_and_evaluate(config, str(tmp_path / "off"))
    assert results["bn_statistics"] == "moving_average"
    assert "moving averages are young after 2 steps" in caplog.text
    with pytest.raises(ValueError, match="evaluation.precise_bn_batches"):
        classifier.validate(tiny_config(mnist_dir, evaluation={"precise_bn_batches": "all"}))
