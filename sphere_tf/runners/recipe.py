"""The recipe of a classification run, free of TensorFlow: the config schema and how a config becomes a model,
an optimizer, the training callbacks and the evaluated statistics.

`runners.classifier` (the runner: data pipelines, checkpoints, strategies, export) builds every run through these
functions, and so does any loop that feeds in-memory arrays on a host without TensorFlow
(`bench/gpu/reproduce.py`, the JAX GPU reproductions of docs/reproductions.md). The schema's documentation is
docs/runner.md.
"""

import fnmatch
import os
import time

import keras
import numpy as np
from absl import logging

from sphere_tf import callbacks as callbacks_lib
from sphere_tf import layers as layers_lib
from sphere_tf import losses as losses_lib
from sphere_tf import models as models_lib
from sphere_tf import optimizers as optimizers_lib
from sphere_tf import regularizers as regularizers_lib
from sphere_tf import saving
from sphere_tf import validation
from sphere_tf.ops import pixel_normalization as normalization_lib
from sphere_tf.layers import kernels as kernels_lib
from sphere_tf.training import model as sphere_model_lib
from sphere_tf.training import optimization
from sphere_tf.training import precise_bn
from sphere_tf.training import pretrain
from sphere_tf.runners import schema
from sphere_tf.training import regularization

def model_kwargs(model_cfg, num_shards=None):
    """The `create_model` arguments of `model` (with `name`): the head spec without the runner's
    `shard_classes`, and with `num_shards` when given (the resolved block count of a Partial FC head)."""
    model_cfg = dict(model_cfg)
    head = model_cfg.get("head")
    if isinstance(head, dict):
        head = {k: v for k, v in head.items() if k != schema.SHARD_CLASSES_KEY}
        if num_shards is not None:
            head["num_shards"] = num_shards
        model_cfg["head"] = head
    return model_cfg


def is_margin_head(model_cfg):
    """Whether the model config's head is a margin head (`head={"layer": "margin", ...}`)."""
    head = model_cfg.get("head")
    return isinstance(head, dict) and head.get("layer") == "margin"


def training_accuracy(model_cfg):
    """The training accuracy metric, named for what it measures: in training a margin head's logits carry the
    margin on the target class (ArcFace's cos(θ + m)), so their argmax is `margin_accuracy`, below the plain
    logits' accuracy that the test evaluation (inference: no margin) reports."""
    name = "margin_accuracy" if is_margin_head(model_cfg) else "accuracy"
    return keras.metrics.SparseCategoricalAccuracy(name=name)


def pretrained_model_path(workdir):
    """The model file a run leaves in `workdir` (read by `paradigm.pretrained`)."""
    return os.path.join(workdir, "checkpoints", "model.keras")


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


def normalization_kwargs(normalization, channel_mean=None):
    """The `create_model` arguments that make the model's first layer the run's pixel normalisation: the
    runner's pipelines yield raw pixels (`get_datasets(normalize=False)`), and the trained model, its `.keras`
    file and its export take raw pixels. `channel_mean` (the data's `info['channel_mean']`) is kept for the
    normalisations that read it only."""
    uses_mean = normalization_lib.uses_channel_mean(normalization)
    return {"normalization": normalization, "channel_mean": channel_mean if uses_mean else None}


