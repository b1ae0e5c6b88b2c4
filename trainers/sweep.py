r"""Runs one config over variants and seeds and aggregates the results (mean ± std).

  python -m trainers.sweep --config configs/repro/fashion_mnist_no_relu.py \
      --workdir runs/repro/no_relu --seeds 0,1,2 \
      [--variants "operator=conv2d,relu=False;operator=sphere,relu=False"] \
      [--summary experiments/results/fashion_mnist_no_relu.json]

Each (variant, seed) is one `classifier.train_and_evaluate` run of
`get_config(variant)` with `config.seed = seed`, in `<workdir>/<variant>/seed_<n>/`
(a finished run is not trained again, an interrupted one resumes). Without
`--variants` the config module's `SWEEP_VARIANTS` list is used. The summary
(JSON, and a Markdown table beside it) holds, per variant, every run's test
accuracy, final-epoch history values (loss, accuracy, `energy/total`, ...), wall
and process CPU seconds, and their mean and sample standard deviation (ddof 1)
over the seeds.
"""

import os

from trainers import _quiet_logs

if __name__ == "__main__":
    _quiet_logs.quiet_tensorflow_logs()  # before anything below imports TensorFlow

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

from sphere_tf.training.sweep import load_config_module  # noqa: E402
from sphere_tf.training.sweep import markdown_table  # noqa: E402
from sphere_tf.training.sweep import run_sweep  # noqa: E402
from sphere_tf.training.sweep import write_summary  # noqa: E402

_CONFIG = flags.DEFINE_string("config", None, "Config file (a `get_config(arg)` module).")
_WORKDIR = flags.DEFINE_string("workdir", None, "Folder holding `<variant>/seed_<n>/` run folders.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds (integers).")
_VARIANTS = flags.DEFINE_string(
    "variants", None, "';'-separated config arguments, one per variant (default: the config's SWEEP_VARIANTS).")
_SUMMARY = flags.DEFINE_string("summary", None, "Summary JSON path (default `<workdir>/summary.json`); a .md beside it.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    if not _CONFIG.value or not _WORKDIR.value:
        raise app.UsageError("--config and --workdir are required.")
    module = load_config_module(_CONFIG.value)
    if _VARIANTS.value is not None:
        variants = [v.strip() for v in _VARIANTS.value.split(";")]
    else:
        variants = list(getattr(module, "SWEEP_VARIANTS", [""]))
    summary = run_sweep(_CONFIG.value, variants, _SEEDS.value, _WORKDIR.value)
    path = _SUMMARY.value or os.path.join(_WORKDIR.value, "summary.json")
    write_summary(summary, path)
    print(markdown_table(summary))
    print(f"Summary: {path}")


if __name__ == "__main__":
    app.run(main)
