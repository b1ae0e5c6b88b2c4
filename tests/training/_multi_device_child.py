"""The training runs of one case of tests/training/test_multi_device.py, in a fresh process (JAX fixes its devices
at start).

Usage: python _multi_device_child.py '<json spec>'. The parent sets KERAS_BACKEND=jax, the device count
(XLA_FLAGS=--xla_force_host_platform_device_count=N) and, for a multi-process run, the KERAS_DISTRIBUTION_*
variables. The spec:

* `out`: .npz path for the results (`{p}`: the process id);
* `timeout_s`, `heartbeat_s`: for `multi_device.initialize`; `global_batch` (default 8);
* `bn_probe`: also check BatchNormalization's training-mode statistics on a batch sharded over the devices;
* `runs`: a list of trainings, each from the same initial weights, with
  - `name`, `input` ("numpy" or "grain"), `steps`: train on global batches [`start` (default 0), `steps`) of the
    fixed data, each process feeding its own rows of every global batch;
  - `distributed` (default true): false trains on this process's first device with whole global batches;
  - `only_process`: run it in that process only (a run that is not distributed);
  - `load`: a `.weights.h5` (`{p}`: the process id) to start from;
  - `save_at`, `save`: after global batch `save_at`, save the weights (model and optimizer) and go on;
  - `hang_at`, `marker`, `hang_process`: after global batch `hang_at` (0-based), process `hang_process`
    (default 1) writes the file `marker` and sleeps (the parent kills it there).
"""

import json
import os
import sys
import time

SPEC = json.loads(sys.argv[1])

from sphere_tf.training import multi_device  # noqa: E402  (imports Keras, not JAX's runtime)

started = time.time()
SETTINGS = multi_device.process_settings()
multi_device.initialize(SETTINGS, timeout_s=SPEC.get("timeout_s", 30), heartbeat_timeout_s=SPEC.get("heartbeat_s", 10))
initialized = time.time()

import keras  # noqa: E402
import numpy as np  # noqa: E402

from sphere_tf import layers as sphere_layers  # noqa: E402

PID = SETTINGS.process_id
IMAGE = (6, 6, 3)
CLASSES = 5


def data(rows):
    """Fixed inputs; row i is shifted by (i mod 8)/2, so the shards of a global batch have different statistics
    (BatchNormalization with per-device statistics would train different weights)."""
    rng = np.random.default_rng(1234)
    x = rng.normal(size=(rows,) + IMAGE).astype("float32")
    x += (np.arange(rows) % 8)[:, None, None, None].astype("float32") * 0.5
    y = rng.integers(0, CLASSES, size=(rows,)).astype("int32")
    return x, y


def build():
    keras.utils.set_random_seed(7)
    inputs = keras.Input(IMAGE)
    h = keras.layers.Conv2D(4, 3, padding="same", name="conv")(inputs)
    h = keras.layers.BatchNormalization(name="bn")(h)
    h = keras.layers.ReLU()(h)
    h = sphere_layers.DecoupledConv2D(4, 3, padding="same", name="decoupled")(h)  # tanh x cosine, batch radius
    h = keras.layers.GlobalAveragePooling2D()(h)
    outputs = keras.layers.Dense(CLASSES, name="dense")(h)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def local_rows(x, y, first, last, batch, per_process, pid):
    """Process `pid`'s rows of global batches [first, last): rows [p*b, (p+1)*b) of each."""
    index = np.concatenate([np.arange(s * batch + pid * per_process, s * batch + (pid + 1) * per_process)
                            for s in range(first, last)])
    return x[index], y[index]


def as_input(kind, x, y, per_process):
    if kind == "numpy":
        return dict(x=x, y=y, batch_size=per_process)
    import grain

    return dict(x=grain.MapDataset.source([(x[i], y[i]) for i in range(len(x))]).batch(per_process))


class Hang(keras.callbacks.Callback):
    """After batch `at` of the fit: writes the marker file, then sleeps (the parent kills the process there)."""

    def __init__(self, at, marker):
        super().__init__()
        self.at, self.marker = at, marker

    def on_train_batch_end(self, batch, logs=None):
        if batch == self.at:
            with open(self.marker, "w") as f:
                f.write(str(os.getpid()))
            time.sleep(600)


