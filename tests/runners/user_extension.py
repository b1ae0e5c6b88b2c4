"""A user's project outside the package, as docs/runner.md describes: a module registering a data set and a
model family, and a runner config that imports it. `write_user_project(folder)` writes both files."""

import os
import sys

from sphere_tf.data import DATASETS
from sphere_tf.models import MODELS

MODULE = "sphere_tf_test_user_project"
DATASET = "user_blobs"
MODEL = "user_mlp"

MODULE_TEXT = f'''"""The user's registrations: one reader + spec, one model builder."""

import keras
import numpy as np

from sphere_tf import data, models


def read_blobs(**options):
    """Three classes of 8x8 grey images whose brightness is the class (small NumPy arrays)."""
    del options  # source, manual_dir, ...: not needed for data made here
    rng = np.random.default_rng(0)

    def split(n):
        labels = np.arange(n) % 3
        images = np.clip(80 * labels[:, None, None, None] + rng.normal(40, 10, (n, 8, 8, 1)), 0, 255)
        return images.astype(np.uint8), labels

    return split(24), split(9)


data.register_dataset("{DATASET}", data.DatasetSpec(input_shape=(8, 8, 1), num_classes=3, reader=read_blobs))


@models.register_model
def {MODEL}(input_shape=(8, 8, 1), num_classes=3, units=16):
    """A new model family is one registered builder."""
    inputs = keras.Input(input_shape)
    x = keras.layers.Dense(units, activation="relu", name="fc")(keras.layers.Flatten()(inputs))
    return keras.Model(inputs, keras.layers.Dense(num_classes, name="logits")(x), name="{MODEL}")
'''

CONFIG_TEXT = f'''"""A runner config for the user's data set and model: importing the module registers them."""

import {MODULE}  # noqa: F401  (registers "{DATASET}" and "{MODEL}")


def get_config():
    return {{
        "seed": 0,
        "data": {{"name": "{DATASET}"}},
        "model": {{"name": "{MODEL}", "units": 8}},
        "optimizer": {{"name": "adam", "learning_rate": 0.01}},
        "train": {{"batch_size": 4, "epochs": 1, "steps_per_epoch": 2, "verbose": 0}},
        "strategy": "one_device",
        "export": False,
    }}
'''


def write_user_project(folder):
    """Writes the user's module and config into `folder`; returns the config's path."""
    with open(os.path.join(folder, f"{MODULE}.py"), "w") as f:
        f.write(MODULE_TEXT)
    config = os.path.join(folder, "user_config.py")
    with open(config, "w") as f:
        f.write(CONFIG_TEXT)
    return config


def forget_user_project(folder):
    """Undoes an in-process import of the user's module (its registrations, the module, its sys.path entry)."""
    DATASETS.pop(DATASET, None)
    MODELS.pop(MODEL, None)
    sys.modules.pop(MODULE, None)
    if folder in sys.path:
        sys.path.remove(folder)
