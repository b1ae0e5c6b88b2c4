"""Fashion-MNIST idx loading: real files, generated files, corrupt and missing files."""

import gzip
import os

import numpy as np
import pytest

from sphere_tf.data import archive_writers
from sphere_tf.data import fashion_mnist


def _write_set(folder, n_train=5, n_test=3, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {
        "train_images": rng.integers(0, 256, (n_train, 28, 28)),
        "train_labels": rng.integers(0, 10, n_train),
        "test_images": rng.integers(0, 256, (n_test, 28, 28)),
        "test_labels": rng.integers(0, 10, n_test),
    }
    for key, array in arrays.items():
        magic = 2051 if key.endswith("images") else 2049
        archive_writers.write_idx(os.path.join(folder, fashion_mnist.FILES[key]), array, magic)
    return arrays


def test_reads_generated_idx_files_exactly(tmp_path):
    arrays = _write_set(str(tmp_path))
    (x_train, y_train), (x_test, y_test) = fashion_mnist.load_fashion_mnist(str(tmp_path))
    np.testing.assert_array_equal(x_train, arrays["train_images"])
    np.testing.assert_array_equal(y_train, arrays["train_labels"])
    np.testing.assert_array_equal(x_test, arrays["test_images"])
    np.testing.assert_array_equal(y_test, arrays["test_labels"])
    assert x_train.dtype == np.uint8


def test_truncated_file_is_an_error_naming_the_file(tmp_path):
    _write_set(str(tmp_path))
    path = os.path.join(str(tmp_path), fashion_mnist.FILES["test_images"])
    with gzip.open(path, "rb") as f:
        data = f.read()
    with gzip.open(path, "wb") as f:
        f.write(data[:-10])
    with pytest.raises(ValueError, match="truncated or corrupt"):
        fashion_mnist.load_fashion_mnist(str(tmp_path))


def test_bad_magic_is_an_error(tmp_path):
    _write_set(str(tmp_path))
    path = os.path.join(str(tmp_path), fashion_mnist.FILES["train_labels"])
    with gzip.open(path, "wb") as f:
        f.write(b"\x00\x00\x00\x07" + b"\x00" * 12)
    with pytest.raises(ValueError, match="bad idx magic"):
        fashion_mnist.load_fashion_mnist(str(tmp_path))


def test_mismatched_counts_are_an_error(tmp_path):
    _write_set(str(tmp_path))
    archive_writers.write_idx(os.path.join(str(tmp_path), fashion_mnist.FILES["train_labels"]), np.zeros(4), 2049)
    with pytest.raises(ValueError, match="do not match"):
        fashion_mnist.load_fashion_mnist(str(tmp_path))


def test_missing_files_without_fallback_name_the_paths(tmp_path):
    with pytest.raises(fashion_mnist.DataNotFoundError, match="train-images-idx3-ubyte.gz"):
        fashion_mnist.load_fashion_mnist(str(tmp_path), allow_keras_fallback=False)


def test_missing_files_and_failing_fallback_name_both_places(tmp_path, monkeypatch):
    import keras

    def broken():
        raise OSError("no network")

    monkeypatch.setattr(keras.datasets.fashion_mnist, "load_data", broken)
    with pytest.raises(fashion_mnist.DataNotFoundError) as info:
        fashion_mnist.load_fashion_mnist(str(tmp_path))
    message = str(info.value)
    assert str(tmp_path) in message and "keras.datasets.fashion_mnist" in message
    assert "dataset-fashion-mnist" in message and "no network" in message


def test_falls_back_to_keras_when_files_are_missing(tmp_path, monkeypatch):
    import keras

    fake = ((np.zeros((2, 28, 28), np.uint8), np.zeros(2, np.uint8)),) * 2
    monkeypatch.setattr(keras.datasets.fashion_mnist, "load_data", lambda: fake)
    assert fashion_mnist.load_fashion_mnist(str(tmp_path)) is fake


@pytest.mark.skipif(not os.path.isdir(fashion_mnist.DEBIAN_DIR), reason="Debian dataset-fashion-mnist not installed")
def test_debian_package_files():
    (x_train, y_train), (x_test, y_test) = fashion_mnist.load_fashion_mnist(allow_keras_fallback=False)
    assert x_train.shape == (60000, 28, 28) and x_test.shape == (10000, 28, 28)
    assert sorted(np.unique(y_train)) == list(range(10))
    # The official training set is balanced: 6,000 images per class.
    assert np.all(np.bincount(y_train) == 6000)


def test_float_scaling_matches_upstream():
    x = np.array([[[0, 255]]], np.uint8).reshape(1, 1, 2)
    np.testing.assert_allclose(fashion_mnist.as_float_images(x)[0, 0, :, 0], [-127.5 / 128, 127.5 / 128])