def build_model(config, info, num_shards=None):
    """`(model, attached)`: the configured model on the data's `info` (`input_shape`, `num_classes`,
    `channel_mean`), its first layer the config's `data.normalization` (`normalization_kwargs`), initialised
    from a pretrained run and wrapped for the DCNet paradigms as configured, with the regularizers attached
    (`attached`: layer name -> regularizer name). `num_shards`: the class blocks of a Partial FC head (the
    runner's resolved count; None for any other head)."""
    model_cfg = model_kwargs(config["model"], num_shards)
    name = model_cfg.pop("name")
    if model_cfg.get("head") is not None:
        model_cfg["head"] = dict(model_cfg["head"])
        if config["loss"]["data_dependent_mhe"]:
            model_cfg["head"]["label_penalty"] = regularizers_lib.DataDependentMHE(
                factor=config["loss"]["data_dependent_mhe"])
        if num_shards is not None and model_cfg["head"].get("seed") is None:
            # One draw sequence for every process, device and resume: keyed by the run's seed.
            model_cfg["head"]["seed"] = config["seed"]
    try:
        model = models_lib.create_model(
            name, input_shape=info["input_shape"], num_classes=info["num_classes"],
            **normalization_kwargs(config["data"]["normalization"], info.get("channel_mean")), **model_cfg)
    except TypeError as error:  # an option a `**kwargs` model function passes on (not checkable by signature)
        raise ValueError(f"Invalid config key in 'model' for model {name!r}: {error}") from None
    if config["train"]["energy_layers"] is not None:  # each pattern names a layer of this model
        energy_layer_names(config["train"]["energy_layers"], model, {})
    paradigm = config["paradigm"]
    if paradigm["pretrained"]:
        source = saving.load_model(pretrained_model_path(paradigm["pretrained"]))
        pretrain.initialize_from_pretrained(model, source, match=paradigm["pretrained_match"], verbose=False)
    if paradigm["weight_projection_every"] or paradigm["weighted_gradients"]:
        model = sphere_model_lib.wrap(
            model, weight_projection_every=paradigm["weight_projection_every"] or None,
            projection_scale=paradigm["projection_scale"], weighted_gradients=paradigm["weighted_gradients"],
        )
    attached = regularization.attach(model, config["regularizers"])
    return model, attached


def build_loss(config):
    """The training loss of `config['loss']`: `losses.SparseCrossentropy(label_smoothing)` for 'crossentropy',
    `losses.SparseHinge(hinge_norm)` (Caffe's one-vs-all hinge, L-Softmax's hinge rows) for 'hinge'."""
    loss_cfg = config["loss"]
    if loss_cfg["name"] == "hinge":
        return losses_lib.SparseHinge(norm=loss_cfg["hinge_norm"])
    return losses_lib.SparseCrossentropy(label_smoothing=loss_cfg["label_smoothing"])


def build_optimizer(config, total_steps, partial_fc=False):
    """The configured optimizer and learning-rate schedule over `total_steps`, wrapped for OPT when asked and in
    `PartialFCOptimizer` for a Partial FC head (`partial_fc`)."""
    rate = optimization.build_learning_rate(config["optimizer"].get("learning_rate"), config["schedule"], total_steps)
    optimizer = optimization.build_optimizer(config["optimizer"], rate)
    if config["paradigm"]["opt_optimizer"]:
        optimizer = optimizers_lib.OPTOptimizer(optimizer)
    if partial_fc:  # unsampled classes keep their weights and slots (insightface v1, docs/partial_fc.md)
        optimizer = optimizers_lib.PartialFCOptimizer(optimizer)
    return optimizer


def margin_heads(model):
    """The `MarginHead` layers (Partial FC heads included) among `model.layers`."""
    return [layer for layer in model.layers if isinstance(layer, layers_lib.MarginHead)]


def recompute_batch_statistics(model, evaluation_cfg, batches, steps, batches_per_pass):
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


def energy_layer_patterns(energy_layers):
    """The `fnmatch` patterns of `train.energy_layers`: None (the regularized layers, see `energy_layer_names`),
    one pattern or a list of them ([] tracks no layer); anything else raises, naming the key."""
    if energy_layers is None:
        return None
    patterns = [energy_layers] if isinstance(energy_layers, str) else energy_layers
    if not isinstance(patterns, (list, tuple)) or not all(isinstance(p, str) and p for p in patterns):
        raise validation.invalid_argument(
            "train.energy_layers", "None (the regularized layers), a layer-name pattern or a list of them",
            energy_layers)
    return list(patterns)


