"""Config-driven train-and-evaluate loop for image classifiers (no flags here).

The trainers in `trainers/` are thin absl mains around `train_and_evaluate`.
The config schema (every section and key, with defaults) is `DEFAULTS` (defined, with how a config becomes a
model, an optimizer and the training callbacks, in `runners.recipe`, which needs no TensorFlow); the
documentation is docs/runner.md. A config may leave keys out (their defaults
apply) but any key not in the schema, or a bad value, fails in `validate`
before any data is read, naming the dotted key and the valid choices.
"""

import collections
import copy
import json
import os
import shutil
import sys
import time

import keras
from absl import logging
from keras import distribution as kd

from sphere_tf import callbacks as callbacks_lib
from sphere_tf import data as data_lib
from sphere_tf import dependencies
from sphere_tf import json_files
from sphere_tf import layers
from sphere_tf import losses as losses_lib
from sphere_tf import models as models_lib
from sphere_tf import saving
from sphere_tf import validation
from sphere_tf.data import datasets as datasets_lib
from sphere_tf.data import label_noise as label_noise_lib
from sphere_tf.data import normalization as normalization_lib
from sphere_tf.data import numpy_preprocessing
from sphere_tf.metrics import classification
from sphere_tf.models import blocks
from sphere_tf.training import checkpoint as checkpoint_lib
from sphere_tf.training import distribute
from sphere_tf.training import error_rates
from sphere_tf.training import optimization
from sphere_tf.training import progress
from sphere_tf.runners import recipe
from sphere_tf.runners import schema
from sphere_tf.runners import tasks
from sphere_tf.training import regularization
from sphere_tf.training import workdir_lock
from sphere_tf.runners.schema import DEFAULTS
from sphere_tf.runners.schema import FIT_VERBOSITY
from sphere_tf.runners.schema import MIXED_PRECISION
from sphere_tf.runners.schema import SHARD_CLASSES_KEY
from sphere_tf.runners.schema import ConfigError
from sphere_tf.runners.recipe import ScheduleLogger
from sphere_tf.runners.schema import config_errors
from sphere_tf.runners.schema import merge_config
from sphere_tf.runners.schema import plain_config
from sphere_tf.runners.recipe import pretrained_model_path
from sphere_tf.runners.recipe import run_length

# The model variables' mesh axis of a class-sharded head on JAX (`keras.distribution`).
SHARD_AXIS = "devices"
# `data` keys where '' means None (`data_kwargs`).
_EMPTY_IS_NONE = ("manual_dir", "data_dir", "eval_augmentation", "val_labels_file")


def _check_model(model_cfg):
    model_cfg = dict(model_cfg)
    name = model_cfg.pop("name", None)
    try:
        fn = models_lib.get_model_fn(name)
    except (ValueError, TypeError) as error:  # the registry's "Unknown model ..." names the registry, not the key
        raise ValueError(f"Invalid config key 'model.name': {error}") from None
    if model_cfg.get("bn_momentum") is not None:  # create_model's own argument
        validation.real(model_cfg.pop("bn_momentum"), "model.bn_momentum", low=0.0, high=1.0, high_open=True)
    # Every option the builder takes, through the functions its `**kwargs` go on to: checked here without
    # building a model (the run builds its one model later). None: a user builder whose `**kwargs` go where the
    # registry was not told; its options are checked when the model is built.
    valid = models_lib.model_options(name)
    if valid is not None:
        for key in model_cfg:
            if key not in valid:
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


def _check_periodic_evaluation(evaluation_cfg, train_cfg):
    """`evaluation.eval_every_steps` and `evaluation.select_best`, as far as they can be checked before the data
    is read (the epoch length may come from the data: then `train_and_evaluate` checks the multiple)."""
    every = validation.integer(evaluation_cfg["eval_every_steps"], "evaluation.eval_every_steps", minimum=0)
    validation.one_of(evaluation_cfg["select_best"], "evaluation.select_best", (True, False))
    if evaluation_cfg["select_best"] and not every:
        raise validation.invalid_argument(
            "evaluation.select_best", "False unless evaluation.eval_every_steps > 0 (the best of which evaluations?)",
            evaluation_cfg["select_best"])
    if every and train_cfg["steps_per_epoch"]:
        callbacks_lib.evaluation.evaluation_freq(every, train_cfg["steps_per_epoch"])


