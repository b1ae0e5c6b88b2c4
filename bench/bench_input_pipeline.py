"""Is the input pipeline ever the bottleneck? A CNN-9 train step fed by tf.data vs one cached batch.

Cases, timed side by side in one process on the same model and traced step:

* `cached`: the step on one batch held in memory (a batch taken from the
  pipeline itself, so the values are the same kind);
* `pipeline`: the step on `next(iterator)` of the real training stream of
  `sphere_tf.data.get_datasets('cifar10', source='manual', augmentation='cifar_plus')`
  (decode from the CIFAR-10 binary archive, per-example seeded pad-4 random
  crop and flip, normalisation, batching, prefetch): what `model.fit` gets;
* `input_only` (diagnostic, not in the ratio): `next(iterator)` alone, the
  pipeline's own sustained rate while nothing else runs (`--input_only_steps`
  batches per round, more than the prefetch buffers hold).

The archive is a full-size `cifar-10-binary.tar.gz` (50,000 training and
10,000 test records of random pixels) written once by
`sphere_tf.data.archive_writers.write_cifar10` into `--archive_dir` and reused.

Timing: rounds of `--block_steps` consecutive steps of each case in turn
(round-robin, so load from other processes hits both alike). A block, not a
single step, per turn: with one step per turn the prefetch buffer would refill
during the cached step and hide the pipeline's cost. The median per-step time
over rounds is reported, as wall and process CPU time, and the ratio
pipeline / cached (target <= 1.05: the pipeline is never the bottleneck).

    python -m bench.bench_input_pipeline --results_file=bench/results/cpu/input_pipeline.jsonl

`--deterministic=false` and `--threadpool_size=N` apply the matching
`tf.data.Options` to the returned training dataset (the knobs to try when the
target is missed).
"""

import os
import statistics
import tempfile
import time

from absl import app
from absl import flags

import keras
import tensorflow as tf

from bench import common
from sphere_tf import models
from sphere_tf.data import archive_writers
from sphere_tf.data import datasets
from sphere_tf.training import runtime

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "model", "cnn9", "A `sphere_tf.models` name taking 32x32x3 inputs (cnn9: SphereNet's CNN-9, as `common.cnn9`)."
)
flags.DEFINE_integer("batch_size", 128, "Batch size.")
flags.DEFINE_string("augmentation", "cifar_plus", "A `sphere_tf.data.preprocessing.AUGMENTATIONS` name.")
flags.DEFINE_string(
    "archive_dir", os.path.join(tempfile.gettempdir(), "sphere_tf_bench_cifar10"),
    "Folder for the generated full-size CIFAR-10 archive (written once, then reused).",
)
flags.DEFINE_integer("num_warmup", 5, "Untimed steps per case before timing.")
flags.DEFINE_integer("num_rounds", 5, "Timed rounds (one block of every case per round).")
flags.DEFINE_integer("block_steps", 20, "Consecutive steps per case per round.")
flags.DEFINE_integer(
    "input_only_steps", 300,
    "Consecutive batches of the input_only case per round: more than the prefetch buffers hold, so the "
    "figure is the pipeline's sustained rate, not a drained buffer.",
)
flags.DEFINE_enum("deterministic", "default", ["default", "true", "false"], "tf.data.Options.deterministic.")
flags.DEFINE_integer("threadpool_size", 0, "tf.data.Options.threading.private_threadpool_size (0: shared pool).")
flags.DEFINE_string("results_file", None, "Write the JSON lines here as well.")
flags.DEFINE_enum(
    "cpu_allocator", "bfc", ["bfc", "default"],
    "TensorFlow's CPU allocator for the whole run (sphere_tf.training.runtime; the trainers use 'bfc').",
)

CIFAR10_TRAIN_PER_BATCH = 10_000  # 5 data_batch files = 50,000 training images
CIFAR10_TEST = 10_000


def cifar10_archive(folder):
    """Writes a full-size random-pixel cifar-10-binary.tar.gz into `folder` unless it is there; returns `folder`."""
    path = os.path.join(folder, "cifar-10-binary.tar.gz")
    if not os.path.exists(path):
        os.makedirs(folder, exist_ok=True)
        archive_writers.write_cifar10(folder, per_batch=CIFAR10_TRAIN_PER_BATCH, n_test=CIFAR10_TEST)
    return folder


