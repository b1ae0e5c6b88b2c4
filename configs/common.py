"""Helpers shared by the experiment configs."""

import copy

import ml_collections

from sphere_tf.training import recipe


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


def quick_train(config):
    """Shrinks a config for a two-step smoke run (used by every config's `quick` variant)."""
    config.data.train_limit = 64
    config.data.test_limit = 32
    config.train.batch_size = 32
    config.train.epochs = 1
    config.train.steps_per_epoch = 2
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
    """A ConfigDict holding every key of the runner's schema (`recipe.DEFAULTS`), then `sections` over it.

    Every key exists, so `--config.data.manual_dir=...`, `--config.data.data_dir=...`,
    `--config.strategy=...` etc. work from the command line for every config.
    Sections given as dicts replace the defaults key by key (`model` and
    `optimizer` wholly: their keys are the model's / optimizer's arguments).
    """
    return config_over(recipe.DEFAULTS, sections)