def _test_curve(history, accuracy_name):
    """`[{'step', 'test_accuracy', 'test_error', 'test_loss'}, ...]` of the periodic evaluations in `history`."""
    steps = history.get("val_step", [])
    return [{"step": int(step), "test_accuracy": 100.0 * accuracy, "test_error": error, "test_loss": loss}
            for step, accuracy, error, loss in zip(steps, history[f"val_{accuracy_name}"], history["val_error"],
                                                   history["val_loss"])]


@config_errors
def validate(config):
    """Checks the whole config before any data is read; returns it as plain dicts with defaults filled in.

    Raises:
        ConfigError (a ValueError): an unknown key or a bad value, naming the dotted key (and
            the valid choices for registry names: data sets, augmentations,
            normalisations, models, operators, heads, regularizers,
            optimizers, schedules, strategies, precisions).
    """
    config = merge_config(DEFAULTS, tasks.without_task_key(config, "classification"))
    validation.integer(config["seed"], "seed", minimum=0)
    data = config["data"]
    for key in ("manual_dir", "data_dir", "val_labels_file", "eval_augmentation"):  # '' for none
        validation.text(data[key], f"data.{key}", allow_empty=True)
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
    validation.one_of(data["pipeline"], "data.pipeline", ("auto",) + datasets_lib.PIPELINES)
    pipeline = datasets_lib.resolve_pipeline(None if data["pipeline"] == "auto" else data["pipeline"])
    if pipeline == "tf_data" and not dependencies.installed("tensorflow"):
        raise validation.invalid_argument(
            "data.pipeline", f"'grain' or 'auto' (tf.data needs TensorFlow, which is not installed here; Keras "
            f"backend {keras.backend.backend()!r})", data["pipeline"])
    source = ("tfds" if data["data_dir"] else "manual") if data["source"] == "auto" else data["source"]
    if pipeline == "grain" and source == "tfds":
        # With source='auto' it is data.data_dir (a tensorflow-datasets folder) that asks for tfds.
        key, value = ("data.data_dir", data["data_dir"]) if data["source"] == "auto" else ("data.source",
                                                                                          data["source"])
        raise validation.invalid_argument(
            key, f"'manual' data (data.source='manual', data.data_dir='') on the Grain pipeline (Keras backend "
            f"{keras.backend.backend()!r}: tensorflow-datasets folders are read with tf.data; set "
            "data.pipeline='tf_data' with TensorFlow installed, or read the published archives from "
            "data.manual_dir)", value)
    augmentations = datasets_lib.augmentation_names(pipeline)
    validation.one_of(data["augmentation"], "data.augmentation", augmentations)
    if data["eval_augmentation"]:
        validation.one_of(data["eval_augmentation"], "data.eval_augmentation", augmentations)
    validation.one_of(data["normalization"], "data.normalization", tuple(sorted(normalization_lib.NORMALIZATIONS)))
    validation.one_of(data["label_mode"], "data.label_mode", ("fine", "coarse"))
    validation.integer(data["train_limit"], "data.train_limit", minimum=0)
    validation.integer(data["test_limit"], "data.test_limit", minimum=0)
    spec = datasets_lib.DATASETS[data["name"]]
    if data["label_mode"] == "coarse" and spec.num_coarse_classes is None:
        raise validation.invalid_argument("data.label_mode", f"'fine' ({data['name']} has no coarse labels)",
                                          data["label_mode"])
    classes = spec.num_coarse_classes if data["label_mode"] == "coarse" else spec.num_classes
    datasets_lib.check_class_limits(data["class_limits"], classes, "data.class_limits")
    label_noise_lib.check_label_noise(data["label_noise"], data["label_noise_type"], prefix="data.")
    if data["label_noise"] and data["name"] == "imagenet2012" and data["source"] == "tfds":
        raise validation.invalid_argument("data.label_noise", "0 for imagenet2012 from tfds (streamed shards)",
                                          data["label_noise"])

    _check_model(config["model"])
    loss = config["loss"]
    validation.one_of(loss["name"], "loss.name", schema.LOSSES)
    validation.real(loss["label_smoothing"], "loss.label_smoothing", low=0.0, high=1.0, high_open=True)
    validation.one_of(loss["hinge_norm"], "loss.hinge_norm", losses_lib.hinge.NORMS)
    if loss["name"] == "hinge" and loss["label_smoothing"]:
        raise validation.invalid_argument("loss.label_smoothing", "0 with loss.name='hinge' (a cross-entropy "
                                          "option)", loss["label_smoothing"])
    validation.non_negative_float(loss["data_dependent_mhe"], "loss.data_dependent_mhe")
    if loss["data_dependent_mhe"] and not recipe.is_margin_head(config["model"]):
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
    validation.text(paradigm["pretrained"], "paradigm.pretrained", allow_empty=True)  # a workdir, '' for none
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
    recipe.energy_layer_patterns(train["energy_layers"])
    validation.non_negative_float(train["energy_power"], "train.energy_power")
    validation.one_of(train["energy_half_space"], "train.energy_half_space", (True, False))
    validation.one_of(train["verbose"], "train.verbose", FIT_VERBOSITY)
    total = train["steps"] or train["epochs"] * max(train["steps_per_epoch"], 1)
    rate = optimization.build_learning_rate(config["optimizer"].get("learning_rate"), config["schedule"], total)
    optimization.build_optimizer(config["optimizer"], rate)
    optimization.schedule_callbacks(config["schedule"])
    batches = config["evaluation"]["precise_bn_batches"]
    if batches != "auto":
        validation.integer(batches, "evaluation.precise_bn_batches", minimum=0)
    _check_periodic_evaluation(config["evaluation"], train)
    if config["evaluation"]["minority_classes"]:
        classification.check_classes(config["evaluation"]["minority_classes"], classes, "evaluation.minority_classes")
    validation.one_of(config["mixed_precision"], "mixed_precision", MIXED_PRECISION)
    validation.one_of(config["strategy"], "strategy", distribute.STRATEGIES)
    validation.one_of(config["export_class_matrix"], "export_class_matrix", (True, False))
    validation.one_of(config["export"], "export", (True, False))
    if config["export"] and not dependencies.installed("tensorflow"):
        raise validation.invalid_argument(
            "export", f"False here: the TF Serving export writes a SavedModel with TensorFlow, which is not installed "
            f"(Keras backend {keras.backend.backend()!r}); export the run's checkpoints/model.keras later where "
            "TensorFlow is (sphere-tf export, docs/export.md)", config["export"])
    if _is_partial_fc(config["model"]):
        _check_partial_fc_run(config)
    return config


