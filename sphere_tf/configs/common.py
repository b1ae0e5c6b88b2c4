"""Helpers shared by the experiment configs."""

import copy

import ml_collections

from sphere_tf import validation
from sphere_tf.runners import schema


def parse_arg(arg, **defaults):
    """Parses a config argument `"quick,key=value"` into a ConfigDict over `defaults`.

    A bare name sets a boolean default to True (`:quick`); values are cast to the
    default's type. Unknown keys raise, naming the valid ones.
    """
    parsed = ml_collections.ConfigDict(defaults)
    for item in filter(None, (arg or "").split(",")):
        key, _, value = item.partition("=")
        if key not in defaults:
            raise ValueError(f"Unknown config argument {key!r}; expected one of {sorted(defaults)}.")
        default = defaults[key]
        if not value:
            value = True
        elif isinstance(default, bool):
            value = value.lower() in ("1", "true", "yes")
        else:
            value = type(default)(value)
        parsed[key] = value
    return parsed


def check(value, name, choices):
    """`value` if it is one of `choices`, else a ValueError naming the config argument and the choices."""
    return validation.one_of(value, name, tuple(choices))


def choose(arg, key, choices):
    """The variant `arg[key]`, checked against the table's `choices`.

    Raises:
        ValueError: the value is not one of `choices`, naming the argument and the valid values.
    """
    value = arg[key]
    if value not in choices:
        raise ValueError(f"Invalid config argument {key}={value!r}; expected one of {sorted(choices)}.")
    return value


def quick_train(config):
    """Shrinks a config for a two-step smoke run (used by every config's `quick` variant)."""
    config.data.train_limit = 64
    config.data.test_limit = 32
    config.train.batch_size = 32
    config.train.epochs = 1
    config.train.steps_per_epoch = 2
    return config


def _two_steps(config, batch_size):
    """`quick_train` on `batch_size`-image batches with no step budget and no export."""
    quick_train(config)
    config.train.steps = 0
    config.train.batch_size = batch_size
    config.export = False
    return config


def quick(config, batch_size=8, **model):
    """The two-step smoke variant: `quick_train`, no export, a small batch, `model` keys overridden.

    The configs pass a `width_multiplier` and a shallower net (`blocks_per_stage`, `residual_units`, or the
    plain CNN-3 `name='cnn3'` for the plain CNNs, which fix their depth): tracing the training step of the full-depth nets costs most of a
    CPU-minute, and the two steps only check that data, operator, head, optimizer, schedule and paradigm
    run together. The full-depth models are built by `classifier.validate` for every variant.
    """
    _two_steps(config, batch_size)
    if config.schedule.name == "step":
        config.schedule.boundaries = [1]  # the rate drops after the first step: the schedule runs too
    for key, value in model.items():
        config.model[key] = value
    return config


def quick_narrow(config):
    """The two-step smoke variant: `quick_train` on 8-image batches, no step budget, no export, and the
    network at 1/8 of its widths (`width_multiplier`, which every zoo builder takes) and ResNets at one block per
    stage, so that CI stays fast (tracing the train step of a 35-layer regularized net takes most of a run).

    Unlike `quick`, the model is shrunk from what the config holds (no per-config overrides) and the
    learning-rate schedule is left as it is.
    """
    _two_steps(config, batch_size=8)
    config.data.train_limit, config.data.test_limit = 32, 16
    config.train.checkpoint_every_steps = 0
    config.model.width_multiplier = 0.125
    if "blocks_per_stage" in config.model:  # ResNets: one block per stage (tracing 35 layers dominates)
        blocks = config.model.blocks_per_stage
        config.model.blocks_per_stage = (1,) * len(blocks) if isinstance(blocks, (list, tuple)) else 1
    if config.data.name == "imagenet2012":  # the generated archives hold a few images per class
        config.data.train_limit, config.data.test_limit = 4, 2
        config.train.batch_size = 2
        if config.model.name.startswith("resnet"):
            # At 1/8 width (an 8-channel 7×7/2 stem on 224×224) the TF 2.21 CPU run aborts with "corrupted
            # double-linked list" (heap corruption inside TensorFlow); half width trains.
            config.model.width_multiplier = 0.5
    if config.data.class_limits:  # the generated archives hold a few images per class
        config.data.class_limits = [min(k, 1) for k in config.data.class_limits]
    return config


def config_over(defaults, sections, whole=("model", "optimizer")):
    """A ConfigDict of the schema `defaults` with `sections` over it.

    Dict sections replace the defaults key by key, the `whole` ones (free-form keyword arguments)
    entirely; unknown sections or keys raise, naming the valid ones.
    """
    config = copy.deepcopy(defaults)
    for key, value in sections.items():
        if key not in config:
            raise ValueError(f"Unknown config section {key!r}; expected one of {sorted(config)}.")
        if isinstance(config[key], dict) and key not in whole:
            unknown = sorted(set(value) - set(config[key]))
            if unknown:
                raise ValueError(f"Unknown keys {unknown} in config section {key!r}; expected {sorted(config[key])}.")
            config[key].update(value)
        else:
            config[key] = value
    return ml_collections.ConfigDict(config)


def base_config(**sections):
    """A ConfigDict holding every key of the runner's schema (`schema.DEFAULTS`), then `sections` over it.

    Every key exists, so `--config.data.manual_dir=...`, `--config.data.data_dir=...`,
    `--config.strategy=...` etc. work from the command line for every config.
    Sections given as dicts replace the defaults key by key (`model` and
    `optimizer` wholly: their keys are the model's / optimizer's arguments).
    """
    return config_over(schema.DEFAULTS, sections)
