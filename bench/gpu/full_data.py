"""One full-data reproduction run on in-memory arrays, through the runner's recipe (no TensorFlow needed).

`bench/gpu/reproduce.py` (the absl main) runs `run_one` per (config, variant, seed) in its own process and
`summarize`s the records; see its docstring for what differs from the runner.
"""

import math
import os
import time

import keras
import numpy as np

from sphere_tf import metrics as metrics_lib
from sphere_tf import models as models_lib
from sphere_tf.data import fashion_mnist
from sphere_tf.data import label_noise
from sphere_tf.runners import recipe
from sphere_tf.runners import schema
from sphere_tf.runners import sweep

# Training-accuracy intervals recorded at the start of a run (SphereNet Fig. 3(b): early convergence).
EARLY_INTERVAL = 25
EARLY_STEPS = 200


def claim_name(config_path):
    return os.path.splitext(os.path.basename(config_path))[0]


class EarlyTrainingCurve(keras.callbacks.Callback):
    """The mean training accuracy over each `EARLY_INTERVAL` steps of the first `EARLY_STEPS` steps of the first
    pass, from Keras's running mean m_k over the pass's first k steps: (m_k·k − m_j·j) / (k − j). It reads the
    logs only at those steps, so the later steps stay asynchronous."""

    def __init__(self, metric_name):
        super().__init__()
        self.metric_name = metric_name
        self.running_means = {}
        self.first_pass_over = False

    def on_train_batch_end(self, batch, logs=None):
        step = batch + 1
        if not self.first_pass_over and step <= EARLY_STEPS and step % EARLY_INTERVAL == 0:
            self.running_means[step] = float(logs[self.metric_name])

    def on_epoch_end(self, epoch, logs=None):
        self.first_pass_over = True

    def intervals(self):
        """`[{'steps': [first, last], 'accuracy': percent}, ...]`."""
        out, previous, previous_mean = [], 0, 0.0
        for step in sorted(self.running_means):
            mean = (self.running_means[step] * step - previous_mean * previous) / (step - previous)
            out.append({"steps": [previous + 1, step], "accuracy": 100.0 * mean})
            previous, previous_mean = step, self.running_means[step]
        return out


