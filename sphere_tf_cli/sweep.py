r"""Runs one config over variants and seeds and aggregates the results (mean ± std).

  sphere-tf sweep --config repro/fashion_mnist_no_relu \
      --workdir runs/repro/no_relu --seeds 0,1,2 \
      [--variants "operator=conv2d,relu=False;operator=sphere,relu=False"] \
      [--summary reproductions/results/fashion_mnist_no_relu.json]
  sphere-tf sweep --config repro/fashion_mnist_no_relu --dry_run [--dry_run_steps 3]

Each (variant, seed) is one `classifier.train_and_evaluate` run of
`get_config(variant)` with `config.seed = seed`, in `<workdir>/<variant>/seed_<n>/`
(a finished run is not trained again, an interrupted one resumes). Without
`--variants` the config module's `SWEEP_VARIANTS` list is used. The summary
(JSON, and a Markdown table beside it) holds, per variant, every run's test
accuracy, final-epoch history values (loss, accuracy, `energy/total`, ...), wall
and process CPU seconds, and their mean and sample standard deviation (ddof 1)
over the seeds.

The runs are sequential: one process trains them one after another (variant by
variant, each variant's seeds in order).

`--dry_run` (no `--workdir` or `--summary` needed) prints what the sweep would
run and exits, training and writing nothing: the keys of the resolved config
that differ between the variants and each variant's values for them (not the
whole config per variant; `sphere_tf_cli.train_classifier --config FILE:VARIANT
--dry_run` prints one variant's), every (variant, seed) run with its step count,
a step time measured once per variant (`--dry_run_steps` steps on a synthetic
batch, as `train_classifier --dry_run`; a variant's seeds share it) and the
sweep's estimated training time, the sum over its runs. A bad variant fails as
it fails the sweep, before any model is built.
"""

import os

from sphere_tf_cli import _config_flags
from sphere_tf_cli import _quiet_logs

if __name__ == "__main__":
    _quiet_logs.quiet_tensorflow_logs()  # before anything below imports TensorFlow

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

from sphere_tf.runners import sweep  # noqa: E402

_CONFIG = flags.DEFINE_string("config", None, "Config file (a `get_config(arg)` module).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Folder holding `<variant>/seed_<n>/` run folders.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds (integers).")
_VARIANTS = flags.DEFINE_string(
    "variants", None, "';'-separated config arguments, one per variant (default: the config's SWEEP_VARIANTS).")
_SUMMARY = flags.DEFINE_string("summary", None, "Summary JSON path (default `<workdir>/summary.json`); a .md beside it.")
_DRY_RUN = flags.DEFINE_bool(
    "dry_run", False, "Print what each variant changes, every (variant, seed) run with its steps and the sweep's "
    "estimated training time on this machine (each variant's step measured once on a synthetic batch), then "
    "exit: nothing is trained or written.")
_DRY_RUN_STEPS = flags.DEFINE_integer("dry_run_steps", 3, "Steps timed per variant by --dry_run (0: no time estimate).")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    if not _CONFIG.value:
        raise app.UsageError("--config is required.")
    if not _WORKDIR.value and not _DRY_RUN.value:
        raise app.UsageError("--workdir is required (except with --dry_run).")
    module = sweep.load_config_module(_CONFIG.value)
    if _VARIANTS.value is not None:
        variants = [v.strip() for v in _VARIANTS.value.split(";")]
    else:
        variants = list(getattr(module, "SWEEP_VARIANTS", [""]))
    if _DRY_RUN.value:
        plan = sweep.dry_run(_CONFIG.value, variants, _SEEDS.value, probe_steps=_DRY_RUN_STEPS.value)
        print("\n".join(sweep.dry_run_lines(plan)))
        return
    try:
        summary = sweep.run_sweep(_CONFIG.value, variants, _SEEDS.value, _WORKDIR.value)
    except _config_flags.user_errors() as error:  # one `Error:` line, as `sphere-tf run` prints it
        _config_flags.exit_with(error)
    path = _SUMMARY.value or os.path.join(_WORKDIR.value, "summary.json")
    sweep.write_summary(summary, path)
    print(sweep.markdown_table(summary))
    print(f"Summary: {path}")


if __name__ == "__main__":
    app.run(main)
