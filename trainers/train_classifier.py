r"""Trains an image classifier from a config file; exports a SavedModel: `trainers.run` for classification configs.

  python -m trainers.train_classifier --config configs/dcnet/fashion_mnist_tanh_cosine.py \
      --workdir runs/fashion_mnist [--strategy mirrored] [--backend jax] [--config.data.manual_dir=DIR]

The flags are `trainers.run`'s (see there: `--backend`, `--strategy`, `--dry_run`, `--config.<section>.<key>=`
overrides, resume, export); a config of another task is refused with a one-line message.
"""

import sys

from trainers import _config_flags
from trainers import _quiet_logs

if __name__ == "__main__":
    _quiet_logs.quiet_tensorflow_logs()  # before anything below imports TensorFlow

from absl import app  # noqa: E402

from trainers import run  # noqa: E402

if __name__ == "__main__":
    _ARGV, _OVERRIDES = _config_flags.split_overrides(sys.argv)
    app.run(lambda argv: run.main(argv, _OVERRIDES, expected_task="classification"), argv=_ARGV)
