"""OPT train-step cost: CNN-6 with Gram-Schmidt OPT vs the plain CNN-6, and QR vs an unrolled GS loop.

CNN-6 is the original OPT code's CIFAR network (wy1iu/OPT): [3×3 conv 64 + BN +
ReLU]×2 + max-pool, three stages, FC 64, classifier.  In the OPT model all six
convolutions (d = 27, 576, …, 576) and the FC-64 layer (d = 4·4·64 = 1024) are
`OPTConv2D`/`OPTDense` with orthogonalization='gram_schmidt'; the classifier is a
plain Dense, as upstream.  The cases are timed round-robin in one process so
machine load hits them alike; the table reports medians and the ratio to the
plain CNN.

A second part times the orthogonalisation alone (forward + backward of one d×d
map): the QR route of `sphere_tf.ops.orthogonal.gram_schmidt` against
`classical_gram_schmidt`, the d-step unrolled loop of the original code.

    python bench/bench_opt.py --results_file bench/results/cpu/opt.jsonl
"""

import statistics
import time

from absl import app
from absl import flags
import keras
import numpy as np
import tensorflow as tf

from bench import common
from sphere_tf import layers as sphere_layers
from sphere_tf.ops import orthogonal

FLAGS = flags.FLAGS
flags.DEFINE_integer("batch_size", 128, "Batch size.")
flags.DEFINE_integer("num_warmup", 3, "Untimed warm-up steps per case.")
flags.DEFINE_integer("num_iters", 10, "Timed steps per case (round-robin).")
flags.DEFINE_bool("jit_compile", False, "XLA-compile the train steps.")
flags.DEFINE_string("orthogonalization", "gram_schmidt", "OPT variant of the model case.")
flags.DEFINE_list("orth_dims", ["64", "576"], "d of the QR-vs-loop orthogonalisation timing.")
flags.DEFINE_string("results_file", None, "JSON-lines output file.")


def cnn6(opt=False, orthogonalization="gram_schmidt", num_classes=10):
    """The OPT paper's CNN-6 for 32×32×3 inputs (64/64/64 channels, FC 64)."""

    def conv(seed):
        if opt:
            return sphere_layers.OPTConv2D(64, 3, padding="same", use_bias=False,
                                           orthogonalization=orthogonalization, seed=seed)
        return keras.layers.Conv2D(64, 3, padding="same", use_bias=False)

    model = keras.Sequential([keras.Input((32, 32, 3))])
    seed = 0
    for _ in range(3):
        for _ in range(2):
            model.add(conv(seed))
            model.add(keras.layers.BatchNormalization())
            model.add(keras.layers.ReLU())
            seed += 1
        model.add(keras.layers.MaxPooling2D(2))
    model.add(keras.layers.Flatten())
    if opt:
        model.add(sphere_layers.OPTDense(64, activation="relu", orthogonalization=orthogonalization, seed=seed))
    else:
        model.add(keras.layers.Dense(64, activation="relu"))
    model.add(keras.layers.Dense(num_classes))
    return model


def _round_robin(cases, num_warmup, num_iters):
    """cases: name -> zero-arg callable returning something with .numpy(). Returns name -> times."""
    for fn in cases.values():
        for _ in range(num_warmup):
            _force(fn())
    times = {name: [] for name in cases}
    for _ in range(num_iters):
        for name, fn in cases.items():
            start = time.perf_counter()
            _force(fn())
            times[name].append(time.perf_counter() - start)
    return times


def _force(result):
    for t in tf.nest.flatten(result):
        t.numpy()


def _summary(samples):
    s = sorted(samples)
    return {"median_s": statistics.median(s), "p90_s": s[min(len(s) - 1, int(0.9 * len(s)))]}


def _orth_step(fn, d, seed=0):
    p = tf.Variable(np.random.default_rng(seed).standard_normal((d, d)).astype(np.float32))
    weights = tf.constant(np.random.default_rng(seed + 1).standard_normal((d, d)).astype(np.float32))

    @tf.function(autograph=False)
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(fn(p) * weights)
        return tape.gradient(loss, p)

    return step


def main(argv):
    del argv
    env = common.environment()
    x, y = common.random_batch(FLAGS.batch_size, (32, 32, 3), 10)
    models = {"plain_cnn6": cnn6(opt=False), f"opt_{FLAGS.orthogonalization}_cnn6": cnn6(True, FLAGS.orthogonalization)}
    steps = {
        name: common.make_train_step(model, keras.optimizers.SGD(0.01, momentum=0.9), FLAGS.jit_compile)
        for name, model in models.items()
    }
    build_start = time.perf_counter()
    times = _round_robin({name: (lambda s=s: s(x, y)) for name, s in steps.items()}, FLAGS.num_warmup, FLAGS.num_iters)
    rows = []
    base = statistics.median(times["plain_cnn6"])
    for name, samples in times.items():
        stats = _summary(samples)
        rows.append({
            "bench": "opt_train_step", "case": name, "batch_size": FLAGS.batch_size, "image": [32, 32, 3],
            "jit_compile": FLAGS.jit_compile, "num_iters": FLAGS.num_iters, **stats,
            "ratio_to_plain": stats["median_s"] / base, **env,
        })
    orth_cases = {}
    for d in (int(v) for v in FLAGS.orth_dims):
        orth_cases[f"qr_gram_schmidt_d{d}"] = _orth_step(orthogonal.gram_schmidt, d)
        orth_cases[f"unrolled_loop_gram_schmidt_d{d}"] = _orth_step(orthogonal.classical_gram_schmidt, d)
    trace_start = time.perf_counter()
    for fn in orth_cases.values():
        _force(fn())  # first call traces; the loop's trace is large
    trace_seconds = time.perf_counter() - trace_start
    orth_times = _round_robin(orth_cases, 1, FLAGS.num_iters)
    for name, samples in orth_times.items():
        d = int(name.rsplit("_d", 1)[1])
        qr = statistics.median(orth_times[f"qr_gram_schmidt_d{d}"])
        stats = _summary(samples)
        rows.append({
            "bench": "opt_orthogonalization_fwd_bwd", "case": name, "d": d, "num_iters": FLAGS.num_iters,
            **stats, "ratio_to_qr": stats["median_s"] / qr, **env,
        })
    rows.append({"bench": "opt_meta", "orth_trace_seconds_all_cases": trace_seconds,
                 "total_seconds": time.perf_counter() - build_start, **env})
    common.write_results(rows, FLAGS.results_file)


if __name__ == "__main__":
    app.run(main)
