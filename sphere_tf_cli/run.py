r"""The runner's main: runs any config's task (`sphere_tf.runners`): trains, evaluates, exports.

  sphere-tf run --config dcnet/fashion_mnist_tanh_cosine \
      --workdir runs/fashion_mnist [--strategy mirrored] [--backend jax] [--config.data.manual_dir=DIR]
  sphere-tf run --config adversarial/fashion_mnist_cnn9 --workdir runs/adversarial

The config's top-level `task` picks what runs: `classification` (the default: train an image classifier, export
a SavedModel), `adversarial` (DCNet's Tables 7 and 8), `face` (train on an identity folder, verify on LFW pairs);
`sphere_tf_cli.train_classifier`, `sphere_tf_cli.train_adversarial` and `sphere_tf_cli.train_face` are this main held to one
task (a config of another task is refused in one line).

`--backend` picks the Keras backend (tensorflow, jax, torch; default: `KERAS_BACKEND`,
else Keras's own default, TensorFlow). Only the TensorFlow backend needs TensorFlow: the others read their data
with Grain (`data.pipeline`) and write NumPy step checkpoints. The TF Serving export (`export=True`) needs
TensorFlow installed whatever the backend (on JAX and PyTorch it reloads `checkpoints/model.keras` under
TensorFlow in a child process); where it is not installed, run with `--config.export=False` and export later
(`sphere-tf export`).

`--config.<section>.<key>=VALUE` sets any key of the runner's schema
(docs/runner.md), whether the config file holds it or not (`--config.model.relu=False`,
`--config.model.head.layer=margin`, `--config.data.data_dir=` for a
tensorflow-datasets folder); a mistake there, a bad config or missing data is
reported on one line (with the valid choices) and leaves no workdir behind.

The resolved config is written to `<workdir>/config.json` (a workdir holding a
different config is refused, naming the differing keys); an interrupted run
resumes from its last step checkpoint in `<workdir>/checkpoints/train`, and a
finished one is not trained again. A second run on a workdir that a live run holds (`<workdir>/run.lock`) is
refused on one line naming that run's pid and host.

TensorFlow's C++ and absl INFO lines (oneDNN notices, XLA cluster messages, ...)
are not printed; `--verbosity=0` brings them back. On a terminal Keras shows its
progress bar; otherwise (a CI log, `> file`) one line per epoch.
"""

import importlib.util
import json
import os
import sys

from sphere_tf_cli import _config_flags
from sphere_tf_cli import _quiet_logs

if __name__ == "__main__":
    _quiet_logs.quiet_tensorflow_logs()  # before anything below imports TensorFlow

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
from absl import logging  # noqa: E402

# sphere_tf (hence TensorFlow) and the config file are loaded in `main`, after flag parsing: `--help` is fast.
_CONFIG = flags.DEFINE_string(
    "config", None, "Run configuration (its `task` key picks the task): a config file, FILE[:ARG] (`get_config(ARG)`); override any key of "
    "the schema (docs/runner.md) with --config.<section>.<key>=VALUE.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Folder for checkpoints, logs and the export.")
_CPU_ALLOCATOR = flags.DEFINE_enum(
    "cpu_allocator", "bfc", ["bfc", "default"],
    "TensorFlow's CPU allocator: 'bfc' reuses memory (faster on CPU, see docs/performance.md); "
    "'default' keeps TensorFlow's malloc-based one.",
)
_STRATEGY = flags.DEFINE_enum(
    "strategy", None, ["auto", "one_device", "mirrored", "multi_worker", "tpu"],
    "tf.distribute strategy; overrides `config.strategy` (multi_worker reads TF_CONFIG). Other backends than "
    "TensorFlow: auto or one_device.",
)
# Keras backend -> (the module it imports, the distribution to install); the package's own table
# (sphere_tf.dependencies.BACKEND_PACKAGES) is not importable before the backend is chosen, Keras loads with it.
BACKENDS = {"tensorflow": ("tensorflow", "tensorflow-cpu"), "jax": ("jax", "jax[cpu]"), "torch": ("torch", "torch")}
_BACKEND = flags.DEFINE_enum(
    "backend", None, list(BACKENDS),
    "Keras backend of the run; default: the KERAS_BACKEND environment variable, else Keras's default (tensorflow).",
)
# Multi-process JAX (keras.distribution): every process runs this command with the same flags but its own id.
_COORDINATOR_ADDRESS = flags.DEFINE_string(
    "coordinator_address", None, "Multi-process training on JAX: process 0's host:port (every process the same); "
    "default: KERAS_DISTRIBUTION_JOB_ADDRESSES.")
_NUM_PROCESSES = flags.DEFINE_integer(
    "num_processes", None, "Multi-process training on JAX: the number of processes; default: "
    "KERAS_DISTRIBUTION_NUM_PROCESSES, else 1.")
_PROCESS_ID = flags.DEFINE_integer(
    "process_id", None, "Multi-process training on JAX: this process's id in [0, num_processes); default: "
    "KERAS_DISTRIBUTION_PROCESS_ID.")
_DRY_RUN = flags.DEFINE_bool(
    "dry_run", False, "Print the resolved config, the step count and an estimated training time on this machine "
    "(measured on a few steps of a synthetic batch), then exit: nothing is trained or written.")
_DRY_RUN_STEPS = flags.DEFINE_integer("dry_run_steps", 3, "Steps timed by --dry_run (0: no time estimate).")
_DRY_RUN_CLASS_MEMORY_GB = flags.DEFINE_float(
    "dry_run_class_memory_gb", None,
    "The face task's --dry_run builds no class matrix whose weights and optimizer slots exceed this many GiB (its "
    "memory is printed, the time is not measured); default: runners.face.DRY_RUN_CLASS_MEMORY_BYTES (2 GiB).",
    lower_bound=0.0)
