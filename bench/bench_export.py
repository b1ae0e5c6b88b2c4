"""Served forward time of exported SavedModels: operator-layer CNN-9 vs the same net with Conv2D.

Every case is `bench.common.cnn9` (3 stages × 3 conv 3×3 with 64/96/128
filters, BN, ReLU, max-pool, dense 256, 10 classes) with a different
convolution: `conv2d` (`keras.layers.Conv2D`, no bias, the baseline),
`tanh_cosine` (`DecoupledConv2D` tanh + cosine, the DCNet default) and
`sphere_linear` (`SphereConv2D` linear). Each model is exported twice:

* `keras`: a plain `model.export(path)` (what a user calls directly), timed
  through the reloaded `serve` endpoint on float inputs;
* `sphere_tf`: `sphere_tf.export.export_model` (the TF Serving layout with
  preprocessing in the graph), timed through the reloaded `serving_default`
  signature on uint8 pixels, returning logits, probabilities and classes.

The SavedModels are reloaded with `tf.saved_model.load` and timed round-robin
(one call of every case per round, each batch size), so load from other
processes hits every case alike; the median wall and process CPU time per call
are reported with the ratio to the `conv2d` model of the same exporter. Each
row also lists the op types of the reloaded graph that are not TensorFlow's
own (custom ops would have to be loaded to serve it: the list must be empty).

    python -m bench.bench_export --results_file bench/results/cpu/export.jsonl
"""

import os
import statistics
import tempfile
import time

from absl import app
from absl import flags

import keras
import numpy as np
import tensorflow as tf
from tensorflow.python.framework import op_def_registry  # pylint: disable=g-direct-tensorflow-import

from bench import common
from sphere_tf import export as export_lib
from sphere_tf import layers as sphere_layers

FLAGS = flags.FLAGS
flags.DEFINE_list("cases", ["tanh_cosine", "sphere_linear"], "Cases to compare with conv2d (always included).")
flags.DEFINE_list("exporters", ["keras", "sphere_tf"], "Exporters: 'keras' (model.export), 'sphere_tf'.")
flags.DEFINE_list("batch_sizes", ["1", "64"], "Batch sizes to time.")
flags.DEFINE_integer("image_size", 32, "Square input size (3 channels).")
flags.DEFINE_integer("num_warmup", 5, "Untimed calls per case and batch size.")
flags.DEFINE_integer("num_iters", 30, "Timed rounds (one call of every case per round).")
flags.DEFINE_integer("train_steps", 2, "Training-mode forward calls before export (moving averages non-trivial).")
flags.DEFINE_string("results_file", None, "Write the JSON lines here as well.")

BASELINE = "conv2d"

_CASES = {
    "conv2d": lambda f: keras.layers.Conv2D(f, 3, padding="same", use_bias=False),
    "tanh_cosine": lambda f: sphere_layers.DecoupledConv2D(f, 3, padding="same", magnitude="tanh",
                                                           angular="cosine"),
    "sphere_linear": lambda f: sphere_layers.SphereConv2D(f, 3, padding="same", angular="linear"),
    "sphere_cosine": lambda f: sphere_layers.SphereConv2D(f, 3, padding="same", angular="cosine"),
    "sphere_sigmoid": lambda f: sphere_layers.SphereConv2D(f, 3, padding="same", angular="sigmoid"),
}


def build(case, image_size, train_steps, seed=0):
    """The case's CNN-9, its BN and E{‖x‖} statistics moved by `train_steps` training-mode calls."""
    if case not in _CASES:
        raise ValueError(f"Unknown case {case!r}; expected one of {sorted(_CASES)}.")
    keras.utils.set_random_seed(seed)
    model = common.cnn9(_CASES[case], input_shape=(image_size, image_size, 3))
    x = np.random.default_rng(seed).uniform(-1, 1, (8, image_size, image_size, 3)).astype(np.float32)
    for _ in range(train_steps):
        model(x, training=True)
    return model


def foreign_ops(concrete):
    """Op types of a traced function (and its library) that are not stock TensorFlow ops.

    The project's compiled kernels register as `SphereTf*`; anything else not in
    TensorFlow's op registry would need a library loaded to serve the graph.
    """
    graph_def = concrete.graph.as_graph_def()
    functions = {f.signature.name for f in graph_def.library.function}
    op_types = {n.op for n in graph_def.node} | {n.op for f in graph_def.library.function for n in f.node_def}
    return sorted(op for op in op_types - functions
                  if op.startswith("SphereTf") or op_def_registry.get(op) is None)


