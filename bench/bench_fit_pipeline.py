"""Does the runner's input pipeline slow `model.fit` down, on the Keras backend this runs on?

Cases, timed side by side in one process on one compiled model, each a `model.fit` of `--block_steps` steps:

* `arrays`: `fit(x, y, batch_size=B)` on NumPy arrays already in memory: batches the pipeline produced
  beforehand (so the values are the same kind), read by Keras's own array adapter;
* `grain`: `fit` on the training stream of `get_datasets(..., pipeline='grain')` (every backend): index
  permutation, decode from the archive's arrays, per-example seeded augmentation, normalisation, batching and
  read-ahead threads, as the runner feeds it;
* `tf_data`: the same with `pipeline='tf_data'` (only where TensorFlow is installed, `--tf_data`).

Rounds alternate the cases (round-robin blocks), so load from other processes hits them alike; the median per-step
wall time of the rounds is reported with its ratio to `arrays` (target <= 1.05: the pipeline is never the
bottleneck). The data set is a full-size CIFAR-10 binary archive of random pixels (`archive_writers`), written
once into `--archive_dir`.

    KERAS_BACKEND=jax python -m bench.bench_fit_pipeline --results_file bench/results/cpu/fit_pipeline.jsonl
"""

import importlib.metadata
import json
import os
import platform
import statistics
import tempfile
import time

from absl import app
from absl import flags

import keras
import numpy as np

from sphere_tf import models
from sphere_tf.data import archive_writers
from sphere_tf.data import datasets

FLAGS = flags.FLAGS
flags.DEFINE_string("model", "small_cnn", "A `sphere_tf.models` name taking 32x32x3 inputs.")
flags.DEFINE_integer("batch_size", 128, "Global batch.")
flags.DEFINE_string("augmentation", "cifar_plus", "An augmentation name (both pipelines know the built-in ones).")
flags.DEFINE_string("archive_dir", os.path.join(tempfile.gettempdir(), "sphere_tf_bench_cifar10"),
                    "Folder for the generated full-size CIFAR-10 archive (written once, then reused).")
flags.DEFINE_integer("block_steps", 30, "Steps per fit call (one block of a case per round).")
flags.DEFINE_integer("num_rounds", 5, "Timed rounds.")
flags.DEFINE_bool("tf_data", False, "Also time the tf.data pipeline (needs TensorFlow).")
flags.DEFINE_string("results_file", None, "Append the JSON lines here as well.")

CIFAR10_TRAIN_PER_BATCH = 10_000
CIFAR10_TEST = 10_000


def archive(folder):
    if not os.path.exists(os.path.join(folder, "cifar-10-binary.tar.gz")):
        os.makedirs(folder, exist_ok=True)
        archive_writers.write_cifar10(folder, per_batch=CIFAR10_TRAIN_PER_BATCH, n_test=CIFAR10_TEST)
    return folder


def stream(folder, pipeline):
    train, _, _ = datasets.get_datasets("cifar10", batch_size=FLAGS.batch_size, manual_dir=folder,
                                        augmentation=FLAGS.augmentation, seed=0, pipeline=pipeline)
    return train


def build_model():
    model = models.create_model(FLAGS.model, input_shape=(32, 32, 3), num_classes=10)
    model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def environment():
    """The host and versions (bench/common.py's `environment` imports TensorFlow; this runs without it)."""
    cpu = ""
    if os.path.exists("/proc/cpuinfo"):
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    return {"cpu": cpu or platform.processor(), "cores": os.cpu_count(), "load_1min": os.getloadavg()[0],
            "keras": keras.__version__, "grain": importlib.metadata.version("grain"), "numpy": np.__version__}


def main(argv):
    del argv
    folder = archive(FLAGS.archive_dir)
    steps = FLAGS.block_steps
    grain_train = stream(folder, "grain")
    it = iter(grain_train)
    batches = [next(it) for _ in range(steps)]
    x = np.concatenate([np.asarray(b[0]) for b in batches])
    y = np.concatenate([np.asarray(b[1]) for b in batches])
    model = build_model()
    cases = {
        "arrays": lambda: model.fit(x, y, batch_size=FLAGS.batch_size, epochs=1, shuffle=False, verbose=0),
        "grain": lambda: model.fit(grain_train, steps_per_epoch=steps, epochs=1, verbose=0),
    }
    if FLAGS.tf_data:
        tf_train = stream(folder, "tf_data")
        cases["tf_data"] = lambda: model.fit(tf_train, steps_per_epoch=steps, epochs=1, verbose=0)
    for fn in cases.values():  # compile and warm every path
        fn()
    times = {name: [] for name in cases}
    for _ in range(FLAGS.num_rounds):
        for name, fn in cases.items():
            start = time.perf_counter()
            fn()
            times[name].append((time.perf_counter() - start) / steps)
    env = environment()
    base = statistics.median(times["arrays"])
    rows = []
    for name, values in times.items():
        median = statistics.median(values)
        rows.append({"bench": "fit_pipeline", "case": name, "backend": keras.backend.backend(),
                     "model": FLAGS.model, "augmentation": FLAGS.augmentation, "batch_size": FLAGS.batch_size,
                     "block_steps": steps, "rounds": FLAGS.num_rounds, "median_s": median,
                     "ratio": median / base, **env})
    print("\n| backend | case | median s/step | ratio to arrays |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['backend']} | {r['case']} | {r['median_s']:.4f} | {r['ratio']:.3f} |")
    if FLAGS.results_file:
        os.makedirs(os.path.dirname(FLAGS.results_file) or ".", exist_ok=True)
        with open(FLAGS.results_file, "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    app.run(main)
