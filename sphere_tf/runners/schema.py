"""The runner's config schema, free of TensorFlow: every section and key of a classification run with its
default (`DEFAULTS`, documented in docs/runner.md), and how a config is merged over a schema and checked.

Tasks that extend the classification run (`runners.face`: `verification`, `training_set`; `runners.adversarial`:
seeds, attacks, black-box sources) declare their own sections beside their task and merge them with the same
`merge_config`, so every key of every task fails the same way: named, with the valid choices.
"""

import copy
import functools

from sphere_tf import validation
from sphere_tf.ops import pixel_normalization
from sphere_tf.training import model as sphere_model_lib

MIXED_PRECISION = ("float32", "mixed_float16", "mixed_bfloat16")
# `train.verbose`: Keras's `fit` values, or 'auto' (the bar on a terminal, `progress.EpochLogger` otherwise).
FIT_VERBOSITY = ("auto", 0, 1, 2)
# The schema: every section, every key, its default. `model` holds the model
# function's keyword arguments (checked against its signature) besides `name`.
DEFAULTS = {
    "seed": 0,
    "data": {
        "name": "fashion_mnist", "source": "auto", "manual_dir": "", "data_dir": "", "augmentation": "none",
        "eval_augmentation": "", "normalization": pixel_normalization.DEFAULT_NORMALIZATION, "train_limit": 0, "test_limit": 0,
        "label_mode": "fine", "val_labels_file": "", "class_limits": [], "label_noise": 0.0,
        "label_noise_type": "symmetric", "pipeline": "auto",
    },
    "model": {"name": "small_cnn"},
    "loss": {"name": "crossentropy", "label_smoothing": 0.0, "hinge_norm": "l1", "data_dependent_mhe": 0.0},
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
        "verbose": "auto", "energy_every_epochs": 1, "energy_layers": None, "energy_power": 1.0,
        "energy_half_space": True,
    },
    "evaluation": {"precise_bn_batches": "auto", "eval_every_steps": 0, "select_best": False,
                   "minority_classes": []},
    "mixed_precision": "float32",
    "strategy": "auto",
    "export": True,
    "export_class_matrix": True,
}
# The runner's own key of a margin head spec (`model.head`), besides the head layer's arguments: split the class
# axis over the devices (`classifier._partial_fc_plan`).
SHARD_CLASSES_KEY = "shard_classes"
# `loss.name`: the loss on the head's logits.
LOSSES = ("crossentropy", "hinge")
# Sections with free-form keys: the model function's and the optimizer class's keyword arguments.
_OPEN_SECTIONS = ("model", "optimizer")


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


def check_numbers(config, prefix=""):
    """Refuses, naming the dotted key, every number of a config (a plain dict, lists and open sections included)
    that no setting of the runner takes: NaN or an infinity, a float beyond float32's range, an int past int32
    (a step count or seed the JAX backend holds as int32 without x64; a size no data set reaches). A config's
    own checks then see only finite numbers in range, whichever keys they read.

    Raises:
        ValueError: naming the key (`train.steps`, `curve.epsilons[2]`).
    """
    if isinstance(config, dict):
        for key, value in config.items():
            check_numbers(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(config, (list, tuple)):
        for index, value in enumerate(config):
            check_numbers(value, f"{prefix}[{index}]")
    elif validation.is_int(config):
        if abs(config) > validation.MAX_INT32:
            raise validation.invalid_argument(prefix, f"an int of magnitude at most {validation.MAX_INT32}", config)
    elif validation.is_real(config):
        validation.real(config, prefix)


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
    if not prefix:
        check_numbers(merged)
    return merged


__all__ = ["DEFAULTS", "FIT_VERBOSITY", "LOSSES", "MIXED_PRECISION", "SHARD_CLASSES_KEY", "ConfigError",
           "check_numbers", "config_errors", "merge_config", "plain_config"]