def _check_partial_fc_run(config):
    """What a Partial FC head (sampled or sharded) does not combine with, named by config key."""
    if config["loss"]["name"] != "crossentropy":
        raise validation.invalid_argument(
            "loss.name", "'crossentropy' with a Partial FC head (model.head.sample_rate < 1 or shard_classes: the "
            "head computes its own sampled softmax cross-entropy)", config["loss"]["name"])
    if config["loss"]["label_smoothing"]:
        raise validation.invalid_argument(
            "loss.label_smoothing", "0 with a Partial FC head (model.head.sample_rate < 1 or shard_classes: the "
            "head computes its own sampled softmax cross-entropy)", config["loss"]["label_smoothing"])
    if config["evaluation"]["eval_every_steps"]:
        # Its training model has no accuracy metric (the training logits are sampled columns), and the periodic
        # evaluation and the best-checkpoint selection are of the compiled metric.
        raise validation.invalid_argument(
            "evaluation.eval_every_steps", "0 with a Partial FC head (model.head.sample_rate < 1 or shard_classes: "
            "the test set is evaluated once, at the end)", config["evaluation"]["eval_every_steps"])
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


def data_kwargs(data_cfg):
    """The `get_datasets` keyword arguments of the `data` section.

    '' means None; `source='auto'` is 'tfds' when `data_dir` is set, else 'manual'. The pipelines yield raw pixels
    (`normalize=False`): `data.normalization` is the model's first layer (`recipe.build_model`).
    """
    kwargs = {k: (None if k in _EMPTY_IS_NONE and v == "" else v) for k, v in data_cfg.items() if k != "name"}
    kwargs["normalize"] = False
    kwargs["pipeline"] = None if kwargs.get("pipeline", "auto") == "auto" else kwargs["pipeline"]
    if kwargs["source"] == "auto":
        kwargs["source"] = "tfds" if kwargs["data_dir"] else "manual"
    return kwargs


