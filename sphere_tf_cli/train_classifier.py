r"""Trains an image classifier from a config file; exports a SavedModel: `sphere_tf_cli.run` for classification configs.

  sphere-tf train-classifier --config dcnet/fashion_mnist_tanh_cosine \
      --workdir runs/fashion_mnist [--strategy mirrored] [--backend jax] [--config.data.manual_dir=DIR]

The flags are `sphere_tf_cli.run`'s (see there: `--backend`, `--strategy`, `--dry_run`, `--config.<section>.<key>=`
overrides, resume, export); a config of another task is refused with a one-line message.
"""

import sys

from sphere_tf_cli import _config_flags
from sphere_tf_cli import _quiet_logs

if __name__ == "__main__":
    _quiet_logs.quiet_tensorflow_logs()  # before anything below imports TensorFlow

from absl import app  # noqa: E402

from sphere_tf_cli import run  # noqa: E402

if __name__ == "__main__":
    _ARGV, _OVERRIDES = _config_flags.split_overrides(sys.argv)
    app.run(lambda argv: run.main(argv, _OVERRIDES, expected_task="classification"), argv=_ARGV)