def energy_layer_names(energy_layers, model, attached):
    """The sorted names of the layers whose hyperspherical energy a run tracks (`train.energy_layers`).

    None: the regularized layers (`attached`, from `build_model`; any regularizer, weight decay included).
    Patterns: the layers with an effective kernel (`sphere_tf.layers.kernels`: a `kernel`, or an OPT layer's
    ``W = R·V``) whose names match any of them, regularized or not.

    Raises:
        ValueError: a pattern matches no such layer (the message names the key and lists the layers).
    """
    patterns = energy_layer_patterns(energy_layers)
    if patterns is None:
        return sorted(attached)
    candidates = [layer.name for layer in kernels_lib.kernel_layers(model)]
    for pattern in patterns:
        if not any(fnmatch.fnmatchcase(name, pattern) for name in candidates):
            raise ValueError(f"train.energy_layers: the pattern {pattern!r} matches no layer with a kernel; "
                             f"layers: {candidates}.")
    return sorted(name for name in candidates if any(fnmatch.fnmatchcase(name, p) for p in patterns))


def training_callbacks(config, model, attached):
    """The callbacks every run of `config` trains with, before the runner's own (checkpoints, TensorBoard, output):
    the learning-rate and λ logger, the schedule's callbacks, the E{‖x‖} skip warning, the hyperspherical energy
    of the layers `train.energy_layers` names (default: the regularized layers, `attached` from `build_model`),
    SRIP's coefficient schedule and S-OPT's episodes."""
    run_callbacks = [ScheduleLogger(margin_heads(model))] + optimization.schedule_callbacks(config["schedule"])
    run_callbacks.append(callbacks_lib.WarnOnSkippedNormMean())  # non-finite batches left out of E{‖x‖}
    train = config["train"]
    tracked = energy_layer_names(train["energy_layers"], model, attached)
    if tracked:
        run_callbacks.append(callbacks_lib.HypersphericalEnergy(
            power=train["energy_power"], half_space=train["energy_half_space"], layer_names=tracked,
            frequency=train["energy_every_epochs"]))
    if regularizers_lib.srip.srip_regularizers(model):  # SRIP's λ schedule (Bansal et al.'s code)
        regularizers_lib.track_state(model)  # on JAX the scheduled λ travels with its layer
        run_callbacks.append(regularizers_lib.SRIPSchedule())
    if config["paradigm"]["sopt_episode_length"]:
        run_callbacks.append(callbacks_lib.SOPTEpisodes(config["paradigm"]["sopt_episode_length"],
                                                        seed=config["seed"]))
    return run_callbacks


def measure_step_time(model, batch_size, input_shape, num_classes, probe_steps, seed=0):
    """`(compile_seconds, seconds_per_step)` of a compiled model's training step on a synthetic batch.

    One `train_on_batch` compiles the step (its time is `compile_seconds`), then `probe_steps` more are timed.
    The batch is Gaussian images of `input_shape` and uniform labels (packed with the images for a margin-head
    model); the model's weights change, so probe a model built for the purpose.
    """
    probe_steps = validation.positive_int(probe_steps, "probe_steps")
    rng = np.random.default_rng(seed)
    images = rng.normal(size=(batch_size, *input_shape)).astype("float32")
    labels = rng.integers(0, num_classes, size=batch_size).astype("int32")
    inputs = models_lib.pack_inputs(images, labels) if models_lib.needs_labels(model) else images
    started = time.perf_counter()
    model.train_on_batch(inputs, labels)
    compile_seconds = time.perf_counter() - started
    started = time.perf_counter()
    for _ in range(probe_steps):
        model.train_on_batch(inputs, labels)
    return compile_seconds, (time.perf_counter() - started) / probe_steps


__all__ = ["ScheduleLogger", "build_loss", "build_model", "build_optimizer", "energy_layer_names", "energy_layer_patterns",
           "is_margin_head", "margin_heads", "measure_step_time", "model_kwargs", "pretrained_model_path",
           "recompute_batch_statistics", "run_length", "training_accuracy", "training_callbacks",
           "normalization_kwargs"]