def export_case(model, exporter, directory, case):
    """Exports `model`; returns `(callable(batch) -> outputs, input dtype, foreign op types)`."""
    if exporter == "keras":
        path = os.path.join(directory, "keras", case)
        model.export(path, format="tf_saved_model", verbose=False)
        loaded = tf.saved_model.load(path)
        fn = loaded.signatures["serving_default"]
        name = list(fn.structured_input_signature[1])[0]
        return loaded, (lambda x: fn(**{name: x})), tf.float32, foreign_ops(fn)
    result = export_lib.export_model(model, os.path.join(directory, "sphere_tf"), case, normalization="none",
                                     verify=False, warmup_batch_sizes=())
    loaded = tf.saved_model.load(result.path)
    fn = loaded.signatures["serving_default"]
    return loaded, (lambda x: fn(images=x)), tf.uint8, foreign_ops(fn)


def time_round_robin(fns, num_warmup, num_iters):
    """Median/p90 wall and median CPU seconds per key of `fns` (zero-argument callables)."""
    for fn in fns.values():
        for _ in range(num_warmup):
            common._block(fn())  # pylint: disable=protected-access
    wall = {k: [] for k in fns}
    cpu = {k: [] for k in fns}
    for _ in range(num_iters):
        for key, fn in fns.items():
            w0, c0 = time.perf_counter(), time.process_time()
            common._block(fn())  # pylint: disable=protected-access
            cpu[key].append(time.process_time() - c0)
            wall[key].append(time.perf_counter() - w0)
    out = {}
    for key in fns:
        w = sorted(wall[key])
        out[key] = {"median_s": statistics.median(w), "p90_s": w[min(len(w) - 1, int(0.9 * len(w)))],
                    "cpu_median_s": statistics.median(cpu[key])}
    return out


def main(argv):
    del argv
    cases = [BASELINE] + [c for c in FLAGS.cases if c != BASELINE]
    batch_sizes = [int(b) for b in FLAGS.batch_sizes]
    env = common.environment()
    rng = np.random.default_rng(0)
    size = FLAGS.image_size
    inputs = {b: rng.integers(0, 256, (b, size, size, 3)).astype(np.uint8) for b in batch_sizes}
    served, foreign, keep = {}, {}, []
    with tempfile.TemporaryDirectory() as directory:
        for case in cases:
            model = build(case, size, FLAGS.train_steps)
            for exporter in FLAGS.exporters:
                loaded, fn, dtype, ops_ = export_case(model, exporter, directory, case)
                keep.append(loaded)
                foreign[(exporter, case)] = ops_
                for b in batch_sizes:
                    x = tf.constant(inputs[b], dtype) if dtype == tf.uint8 else tf.constant(inputs[b], tf.float32)
                    served[(exporter, case, b)] = (lambda fn=fn, x=x: fn(x))
        results = time_round_robin(served, FLAGS.num_warmup, FLAGS.num_iters)
    rows = []
    end_load = common.load_average()
    for (exporter, case, b), stats in results.items():
        base = results[(exporter, BASELINE, b)]
        rows.append({
            "bench": "export", "exporter": exporter, "layer": case, "batch_size": b, **stats,
            "median_s_ratio": stats["median_s"] / base["median_s"],
            "cpu_median_s_ratio": stats["cpu_median_s"] / base["cpu_median_s"],
            "foreign_ops": foreign[(exporter, case)], "num_iters": FLAGS.num_iters,
            "image_size": size, **env, "load_average_end": end_load,
        })
    common.write_results(rows, FLAGS.results_file)
    print("\n| exporter | layer | batch | median ms | ratio (wall) | ratio (CPU) | foreign ops |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['exporter']} | {r['layer']} | {r['batch_size']} | {1e3 * r['median_s']:.2f} | "
              f"{r['median_s_ratio']:.3f} | {r['cpu_median_s_ratio']:.3f} | {','.join(r['foreign_ops']) or '-'} |")


if __name__ == "__main__":
    app.run(main)
