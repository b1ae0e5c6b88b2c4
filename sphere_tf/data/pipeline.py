"""tf.data pipelines for the trainers."""

import numpy as np

from sphere_tf import dependencies
from sphere_tf import validation
from sphere_tf.data import fashion_mnist

tf = dependencies.lazy_tensorflow(__name__)  # imported on first use: this module imports without TensorFlow


def _take(x, y, limit, rng):
    if limit and limit < len(x):
        index = rng.permutation(len(x))[:limit]
        return x[index], y[index]
    return x, y


def fashion_mnist_datasets(batch_size, train_limit=0, test_limit=0, seed=0, data_dir=None):
    """Batched Fashion-MNIST train/test `tf.data.Dataset`s of ((x − 127.5)/128, label).

    Args:
        batch_size: int > 0.
        train_limit, test_limit: int, use a random subset of this many images (0: all).
        seed: int, subset and shuffle seed.
        data_dir: optional folder with the idx files (see `load_fashion_mnist`).

    Returns:
        `(train_ds, test_ds, info)`, info a dict with `input_shape`, `num_classes`,
        `train_size`, `test_size`.
    """
    dependencies.require_tensorflow("sphere_tf.data.fashion_mnist_datasets", __name__)  # before any file is read
    batch_size = validation.positive_int(batch_size, "batch_size")
    train_limit = validation.integer(train_limit, "train_limit", minimum=0)
    test_limit = validation.integer(test_limit, "test_limit", minimum=0)
    (x_train, y_train), (x_test, y_test) = fashion_mnist.load_fashion_mnist(data_dir)
    rng = np.random.default_rng(seed)
    x_train, y_train = _take(x_train, y_train, train_limit, rng)
    x_test, y_test = _take(x_test, y_test, test_limit, rng)
    x_train = fashion_mnist.as_float_images(x_train)
    x_test = fashion_mnist.as_float_images(x_test)
    train = (
        tf.data.Dataset.from_tensor_slices((x_train, y_train.astype(np.int32)))
        .shuffle(len(x_train), seed=seed, reshuffle_each_iteration=True)
        .batch(batch_size)
        .prefetch(tf.data.AUTOTUNE)
    )
    test = (
        tf.data.Dataset.from_tensor_slices((x_test, y_test.astype(np.int32)))
        .batch(batch_size)
        .prefetch(tf.data.AUTOTUNE)
    )
    info = {
        "input_shape": tuple(x_train.shape[1:]),
        "num_classes": 10,
        "train_size": len(x_train),
        "test_size": len(x_test),
    }
    return train, test, info
