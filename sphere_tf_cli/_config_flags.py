"""`--config FILE[:ARG]` and `--config.<dotted.key>=VALUE` overrides for the absl mains, without TensorFlow.

`ml_collections.config_flags` applies an override only to a key the config file
already holds (`--config.model.relu=False` on a config without `model.relu` is an
`AttributeError`, `--config.model.head.layer=margin` with no head a `KeyError`), and
a misspelt key ends in chained tracebacks. Here the overrides are taken out of
`argv` before absl parses it and set on the loaded config as plain dicts, creating
absent keys and sections; the runner's `validate` then checks the result exactly
as it checks a config file, so a typo on the command line gets the same one-line
message ("Unknown config key ... Did you mean ...?") as one in a file.

The config file is loaded in `main`, after flag parsing, so `--help` does not
import TensorFlow (a config file's `get_config` builds on `sphere_tf.configs.common`, which
reads the runner's schema).
"""

import ast
import os
import sys

PREFIX = "--config."


class ConfigFlagError(ValueError):
    """A config file that cannot be loaded or an override value that cannot be parsed."""


def split_overrides(argv):
    """`argv` without its `--config.KEY=VALUE` / `--config.KEY VALUE` items, and those as (dotted key, text).

    A bare `--config.KEY` (no value, next item a flag or absent) means True, as
    absl's boolean flags do; a negative number is a value, not a flag.
    """
    rest, overrides = [], []
    items = iter(enumerate(argv))
    for i, item in items:
        if not item.startswith(PREFIX):
            rest.append(item)
            continue
        key, equals, value = item[len(PREFIX):].partition("=")
        if not equals:
            if i + 1 < len(argv) and (not argv[i + 1].startswith("-") or _is_number(argv[i + 1])):
                value = next(items)[1]
            else:
                value = "True"
        if not key:
            raise ConfigFlagError(f"Empty config key in {item!r}; expected --config.<section>.<key>=VALUE.")
        overrides.append((key, value))
    return rest, overrides


def _is_number(text):
    try:
        float(text)
    except ValueError:
        return False
    return True


def load_config_file(spec):
    """`get_config(ARG)` (or `get_config()`) of the config `spec` = 'FILE[:ARG]' or 'NAME[:ARG]' (a packaged
    config's name, `sphere_tf.configs.config_path`), as plain dicts.

    The config file's folder is added to the end of `sys.path`, so a config can import a module
    beside it, e.g. one that registers a user's data set or model (`register_dataset`, `register_model`).
    """
    # Here, not at the top: `sphere_tf` imports Keras, which must wait for the backend choice (`run.select_backend`).
    from sphere_tf import configs  # noqa: PLC0415

    path, _, arg = spec.partition(":")
    try:
        path = configs.config_path(path)
        folder = os.path.dirname(os.path.abspath(path))
        if folder not in sys.path:
            sys.path.append(folder)  # last: never shadows an installed module
        module = configs.load_module(path, module_name="sphere_tf_config_file")
    except configs.ConfigNotFoundError as error:
        raise ConfigFlagError(str(error)) from None
    config = module.get_config(arg) if arg else module.get_config()
    return to_plain(config)


def to_plain(value):
    """ConfigDict / nested tuples -> plain dicts and lists."""
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    return value


def parse_value(text, like, key):
    """The override `text` as a Python value: a string where the key holds (or defaults to) a string, else
    a Python literal (`False`, `3`, `1e-3`, `[0, 1]`, `None`; `true`/`false` in any case), else the text."""
    if isinstance(like, str):
        return text
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        if isinstance(like, (bool, int, float, list, dict)):
            raise ConfigFlagError(
                f"Invalid value for --config.{key}: expected a {type(like).__name__}. Received: {text!r}") from None
        return text
    if isinstance(like, float) and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    return value


def _lookup(tree, path):
    for part in path:
        if not isinstance(tree, dict) or part not in tree:
            return None
        tree = tree[part]
    return tree


def apply_overrides(config, overrides, defaults=None):
    """Sets each (dotted key, text) of `overrides` on the plain dict `config`, creating absent keys and
    sections (a None section such as `model.head` becomes a dict); values are typed after the value in
    `config`, else the one in the schema `defaults`, else parsed as literals. Returns `config`."""
    for key, text in overrides:
        path = key.split(".")
        like = _lookup(config, path)
        if like is None and defaults is not None:
            like = _lookup(defaults, path)
        value = parse_value(text, like, key)
        node = config
        for part in path[:-1]:
            if not isinstance(node.get(part), dict):
                node[part] = {}
            node = node[part]
        node[path[-1]] = value
    return config


def user_errors():
    """The errors a run reports as one `Error:` line (`exit_with`) rather than a traceback: their messages name
    the config key, the file, the workdir or the step and what to do (a bad config, a workdir of another run or
    held by a running one, missing or damaged data, lost or unreadable checkpoints, a full disk, a diverged run)."""
    from sphere_tf import runners  # noqa: PLC0415  (after the backend is chosen: these import Keras)
    from sphere_tf.data import errors as data_errors  # noqa: PLC0415
    from sphere_tf.training import checkpoint  # noqa: PLC0415
    from sphere_tf.training import workdir_lock  # noqa: PLC0415

    return (ConfigFlagError, runners.ConfigError, checkpoint.ConfigMismatchError, workdir_lock.WorkdirLockedError,
            data_errors.DataNotFoundError, data_errors.CorruptDataError, checkpoint.CorruptCheckpointError,
            checkpoint.DiskFullError, checkpoint.NonFiniteError)


def exit_with(error):
    """Ends the program with `error`'s message on one line of stderr (no traceback) and status 1."""
    message = " ".join(str(error).split("\n"))
    if isinstance(error, KeyError) and message.startswith(("'", '"')):
        message = message[1:-1]
    sys.exit(f"Error: {message}")