def train_stream(folder):
    """The training dataset of `get_datasets('cifar10', source='manual')` with the flags' options; and info."""
    train_ds, _, info = datasets.get_datasets(
        "cifar10", batch_size=FLAGS.batch_size, source="manual", manual_dir=folder,
        augmentation=FLAGS.augmentation, seed=0,
    )
    options = tf.data.Options()
    if FLAGS.deterministic != "default":
        options.deterministic = FLAGS.deterministic == "true"
    if FLAGS.threadpool_size:
        options.threading.private_threadpool_size = FLAGS.threadpool_size
    return train_ds.with_options(options), info


def time_blocks(cases, num_warmup, num_rounds, block_steps):
    """Median/p90 per-step wall and CPU seconds of each `case()`, in round-robin blocks.

    `block_steps` is an int (every case) or a dict of case name -> int.
    """
    if not isinstance(block_steps, dict):
        block_steps = {name: block_steps for name in cases}
    for fn in cases.values():
        for _ in range(num_warmup):
            fn()
    wall = {name: [] for name in cases}
    cpu = {name: [] for name in cases}
    for _ in range(num_rounds):
        for name, fn in cases.items():
            w0, c0 = time.perf_counter(), time.process_time()
            for _ in range(block_steps[name]):
                fn()
            cpu[name].append((time.process_time() - c0) / block_steps[name])
            wall[name].append((time.perf_counter() - w0) / block_steps[name])
    return {name: _summary(wall[name], cpu[name]) for name in cases}


def _summary(wall, cpu):
    """Median and p90 of the wall times, median of the CPU times (seconds per step)."""
    wall = sorted(wall)
    p90 = wall[min(len(wall) - 1, int(0.9 * len(wall)))]
    return {"median_s": statistics.median(wall), "p90_s": p90, "cpu_median_s": statistics.median(cpu)}


def print_table(rows):
    print("\n| case | model | augmentation | median s/step | p90 s/step | ratio (wall) | ratio (CPU) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        if r["median_s_ratio"] is None:
            ratio, cpu = f"{r['share_of_cached_step']:.4f} of a cached step", "n/a"
        else:
            ratio, cpu = f"{r['median_s_ratio']:.3f}", f"{r['cpu_median_s_ratio']:.3f}"
        print(f"| {r['case']} | {r['model']} | {r['augmentation']} | {r['median_s']:.4f} | {r['p90_s']:.4f} | "
              f"{ratio} | {cpu} |")


def main(argv):
    del argv
    if FLAGS.cpu_allocator == "bfc":
        runtime.use_bfc_cpu_allocator()  # before any tensor exists
    env = common.environment()
    folder = cifar10_archive(FLAGS.archive_dir)
    train_ds, info = train_stream(folder)
    iterator = iter(train_ds)
    x, y = next(iterator)
    cached = (tf.identity(x), tf.identity(y))

    keras.utils.set_random_seed(0)
    model = models.create_model(FLAGS.model, input_shape=info["input_shape"], num_classes=info["num_classes"])
    step = common.make_train_step(model)
    step.get_concrete_function(*cached)  # trace once; both cases run this graph

    def cached_step():
        step(*cached).numpy()

    def pipeline_step():
        step(*next(iterator)).numpy()

    def input_only():
        next(iterator)[0].numpy()

    results = time_blocks(
        {"cached": cached_step, "pipeline": pipeline_step, "input_only": input_only},
        FLAGS.num_warmup, FLAGS.num_rounds,
        {"cached": FLAGS.block_steps, "pipeline": FLAGS.block_steps, "input_only": FLAGS.input_only_steps},
    )
    end_load = common.load_average()
    base = results["cached"]
    rows = []
    for name, stats in results.items():
        row = {
            "bench": "input_pipeline", "case": name, "model": FLAGS.model, "augmentation": FLAGS.augmentation,
            "batch_size": FLAGS.batch_size, "train_size": info["train_size"],
            "num_rounds": FLAGS.num_rounds, "num_warmup": FLAGS.num_warmup,
            "block_steps": FLAGS.input_only_steps if name == "input_only" else FLAGS.block_steps,
            "deterministic": FLAGS.deterministic, "threadpool_size": FLAGS.threadpool_size,
            "cpu_allocator": FLAGS.cpu_allocator, **env, "load_average_end": end_load, **stats,
        }
        for key in ("median_s", "cpu_median_s"):
            # input_only is the pipeline alone, not a step: its ratio would mean nothing.
            row[f"{key}_ratio"] = stats[key] / base[key] if name != "input_only" else None
        if name == "input_only":  # the pipeline's sustained time per batch, as a share of a cached step
            row["share_of_cached_step"] = stats["median_s"] / base["median_s"]
        rows.append(row)
    common.write_results(rows, FLAGS.results_file)
    print_table(rows)


if __name__ == "__main__":
    app.run(main)