def _export(model, model_path, export_base, config, info):
    """Writes the TF Serving folder `export/<model name>/<version>/` (raw pixels in: the model's first layer
    normalises them); returns its path. On a backend other than TensorFlow the saved `model_path` (the final
    weights: saved at the last epoch's end, or after precise BN) is exported under TensorFlow in a child process."""
    del info  # the normalisation and its channel mean are the model's (`PixelNormalization`)
    kwargs = {"model_name": config["model"]["name"] or "model", "class_matrix": config["export_class_matrix"]}
    from sphere_tf import export as export_lib  # noqa: PLC0415 (TensorFlow; `validate` checked it is installed)

    # The run holds its workdir's lock (`workdir_lock`), so nothing else exports into `export_base`: a `.tmp-*`
    # folder or file there is what a run killed inside an export left, and a version folder is this run's own
    # export (the rename into place is an export's last step), made before a kill that came ahead of
    # results.json. A resumed run removes the one and keeps the other, so it ends with the one version an
    # uninterrupted run has, not a second copy.
    model_dir = os.path.join(export_base, kwargs["model_name"])
    for folder in (export_base, model_dir):
        for name in os.listdir(folder) if os.path.isdir(folder) else ():
            path = os.path.join(folder, name)
            if ".tmp-" in name and os.path.isdir(path):
                shutil.rmtree(path)
            elif ".tmp-" in name:
                os.remove(path)
    versions = export_lib.existing_versions(model_dir)
    if versions:
        export_lib.write_models_config(export_base)  # the kill may have come before it was written
        return os.path.join(model_dir, str(versions[-1]))
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
def dry_run(config, probe_steps=3, data=None):
    """What a run of `config` would do, before anything trains or any file is written: the resolved config, the
    step count and an estimated training time on this machine.

    The step count comes from the data set's published training size (`DatasetSpec.train_size`, with
    `data.train_limit`); where that is unknown (a folder of identities) and the config does not fix the steps,
    it is None. A caller that knows more about the data (the face runner counts an identity folder's images,
    `sphere_tf.evaluation.face.dry_run`) passes it in `data`. The time is measured: the model is built and
    compiled as the run builds it (no strategy), one step on a synthetic batch of the run's shape compiles it
    (`compile_seconds`), then `probe_steps` more are timed; the estimate is compile + steps × the measured step time (test evaluations, data loading and
    export are not counted).

    Args:
        config: ConfigDict or dict following `DEFAULTS`.
        probe_steps: int >= 0, timed steps (0: no model is built, no time estimate).
        data: None or a dict overriding the data set's published `train_images` (int or None: unknown),
            `num_classes` and `input_shape` (the run's image shape, without the batch axis).

    Returns:
        dict: `config` (resolved), `train_images`, `steps_per_epoch`, `epochs`, `total_steps`, `evaluations`,
        and with `probe_steps` > 0 `parameters`, `compile_seconds`, `seconds_per_step`,
        `estimated_train_seconds`, `backend`.

    Raises:
        ConfigError: a bad config (as `validate`).
    """
    config = validate(config)
    probe_steps = validation.integer(probe_steps, "probe_steps", minimum=0)
    data_cfg, train_cfg = config["data"], config["train"]
    spec = datasets_lib.DATASETS[data_cfg["name"]]
    data = dict(data or {})
    train_images = data.get("train_images", spec.train_size)
    if train_images is not None and data_cfg["train_limit"]:
        train_images = min(train_images, data_cfg["train_limit"])
    data_steps = train_images // train_cfg["batch_size"] if train_images else None  # drop_remainder, as the run
    plan = {"config": config, "train_images": train_images, "steps_per_epoch": None, "epochs": None,
            "total_steps": None, "evaluations": None}
    if data_steps or train_cfg["steps_per_epoch"]:  # else the epoch is one pass over data of unknown size
        steps_per_epoch, epochs = run_length(train_cfg, data_steps or 0)
        every = config["evaluation"]["eval_every_steps"]
        if every:
            config_errors(callbacks_lib.evaluation.evaluation_freq)(every, steps_per_epoch)
        plan.update(steps_per_epoch=steps_per_epoch, epochs=epochs, total_steps=steps_per_epoch * epochs,
                    evaluations=(steps_per_epoch * epochs) // every if every else 1)
    if not probe_steps:
        return plan
    classes = data.get("num_classes", spec.num_coarse_classes if data_cfg["label_mode"] == "coarse"
                       else spec.num_classes)
    input_shape = tuple(data.get("input_shape") or spec.input_shape
                        or (numpy_preprocessing.IMAGENET_CROP, numpy_preprocessing.IMAGENET_CROP, 3))
    # The channel mean does not change the step's cost: the data set's published one, else mid-grey.
    info = {"input_shape": input_shape, "num_classes": classes,
            "channel_mean": spec.channel_mean or (127.5,) * input_shape[-1]}
    previous_policy = keras.mixed_precision.global_policy().name
    keras.mixed_precision.set_global_policy(config["mixed_precision"])
    try:
        if _is_partial_fc(config["model"]):  # one device here: the head's own blocks, no sharding
            model, _ = recipe.build_model(config, info, config["model"]["head"].get("num_shards", 1))
            model.compile(optimizer=recipe.build_optimizer(config, plan["total_steps"] or 1, partial_fc=True),
                          loss=None)
        else:
            model, _ = recipe.build_model(config, info)
            model.compile(optimizer=recipe.build_optimizer(config, plan["total_steps"] or 1),
                          loss=recipe.build_loss(config),
                          metrics=[recipe.training_accuracy(config["model"])])
        compile_seconds, seconds_per_step = recipe.measure_step_time(
            model, train_cfg["batch_size"], input_shape, classes, probe_steps, seed=config["seed"])
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)
    plan.update(parameters=int(model.count_params()), compile_seconds=compile_seconds,
                seconds_per_step=seconds_per_step, backend=keras.backend.backend(),
                estimated_train_seconds=(compile_seconds + seconds_per_step * plan["total_steps"]
                                         if plan["total_steps"] else None))
    return plan


