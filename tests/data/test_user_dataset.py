"""A user's data set, registered from outside the package (a reader + a `DatasetSpec`), as the docs show:
`get_datasets` reads it through the same shared pipeline (subsets, label noise, normalisation, augmentation,
batching) as the built-in data sets."""

import numpy as np
import pytest

from sphere_tf.data import DATASETS
from sphere_tf.data import DatasetSpec
from sphere_tf.data import get_datasets
from sphere_tf.data import register_dataset

NAME = "test_user_stripes"


def _stripes(n, seed):
    """n 6x5x3 uint8 images, labels 0..2 (a user's in-memory data)."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 6, 5, 3), dtype=np.uint8), (np.arange(n) % 3).astype(np.int64)


def read_stripes(**options):
    """The user's reader: the keyword arguments (source, manual_dir, ...) are not needed here."""
    del options
    return _stripes(12, seed=0), _stripes(5, seed=1)


@pytest.fixture
def user_dataset():
    spec = register_dataset(NAME, DatasetSpec(input_shape=(6, 5, 3), num_classes=3, reader=read_stripes))
    yield spec
    DATASETS.pop(NAME)


def test_the_user_reader_goes_through_the_shared_pipeline(user_dataset):
    (x_train, _), (x_test, y_test) = read_stripes()
    train, test, info = get_datasets(NAME, batch_size=4, normalization="mean_subtraction", test_limit=4,
                                     augmentation="flip")
    mean = x_train.reshape(-1, 3).astype(np.float64).mean(axis=0)
    assert info == {"input_shape": (6, 5, 3), "num_classes": 3, "train_size": 12, "test_size": 4,
                    "steps_per_epoch": 3, "channel_mean": tuple(mean), "normalization": "mean_subtraction",
                    "test_steps": 1, "process_count": 1}
    x, y = next(iter(test))
    np.testing.assert_allclose(x.numpy(), x_test[:4] - mean.astype(np.float32), rtol=1e-6)
    np.testing.assert_array_equal(y.numpy(), y_test[:4])
    x, y = next(iter(train))
    assert x.shape == (4, 6, 5, 3) and y.dtype.name == "int32"


def test_limits_and_label_noise_apply_to_a_user_dataset(user_dataset):
    _, _, info = get_datasets(NAME, batch_size=2, train_limit=5, class_limits=[1])
    assert info["train_size"] == 5
    clean, _, _ = get_datasets(NAME, batch_size=12, seed=3)
    noisy, _, _ = get_datasets(NAME, batch_size=12, seed=3, label_noise=0.5)
    (x_clean, y_clean), (x_noisy, y_noisy) = next(iter(clean)), next(iter(noisy))
    np.testing.assert_array_equal(x_clean.numpy(), x_noisy.numpy())  # the same images in the same order
    assert (y_clean.numpy() != y_noisy.numpy()).any()


def test_runner_choices_see_the_user_dataset(user_dataset):
    from sphere_tf.runners import classifier  # noqa: PLC0415

    config = classifier.validate({"data": {"name": NAME}, "model": {"name": "small_cnn"}})
    assert config["data"]["name"] == NAME
    with pytest.raises(ValueError, match=f"data.label_mode.*'fine' \\({NAME} has no coarse labels\\)"):
        classifier.validate({"data": {"name": NAME, "label_mode": "coarse"}, "model": {"name": "small_cnn"}})
    with pytest.raises(ValueError, match=r"argument `label_mode`: expected 'fine' \(only cifar100 has coarse"):
        get_datasets(NAME, batch_size=2, label_mode="coarse")


def test_register_dataset_needs_a_reader_and_a_free_name(user_dataset):
    with pytest.raises(TypeError, match="DatasetSpec whose `reader`"):
        register_dataset("test_user_no_reader", DatasetSpec((6, 5, 3), 3))
    assert "test_user_no_reader" not in DATASETS
    with pytest.raises(KeyError, match=f"dataset '{NAME}' is already registered"):
        register_dataset(NAME, user_dataset)


@pytest.mark.parametrize("returned, error, message", [
    ("not splits", TypeError, "returned str; expected \\(train, test\\)"),
    ((np.zeros((4, 6, 5)), np.zeros(4)), TypeError, "returned a training split of type ndarray"),
    (((np.zeros((4, 6, 5)), np.zeros(4)), (np.zeros((2, 6, 5, 3)), np.zeros(2))), ValueError,
     r"training images of shape \(4, 6, 5\)"),
    (((np.zeros((4, 6, 5, 3)), np.zeros(3)), (np.zeros((2, 6, 5, 3)), np.zeros(2))), ValueError,
     "expected \\(N, H, W, C\\) images and N labels"),
    (((np.zeros((4, 6, 6, 3)), np.zeros(4)), (np.zeros((2, 6, 5, 3)), np.zeros(2))), ValueError,
     r"DatasetSpec says input_shape=\(6, 5, 3\)"),
])
def test_a_reader_returning_something_else_is_named(returned, error, message):
    name = "test_user_bad_reader"
    register_dataset(name, DatasetSpec((6, 5, 3), 3, reader=lambda **_: returned))
    try:
        with pytest.raises(error, match=message):
            get_datasets(name, batch_size=2)
    finally:
        DATASETS.pop(name)
