"""One full-data reproduction run through the runner itself (no TensorFlow needed: Grain reads the data).

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
from sphere_tf.runners import classifier
from sphere_tf.runners import recipe
from sphere_tf.runners import schema
from sphere_tf.runners import sweep
from sphere_tf.training import array_checkpoint

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


def run_one(config_path, variant, seed, mode, data_dir, workdir):
    """Trains one (config, variant, seed) through the runner (`classifier.train_and_evaluate`) in `workdir`;
    returns its record.

    The runner reads the data (Grain off TensorFlow), checkpoints, logs and evaluates as `sphere_tf_cli.run` does; two
    things are added for the record: the test set is evaluated after every pass (`evaluation.eval_every_steps` =
    one pass), and an `EarlyTrainingCurve` callback rides along. The 2-D feature statistics are computed after
    the run on the trained model (its final weights, batch statistics recomputed as the config says).
    """
    started, cpu_started = time.time(), time.process_time()
    module = sweep.load_config_module(config_path)
    arg = ",".join(filter(None, [variant, "full=True" if mode == "full" else "quick"]))
    config = schema.merge_config(schema.DEFAULTS, schema.plain_config(module.get_config(arg)))
    config["seed"] = int(seed)
    config["export"] = False  # no TensorFlow on the GPU hosts; the reproductions need no SavedModel
    data_cfg = config["data"]
    if data_cfg["name"] != "fashion_mnist":
        raise ValueError(f"{config_path}: data.name={data_cfg['name']!r}; this script reads Fashion-MNIST only.")
    if data_dir:
        data_cfg["manual_dir"] = data_dir
    plan = classifier.dry_run(config)
    config["evaluation"]["eval_every_steps"] = plan["steps_per_epoch"]  # the test curve, pass by pass
    accuracy_name = recipe.training_accuracy(config["model"]).name
    early = EarlyTrainingCurve(accuracy_name)
    try:
        results = classifier.train_and_evaluate(config, workdir, callbacks=[early])
    except array_checkpoint.NonFiniteError as error:  # the runner stops at the first NaN/inf loss: a divergence
        return _diverged_record(config_path, variant, seed, mode, workdir, plan, error, started, cpu_started)
    model = early.model  # the run's model, as it was evaluated
    test_curve = [point["test_accuracy"] for point in results["test_curve"]]
    history = results["history"]
    record = {
        "config": config_path, "claim": claim_name(config_path), "variant": variant, "seed": int(seed), "mode": mode,
        "backend": keras.backend.backend(), "device": _device_name(), "workdir": workdir,
        "train_size": plan["train_images"], "steps": results["steps"], "epochs": results["epochs"],
        "test_accuracy": results["test_accuracy"], "test_loss": results["test_loss"],
        "best_pass_test_accuracy": max(test_curve), "best_pass": int(np.argmax(test_curve)) + 1,
        "test_accuracy_per_pass": test_curve, "bn_statistics": results["bn_statistics"],
        "train_accuracy_last_pass": 100.0 * float(history[accuracy_name][-1]),
        "early_training_accuracy": early.intervals(),
        "history_last": {k: float(v[-1]) for k, v in history.items() if k.startswith("energy")},
        "energy_per_pass": {k: [float(x) for x in v] for k, v in history.items() if k.startswith("energy")},
    }
    if "fc" in [layer.name for layer in model.layers] and model.get_layer("fc").output.shape[-1] == 2:
        record.update(_feature_statistics(model, data_cfg))
    record["wall_seconds"] = time.time() - started
    record["cpu_seconds"] = time.process_time() - cpu_started
    return record


def _diverged_record(config_path, variant, seed, mode, workdir, plan, error, started, cpu_started):
    """The record of a seed that diverged: its statistics NaN (counted under `<key>_nonfinite` by `summarize`),
    the runner's message (the global step of the first non-finite loss) under `diverged`."""
    nan = float("nan")
    return {
        "config": config_path, "claim": claim_name(config_path), "variant": variant, "seed": int(seed), "mode": mode,
        "backend": keras.backend.backend(), "device": _device_name(), "workdir": workdir,
        "train_size": plan["train_images"], "steps": plan["total_steps"], "diverged": str(error),
        "test_accuracy": nan, "best_pass_test_accuracy": nan, "train_accuracy_last_pass": nan, "history_last": {},
        "wall_seconds": time.time() - started, "cpu_seconds": time.process_time() - cpu_started,
    }


def _feature_statistics(model, data_cfg):
    """The angular Fisher score and the smallest angle between class means of the 2-D `fc` features of the test
    images the runner evaluated (raw pixels: the model's first layer normalises them)."""
    _, (x_test, y_test) = fashion_mnist.load_fashion_mnist(data_cfg["manual_dir"] or None, allow_keras_fallback=False)
    if data_cfg["test_limit"]:
        x_test, y_test = x_test[: data_cfg["test_limit"]], y_test[: data_cfg["test_limit"]]
    x_test, y_test = x_test.astype(np.float32)[..., None], y_test.astype(np.int32)
    test_inputs = models_lib.pack_inputs(x_test, y_test) if models_lib.needs_labels(model) else x_test
    features = keras.Model(model.inputs, model.get_layer("fc").output).predict(test_inputs, batch_size=1000,
                                                                              verbose=0)
    return {"angular_fisher_score": float(metrics_lib.angular_fisher_score(features, y_test, 10)),
            "min_interclass_angle_deg": float(np.degrees(metrics_lib.min_interclass_angle(features, y_test, 10)))}


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
        for name in sorted({name for r in rows for name in r["history_last"]}):
            _add_mean_std(entry, name, [r["history_last"].get(name, float("nan")) for r in rows])
        summary.setdefault(claim, {})[variant] = entry
    return summary