flags.mark_flag_as_required("config")


def select_backend(name):
    """Sets `KERAS_BACKEND` to `name` (None: keep the environment's) before Keras is imported; checks that
    TensorFlow, which the data pipeline and the export need on every backend, is installed.

    Raises:
        ValueError: Keras is already imported with another backend, or TensorFlow is missing (the message names
            the backend and what to install).
    """
    if name is not None:
        module, distribution = BACKENDS[name]
        if importlib.util.find_spec(module) is None:
            raise ValueError(f"--backend={name}: {module} is not installed in this environment ({sys.executable}); "
                             f"install it (pip install {distribution}) or pick an installed backend.")
        keras_module = sys.modules.get("keras")
        if keras_module is not None and keras_module.backend.backend() != name:
            raise ValueError(f"--backend={name}: Keras is already imported with backend "
                             f"{keras_module.backend.backend()!r}; the backend must be chosen before Keras loads.")
        os.environ["KERAS_BACKEND"] = name


def _tensorflow_allocator_applies():
    """Whether TensorFlow runs here (its backend, or tf.data beside another one): its CPU allocator then matters."""
    return importlib.util.find_spec("tensorflow") is not None


def start_processes():
    """Joins the other processes of a multi-process JAX run (flags, else KERAS_DISTRIBUTION_*); one line for a
    backend that cannot (PyTorch: no keras.distribution; TensorFlow: tf.distribute's multi_worker strategy)."""
    from sphere_tf.training import multi_device  # noqa: PLC0415 (after the backend is chosen)

    settings = multi_device.process_settings(_COORDINATOR_ADDRESS.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
    if not settings.multi_process:
        return
    import keras  # noqa: PLC0415

    backend = keras.backend.backend()
    if backend == "tensorflow":
        raise ValueError(f"--num_processes={settings.num_processes}: on the TensorFlow backend several processes "
                         "train through tf.distribute: --strategy=multi_worker with TF_CONFIG (docs/runner.md); "
                         "--num_processes is keras.distribution's, on JAX.")
    multi_device.check_backend_request(backend, settings.num_processes)
    multi_device.initialize(settings)


def main(argv, overrides=(), expected_task=None):
    """Runs the config's task; `expected_task` (the task-named mains) refuses a config of another task."""
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    try:
        select_backend(_BACKEND.value)  # before anything below imports Keras
    except ValueError as error:
        _config_flags.exit_with(error)
    try:
        start_processes()  # before anything computes with JAX
    except ValueError as error:
        _config_flags.exit_with(error)
    bfc = _CPU_ALLOCATOR.value == "bfc" and _tensorflow_allocator_applies()
    if bfc:
        from sphere_tf.training import runtime  # noqa: PLC0415

        # Before TensorFlow creates its CPU device (the strategy below does): the allocator is chosen then, and
        # where oneDNN does not pool CPU memory already (AVX2 hosts) asking afterwards is too late.
        runtime.request_bfc_cpu_allocator()
    from sphere_tf import runners  # noqa: PLC0415
    from sphere_tf.runners import classifier  # noqa: PLC0415

    try:
        task_name, config = runners.split_task(_config_flags.load_config_file(_CONFIG.value))
        if expected_task is not None and task_name != expected_task:
            raise runners.ConfigError(f"The config's task is {task_name!r}, not {expected_task!r}: run it with "
                                      "sphere-tf run.")
        task = runners.get_task(task_name)
        _config_flags.apply_overrides(config, overrides, task.schema())
        strategy = None
        if _STRATEGY.value is not None:
            if "strategy" not in task.schema():
                raise runners.ConfigError(f"--strategy: the {task_name!r} task trains under no strategy key.")
            config["strategy"] = _STRATEGY.value
        if task_name == "classification":
            # The strategy first (MultiWorkerMirroredStrategy configures collective ops at startup), then the
            # allocator, before any tensor exists.
            strategy = classifier.make_run_strategy(config)
        if bfc:
            runtime.use_bfc_cpu_allocator()  # checks that the request above took effect
        if _DRY_RUN.value:
            options = {}
            if _DRY_RUN_CLASS_MEMORY_GB.value is not None:
                if task_name != "face":
                    raise runners.ConfigError(f"--dry_run_class_memory_gb: the {task_name!r} task has no class "
                                              "matrix budget (a face task's flag).")
                options["class_memory_limit"] = max(1, int(_DRY_RUN_CLASS_MEMORY_GB.value * 2**30))
            plan = task.dry_run(config, probe_steps=_DRY_RUN_STEPS.value, **options)
            print(json.dumps(plan["config"], indent=2))
            print("\n".join(task.dry_run_lines(plan)))
            return
        if not _WORKDIR.value:
            raise app.UsageError("--workdir is required (except with --dry_run).")
        logging.info("Config (task %s):\n%s", task_name, json.dumps(config, indent=2))
        if strategy is not None:
            results = classifier.train_and_evaluate(config, _WORKDIR.value, strategy=strategy)
        else:
            results = task.run(config, _WORKDIR.value)
    except _config_flags.user_errors() as error:
        # A bad config, a busy workdir, lost or unreadable checkpoints, a full disk, a diverged run, a damaged data
        # file or an out-of-range label: the message names the key, file or step and what to do, which a
        # traceback would bury.
        _config_flags.exit_with(error)
    for line in task.result_lines(results):
        print(line)
    logging.info("Results: %s", json.dumps({k: v for k, v in results.items() if k != "history"}))


if __name__ == "__main__":
    _ARGV, _OVERRIDES = _config_flags.split_overrides(sys.argv)
    app.run(lambda argv: main(argv, _OVERRIDES), argv=_ARGV)
