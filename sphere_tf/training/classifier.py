"""Config-driven train-and-evaluate loop for image classifiers (no flags here).

The trainers in `trainers/` are thin absl mains around `train_and_evaluate`.
The config schema (every section and key, with defaults) is `DEFAULTS`; the
documentation is docs/runner.md. A config may leave keys out (their defaults
apply) but any key not in the schema, or a bad value, fails in `validate`
before any data is read, naming the dotted key and the valid choices.
"""

import collections
import copy
import functools
import inspect
import json
import os
import shutil
import sys
import time

import keras
from absl import logging

from sphere_tf import callbacks as callbacks_lib
from sphere_tf import data as data_lib
from sphere_tf import export as export_lib
from sphere_tf import json_files
from sphere_tf import losses as losses_lib
from sphere_tf import models as models_lib
from sphere_tf import optimizers as optimizers_lib
from sphere_tf import regularizers as regularizers_lib
from sphere_tf import validation
from sphere_tf.data import datasets as datasets_lib
from sphere_tf.data import preprocessing
from sphere_tf.models import blocks
from sphere_tf.training import checkpoint as checkpoint_lib
from sphere_tf.training import distribute
from sphere_tf.training import model as sphere_model_lib
from sphere_tf.training import optimization
from sphere_tf.training import precise_bn
from sphere_tf.training import pretrain
from sphere_tf.training import progress
from sphere_tf.training import regularization

MIXED_PRECISION = ("float32", "mixed_float16", "mixed_bfloat16")
# `train.verbose`: Keras's `fit` values, or 'auto' (the bar on a terminal, `progress.EpochLogger` otherwise).
FIT_VERBOSITY = ("auto", 0, 1, 2)
# The schema: every section, every key, its default. `model` holds the model
# function's keyword arguments (checked against its signature) besides `name`.
DEFAULTS = {
    "seed": 0,
    "data": {
        "name": "fashion_mnist", "source": "auto", "manual_dir": "", "data_dir": "", "augmentation": "none",
        "eval_augmentation": "", "normalization": "centered_128", "train_limit": 0, "test_limit": 0,
        "label_mode": "fine", "val_labels_file": "", "class_limits": [],
    },
    "model": {"name": "small_cnn"},
    "loss": {"label_smoothing": 0.0, "data_dependent_mhe": 0.0},
    "regularizers": [],
    "paradigm": {
        "weight_projection_every": 0, "projection_scale": sphere_model_lib.DEFAULT_PROJECTION_SCALE,
        "weighted_gradients": False, "pretrained": "", "pretrained_match": "position",
        "opt_optimizer": False, "sopt_episode_length": 0,
    },
    "optimizer": {"name": "adam", "learning_rate": 1e-3},
    "schedule": {
        "name": "constant", "boundaries": [], "decay_factor": 0.1, "decay_steps": 0, "alpha": 0.0,
        "patience": 10, "min_lr": 0.0, "monitor": "loss",
    },
    "train": {
        "batch_size": 128, "epochs": 1, "steps": 0, "steps_per_epoch": 0, "checkpoint_every_steps": 0,
        "verbose": "auto", "energy_every_epochs": 1,
    },
    "evaluation": {"precise_bn_batches": "auto"},
    "mixed_precision": "float32",
    "strategy": "auto",
    "export": True,
    "export_class_matrix": True,
}
# The runner's own key of a margin head spec (`model.head`), besides the head layer's arguments: split the class
# axis over the devices (see `_partial_fc_plan`).
SHARD_CLASSES_KEY = "shard_classes"
# The model variables' mesh axis of a class-sharded head on JAX (`keras.distribution`).
SHARD_AXIS = "devices"
# Sections with free-form keys: the model function's and the optimizer class's keyword arguments.
_OPEN_SECTIONS = ("model", "optimizer")
_EMPTY_IS_NONE = ("manual_dir", "data_dir", "eval_augmentation", "val_labels_file")


class ConfigError(ValueError):
    """A bad config: an unknown key or a bad value, named in the message (which is complete: the trainers
    print it alone, without a traceback)."""


def config_errors(check):
    """Decorates a config check so that each `ValueError` it raises becomes a `ConfigError` (same message)."""

    @functools.wraps(check)
    def checked(*args, **kwargs):
        try:
            return check(*args, **kwargs)
        except ConfigError:
            raise
        except ValueError as error:
            raise ConfigError(str(error)) from None

    return checked


