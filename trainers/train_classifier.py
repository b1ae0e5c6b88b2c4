r"""Trains an image classifier from a config file; exports a SavedModel.

  python -m trainers.train_classifier --config configs/dcnet/fashion_mnist_tanh_cosine.py \
      --workdir runs/fashion_mnist [--strategy mirrored] [--config.data.manual_dir=DIR]

Every config holds every key of the runner's schema (docs/runner.md), so any
`--config.<section>.<key>=...` override works, e.g. `--config.data.data_dir=`
for a tensorflow-datasets folder.

The resolved config is written to `<workdir>/config.json` (a workdir holding a
different config is refused, naming the differing keys); an interrupted run
resumes from its last step checkpoint in `<workdir>/checkpoints/train`, and a
finished one is not trained again.

TensorFlow's C++ and absl INFO lines (oneDNN notices, XLA cluster messages, ...)
are not printed; `--verbosity=0` brings them back. On a terminal Keras shows its
progress bar; otherwise (a CI log, `> file`) one line per epoch.
"""

import json

from trainers import _quiet_logs

if __name__ == "__main__":
    _quiet_logs.quiet_tensorflow_logs()  # before anything below imports TensorFlow

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
from absl import logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from sphere_tf.training import classifier  # noqa: E402
from sphere_tf.training import runtime  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "Training configuration.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Folder for checkpoints, logs and the export.")
_CPU_ALLOCATOR = flags.DEFINE_enum(
    "cpu_allocator", "bfc", ["bfc", "default"],
    "TensorFlow's CPU allocator: 'bfc' reuses memory (faster on CPU, see docs/performance.md); "
    "'default' keeps TensorFlow's malloc-based one.",
)
_STRATEGY = flags.DEFINE_enum(
    "strategy", None, ["auto", "one_device", "mirrored", "multi_worker", "tpu"],
    "tf.distribute strategy; overrides `config.strategy` (multi_worker reads TF_CONFIG).",
)
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    config = _CONFIG.value
    if _STRATEGY.value is not None:
        with config.unlocked():
            config.strategy = _STRATEGY.value
    # The strategy first (MultiWorkerMirroredStrategy configures collective ops at startup), then the
    # allocator, before any tensor exists.
    strategy = classifier.make_run_strategy(config)
    if _CPU_ALLOCATOR.value == "bfc":
        runtime.use_bfc_cpu_allocator()
    logging.info("Config:\n%s", config)
    results = classifier.train_and_evaluate(config, _WORKDIR.value, strategy=strategy)
    logging.info("Results: %s", json.dumps({k: v for k, v in results.items() if k != "history"}))


if __name__ == "__main__":
    app.run(main)
