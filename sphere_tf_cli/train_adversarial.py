r"""DCNet's adversarial experiment (Tables 7 and 8): trains, attacks and tabulates from a config.

  sphere-tf train-adversarial --config adversarial/fashion_mnist_cnn9 \
      --workdir runs/adversarial_fashion_mnist [--config.seeds=[0,1]]

Trains Baseline / SphereConv / BallConv / TanhConv naturally and with FGSM
adversarial training (one seed after another), attacks them white-box and
black-box (from a separately trained baseline) with FGSM and BIM, and writes
`<workdir>/results.json`, `<workdir>/tables.md` (printed at the end) and, where matplotlib is
installed, `<workdir>/accuracy_vs_epsilon.png`. Runs on TensorFlow, JAX and PyTorch (`--backend`). The config
schema is
`sphere_tf.runners.adversarial.DEFAULTS` (docs/adversarial.md). An interrupted run resumes
from the trained models' checkpoints in `<workdir>/checkpoints/`.

This is `sphere_tf_cli.run` for configs of the runner's `adversarial` task (the flags are its: `--dry_run` lists every
model the experiment would train with its steps and an estimated training time); a config of another task is
refused in one line.
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
    app.run(lambda argv: run.main(argv, _OVERRIDES, expected_task="adversarial"), argv=_ARGV)