def plain_config(value):
    """ConfigDict / FrozenConfigDict / nested tuples -> plain dicts and lists."""
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    if isinstance(value, dict):
        return {k: plain_config(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_config(v) for v in value]
    return value


def merge_config(defaults, config, open_sections=_OPEN_SECTIONS, replaced_sections=(), prefix=""):
    """`config` over the schema `defaults`; a key the schema does not have raises, naming it and the valid ones.

    Args:
        defaults: dict, the schema with its defaults (nested dicts are sections).
        config: dict (plain, see `plain_config`).
        open_sections: top-level sections with free-form keys, merged key by key over their defaults
            unchecked (the caller checks them: a model's or optimizer's keyword arguments).
        replaced_sections: top-level sections a config replaces whole.
        prefix: the dotted path of `defaults` in the whole config (for messages).

    Returns:
        dict, the merged config.
    """
    merged = copy.deepcopy(defaults)
    for key, value in config.items():
        dotted = f"{prefix}{key}"
        if key not in defaults:
            raise ValueError(f"Unknown config key {dotted!r}; expected one of {sorted(defaults)}."
                             + validation.did_you_mean(key, defaults))
        if isinstance(defaults[key], dict):
            if not isinstance(value, dict):
                raise validation.invalid_argument(dotted, "a dict", value)
            if not prefix and key in replaced_sections:
                merged[key] = dict(value)
            elif not prefix and key in open_sections:
                merged[key] = {**defaults[key], **value}
            else:
                merged[key] = merge_config(defaults[key], value, prefix=dotted + ".")
        else:
            merged[key] = value
    return merged


def _check_model(model_cfg):
    model_cfg = dict(model_cfg)
    name = model_cfg.pop("name", None)
    fn = models_lib.get_model_fn(name)
    if model_cfg.get("bn_momentum") is not None:  # create_model's own argument
        validation.real(model_cfg.pop("bn_momentum"), "model.bn_momentum", low=0.0, high=1.0, high_open=True)
    parameters = inspect.signature(fn).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        valid = sorted(k for k in parameters if k not in ("input_shape", "num_classes"))
        for key in model_cfg:
            if key not in parameters or key in ("input_shape", "num_classes"):
                raise ValueError(f"Unknown config key 'model.{key}' for model {name!r}; expected one of {valid}."
                                 + validation.did_you_mean(key, valid))
    for key in ("operator", "shortcut_operator", "fc_operator", "stem_operator"):
        if model_cfg.get(key) is not None:
            models_lib.operators.validate_operator(model_cfg[key], f"model.{key}")
    head = model_cfg.get("head")
    if head is not None:
        head = _check_partial_fc(head)
        blocks.make_head(head, max(2, head.get("num_shards", 1)))
    return fn


def _check_partial_fc(head):
    """Checks the Partial FC keys of the head spec `model.head` (`sample_rate`, `num_shards`, `seed` and the
    runner's `shard_classes`), naming the dotted key; returns the spec without `shard_classes`."""
    head = dict(head)
    shard = head.pop(SHARD_CLASSES_KEY, False)
    partial_keys = sorted(set(head) & set(blocks.PARTIAL_FC_DEFAULTS))
    if head.get("layer", "dense") != "margin" and (partial_keys or shard is not False):
        key = partial_keys[0] if partial_keys else SHARD_CLASSES_KEY
        raise ValueError(f"Invalid config key 'model.head.{key}': Partial FC sampling and class sharding need a "
                         f"margin head (model.head.layer='margin'); the head is {head.get('layer', 'dense')!r}.")
    if shard is not False and shard is not True:
        validation.positive_int(shard, f"model.head.{SHARD_CLASSES_KEY}")
    validation.unit_interval(head.get("sample_rate", 1.0), "model.head.sample_rate")
    validation.positive_int(head.get("num_shards", 1), "model.head.num_shards")
    validation.integer(head.get("seed"), "model.head.seed", minimum=0, allow_none=True)
    return head


def _shard_classes(model_cfg):
    """`model.head.shard_classes`: False, True (every device / replica) or a device count."""
    head = model_cfg.get("head")
    return head.get(SHARD_CLASSES_KEY, False) if isinstance(head, dict) else False


def _is_partial_fc(model_cfg):
    """True when the run trains a `PartialFCHead`: `model.head.sample_rate` < 1, or class sharding asked for
    (`shard_classes`), or `num_shards` > 1."""
    head = model_cfg.get("head")
    return _shard_classes(model_cfg) is not False or blocks.is_partial_fc(head)


def _probe_model(config):
    """Builds the configured model once on the data set's shapes (no data read), so a model option a
    `**kwargs` model function passes on is checked too; the probe is discarded."""
    spec = datasets_lib.DATASETS[config["data"]["name"]]
    input_shape = spec.input_shape or (preprocessing.IMAGENET_CROP, preprocessing.IMAGENET_CROP, 3)
    model_cfg = _model_kwargs(config["model"])
    name = model_cfg.pop("name")
    try:
        models_lib.create_model(name, input_shape=input_shape, num_classes=spec.num_classes, **model_cfg)
    except TypeError as error:
        raise ValueError(f"Invalid config key in 'model' for model {name!r}: {error}") from None


def _model_kwargs(model_cfg, num_shards=None):
    """The `create_model` arguments of `model` (with `name`): the head spec without the runner's
    `shard_classes`, and with `num_shards` when given (the resolved block count of a Partial FC head)."""
    model_cfg = dict(model_cfg)
    head = model_cfg.get("head")
    if isinstance(head, dict):
        head = {k: v for k, v in head.items() if k != SHARD_CLASSES_KEY}
        if num_shards is not None:
            head["num_shards"] = num_shards
        model_cfg["head"] = head
    return model_cfg


def _is_margin_head(model_cfg):
    head = model_cfg.get("head")
    return isinstance(head, dict) and head.get("layer") == "margin"


def _training_accuracy(model_cfg):
    """The training accuracy metric, named for what it measures: in training a margin head's logits carry the
    margin on the target class (ArcFace's cos(θ + m)), so their argmax is `margin_accuracy`, below the plain
    logits' accuracy that the test evaluation (inference: no margin) reports."""
    name = "margin_accuracy" if _is_margin_head(model_cfg) else "accuracy"
    return keras.metrics.SparseCategoricalAccuracy(name=name)


@config_errors
def validate(config):
    """Checks the whole config before any data is read; returns it as plain dicts with defaults filled in.

    Raises:
        ConfigError (a ValueError): an unknown key or a bad value, naming the dotted key (and
            the valid choices for registry names: data sets, augmentations,
            normalisations, models, operators, heads, regularizers,
            optimizers, schedules, strategies, precisions).
    """
    config = merge_config(DEFAULTS, plain_config(config))
    validation.integer(config["seed"], "seed", minimum=0)
    data = config["data"]
    validation.one_of(data["name"], "data.name", tuple(sorted(datasets_lib.DATASETS)))
    validation.one_of(data["source"], "data.source", ("auto",) + datasets_lib.SOURCES)
    if data["source"] == "manual" and data["data_dir"]:
        raise validation.invalid_argument(
            "data.data_dir", "'' with data.source='manual' (the archives' folder is data.manual_dir; data_dir is a "
            "tensorflow-datasets folder, read with source='tfds' or 'auto')", data["data_dir"])
    if data["source"] == "tfds" and data["manual_dir"] and data["name"] != "imagenet2012":
        raise validation.invalid_argument(
            "data.manual_dir", "'' with data.source='tfds' (the prepared data are in data.data_dir)",
            data["manual_dir"])
    validation.one_of(data["augmentation"], "data.augmentation", tuple(sorted(preprocessing.AUGMENTATIONS)))
    if data["eval_augmentation"]:
        validation.one_of(data["eval_augmentation"], "data.eval_augmentation", tuple(sorted(preprocessing.AUGMENTATIONS)))
    validation.one_of(data["normalization"], "data.normalization", tuple(sorted(preprocessing.NORMALIZATIONS)))
    validation.one_of(data["label_mode"], "data.label_mode", ("fine", "coarse"))
    validation.integer(data["train_limit"], "data.train_limit", minimum=0)
    validation.integer(data["test_limit"], "data.test_limit", minimum=0)
    classes = 20 if data["label_mode"] == "coarse" else datasets_lib.DATASETS[data["name"]].num_classes
    datasets_lib.check_class_limits(data["class_limits"], classes, "data.class_limits")

    _check_model(config["model"])
    loss = config["loss"]
    validation.real(loss["label_smoothing"], "loss.label_smoothing", low=0.0, high=1.0, high_open=True)
    validation.non_negative_float(loss["data_dependent_mhe"], "loss.data_dependent_mhe")
    if loss["data_dependent_mhe"] and not _is_margin_head(config["model"]):
        raise validation.invalid_argument("loss.data_dependent_mhe", "0 unless model.head is a margin head",
                                          loss["data_dependent_mhe"])
    if not isinstance(config["regularizers"], list):
        raise validation.invalid_argument("regularizers", "a list of dicts", config["regularizers"])
    for index, entry in enumerate(config["regularizers"]):
        regularization.build_regularizer(entry, index)

    paradigm = config["paradigm"]
    validation.integer(paradigm["weight_projection_every"], "paradigm.weight_projection_every", minimum=0)
    validation.positive_float(paradigm["projection_scale"], "paradigm.projection_scale")
    validation.one_of(paradigm["weighted_gradients"], "paradigm.weighted_gradients", (True, False))
    validation.one_of(paradigm["opt_optimizer"], "paradigm.opt_optimizer", (True, False))
    validation.integer(paradigm["sopt_episode_length"], "paradigm.sopt_episode_length", minimum=0)
    if paradigm["pretrained"] and not os.path.isfile(pretrained_model_path(paradigm["pretrained"])):
        raise validation.invalid_argument(
            "paradigm.pretrained", f"the workdir of a finished run (expected {pretrained_model_path('WORKDIR')})",
            paradigm["pretrained"])
    if not isinstance(paradigm["pretrained_match"], dict):
        validation.one_of(paradigm["pretrained_match"], "paradigm.pretrained_match", ("position", "name"))

    train = config["train"]
    validation.positive_int(train["batch_size"], "train.batch_size")
    validation.positive_int(train["epochs"], "train.epochs")
    for key in ("steps", "steps_per_epoch", "checkpoint_every_steps"):
        validation.integer(train[key], f"train.{key}", minimum=0)
    validation.positive_int(train["energy_every_epochs"], "train.energy_every_epochs")
    validation.one_of(train["verbose"], "train.verbose", FIT_VERBOSITY)
    total = train["steps"] or train["epochs"] * max(train["steps_per_epoch"], 1)
    rate = optimization.build_learning_rate(config["optimizer"].get("learning_rate"), config["schedule"], total)
    optimization.build_optimizer(config["optimizer"], rate)
    optimization.schedule_callbacks(config["schedule"])
    batches = config["evaluation"]["precise_bn_batches"]
    if batches != "auto":
        validation.integer(batches, "evaluation.precise_bn_batches", minimum=0)
    validation.one_of(config["mixed_precision"], "mixed_precision", MIXED_PRECISION)
    validation.one_of(config["strategy"], "strategy", distribute.STRATEGIES)
    validation.one_of(config["export_class_matrix"], "export_class_matrix", (True, False))
    if _is_partial_fc(config["model"]):
        _check_partial_fc_run(config)
    _probe_model(config)
    return config


def _check_partial_fc_run(config):
    """What a Partial FC head (sampled or sharded) does not combine with, named by config key."""
    if config["loss"]["label_smoothing"]:
        raise validation.invalid_argument(
            "loss.label_smoothing", "0 with a Partial FC head (model.head.sample_rate < 1 or shard_classes: the "
            "head computes its own sampled softmax cross-entropy)", config["loss"]["label_smoothing"])
    paradigm = config["paradigm"]
    for key in ("opt_optimizer", "weighted_gradients", "weight_projection_every"):
        if paradigm[key]:
            raise validation.invalid_argument(
                f"paradigm.{key}", "off with a Partial FC head (model.head.sample_rate < 1 or shard_classes: its "
                "optimizer is sphere_tf.optimizers.PartialFCOptimizer around the configured one)", paradigm[key])


PartialFCPlan = collections.namedtuple("PartialFCPlan", ["num_shards", "devices", "distribution"])
PartialFCPlan.__doc__ = """How a run trains its Partial FC head (`_partial_fc_plan`).

Attributes:
    num_shards: int, the head's class blocks (`model.head.num_shards`, by default the devices or replicas
        when sharded, else 1).
    devices: int, the devices the class axis is split over (JAX) or the replicas that each sample the same
        blocks (TensorFlow); 1 when not sharded.
    distribution: a `keras.distribution.ModelParallel` (JAX, sharded) or None.
"""


# Where a run records its Partial FC head's resolved block count (`checkpoints/train/`), so a resume on another
# device count keeps it.
PARTIAL_FC_FILE = "partial_fc.json"


def _recorded_num_shards(state_dir):
    path = os.path.join(state_dir, PARTIAL_FC_FILE)
    if not os.path.isfile(path):
        return None
    with open(path) as f:
        return int(json.load(f)["num_shards"])


@config_errors
def _partial_fc_plan(config, strategy, recorded_num_shards=None):
    """The `PartialFCPlan` of a validated config on this backend and `strategy`, or None (no Partial FC head).

    `model.head.shard_classes`: on JAX, `keras.distribution.ModelParallel` over a 1-D mesh of that many devices
    (True: every device of `keras.distribution.list_devices()`), the batch split over it and the head's class
    axis split by `sphere_tf.layers.class_sharding_layout`; on TensorFlow, the `tf.distribute` strategy's
    replicas, each holding the whole head and sampling the same blocks (`PartialFCHead`'s data parallelism);
    PyTorch has neither. Checked here, before any data is read: the device count, `num_shards` (a multiple of
    the devices on JAX) and `train.batch_size` (divisible by the devices on JAX).

    Without `model.head.num_shards` the blocks are one per device (or replica), unless the workdir's run
    recorded its count (`recorded_num_shards`): a resumed run keeps the blocks, and so the samples, it started
    with, on any device count that divides them.
    """
    model_cfg = config["model"]
    if not _is_partial_fc(model_cfg):
        return None
    head = model_cfg["head"]
    shard = _shard_classes(model_cfg)
    key = f"model.head.{SHARD_CLASSES_KEY}"
    backend = keras.backend.backend()
    if shard is False:
        return PartialFCPlan(head.get("num_shards", recorded_num_shards or 1), 1, None)
    if backend == "tensorflow":
        replicas = int(strategy.num_replicas_in_sync)
        if shard is not True and shard != replicas:
            raise validation.invalid_argument(
                key, f"True or the replica count of strategy {config['strategy']!r} ({replicas}): on TensorFlow "
                "each replica of the strategy holds the head and samples the same class blocks", shard)
        return PartialFCPlan(head.get("num_shards", recorded_num_shards or replicas), replicas, None)
    if backend != "jax":
        raise validation.invalid_argument(
            key, f"False on Keras backend {backend!r} (class sharding runs on JAX through keras.distribution and "
            "on TensorFlow through tf.distribute)", shard)
    from keras import distribution as kd  # noqa: PLC0415
    from sphere_tf import layers  # noqa: PLC0415 (the package imports training)

    available = kd.list_devices()
    count = len(available) if shard is True else shard
    if count > len(available):
        raise validation.invalid_argument(
            key, f"True or a device count of at most {len(available)} (the devices of keras.distribution."
            "list_devices() here)", shard)
    num_shards = head.get("num_shards", recorded_num_shards or count)
    if num_shards % count:
        recorded = "" if "num_shards" in head else f" (the workdir's run started with {num_shards} blocks)"
        raise validation.invalid_argument(
            "model.head.num_shards", f"a multiple of the {count} devices the classes are split over (each device "
            f"samples its own whole blocks){recorded}", num_shards)
    batch_size = config["train"]["batch_size"]
    if batch_size % count:
        raise validation.invalid_argument(
            "train.batch_size", f"a multiple of the {count} devices the batch is split over (model.head."
            f"{SHARD_CLASSES_KEY})", batch_size)
    mesh = kd.DeviceMesh((count,), (SHARD_AXIS,), available[:count])
    layout_map = layers.class_sharding_layout(kd.LayoutMap(mesh), head.get("name", "logits"), SHARD_AXIS)
    return PartialFCPlan(num_shards, count, kd.ModelParallel(layout_map=layout_map, batch_dim_name=SHARD_AXIS))


def pretrained_model_path(workdir):
    """The model file a run leaves in `workdir` (read by `paradigm.pretrained`)."""
    return os.path.join(workdir, "checkpoints", "model.keras")


def data_kwargs(data_cfg):
    """The `get_datasets` keyword arguments of the `data` section.

    '' means None; `source='auto'` is 'tfds' when `data_dir` is set, else 'manual'.
    """
    kwargs = {k: (None if k in _EMPTY_IS_NONE and v == "" else v) for k, v in data_cfg.items() if k != "name"}
    if kwargs["source"] == "auto":
        kwargs["source"] = "tfds" if kwargs["data_dir"] else "manual"
    return kwargs


def run_length(train_cfg, data_steps_per_epoch):
    """`(steps_per_epoch, epochs)` of a run from the `train` section.

    `train.steps` > 0 sets the budget in optimizer steps as the papers count
    iterations; the epochs are then log/evaluation intervals of
    `train.steps_per_epoch` steps (0: the largest divisor of `steps` not above
    one pass over the data). Otherwise `train.epochs` epochs of
    `train.steps_per_epoch` (0: one pass) steps.
    """
    steps, per_epoch = train_cfg["steps"], train_cfg["steps_per_epoch"]
    if steps:
        if not per_epoch:
            per_epoch = max(d for d in range(1, min(steps, data_steps_per_epoch) + 1) if steps % d == 0)
        if steps % per_epoch:
            raise ValueError(f"train.steps={steps} is not a multiple of train.steps_per_epoch={per_epoch}.")
        return per_epoch, steps // per_epoch
    return per_epoch or data_steps_per_epoch, train_cfg["epochs"]


class ScheduleLogger(keras.callbacks.Callback):
    """Adds `learning_rate` and each margin head's λ (`lambda/<layer>`) to the epoch logs (for TensorBoard)."""

    def __init__(self, heads=()):
        super().__init__()
        self.heads = list(heads)

    def on_epoch_end(self, epoch, logs=None):
        if logs is None:
            return
        logs["learning_rate"] = optimization.current_learning_rate(self.model.optimizer)
        for head in self.heads:
            logs[f"lambda/{head.name}"] = float(keras.ops.convert_to_numpy(head.current_lambda()))


def _build_model(config, info, plan=None):
    model_cfg = _model_kwargs(config["model"], None if plan is None else plan.num_shards)
    name = model_cfg.pop("name")
    if model_cfg.get("head") is not None:
        model_cfg["head"] = dict(model_cfg["head"])
        if config["loss"]["data_dependent_mhe"]:
            model_cfg["head"]["label_penalty"] = regularizers_lib.DataDependentMHE(
                factor=config["loss"]["data_dependent_mhe"])
        if plan is not None and model_cfg["head"].get("seed") is None:
            # One draw sequence for every process, device and resume: keyed by the run's seed.
            model_cfg["head"]["seed"] = config["seed"]
    model = models_lib.create_model(name, input_shape=info["input_shape"], num_classes=info["num_classes"],
                                    **model_cfg)
    paradigm = config["paradigm"]
    if paradigm["pretrained"]:
        source = keras.models.load_model(pretrained_model_path(paradigm["pretrained"]))
        pretrain.initialize_from_pretrained(model, source, match=paradigm["pretrained_match"], verbose=False)
    if paradigm["weight_projection_every"] or paradigm["weighted_gradients"]:
        model = sphere_model_lib.wrap(
            model, weight_projection_every=paradigm["weight_projection_every"] or None,
            projection_scale=paradigm["projection_scale"], weighted_gradients=paradigm["weighted_gradients"],
        )
    attached = regularization.attach(model, config["regularizers"])
    return model, attached


def _build_optimizer(config, total_steps, partial_fc=False):
    rate = optimization.build_learning_rate(config["optimizer"].get("learning_rate"), config["schedule"], total_steps)
    optimizer = optimization.build_optimizer(config["optimizer"], rate)
    if config["paradigm"]["opt_optimizer"]:
        optimizer = optimizers_lib.OPTOptimizer(optimizer)
    if partial_fc:  # unsampled classes keep their weights and slots (insightface v1, docs/partial_fc.md)
        optimizer = optimizers_lib.PartialFCOptimizer(optimizer)
    return optimizer


def _margin_heads(model):
    from sphere_tf import layers  # noqa: PLC0415 (the package imports training)

    return [layer for layer in model.layers if isinstance(layer, layers.MarginHead)]


def _recompute_batch_statistics(model, evaluation_cfg, batches, steps, batches_per_pass):
    """Precise BN before evaluation as `evaluation.precise_bn_batches` says; returns what `results.json` records
    as `bn_statistics`: 'precise (N batches)', 'moving_average' or 'none' (no BN or E{‖x‖} average).

    'auto' recomputes over min(200, one pass) training batches when a moving average is young
    (`precise_bn.young_averages`), and keeps well-converged averages; 0 never recomputes (warning when young).
    """
    if not precise_bn.tracked_layers(model):
        return "none"
    young = precise_bn.young_averages(model, steps)
    wanted = evaluation_cfg["precise_bn_batches"]
    if wanted == "auto":
        wanted = min(precise_bn.DEFAULT_BATCHES, batches_per_pass) if young else 0
    if not wanted:
        if young:
            name, momentum, needed = young[0]
            logging.warning(
                "%d moving averages are young after %d steps (e.g. %r: momentum %g wants >= %d): test accuracy "
                "may be far below the weights'. Set evaluation.precise_bn_batches (or model.bn_momentum).",
                len(young), steps, name, momentum, needed)
        return "moving_average"
    used = precise_bn.recompute_statistics(model, batches, wanted)
    print(f"Precise BN: recomputed the BN / E{{‖x‖}} statistics over {used} training batches.")
    return f"precise ({used} batches)"


def _export(model, model_path, export_base, config, info):
    """Writes the TF Serving folder `export/<model name>/<version>/` (the pipeline's normalisation in the graph);
    returns its path. On a backend other than TensorFlow the saved `model_path` (the final weights: saved at the
    last epoch's end, or after precise BN) is exported under TensorFlow in a child process."""
    kwargs = {"model_name": config["model"]["name"] or "model", "normalization": config["data"]["normalization"],
              "channel_mean": info.get("channel_mean"), "class_matrix": config["export_class_matrix"]}
    if keras.backend.backend() == "tensorflow":
        return export_lib.export_model(model, export_base, **kwargs).path
    return export_lib.export_model_file(model_path, export_base, **kwargs).path


def summary_lines(config, info, results, seconds, workdir):
    """The one-screen summary printed at the end of a run."""
    model_cfg = config["model"]
    head = model_cfg.get("head")
    head_name = "dense" if head is None else (head.get("loss_type") or head.get("layer"))
    return [
        "=" * 64,
        f"data        {config['data']['name']} ({info['train_size']} train / {info['test_size']} test, "
        f"augmentation {config['data']['augmentation']})",
        f"model       {model_cfg['name']}, operator {model_cfg.get('operator', 'default')}, head {head_name}",
        f"regularize  {[r['name'] + ':' + str(r['layers']) for r in config['regularizers']] or 'none'}",
        f"optimizer   {config['optimizer']['name']} lr {config['optimizer'].get('learning_rate')}, "
        f"schedule {config['schedule']['name']}",
        f"steps       {results['steps']} ({results['epochs']} epochs of {results['steps_per_epoch']})",
        f"test        accuracy {results['test_accuracy']:.2f}%  error {results['test_error']:.2f}%  "
        f"loss {results['test_loss']:.4f}",
        f"time        {seconds:.0f} s on Keras backend {results.get('backend', keras.backend.backend())}; "
        f"workdir {workdir}",
        "=" * 64,
    ]


@config_errors
def make_run_strategy(config):
    """The `tf.distribute` strategy of `config['strategy']` (checked first); on the JAX and PyTorch backends a
    `distribute.LocalStrategy` for 'auto' / 'one_device', and a `ConfigError` naming the backend otherwise.

    Create it before anything else in the program touches TensorFlow:
    `MultiWorkerMirroredStrategy` configures collective ops, which TensorFlow
    allows only at startup. `train_and_evaluate` does this itself; a main that
    also picks the CPU allocator creates the strategy first and passes it in.
    """
    name = merge_config(DEFAULTS, plain_config(config))["strategy"]
    validation.one_of(name, "strategy", distribute.STRATEGIES)
    return distribute.make_strategy(name)


def train_and_evaluate(config, workdir, strategy=None):
    """Trains the configured classifier, evaluates it on the test split, exports it.

    Writes to `workdir`: `config.json`, `checkpoints/train/` (the whole training
    state every `train.checkpoint_every_steps` steps, see
    `sphere_tf.training.checkpoint`), `checkpoints/model.keras` (each epoch),
    `tensorboard/` (loss, accuracy, learning rate, λ of margin heads,
    hyperspherical energy of regularized layers), `export/<model name>/<version>/`
    (SavedModel for TensorFlow Serving, `sphere_tf.export.export_model`) and `results.json` (`test_accuracy` and `test_error` in
    percent, `test_loss`, `history`, ...). An interrupted run continues from
    its latest checkpoint; a finished workdir is not trained again (its
    `results.json` is returned); a workdir written by a different config is
    refused, naming the differing keys.

    Under `MultiWorkerMirroredStrategy` every worker runs this with the same
    `workdir` (a shared folder); only the chief writes there, the others write
    their logs to `workdir/workertemp_<task>` and delete it at the end.

    Args:
        config: ConfigDict or dict following `DEFAULTS` (docs/runner.md).
        workdir: str, the output folder.
        strategy: optional `tf.distribute.Strategy` already made from
            `config['strategy']` (`make_run_strategy`); by default it is made
            here, before any other TensorFlow work.

    Returns:
        dict, the contents of `results.json`.

    Raises:
        ConfigError (a ValueError): a bad config (before any data is read).
        DataNotFoundError: the data set's files are missing (before anything is written).
        checkpoint.ConfigMismatchError: `workdir` holds another config's run.
    """
    started = time.time()
    if strategy is None:
        strategy = make_run_strategy(config)  # first: multi-worker collectives are configured at startup
    config = validate(config)
    chief = distribute.is_chief(strategy)
    train_cfg = config["train"]
    # 'auto': Keras's progress bar on a terminal; one line per epoch (no carriage returns) otherwise.
    verbose, epoch_lines = progress.resolve_fit_verbosity(train_cfg["verbose"], sys.stdout)
    state_dir = os.path.join(workdir, "checkpoints", "train")
    checkpoint_lib.check_workdir_config(workdir, config)
    plan = _partial_fc_plan(config, strategy, _recorded_num_shards(state_dir))
    results_path = os.path.join(workdir, "results.json")
    keras.utils.set_random_seed(config["seed"])

    data_cfg = config["data"]
    kwargs = data_kwargs(data_cfg)

    def load(initial_step):
        return data_lib.get_datasets(data_cfg["name"], batch_size=train_cfg["batch_size"], seed=config["seed"],
                                     initial_step=initial_step, **kwargs)

    # The data before anything is written: missing archives leave no workdir behind.
    train_ds, test_ds, info = load(0)
    if plan is not None and plan.distribution is not None and info["test_size"] % plan.devices:
        raise ConfigError(str(validation.invalid_argument(
            "data.test_limit", f"a test set size divisible by the {plan.devices} devices of model.head."
            f"{SHARD_CLASSES_KEY} (every evaluation batch is split over them; the test set has "
            f"{info['test_size']} images)", data_cfg["test_limit"])))
    if chief:
        checkpoint_lib.record_config(state_dir, config)
        checkpoint_lib.record_config(workdir, config)
        if plan is not None:
            json_files.write_json(os.path.join(state_dir, PARTIAL_FC_FILE), {"num_shards": plan.num_shards})
    # Where this process writes logs and files: `workdir` on the chief, `workdir/workertemp_<task>` elsewhere.
    local_dir = distribute.checkpoint_directory(workdir, strategy)
    steps_per_epoch, epochs = run_length(train_cfg, info["steps_per_epoch"])
    total_steps = steps_per_epoch * epochs
    if os.path.exists(results_path) and checkpoint_lib.latest_step(state_dir) == total_steps:
        with open(results_path) as f:
            results = json.load(f)
        print(f"{workdir} already holds a finished run (step {total_steps}); "
              f"test accuracy {results['test_accuracy']:.2f}%. Not training again.")
        return results
    logging.info("Data: %s", info)

    previous_policy = keras.mixed_precision.global_policy().name
    keras.mixed_precision.set_global_policy(config["mixed_precision"])
    previous_distribution = keras.distribution.distribution() if keras.backend.backend() == "jax" else None
    if plan is not None:
        print(f"Partial FC head: sample_rate {config['model']['head'].get('sample_rate', 1.0)}, "
              f"{plan.num_shards} class block(s)"
              + (f", classes sharded over {plan.devices} devices (keras.distribution)" if plan.distribution else "")
              + (f", {plan.devices} replicas" if plan.distribution is None and plan.devices > 1 else "") + ".")
    try:
        if plan is not None and plan.distribution is not None:
            # JAX: model, optimizer, checkpoints and every fit / evaluate step under the class-sharded layout.
            keras.distribution.set_distribution(plan.distribution)
        with strategy.scope():
            model, attached = _build_model(config, info, plan)
            if plan is None:
                model.compile(
                    optimizer=_build_optimizer(config, total_steps),
                    loss=losses_lib.SparseCrossentropy(label_smoothing=config["loss"]["label_smoothing"]),
                    metrics=[_training_accuracy(config["model"])],
                )
            else:  # the head adds its own (sampled) loss; its training logits are sampled columns: no metric
                model.compile(optimizer=_build_optimizer(config, total_steps, partial_fc=True), loss=None)
            model.optimizer.build(model.trainable_variables)  # its slots live on the strategy's devices
        model.summary(print_fn=logging.info)
        packed = models_lib.needs_labels(model)

        def pack(dataset):
            return dataset.map(lambda x, y: (models_lib.pack_inputs(x, y), y)) if packed else dataset

        def stream(step):
            return pack(train_ds if step == 0 else load(step)[0])

        heads = _margin_heads(model)
        run_callbacks = [ScheduleLogger(heads)] + optimization.schedule_callbacks(config["schedule"]) + epoch_lines
        run_callbacks.append(callbacks_lib.WarnOnSkippedNormMean())  # non-finite batches left out of E{‖x‖}
        if attached:
            run_callbacks.append(callbacks_lib.HypersphericalEnergy(
                layer_names=sorted(attached), frequency=train_cfg["energy_every_epochs"]))
        if config["paradigm"]["sopt_episode_length"]:
            run_callbacks.append(callbacks_lib.SOPTEpisodes(config["paradigm"]["sopt_episode_length"],
                                                            seed=config["seed"]))
        os.makedirs(os.path.join(local_dir, "checkpoints"), exist_ok=True)
        run_callbacks += [
            keras.callbacks.ModelCheckpoint(os.path.join(local_dir, "checkpoints", "model.keras")),
            keras.callbacks.TensorBoard(os.path.join(local_dir, "tensorboard")),
        ]
        resume_step = checkpoint_lib.latest_step(state_dir)
        if resume_step:  # said before training, not after
            print(f"Resumed from step {resume_step} of {total_steps} ({state_dir}).")
        fitted = checkpoint_lib.fit_resumable(
            model, stream, epochs=epochs, directory=state_dir, steps_per_epoch=steps_per_epoch,
            every_steps=train_cfg["checkpoint_every_steps"] or checkpoint_lib.DEFAULT_EVERY_STEPS,
            callbacks=run_callbacks, verbose=verbose,
        )
        bn_statistics = _recompute_batch_statistics(model, config["evaluation"], stream(0), total_steps,
                                                    info["steps_per_epoch"])
        if bn_statistics.startswith("precise") and chief:
            # The saved model is the evaluated and exported one.
            model.save(os.path.join(local_dir, "checkpoints", "model.keras"))
        if plan is not None:
            # Evaluation calls the head without sampling: plain logits over every class and their full
            # cross-entropy as the loss; the accuracy is now the plain-logit accuracy.
            with strategy.scope():
                model.compile(optimizer=model.optimizer, loss=None,
                              metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
        with distribute.distributed_fit(model):  # evaluate needs the multi-worker workarounds of fit
            test_loss, test_accuracy = model.evaluate(pack(test_ds), verbose=0)
        print(f"Test accuracy: {100 * test_accuracy:.2f}% (loss {test_loss:.4f}, {info['test_size']} images)")

        export_dir = None
        if config["export"] and chief:
            export_dir = _export(model, os.path.join(local_dir, "checkpoints", "model.keras"),
                                 os.path.join(workdir, "export"), config, info)
            print(f"SavedModel exported to {export_dir}")
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)
        if plan is not None and plan.distribution is not None:
            keras.distribution.set_distribution(previous_distribution)
    results = {
        "test_accuracy": 100.0 * float(test_accuracy),
        "test_error": 100.0 * (1.0 - float(test_accuracy)),
        "test_loss": float(test_loss),
        "steps": total_steps,
        "epochs": epochs,
        "steps_per_epoch": steps_per_epoch,
        "regularized_layers": attached,
        "bn_statistics": bn_statistics,
        "history": fitted["history"],
        "export_dir": export_dir,
        "backend": keras.backend.backend(),
    }
    if plan is not None:
        results["partial_fc"] = {"sample_rate": config["model"]["head"].get("sample_rate", 1.0),
                                 "num_shards": plan.num_shards, "devices": plan.devices,
                                 "sharded": plan.distribution is not None}
    if chief:
        json_files.write_json(results_path, results)
    else:
        shutil.rmtree(local_dir, ignore_errors=True)
    if distribute.in_multi_worker_mode(strategy):
        distribute.barrier(strategy)  # no worker leaves while the chief still exports and writes
    print("\n".join(summary_lines(config, info, results, time.time() - started, workdir)))
    return results


__all__ = ["DEFAULTS", "ConfigError", "ScheduleLogger", "config_errors", "data_kwargs", "make_run_strategy", "merge_config", "plain_config", "run_length", "summary_lines", "train_and_evaluate",
           "validate"]