def run_one(config_path, variant, seed, mode, data_dir):
    """Trains one (config, variant, seed) on in-memory arrays through the runner's recipe; returns its record."""
    started, cpu_started = time.time(), time.process_time()
    module = sweep.load_config_module(config_path)
    arg = ",".join(filter(None, [variant, "full=True" if mode == "full" else "quick"]))
    config = schema.merge_config(schema.DEFAULTS, schema.plain_config(module.get_config(arg)))
    config["seed"] = int(seed)
    data_cfg, train_cfg = config["data"], config["train"]
    if data_cfg["name"] != "fashion_mnist":
        raise ValueError(f"{config_path}: data.name={data_cfg['name']!r}; this script reads Fashion-MNIST only.")
    keras.utils.set_random_seed(config["seed"])
    (x_train, y_train), (x_test, y_test) = fashion_mnist.load_fashion_mnist(data_dir or None,
                                                                            allow_keras_fallback=False)
    rng = np.random.default_rng(config["seed"])
    if data_cfg["train_limit"]:
        keep = np.sort(rng.permutation(len(x_train))[: data_cfg["train_limit"]])
        x_train, y_train = x_train[keep], y_train[keep]
    # The training labels only, after the subset, keyed by the seed: as the runner's `datasets.get_datasets`.
    y_train = label_noise.add_label_noise(y_train, data_cfg["label_noise"], 10, config["seed"],
                                          data_cfg["label_noise_type"])
    if data_cfg["test_limit"]:
        x_test, y_test = x_test[: data_cfg["test_limit"]], y_test[: data_cfg["test_limit"]]
    x_train, x_test = x_train.astype(np.float32)[..., None], x_test.astype(np.float32)[..., None]
    # Raw pixels in: the model's first layer normalises them (`recipe.build_model`), with the training images'
    # per-channel mean for 'mean_subtraction', as the runner's `datasets.get_datasets` computes it.
    channel_mean = data_cfg.get("channel_mean") or tuple(x_train.mean(axis=(0, 1, 2), dtype=np.float64))
    y_train, y_test = y_train.astype(np.int32), y_test.astype(np.int32)

    batch = train_cfg["batch_size"]
    info = {"input_shape": x_train.shape[1:], "num_classes": 10, "train_size": len(x_train),
            "test_size": len(x_test), "steps_per_epoch": math.ceil(len(x_train) / batch),
            "channel_mean": channel_mean}
    steps_per_epoch, epochs = recipe.run_length(train_cfg, info["steps_per_epoch"])
    total_steps = steps_per_epoch * epochs
    keras.mixed_precision.set_global_policy(config["mixed_precision"])
    model, attached = recipe.build_model(config, info)
    accuracy = recipe.training_accuracy(config["model"])
    model.compile(optimizer=recipe.build_optimizer(config, total_steps),
                  loss=recipe.build_loss(config),
                  metrics=[accuracy])
    packed = models_lib.needs_labels(model)
    train_inputs = models_lib.pack_inputs(x_train, y_train) if packed else x_train
    test_inputs = models_lib.pack_inputs(x_test, y_test) if packed else x_test
    early = EarlyTrainingCurve(accuracy.name)
    fit_steps = None if steps_per_epoch == info["steps_per_epoch"] else steps_per_epoch
    history = model.fit(
        train_inputs, y_train, batch_size=batch, epochs=epochs, steps_per_epoch=fit_steps, shuffle=True,
        validation_data=(test_inputs, y_test), validation_batch_size=1000, verbose=0,
        callbacks=recipe.training_callbacks(config, model, attached) + [early],
    ).history
    test_curve = [100.0 * v for v in history[f"val_{accuracy.name}"]]

    def training_batches():
        order = rng.permutation(len(x_train))
        for start in range(0, len(order) - batch + 1, batch):
            index = order[start:start + batch]
            yield (models_lib.pack_inputs(x_train[index], y_train[index]) if packed else x_train[index],
                   y_train[index])

    bn_statistics = recipe.recompute_batch_statistics(model, config["evaluation"], training_batches(),
                                                      total_steps, info["steps_per_epoch"])
    test_loss, test_accuracy = model.evaluate(test_inputs, y_test, batch_size=1000, verbose=0)
    record = {
        "config": config_path, "claim": claim_name(config_path), "variant": variant, "seed": int(seed), "mode": mode,
        "backend": keras.backend.backend(), "device": _device_name(),
        "train_size": info["train_size"], "steps": total_steps, "epochs": epochs,
        "test_accuracy": 100.0 * float(test_accuracy), "test_loss": float(test_loss),
        "best_pass_test_accuracy": max(test_curve), "best_pass": int(np.argmax(test_curve)) + 1,
        "test_accuracy_per_pass": test_curve, "bn_statistics": bn_statistics,
        "train_accuracy_last_pass": 100.0 * float(history[accuracy.name][-1]),
        "early_training_accuracy": early.intervals(),
        "history_last": {k: float(v[-1]) for k, v in history.items() if k.startswith("energy")},
        "energy_per_pass": {k: [float(x) for x in v] for k, v in history.items() if k.startswith("energy")},
    }
    if "fc" in [layer.name for layer in model.layers] and model.get_layer("fc").output.shape[-1] == 2:
        features = keras.Model(model.inputs, model.get_layer("fc").output).predict(
            test_inputs, batch_size=1000, verbose=0)
        record["angular_fisher_score"] = float(metrics_lib.angular_fisher_score(features, y_test, 10))
        record["min_interclass_angle_deg"] = float(
            np.degrees(metrics_lib.min_interclass_angle(features, y_test, 10)))
    record["wall_seconds"] = time.time() - started
    record["cpu_seconds"] = time.process_time() - cpu_started
    return record


def _device_name():
    if keras.backend.backend() == "jax":
        import jax  # noqa: PLC0415

        device = jax.devices()[0]
        return f"{device.platform}:{getattr(device, 'device_kind', '')}"
    return keras.backend.backend()


def _add_mean_std(entry, key, values):
    finite = [v for v in values if math.isfinite(v)]
    if finite:
        entry[key] = sweep.mean_std(finite)
    if len(finite) < len(values):
        entry[f"{key}_nonfinite"] = len(values) - len(finite)


def summarize(records):
    """Mean ± sample std (ddof 1) over the seeds of each (claim, variant).

    A diverged run's non-finite statistics (the Fisher score of NaN features) are left out of the mean and
    counted under `<key>_nonfinite`, so one divergence does not hide the other seeds.
    """
    keys = ("test_accuracy", "best_pass_test_accuracy", "train_accuracy_last_pass", "angular_fisher_score",
            "min_interclass_angle_deg", "wall_seconds")
    groups = {}
    for record in records:
        groups.setdefault((record["claim"], record["variant"]), []).append(record)
    summary = {}
    for (claim, variant), rows in sorted(groups.items()):
        entry = {"seeds": sorted(r["seed"] for r in rows), "device": rows[0]["device"], "steps": rows[0]["steps"]}
        for key in keys:
            _add_mean_std(entry, key, [r[key] for r in rows if r.get(key) is not None])
        for name in rows[0]["history_last"]:
            _add_mean_std(entry, name, [r["history_last"][name] for r in rows])
        summary.setdefault(claim, {})[variant] = entry
    return summary
