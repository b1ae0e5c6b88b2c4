r"""DCNet's adversarial experiment (Tables 7 and 8): trains, attacks and tabulates from a config.

  python -m trainers.train_adversarial --config configs/adversarial/fashion_mnist_cnn9.py \
      --workdir runs/adversarial_fashion_mnist [--config.seeds=[0,1]]

Trains Baseline / SphereConv / BallConv / TanhConv naturally and with FGSM
adversarial training (one seed after another), attacks them white-box and
black-box (from a separately trained baseline) with FGSM and BIM, and writes
`<workdir>/results.json`, `<workdir>/tables.md` (printed at the end) and
`<workdir>/accuracy_vs_epsilon.png`. The config schema is
`sphere_tf.adversarial.DEFAULTS` (docs/adversarial.md). An interrupted run resumes
from the trained models' checkpoints in `<workdir>/checkpoints/`.
"""

from trainers import _quiet_logs

if __name__ == "__main__":
    _quiet_logs.quiet_tensorflow_logs()  # before anything below imports TensorFlow

from absl import app  # noqa: E402
from absl import flags  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from sphere_tf.adversarial import experiment  # noqa: E402
from sphere_tf.training import runtime  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "Experiment configuration.", lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Folder for checkpoints, results.json, tables.md and the plot.")
_CPU_ALLOCATOR = flags.DEFINE_enum(
    "cpu_allocator", "bfc", ["bfc", "default"],
    "TensorFlow's CPU allocator: 'bfc' reuses memory (faster on CPU, see docs/performance.md); "
    "'default' keeps TensorFlow's malloc-based one.",
)
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    if _CPU_ALLOCATOR.value == "bfc":
        runtime.use_bfc_cpu_allocator()  # before any tensor exists
    experiment.run_experiment(_CONFIG.value, _WORKDIR.value)


if __name__ == "__main__":
    app.run(main)
