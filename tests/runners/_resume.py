"""Shared by the resume tests (tests/training/test_checkpoint.py on TensorFlow, test_runner_backends.py on JAX):
a tiny Fashion-MNIST folder, a tiny runner config, and a child program killed with SIGKILL mid-run."""

import gzip
import os
import struct

import numpy as np
import pytest

TRAIN_IMAGES, TEST_IMAGES, BATCH = 60, 20, 10  # 6 steps per epoch


def write_idx(path, array):
    """Writes a gzipped idx file of unsigned bytes (LeCun's MNIST format, used by Fashion-MNIST)."""
    array = np.asarray(array, dtype=np.uint8)
    header = struct.pack(">I", 0x0800 | array.ndim) + struct.pack(">" + "I" * array.ndim, *array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.tobytes())


@pytest.fixture(scope="module")
def idx_dir(tmp_path_factory):
    """A tiny Fashion-MNIST folder: 60 + 20 images, 28×28, label-dependent brightness plus noise."""
    folder = tmp_path_factory.mktemp("fashion_mnist")
    rng = np.random.default_rng(7)
    for split, count in (("train", TRAIN_IMAGES), ("t10k", TEST_IMAGES)):
        labels = rng.integers(0, 10, size=count)
        images = np.clip(labels[:, None, None] * 20 + rng.integers(0, 60, size=(count, 28, 28)), 0, 255)
        write_idx(os.path.join(folder, f"{split}-images-idx3-ubyte.gz"), images)
        write_idx(os.path.join(folder, f"{split}-labels-idx1-ubyte.gz"), labels)
    return str(folder)


def tiny_config(data_dir, **train):
    return {
        "seed": 3,
        "data": {"name": "fashion_mnist", "train_limit": 0, "test_limit": 0, "manual_dir": data_dir},
        "model": {"name": "small_cnn", "widths": [4], "convs_per_stage": 1, "dense_units": 8, "batch_norm": True,
                  "operator": {"layer": "decoupled", "magnitude": "tanh", "angular": "cosine"}},
        "optimizer": {"name": "adam", "learning_rate": 0.01},
        "train": {"batch_size": BATCH, "epochs": 2, "steps_per_epoch": 0, "verbose": 0,
                  "checkpoint_every_steps": 2, **train},
        "export": False,
    }


# A run killed with SIGKILL one step after the checkpoint at step 8 (epoch 2 of 2, 6 steps an epoch):
# the library path is untouched, the process simply dies there.
CHILD = r"""
import json, os, signal, sys
from sphere_tf.runners import classifier
from sphere_tf.training import checkpoint
config, workdir, kill_at = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
original = checkpoint.StepCheckpoint.on_train_batch_end
def on_train_batch_end(self, batch, logs=None):
    original(self, batch, logs)
    if self.step == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
checkpoint.StepCheckpoint.on_train_batch_end = on_train_batch_end
classifier.train_and_evaluate(config, workdir)
"""