def duration_text(seconds):
    """A dry run's estimate for people: `"unknown"` (None), seconds below 2 min, minutes below 1.5 h, else hours."""
    if seconds is None:
        return "unknown"
    return f"{seconds / 3600:.1f} h" if seconds >= 5400 else f"{seconds / 60:.0f} min" if seconds >= 120 \
        else f"{seconds:.0f} s"


def dry_run_lines(plan):
    """The dry run's summary, printed after the resolved config."""
    total = plan["total_steps"]
    lines = [
        f"training images  {plan['train_images'] if plan['train_images'] is not None else 'unknown until read'}",
        f"steps            {total if total is not None else 'unknown until the data is read'}"
        + (f" ({plan['epochs']} epochs of {plan['steps_per_epoch']})" if total else ""),
        f"test evaluations {plan['evaluations']}",
    ]
    if "seconds_per_step" in plan:
        lines += [
            f"model            {plan['parameters']:,} parameters; backend {plan['backend']}",
            f"step time        {plan['seconds_per_step'] * 1000:.1f} ms measured on a synthetic batch "
            f"(compile {plan['compile_seconds']:.1f} s)",
            f"estimated time   {duration_text(plan['estimated_train_seconds'])} of training on this machine "
            "(data loading, evaluations and export not counted)",
        ]
    return lines


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


