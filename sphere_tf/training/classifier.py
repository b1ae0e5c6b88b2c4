"""Config-driven train-and-evaluate loop for image classifiers (no flags here).

The trainers in `trainers/` are thin absl mains around `train_and_evaluate`.
The config schema (every section and key, with defaults) is `DEFAULTS` (defined, with how a config becomes a
model, an optimizer and the training callbacks, in `training.recipe`, which needs no TensorFlow); the
documentation is docs/runner.md. A config may leave keys out (their defaults
apply) but any key not in the schema, or a bad value, fails in `validate`
before any data is read, naming the dotted key and the valid choices.
"""

import inspect
import json
import os
import shutil
import sys
import time

import keras
from absl import logging

from sphere_tf import data as data_lib
from sphere_tf import export as export_lib
from sphere_tf import json_files
from sphere_tf import losses as losses_lib
from sphere_tf import models as models_lib
from sphere_tf import validation
from sphere_tf.data import datasets as datasets_lib
from sphere_tf.data import preprocessing
from sphere_tf.models import blocks
from sphere_tf.training import checkpoint as checkpoint_lib
from sphere_tf.training import distribute
from sphere_tf.training import optimization
from sphere_tf.training import progress
from sphere_tf.training import recipe
from sphere_tf.training import regularization
from sphere_tf.training.recipe import DEFAULTS
from sphere_tf.training.recipe import FIT_VERBOSITY
from sphere_tf.training.recipe import MIXED_PRECISION
from sphere_tf.training.recipe import ConfigError
from sphere_tf.training.recipe import ScheduleLogger
from sphere_tf.training.recipe import config_errors
from sphere_tf.training.recipe import merge_config
from sphere_tf.training.recipe import plain_config
from sphere_tf.training.recipe import pretrained_model_path
from sphere_tf.training.recipe import run_length

# `data` keys where '' means None (`data_kwargs`).
_EMPTY_IS_NONE = ("manual_dir", "data_dir", "eval_augmentation", "val_labels_file")


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
        blocks.make_head(dict(head), 2)
    return fn


def _probe_model(config):
    """Builds the configured model once on the data set's shapes (no data read), so a model option a
    `**kwargs` model function passes on is checked too; the probe is discarded."""
    spec = datasets_lib.DATASETS[config["data"]["name"]]
    input_shape = spec.input_shape or (preprocessing.IMAGENET_CROP, preprocessing.IMAGENET_CROP, 3)
    model_cfg = dict(config["model"])
    name = model_cfg.pop("name")
    try:
        models_lib.create_model(name, input_shape=input_shape, num_classes=spec.num_classes, **model_cfg)
    except TypeError as error:
        raise ValueError(f"Invalid config key in 'model' for model {name!r}: {error}") from None


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
    validation.one_of(loss["name"], "loss.name", recipe.LOSSES)
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
    _probe_model(config)
    return config


def data_kwargs(data_cfg):
    """The `get_datasets` keyword arguments of the `data` section.

    '' means None; `source='auto'` is 'tfds' when `data_dir` is set, else 'manual'.
    """
    kwargs = {k: (None if k in _EMPTY_IS_NONE and v == "" else v) for k, v in data_cfg.items() if k != "name"}
    if kwargs["source"] == "auto":
        kwargs["source"] = "tfds" if kwargs["data_dir"] else "manual"
    return kwargs


def _export(model, model_path, export_base, config, info):
    """Writes the TF Serving folder `export/<model name>/<version>/` (the pipeline's normalisation in the graph);
    returns its path. On a backend other than TensorFlow the saved `model_path` (the final weights: saved at the
    last epoch's end, or after precise BN) is exported under TensorFlow in a child process."""
    kwargs = {"model_name": config["model"]["name"] or "model", "normalization": config["data"]["normalization"],
              "channel_mean": info.get("channel_mean")}
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
    results_path = os.path.join(workdir, "results.json")
    keras.utils.set_random_seed(config["seed"])

    data_cfg = config["data"]
    kwargs = data_kwargs(data_cfg)

    def load(initial_step):
        return data_lib.get_datasets(data_cfg["name"], batch_size=train_cfg["batch_size"], seed=config["seed"],
                                     initial_step=initial_step, **kwargs)

    # The data before anything is written: missing archives leave no workdir behind.
    train_ds, test_ds, info = load(0)
    if chief:
        checkpoint_lib.record_config(state_dir, config)
        checkpoint_lib.record_config(workdir, config)
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
    try:
        with strategy.scope():
            model, attached = recipe.build_model(config, info)
            model.compile(
                optimizer=recipe.build_optimizer(config, total_steps),
                loss=recipe.build_loss(config),
                metrics=[recipe.training_accuracy(config["model"])],
            )
            model.optimizer.build(model.trainable_variables)  # its slots live on the strategy's devices
        model.summary(print_fn=logging.info)
        packed = models_lib.needs_labels(model)

        def pack(dataset):
            return dataset.map(lambda x, y: (models_lib.pack_inputs(x, y), y)) if packed else dataset

        def stream(step):
            return pack(train_ds if step == 0 else load(step)[0])

        run_callbacks = recipe.training_callbacks(config, model, attached) + epoch_lines
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
        bn_statistics = recipe.recompute_batch_statistics(model, config["evaluation"], stream(0), total_steps,
                                                    info["steps_per_epoch"])
        if bn_statistics.startswith("precise") and chief:
            # The saved model is the evaluated and exported one.
            model.save(os.path.join(local_dir, "checkpoints", "model.keras"))
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
