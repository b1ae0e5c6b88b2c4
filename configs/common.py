"""Helpers shared by the experiment configs."""

import ml_collections


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