@workdir_lock.held_while_running  # the workdir's lock, taken below before the first write, ends with the run
def train_and_evaluate(config, workdir, strategy=None, callbacks=None):
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
        callbacks: optional list of extra Keras callbacks, run after the
            run's own (probes such as a benchmark's learning curve); their
            state is not checkpointed, so a resumed run starts them afresh.

    Returns:
        dict, the contents of `results.json`.

    Raises:
        ConfigError (a ValueError): a bad config (before any data is read).
        DataNotFoundError: the data set's files are missing (before anything is written).
        checkpoint.ConfigMismatchError: `workdir` holds another config's run.
        workdir_lock.WorkdirLockedError (a ValueError): another live process runs in `workdir` (named in the
            message); refused before anything is written.
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
    checkpoint_lib.check_workdir_config(workdir, config, defaults=DEFAULTS)
    plan = _partial_fc_plan(config, strategy, _recorded_num_shards(state_dir))
    # keras.distribution (JAX): the Partial FC head's class-sharded layout (it splits the batch too), else the
    # strategy's DataParallel over every device of every process, else none.
    distribution = (plan.distribution if plan is not None and plan.distribution is not None
                    else getattr(strategy, "distribution", None))
    devices = plan.devices if distribution is not None and plan is not None and plan.distribution is not None \
        else getattr(strategy, "num_replicas_in_sync", 1)
    process_count = getattr(strategy, "process_count", 1)
    if distribution is not None:
        if train_cfg["batch_size"] % devices:
            raise ConfigError(str(validation.invalid_argument(
                "train.batch_size", f"a multiple of the {devices} devices every global batch is split over "
                "(keras.distribution)", train_cfg["batch_size"])))
        if process_count > 1 and plan is not None and plan.distribution is not None:
            raise ConfigError(str(validation.invalid_argument(
                f"model.head.{SHARD_CLASSES_KEY}", f"False with {process_count} processes (the class-sharded head "
                "runs in one process over its devices)", config["model"]["head"].get(SHARD_CLASSES_KEY))))
    results_path = os.path.join(workdir, "results.json")
    keras.utils.set_random_seed(config["seed"])

    data_cfg = config["data"]
    kwargs = data_kwargs(data_cfg)
    pipeline = datasets_lib.resolve_pipeline(kwargs["pipeline"])

    def load(initial_step):
        return data_lib.get_datasets(data_cfg["name"], batch_size=train_cfg["batch_size"], seed=config["seed"],
                                     initial_step=initial_step, process_index=getattr(strategy, "process_index", 0),
                                     process_count=process_count, **kwargs)

    # The data before anything is written: missing archives leave no workdir behind.
    train_ds, test_ds, info = load(0)
    if distribution is not None and info["test_size"] % devices:
        raise ConfigError(str(validation.invalid_argument(
            "data.test_limit", f"a test set size divisible by the {devices} devices of keras.distribution "
            f"(every evaluation batch is split over them; the test set has "
            f"{info['test_size']} images)", data_cfg["test_limit"])))
    # Where this process writes logs and files: `workdir` on the chief, `workdir/workertemp_<task>` elsewhere.
    local_dir = distribute.checkpoint_directory(workdir, strategy)
    steps_per_epoch, epochs = run_length(train_cfg, info["steps_per_epoch"])
    total_steps = steps_per_epoch * epochs
    evaluation_cfg = config["evaluation"]
    if evaluation_cfg["eval_every_steps"]:
        validation_freq = config_errors(callbacks_lib.evaluation.evaluation_freq)(
            evaluation_cfg["eval_every_steps"], steps_per_epoch)
    if os.path.exists(results_path) and checkpoint_lib.latest_step(state_dir) == total_steps:
        with open(results_path) as f:
            results = json.load(f)
        print(f"{workdir} already holds a finished run (step {total_steps}); "
              f"test accuracy {results['test_accuracy']:.2f}%. Not training again.")
        return results
    _refuse_lost_checkpoints(workdir, state_dir, results_path, steps_per_epoch,
                             train_cfg["checkpoint_every_steps"] or checkpoint_lib.DEFAULT_EVERY_STEPS)
    logging.info("Data: %s", info)

    previous_policy = keras.mixed_precision.global_policy().name
    keras.mixed_precision.set_global_policy(config["mixed_precision"])
    previous_distribution = keras.distribution.distribution() if keras.backend.backend() == "jax" else None
    if plan is not None:
        print(f"Partial FC head: sample_rate {config['model']['head'].get('sample_rate', 1.0)}, "
              f"{plan.num_shards} class block(s)"
              + (f", classes sharded over {plan.devices} devices (keras.distribution)" if plan.distribution else "")
              + (f", {plan.devices} replicas" if plan.distribution is None and plan.devices > 1 else "") + ".")
    if distribution is not None and (plan is None or plan.distribution is None):
        print(f"keras.distribution.DataParallel: each global batch of {train_cfg['batch_size']} split over "
              f"{devices} devices" + (f" of {process_count} processes" if process_count > 1 else "") + ".")
    try:
        if distribution is not None:
            # JAX: model, optimizer, checkpoints and every fit / evaluate step under the distribution's layout.
            keras.distribution.set_distribution(distribution)
        with strategy.scope():
            model, attached = config_errors(recipe.build_model)(config, info, None if plan is None else plan.num_shards)
            if plan is None:
                model.compile(
                    optimizer=recipe.build_optimizer(config, total_steps),
                    loss=recipe.build_loss(config),
                    metrics=[recipe.training_accuracy(config["model"])],
                )
            else:  # the head adds its own (sampled) loss; its training logits are sampled columns: no metric
                model.compile(optimizer=recipe.build_optimizer(config, total_steps, partial_fc=True), loss=None)
            model.optimizer.build(model.trainable_variables)  # its slots live on the strategy's devices
        if chief:  # after the model is built from the checked config: a model option it refuses leaves no workdir
            # One run per workdir: a second one would interleave its checkpoints with this one's. Only the chief
            # writes here, so only the chief (process 0) locks; it holds the lock until this function returns.
            workdir_lock.acquire(workdir)
            checkpoint_lib.record_config(state_dir, config, defaults=DEFAULTS)
            checkpoint_lib.record_config(workdir, config, defaults=DEFAULTS)
            if plan is not None:
                json_files.write_json(os.path.join(state_dir, PARTIAL_FC_FILE), {"num_shards": plan.num_shards})
        model.summary(print_fn=logging.info)
        packed = models_lib.needs_labels(model)

        def pack(dataset):
            if not packed:
                return dataset
            if pipeline == "grain":  # Grain maps one element, the (images, labels) pair
                return dataset.map(lambda batch: (models_lib.pack_inputs(*batch), batch[1]))
            return dataset.map(lambda x, y: (models_lib.pack_inputs(x, y), y))

        def stream(step):
            return pack(train_ds if step == 0 else load(step)[0])

        run_callbacks = recipe.training_callbacks(config, model, attached)
        accuracy_name = recipe.training_accuracy(config["model"]).name
        periodic = {}
        best_path = os.path.join(local_dir, "checkpoints", "best.weights.h5")
        if evaluation_cfg["eval_every_steps"]:
            # Keras's own validation pass, every `validation_freq` epochs; logged before anything reads the logs.
            periodic = {"validation_data": pack(test_ds), "validation_freq": validation_freq,
                        "validation_steps": info["test_steps"]}
            run_callbacks.append(callbacks_lib.TestErrorLog(accuracy_name, steps_per_epoch))
            if evaluation_cfg["select_best"]:
                run_callbacks.append(callbacks_lib.BestCheckpoint(best_path, monitor=f"val_{accuracy_name}"))
        run_callbacks += epoch_lines
        os.makedirs(os.path.join(local_dir, "checkpoints"), exist_ok=True)
        run_callbacks += [
            _SaveModelEachEpoch(os.path.join(local_dir, "checkpoints", "model.keras")),
            callbacks_lib.tensorboard_callback(os.path.join(local_dir, "tensorboard")),
            *(callbacks or ()),
        ]
        resume_step = checkpoint_lib.latest_step(state_dir)
        if resume_step:  # said before training, not after
            print(f"Resumed from step {resume_step} of {total_steps} ({state_dir}).")
        fitted = checkpoint_lib.fit_resumable(
            model, stream, epochs=epochs, directory=state_dir, steps_per_epoch=steps_per_epoch,
            every_steps=train_cfg["checkpoint_every_steps"] or checkpoint_lib.DEFAULT_EVERY_STEPS,
            callbacks=run_callbacks, verbose=verbose, **periodic,
        )
        test_curve = _test_curve(fitted["history"], accuracy_name) if periodic else []
        selection = "final"
        if evaluation_cfg["select_best"]:
            best = max(test_curve, key=lambda point: point["test_accuracy"])
            model.load_weights(best_path)
            selection = f"best of {len(test_curve)} evaluations (step {best['step']})"
            print(f"Selected the weights of step {best['step']} (test accuracy {best['test_accuracy']:.2f}%).")
        bn_statistics = recipe.recompute_batch_statistics(model, evaluation_cfg, stream(0), total_steps,
                                                          info["steps_per_epoch"])
        # A run resumed at its last step trained nothing here, so no epoch's end wrote model.keras: the file may
        # predate that step (the run stopped between the checkpoint and the file: a kill, a full disk).
        trained_nothing = fitted["initial_step"] == total_steps
        if ((bn_statistics.startswith("precise") or selection != "final" or trained_nothing)
                and (chief or process_count > 1)):
            # The saved model is the evaluated and exported one. Multi-process JAX: every process saves (reading
            # the replicated variables is a collective there), each into its own folder (`local_dir`).
            saving.save_model(model, os.path.join(local_dir, "checkpoints", "model.keras"))
        if plan is not None:
            # Evaluation calls the head without sampling: plain logits over every class and their full
            # cross-entropy as the loss; the accuracy is now the plain-logit accuracy.
            with strategy.scope():
                model.compile(optimizer=model.optimizer, loss=None,
                              metrics=[keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
        with distribute.distributed_fit(model):  # evaluate needs the multi-worker workarounds of fit
            test_loss, test_accuracy = model.evaluate(pack(test_ds), steps=info["test_steps"], verbose=0)
            test_rates = error_rates.evaluate_error_rates(model, pack(test_ds), info["num_classes"],
                                                          config["evaluation"]["minority_classes"])
        print(f"Test accuracy: {100 * test_accuracy:.2f}% (loss {test_loss:.4f}, {info['test_size']} images)")

        export_dir = None
        if config["export"] and chief:
            export_dir = _export(model, os.path.join(local_dir, "checkpoints", "model.keras"),
                                 os.path.join(workdir, "export"), config, info)
            print(f"SavedModel exported to {export_dir}")
    except Exception as error:
        _raise_if_disk_full(error, workdir, state_dir)
        raise
    finally:
        keras.mixed_precision.set_global_policy(previous_policy)
        if distribution is not None:
            keras.distribution.set_distribution(previous_distribution)
    results = {
        "test_accuracy": 100.0 * float(test_accuracy),
        "test_error": 100.0 * (1.0 - float(test_accuracy)),
        "test_loss": float(test_loss),
        **test_rates,
        "steps": total_steps,
        "epochs": epochs,
        "steps_per_epoch": steps_per_epoch,
        "regularized_layers": attached,
        "energy_layers": recipe.energy_layer_names(config["train"]["energy_layers"], model, attached),
        "bn_statistics": bn_statistics,
        "history": fitted["history"],
        "test_curve": test_curve,
        "selection": selection,
        "export_dir": export_dir,
        "backend": keras.backend.backend(),
        "devices": devices,
        "processes": process_count,
    }
    if plan is not None:
        results["partial_fc"] = {"sample_rate": config["model"]["head"].get("sample_rate", 1.0),
                                 "num_shards": plan.num_shards, "devices": plan.devices,
                                 "sharded": plan.distribution is not None}
    if chief:
        try:
            json_files.write_json(results_path, results)
        except OSError as error:
            _raise_if_disk_full(error, workdir, state_dir)
            raise
    else:
        shutil.rmtree(local_dir, ignore_errors=True)
    if distribute.in_multi_worker_mode(strategy):
        distribute.barrier(strategy)  # no worker leaves while the chief still exports and writes
    print("\n".join(summary_lines(config, info, results, time.time() - started, workdir)))
    return results


def _refuse_lost_checkpoints(workdir, state_dir, results_path, steps_per_epoch, every_steps):
    """Refuses to train afresh in a workdir whose run got further than its checkpoints show.

    `results.json` and `export/` are written only after training, and `history.json` at the end of an epoch,
    which follows the first checkpoint when `every_steps` ends before the epochs it counts: with no checkpoint beside
    them the checkpoints were deleted or lost, and training again from step 0 would silently replace the run.
    (`StepCheckpoint.restore` refuses the same from `partial_epoch.json`, which gains an entry before each save.)
    """
    if checkpoint_lib.latest_step(state_dir):
        return
    left = [path for path in (results_path, os.path.join(workdir, "export")) if os.path.exists(path)]
    history = os.path.join(state_dir, checkpoint_lib.HISTORY_FILE)
    try:
        with open(history) as f:
            epochs = int(json.load(f).get("epochs", 0))
    except (OSError, ValueError, TypeError, AttributeError):
        epochs = 0
    # Strictly: the checkpoint of an epoch's last step is written after its history entry.
    if epochs * steps_per_epoch > every_steps:
        left.append(f"{history} ({epochs} epoch(s), past the first checkpoint at step {every_steps})")
    if left:
        raise checkpoint_lib.CorruptCheckpointError(
            f"{workdir} holds the output of a run that trained ({', '.join(left)}) but no checkpoint in {state_dir}: "
            "the checkpoints were deleted or lost. Not training afresh over it: restore the checkpoints, or use a "
            "new --workdir.")


def _raise_if_disk_full(error, workdir, state_dir):
    """Raises `checkpoint.DiskFullError` naming the file when `error` is a full disk (not one `StepCheckpoint`
    described already); returns otherwise. Every file of the workdir is replaced whole (a temporary name renamed
    into place: checkpoints, `model.keras`, JSON files, the export), so what was there before stays valid."""
    filename = checkpoint_lib.disk_full_file(error)
    if filename is None or isinstance(error, checkpoint_lib.DiskFullError):
        return
    try:
        latest = f"step {checkpoint_lib.latest_step(state_dir)}"
    except ValueError:
        latest = "unknown"
    raise checkpoint_lib.DiskFullError(
        f"No space left on device while the run wrote {filename or 'into ' + workdir}. Its earlier files are "
        f"intact (each is replaced whole once written); the latest checkpoint is at {latest}. Free some space and "
        "run the same command again: it resumes from there.", filename) from error


class _SaveModelEachEpoch(keras.callbacks.Callback):
    """`keras.callbacks.ModelCheckpoint(path)` (the whole model at the end of each epoch), written atomically with
    `saving.save_model`: a full disk or a kill during the write leaves the previous epoch's file, not a part."""

    def __init__(self, path):
        super().__init__()
        self.path = path

    def on_epoch_end(self, epoch, logs=None):
        saving.save_model(self.model, self.path)


def _run(config, workdir):
    return train_and_evaluate(config, workdir)


TASK = tasks.Task(validate=validate, run=_run, dry_run=dry_run, dry_run_lines=dry_run_lines,
                  schema=lambda: copy.deepcopy(DEFAULTS))

__all__ = ["DEFAULTS", "ConfigError", "ScheduleLogger", "config_errors", "data_kwargs", "dry_run", "dry_run_lines", "duration_text", "make_run_strategy", "merge_config", "plain_config", "run_length", "summary_lines", "train_and_evaluate",
           "TASK",
           "validate"]