def bn_probe():
    """BatchNormalization(training=True) under jit on a batch sharded over the devices: its outputs against
    the one-device NumPy reference with the global batch's mean and variance."""
    import jax

    rng = np.random.default_rng(5)
    x = rng.normal(size=(8, 3, 3, 2)).astype("float32") + np.arange(8, dtype="float32")[:, None, None, None]
    bn = keras.layers.BatchNormalization(epsilon=1e-3)
    bn.build(x.shape)
    sharding = keras.distribution.distribution().get_data_layout(x.shape).backend_layout
    xs = jax.device_put(x, sharding)
    fn = jax.jit(lambda t, n, v: bn.stateless_call(t, n, v, training=True))
    out, new_non_trainable = fn([v.value for v in bn.trainable_variables],
                                [v.value for v in bn.non_trainable_variables], xs)
    mean, var = x.mean(axis=(0, 1, 2)), x.var(axis=(0, 1, 2))
    want = (x - mean) / np.sqrt(var + 1e-3)
    shards = sorted({str(s.device) for s in xs.addressable_shards})
    # What per-device statistics would give: each shard normalised with its own mean and variance.
    local = np.concatenate([(part - part.mean(axis=(0, 1, 2))) / np.sqrt(part.var(axis=(0, 1, 2)) + 1e-3)
                            for part in np.split(x, len(shards))])
    return dict(bn_probe_error=float(np.max(np.abs(np.asarray(out) - want))),
                bn_probe_shards=len(xs.addressable_shards), bn_probe_devices=len(shards),
                bn_probe_local_stats_gap=float(np.max(np.abs(local - want))),
                bn_probe_moving_mean_error=float(np.max(np.abs(
                    np.asarray(new_non_trainable[0]) - 0.01 * mean))))


MODELS = {}


def fresh_model(distributed):
    """The model with its initial weights and optimizer state: built once per placement and reset for every later
    run, so its jitted train step is traced once (tracing is most of a run's time)."""
    if distributed not in MODELS:
        model = build()
        model.optimizer.build(model.trainable_variables)
        variables = list(model.variables) + list(model.optimizer.variables)
        MODELS[distributed] = (model, variables, [np.array(v.numpy()) for v in variables])
    model, variables, initial = MODELS[distributed]
    for variable, value in zip(variables, initial):
        variable.assign(value)
    return model


def train(run, x, y, batch, per_process, results):
    """One run of the spec: a fresh model (the same initial weights every time) trained on global batches
    [start, steps), under the distribution or, with `distributed: false`, on this process's first device with
    the whole global batch (the one-device reference, also inside a multi-process run)."""
    name, kind = run["name"], run.get("input", "numpy")
    distributed = run.get("distributed", True)
    keras.distribution.set_distribution(DISTRIBUTION if distributed else None)
    rows = per_process if distributed else batch
    pid = PID if distributed else 0
    model = fresh_model(distributed)
    if run.get("load"):
        model.load_weights(run["load"].format(p=PID))
    t = time.time()
    start, steps = run.get("start", 0), run["steps"]
    segments = [(start, steps)] if run.get("save_at") is None else [(start, run["save_at"]), (run["save_at"], steps)]
    losses = []
    for a, b in segments:
        callbacks = []
        if run.get("hang_at") is not None and a <= run["hang_at"] < b and PID == run.get("hang_process", 1):
            callbacks = [Hang(run["hang_at"] - a, run["marker"])]
        xl, yl = local_rows(x, y, a, b, batch, rows, pid)
        history = model.fit(**as_input(kind, xl, yl, rows), epochs=1, shuffle=False, verbose=0,
                            callbacks=callbacks)
        losses += history.history["loss"]
        if run.get("save_at") == b:
            model.save_weights(run["save"].format(p=PID))
    results[f"{name}_loss"] = losses
    results[f"{name}_iterations"] = int(model.optimizer.iterations.numpy())
    results[f"{name}_fit_s"] = time.time() - t
    for w in model.weights:
        results[f"{name}/{w.path}"] = np.asarray(w.numpy())
    # Where the trained variables live: replicated over every device of the mesh.
    kernel = model.get_layer("conv").kernel.value
    results[f"{name}_kernel_devices"] = len(kernel.sharding.device_set)
    results[f"{name}_kernel_replicated"] = bool(kernel.sharding.is_fully_replicated)


def main():
    batch = SPEC.get("global_batch", 8)
    per_process = multi_device.per_process_batch(batch)
    x, y = data(batch * max(run["steps"] for run in SPEC["runs"]))
    results = dict(devices=len(keras.distribution.list_devices()), processes=SETTINGS.num_processes,
                   per_process=per_process, initialize_s=initialized - started)
    for run in SPEC["runs"]:
        if run.get("only_process", PID) == PID:
            train(run, x, y, batch, per_process, results)
    if SPEC.get("bn_probe"):
        keras.distribution.set_distribution(DISTRIBUTION)
        results.update(bn_probe())
    np.savez(SPEC["out"].format(p=PID), **results)
    print(json.dumps({k: v for k, v in results.items() if "/" not in k}, default=str), flush=True)


DISTRIBUTION = multi_device.data_parallel()
main()
