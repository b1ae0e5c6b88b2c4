"""Train-and-evaluate loop for image classifiers, driven by a config (no flags here).

The trainers in `trainers/` are thin absl mains around `train_and_evaluate`.
"""

import json
import os

import keras
from absl import logging

from sphere_tf import data as data_lib
from sphere_tf import export as export_lib
from sphere_tf import models as models_lib
from sphere_tf.training import checkpoint as checkpoint_lib

OPTIMIZERS = {
    "adam": keras.optimizers.Adam,
    "adamw": keras.optimizers.AdamW,
    "sgd": keras.optimizers.SGD,
}
DATASETS = {
    "fashion_mnist": data_lib.fashion_mnist_datasets,
}


def build_optimizer(spec):
    """`{'name': 'adam'|'adamw'|'sgd', **kwargs}` -> a Keras optimizer."""
    spec = dict(spec)
    name = spec.pop("name")
    if name not in OPTIMIZERS:
        raise ValueError(f"Unknown optimizer {name!r}; expected one of {sorted(OPTIMIZERS)}.")
    return OPTIMIZERS[name](**spec)


def _plain(value):
    """ConfigDict / FrozenConfigDict / nested tuples -> plain dicts and lists."""
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def validate(config):
    """Resolves every registry name in `config` so typos fail before any data is read."""
    config = _plain(config)
    models_lib.get_model_fn(config["model"]["name"])
    models_lib.operators.validate_operator(config["model"].get("operator"))
    if config["data"]["name"] not in DATASETS:
        raise ValueError(f"Unknown data set {config['data']['name']!r}; expected one of {sorted(DATASETS)}.")
    build_optimizer(config["optimizer"])
    return config


def train_and_evaluate(config, workdir):
    """Trains the configured classifier, evaluates it on the test split, exports it.

    Writes to `workdir`: `config.json`, `checkpoints/train/` (the whole training
    state every `train.checkpoint_every_steps` steps, see
    `sphere_tf.training.checkpoint`), `checkpoints/model.keras` (each epoch),
    `tensorboard/`, `export/` (SavedModel with a `serve` endpoint) and
    `results.json`. An interrupted run (even `kill -9` mid-epoch) continues
    from its latest checkpoint and ends as the uninterrupted run would; a
    finished workdir is not trained again (its `results.json` is returned); a
    workdir written by a different config is refused, naming the differing keys.

    Args:
        config: ConfigDict or dict with `seed`, `data`, `model`, `optimizer`, `train`, `export`.
        workdir: str, the output folder.

    Returns:
        dict with `test_accuracy`, `test_loss`, `history` and `export_dir`.

    Raises:
        checkpoint.ConfigMismatchError: `workdir` holds another config's run.
    """
    config = validate(config)
    train_cfg = config["train"]
    state_dir = os.path.join(workdir, "checkpoints", "train")
    checkpoint_lib.check_workdir_config(workdir, config)
    checkpoint_lib.record_config(state_dir, config)  # the snapshot kept beside the checkpoints it describes
    checkpoint_lib.record_config(workdir, config)
    results_path = os.path.join(workdir, "results.json")
    keras.utils.set_random_seed(config["seed"])

    data_cfg = dict(config["data"])
    train_ds, test_ds, info = DATASETS[data_cfg.pop("name")](
        batch_size=train_cfg["batch_size"], seed=config["seed"], **data_cfg
    )
    steps_per_epoch = train_cfg.get("steps_per_epoch") or checkpoint_lib.steps_per_pass(train_ds)
    total_steps = train_cfg["epochs"] * steps_per_epoch
    if os.path.exists(results_path) and checkpoint_lib.latest_step(state_dir) == total_steps:
        with open(results_path) as f:
            results = json.load(f)
        print(f"{workdir} already holds a finished run (step {total_steps}); "
              f"test accuracy {results['test_accuracy']:.4f}. Not training again.")
        return results
    logging.info("Data: %s", info)
    model_cfg = dict(config["model"])
    model = models_lib.create_model(
        model_cfg.pop("name"), input_shape=info["input_shape"], num_classes=info["num_classes"], **model_cfg
    )
    model.compile(
        optimizer=build_optimizer(config["optimizer"]),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.summary(print_fn=logging.info)
    os.makedirs(os.path.join(workdir, "checkpoints"), exist_ok=True)
    callbacks = [
        keras.callbacks.ModelCheckpoint(os.path.join(workdir, "checkpoints", "model.keras")),
        keras.callbacks.TensorBoard(os.path.join(workdir, "tensorboard")),
    ]
    fitted = checkpoint_lib.fit_resumable(
        model, train_ds, epochs=train_cfg["epochs"], directory=state_dir, steps_per_epoch=steps_per_epoch,
        every_steps=train_cfg.get("checkpoint_every_steps") or checkpoint_lib.DEFAULT_EVERY_STEPS,
        callbacks=callbacks, verbose=train_cfg.get("verbose", 1),
    )
    if fitted["initial_step"]:
        print(f"Resumed from step {fitted['initial_step']} of {total_steps} ({state_dir}).")
    test_loss, test_accuracy = model.evaluate(test_ds, verbose=0)
    print(f"Test accuracy: {test_accuracy:.4f} (loss {test_loss:.4f}, {info['test_size']} images)")

    export_dir = None
    if config.get("export", True):
        sample = next(iter(test_ds))[0][:8]
        export_dir = export_lib.export_saved_model(model, os.path.join(workdir, "export"), verify_inputs=sample)
        print(f"SavedModel exported to {export_dir}")
    results = {
        "test_accuracy": float(test_accuracy),
        "test_loss": float(test_loss),
        "history": fitted["history"],
        "export_dir": export_dir,
    }
    with open(results_path, "w") as f:
        json.dump(results, f, indent=2)
    return results
