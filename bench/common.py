"""Shared pieces of the benchmarks: the 9-layer CNN and a train-step timer.

Every benchmark times its cases side by side in one process and reports ratios
to a baseline measured in the same run, never absolute targets.
"""

import json
import os
import platform
import statistics
import time

import keras
import numpy as np
import tensorflow as tf

from bench.networks import cnn9  # noqa: F401  (the benchmarks' network, TensorFlow-free)


def make_train_step(model, optimizer=None, jit_compile=False, loss_fn=None):
    """A `tf.function` train step (forward, loss incl. regularization, backward, update)."""
    optimizer = optimizer or keras.optimizers.Adam(1e-3)
    loss_fn = loss_fn or keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function(jit_compile=jit_compile)
    def step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
            if model.losses:
                loss = loss + tf.add_n(model.losses)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return step


def make_forward(model, jit_compile=False):
    @tf.function(jit_compile=jit_compile)
    def forward(x):
        return model(x, training=False)

    return forward


def time_fn(fn, args, num_warmup=3, num_iters=10):
    """Median and p90 wall time (s) of `fn(*args)`, forcing completion each call."""
    for _ in range(num_warmup):
        _block(fn(*args))
    times = []
    for _ in range(num_iters):
        start = time.perf_counter()
        _block(fn(*args))
        times.append(time.perf_counter() - start)
    times.sort()
    return {"median_s": statistics.median(times), "p90_s": times[min(len(times) - 1, int(0.9 * len(times)))]}


def _block(result):
    for t in tf.nest.flatten(result):
        if hasattr(t, "numpy"):
            t.numpy()


def random_batch(batch_size, image_shape=(32, 32, 3), num_classes=10, seed=0):
    rng = np.random.default_rng(seed)
    x = tf.constant(rng.standard_normal((batch_size,) + tuple(image_shape)).astype(np.float32))
    y = tf.constant(rng.integers(0, num_classes, batch_size).astype(np.int32))
    return x, y


def _cpu_info():
    """(model name, set of feature flags) from /proc/cpuinfo; empty where it does not exist."""
    model, flags = platform.processor(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                elif key.strip() == "flags":
                    flags = set(value.split())
                    break
    except OSError:
        pass
    return model, flags


def load_average():
    """The 1-minute load average (other processes sharing the CPU), or None."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def environment():
    """Where a benchmark ran: CPU model and vector extensions, versions, threads, load at the start."""
    model, flags = _cpu_info()
    return {
        "device": "cpu",
        "machine": platform.machine(),
        "cpu_model": model,
        "cpu_count": os.cpu_count(),
        "avx2": "avx2" in flags,
        "avx512f": "avx512f" in flags,
        "avx512_fp16": "avx512_fp16" in flags,
        "tf": tf.__version__,
        "keras": keras.__version__,
        "threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "load_average_start": load_average(),
    }


def write_results(rows, results_file=None):
    lines = [json.dumps(row, sort_keys=True) for row in rows]
    if results_file:
        with open(results_file, "w") as f:
            f.write("\n".join(lines) + "\n")
    for line in lines:
        print(line)
