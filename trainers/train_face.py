r"""Trains a face recognition model on an identity folder from a config; optionally verifies on LFW pairs.

  python -m trainers.train_face --config configs/face/sphereface20_asoftmax.py --workdir runs/sf20 \
      --config.data.manual_dir=CASIA-WebFace-112x96 \
      [--config.verification.pairs=lfw/pairs.txt --config.verification.images=lfw-112x96]

The config is a runner config (docs/runner.md) on `data.name='face_folder'`
plus a `verification` section (docs/face.md); after training, when
`verification.pairs` is set, `workdir/results.json` also holds `lfw_accuracy`,
`lfw_std` and `tar_at_far` (see `trainers.eval_verification`).

A Partial FC head comes from `model.head.sample_rate` / `model.head.shard_classes`
(configs/face/partial_fc_*.py, docs/partial_fc.md); the export leaves the class
matrix out unless `--config.export_class_matrix=True`.

`--dry_run` (no `--workdir` needed) prints the resolved config, the step count (from the identity folder where it
is on this machine, else the published size the config's `training_set` states), the class matrix's memory and an
estimated training time measured on a few steps of a synthetic batch, then exits: nothing is trained or written
(`face.dry_run`, docs/face.md).
"""

import json

from trainers import _quiet_logs

if __name__ == "__main__":
    _quiet_logs.quiet_tensorflow_logs()  # before anything below imports TensorFlow

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
from absl import logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from sphere_tf.runners import face  # noqa: E402
from sphere_tf.training import runtime  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "Face training configuration.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Folder for checkpoints, logs, the export and results.json.")
_STRATEGY = flags.DEFINE_enum(
    "strategy", None, ["auto", "one_device", "mirrored", "multi_worker", "tpu"],
    "tf.distribute strategy; overrides `config.strategy`.",
)
_DRY_RUN = flags.DEFINE_bool(
    "dry_run", False, "Print the resolved config, the step count, the class matrix's memory and an estimated "
    "training time on this machine (measured on a few steps of a synthetic batch), then exit: nothing is trained or "
    "written.")
_DRY_RUN_STEPS = flags.DEFINE_integer("dry_run_steps", 3, "Steps timed by --dry_run (0: no time estimate).")
_DRY_RUN_CLASS_MEMORY_GB = flags.DEFINE_float(
    "dry_run_class_memory_gb", face.DRY_RUN_CLASS_MEMORY_BYTES / 2**30,
    "--dry_run builds no class matrix whose weights and optimizer slots exceed this many GiB (its memory is "
    "printed, the time is not measured).", lower_bound=0.0)
flags.mark_flag_as_required("config")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    runtime.use_bfc_cpu_allocator()  # before any tensor exists
    config = _CONFIG.value
    if _STRATEGY.value is not None:
        with config.unlocked():
            config.strategy = _STRATEGY.value
    if _DRY_RUN.value:
        plan = face.dry_run(config, probe_steps=_DRY_RUN_STEPS.value,
                            class_memory_limit=max(1, int(_DRY_RUN_CLASS_MEMORY_GB.value * 2**30)))
        print(json.dumps(plan["config"], indent=2))
        print("\n".join(face.dry_run_lines(plan)))
        return
    if not _WORKDIR.value:
        raise app.UsageError("--workdir is required (except with --dry_run).")
    logging.info("Config:\n%s", config)
    results = face.train_face(config, _WORKDIR.value)
    if results.get("lfw_accuracy") is not None:
        print(f"Verification: {results['lfw_accuracy']:.2f}% +- {results['lfw_std']:.2f} (10-fold)")
    if "tar_at_far" in results:
        print(face.tar_at_far_table(results["tar_at_far"]))
    logging.info("Results: %s", json.dumps({k: v for k, v in results.items() if k != "history"}))


if __name__ == "__main__":
    app.run(main)
