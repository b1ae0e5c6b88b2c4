r"""Trains a face recognition model on an identity folder from a config; optionally verifies on LFW pairs.

  sphere-tf train-face --config face/sphereface20_asoftmax --workdir runs/sf20 \
      --config.data.manual_dir=CASIA-WebFace-112x96 \
      [--config.verification.pairs=lfw/pairs.txt --config.verification.images=lfw-112x96]

The config is a runner config (docs/runner.md) on `data.name='face_folder'`
plus a `verification` section (docs/face.md); after training, when
`verification.pairs` is set, `workdir/results.json` also holds `lfw_accuracy`,
`lfw_std` and `tar_at_far` (see `sphere_tf_cli.eval_verification`).

A Partial FC head comes from `model.head.sample_rate` / `model.head.shard_classes`
(sphere_tf/configs/face/partial_fc_*.py, docs/partial_fc.md); the export leaves the class
matrix out unless `--config.export_class_matrix=True`.

`--dry_run` (no `--workdir` needed) prints the resolved config, the step count (from the identity folder where it
is on this machine, else the published size the config's `training_set` states), the class matrix's memory and an
estimated training time measured on a few steps of a synthetic batch, then exits: nothing is trained or written
(`face.dry_run`, docs/face.md).

This is `sphere_tf_cli.run` for configs of the runner's `face` task (the flags are its, with
`--dry_run_class_memory_gb`); a config of another task is refused in one line.
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
    app.run(lambda argv: run.main(argv, _OVERRIDES, expected_task="face"), argv=_ARGV)
