"""`sphere-tf`: the runner's command line (the absl mains of this package under one command).

    sphere-tf configs [FOLDER]          the packaged paper configs, one line each
    sphere-tf run --config NAME|FILE --workdir DIR [--backend jax] [--config.<section>.<key>=VALUE ...]
    sphere-tf train-classifier | train-adversarial | train-face ...   `run` held to one task
    sphere-tf sweep --config NAME|FILE --workdir DIR [--seeds 3]
    sphere-tf export --workdir DIR --export_base DIR
    sphere-tf eval-verification --workdir DIR --pairs FILE --images DIR
    sphere-tf --version

`sphere-tf COMMAND ...` is `python -m sphere_tf_cli.MODULE ...` (`python -m sphere_tf_cli COMMAND` too); each
command's `--help` lists its flags. A config is named by its path below `sphere_tf/configs/`
(`dcnet/fashion_mnist_tanh_cosine`) or given as a file of your own.

This package is apart from `sphere_tf` on purpose: `import sphere_tf` imports Keras, whose backend is fixed at
that moment, and TensorFlow prints its C++ notices when it is imported; the mains choose the backend (`--backend`)
and quiet the logs first, then import the library. This module imports only the standard library.
"""

import importlib.metadata
import runpy
import sys

# Command -> (the main's module, one line for the command list).
COMMANDS = {
    "run": ("sphere_tf_cli.run", "train, evaluate and export from a config (any task)"),
    "train-classifier": ("sphere_tf_cli.train_classifier", "`run` for classification configs"),
    "train-adversarial": ("sphere_tf_cli.train_adversarial", "`run` for adversarial configs (DCNet Tables 7, 8)"),
    "train-face": ("sphere_tf_cli.train_face", "`run` for face configs (SphereFace)"),
    "sweep": ("sphere_tf_cli.sweep", "a config's variants × seeds, one table"),
    "export": ("sphere_tf_cli.export", "a finished workdir's model as a TF Serving SavedModel (and ONNX, TFLite)"),
    "eval-verification": ("sphere_tf_cli.eval_verification", "LFW / YTF verification of a face workdir"),
    "configs": (None, "list the packaged paper configs"),
}


def _usage():
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: sphere-tf COMMAND [flags]   (sphere-tf COMMAND --help: its flags)", "", "commands:"]
    lines += [f"  {name:<{width}}  {summary}" for name, (_, summary) in COMMANDS.items()]
    lines += ["", "sphere-tf --version: the installed version"]
    return "\n".join(lines)


def _version():
    try:
        return importlib.metadata.version("sphere_tf")
    except importlib.metadata.PackageNotFoundError:  # a source tree on sys.path, not installed
        return "not installed (a source tree)"


def list_configs(argv):
    """`sphere-tf configs [FOLDER]`: each packaged config's name and the first line of its docstring."""
    from sphere_tf_cli import _quiet_logs  # noqa: PLC0415

    _quiet_logs.quiet_tensorflow_logs()  # `sphere_tf.configs` imports the package (Keras, maybe TensorFlow)
    from sphere_tf import configs  # noqa: PLC0415

    if len(argv) > 1 or (argv and argv[0].startswith("-")):
        print("usage: sphere-tf configs [FOLDER]", file=sys.stderr)
        return 2
    names = [name for name in configs.names() if not argv or name.split("/")[0] == argv[0].strip("/")]
    if not names:
        folders = sorted({name.split("/")[0] for name in configs.names()})
        print(f"sphere-tf configs: no folder {argv[0]!r}; the folders are {', '.join(folders)}.", file=sys.stderr)
        return 2
    width = max(len(name) for name in names)
    for name in names:
        print(f"{name:<{width}}  {configs.summary(name)}")
    return 0


def main(argv=None):
    """The `sphere-tf` console command: runs COMMAND's main with the remaining arguments."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0 if argv else 2
    if argv[0] == "--version":
        print(f"sphere-tf {_version()}")
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"sphere-tf: unknown command {command!r}.\n\n{_usage()}", file=sys.stderr)
        return 2
    module = COMMANDS[command][0]
    if module is None:
        return list_configs(rest)
    sys.argv = [f"sphere-tf {command}"] + rest
    # As `python -m module`: the main's `if __name__ == "__main__"` block parses sys.argv and exits.
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


__all__ = ["COMMANDS", "list_configs", "main"]
