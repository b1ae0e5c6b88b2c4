r"""DCNet's adversarial experiment (Tables 7 and 8): trains, attacks and tabulates from a config.

  python -m trainers.train_adversarial --config configs/adversarial/fashion_mnist_cnn9.py \
      --workdir runs/adversarial_fashion_mnist [--config.seeds=[0,1]]

Trains Baseline / SphereConv / BallConv / TanhConv naturally and with FGSM
adversarial training (one seed after another), attacks them white-box and
black-box (from a separately trained baseline) with FGSM and BIM, and writes
`<workdir>/results.json`, `<workdir>/tables.md` (printed at the end) and
`<workdir>/accuracy_vs_epsilon.png`. The config schema is
`sphere_tf.runners.adversarial.DEFAULTS` (docs/adversarial.md). An interrupted run resumes
from the trained models' checkpoints in `<workdir>/checkpoints/`.
"""

import json
import sys

from trainers import _config_flags
from trainers import _quiet_logs

if __name__ == "__main__":
    _quiet_logs.quiet_tensorflow_logs()  # before anything below imports TensorFlow

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

# sphere_tf (hence TensorFlow) and the config file are loaded in `main`, after flag parsing: `--help` is fast.
_CONFIG = flags.DEFINE_string(
    "config", None, "Experiment configuration: a config file, FILE[:ARG] (`get_config(ARG)`); override any key "
    "of the schema (docs/adversarial.md) with --config.<section>.<key>=VALUE.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Folder for checkpoints, results.json, tables.md and the plot.")
_CPU_ALLOCATOR = flags.DEFINE_enum(
    "cpu_allocator", "bfc", ["bfc", "default"],
    "TensorFlow's CPU allocator: 'bfc' reuses memory (faster on CPU, see docs/performance.md); "
    "'default' keeps TensorFlow's malloc-based one.",
)
_DRY_RUN = flags.DEFINE_bool(
    "dry_run", False, "Print the resolved config, every model the experiment trains with its steps, and an "
    "estimated training time on this machine (each step measured on a synthetic batch), then exit: nothing is "
    "trained or written.")
_DRY_RUN_STEPS = flags.DEFINE_integer("dry_run_steps", 3, "Steps timed per model by --dry_run (0: no estimate).")
flags.mark_flag_as_required("config")


def main(argv, overrides=()):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    from sphere_tf.runners import adversarial as experiment  # noqa: PLC0415
    from sphere_tf.data import errors as data_errors  # noqa: PLC0415
    from sphere_tf.training import checkpoint  # noqa: PLC0415
    from sphere_tf.runners import schema  # noqa: PLC0415
    from sphere_tf.runners import tasks  # noqa: PLC0415
    from sphere_tf.training import runtime  # noqa: PLC0415

    try:
        config = _config_flags.load_config_file(_CONFIG.value)
        config = tasks.without_task_key(config, "adversarial")
        _config_flags.apply_overrides(config, overrides, experiment.DEFAULTS)
        if _CPU_ALLOCATOR.value == "bfc":
            runtime.use_bfc_cpu_allocator()  # before any tensor exists
        if _DRY_RUN.value:
            plan = experiment.dry_run(config, probe_steps=_DRY_RUN_STEPS.value)
            print(json.dumps(plan["config"], indent=2))
            print("\n".join(experiment.dry_run_lines(plan)))
            return
        if not _WORKDIR.value:
            raise app.UsageError("--workdir is required (except with --dry_run).")
        experiment.run_experiment(config, _WORKDIR.value)
    except (_config_flags.ConfigFlagError, schema.ConfigError, checkpoint.ConfigMismatchError,
            data_errors.DataNotFoundError) as error:
        _config_flags.exit_with(error)


if __name__ == "__main__":
    _ARGV, _OVERRIDES = _config_flags.split_overrides(sys.argv)
    app.run(lambda argv: main(argv, _OVERRIDES), argv=_ARGV)
