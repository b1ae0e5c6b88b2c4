"""get_datasets on generated archives: values, order, permutations, augmentation keys, resume, errors."""

import numpy as np
import pytest

from sphere_tf.data import datasets
from sphere_tf.data import fashion_mnist
from sphere_tf.data import preprocessing
from sphere_tf.data.errors import DataNotFoundError
from sphere_tf.data import archive_writers as archives


def _batches(ds, n):
    return [(x.numpy(), y.numpy()) for x, y in ds.take(n)]


@pytest.fixture(scope="module")
def cifar_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cifar")
    return str(folder), archives.write_cifar10(str(folder), per_batch=3, n_test=5)


def test_info_and_test_set_in_file_order(cifar_dir):
    folder, data = cifar_dir
    train, test, info = datasets.get_datasets("cifar10", manual_dir=folder, batch_size=4)
    assert info == {"input_shape": (32, 32, 3), "num_classes": 10, "train_size": 15, "test_size": 5,
                    "steps_per_epoch": 3, "channel_mean": None, "normalization": "centered_128",
                    "test_steps": 2, "process_count": 1}
    x = np.concatenate([b[0] for b in _batches(test, 10)])
    y = np.concatenate([b[1] for b in _batches(test, 10)])
    np.testing.assert_allclose(x, (data["x_test"].astype(np.float32) - 127.5) / 128)
    np.testing.assert_array_equal(y, data["y_test"])
    assert [b[0].shape[0] for b in _batches(train, 4)] == [4, 4, 4, 4]


def test_an_epoch_is_the_seeded_permutation_with_keyed_augmentation(cifar_dir):
    folder, data = cifar_dir
    train, _, info = datasets.get_datasets(
        "cifar10", manual_dir=folder, batch_size=5, augmentation="flip", normalization="none", seed=7
    )
    got = _batches(train, 2 * info["steps_per_epoch"])
    for epoch in range(2):
        order = datasets.epoch_order(7, epoch, 15).numpy()
        assert sorted(order.tolist()) == list(range(15))
        x = np.concatenate([b[0] for b in got[3 * epoch : 3 * epoch + 3]])
        y = np.concatenate([b[1] for b in got[3 * epoch : 3 * epoch + 3]])
        np.testing.assert_array_equal(y, data["y_train"][order])
        for k, i in enumerate(order):
            flip = bool(preprocessing.flip_draw(preprocessing.element_seed(7, epoch, i)))
            expected = data["x_train"][i][:, ::-1] if flip else data["x_train"][i]
            np.testing.assert_array_equal(x[k], expected)
    assert not np.array_equal(datasets.epoch_order(7, 0, 15), datasets.epoch_order(7, 1, 15))


def test_deterministic_under_seed_and_resume_matches(cifar_dir):
    folder, _ = cifar_dir
    kwargs = dict(manual_dir=folder, batch_size=4, augmentation="spherenet_cifar_plus", seed=3)
    full = _batches(datasets.get_datasets("cifar10", **kwargs)[0], 8)
    again = _batches(datasets.get_datasets("cifar10", **kwargs)[0], 8)
    other = _batches(datasets.get_datasets("cifar10", **{**kwargs, "seed": 4})[0], 8)
    for (xa, ya), (xb, yb) in zip(full, again):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    assert not np.array_equal(full[0][0], other[0][0])
    for step in (2, 3, 5):  # inside epoch 0, on the boundary, inside epoch 1
        resumed = _batches(datasets.get_datasets("cifar10", initial_step=step, **kwargs)[0], 8 - step)
        for (xa, ya), (xb, yb) in zip(full[step:], resumed):
            np.testing.assert_array_equal(xa, xb)
            np.testing.assert_array_equal(ya, yb)


def test_limits_and_partial_batches(cifar_dir):
    folder, data = cifar_dir
    train, test, info = datasets.get_datasets(
        "cifar10", manual_dir=folder, batch_size=4, train_limit=6, test_limit=2, drop_remainder=False,
        normalization="none",
    )
    assert (info["train_size"], info["test_size"], info["steps_per_epoch"]) == (6, 2, 2)
    images = np.concatenate([b[0] for b in _batches(train, 2)])
    assert images.shape[0] == 6
    # The subset is six distinct training images.
    matches = [int(np.flatnonzero((data["x_train"] == im).all(axis=(1, 2, 3)))[0]) for im in images]
    assert len(set(matches)) == 6
    np.testing.assert_array_equal(next(iter(test))[0].numpy(), data["x_test"][:2])


def test_mean_subtraction_uses_the_training_mean(cifar_dir):
    folder, data = cifar_dir
    _, test, info = datasets.get_datasets(
        "cifar10", manual_dir=folder, batch_size=4, normalization="mean_subtraction", train_limit=4
    )
    mean = data["x_train"].reshape(-1, 3).astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(info["channel_mean"], mean)
    np.testing.assert_allclose(next(iter(test))[0].numpy(), data["x_test"][:4] - mean.astype(np.float32), rtol=1e-6)
    _, test, info = datasets.get_datasets(
        "cifar10", manual_dir=folder, batch_size=4, normalization="mean_subtraction", channel_mean=[1, 2, 3]
    )
    assert info["channel_mean"] == (1.0, 2.0, 3.0)
    np.testing.assert_allclose(next(iter(test))[0].numpy(), data["x_test"][:4] - np.float32([1, 2, 3]))


def test_cifar100_and_mnist(tmp_path):
    data = archives.write_cifar100(str(tmp_path))
    _, test, info = datasets.get_datasets("cifar100", manual_dir=str(tmp_path), batch_size=4, label_mode="coarse")
    assert info["num_classes"] == 20
    np.testing.assert_array_equal(next(iter(test))[1].numpy(), data["coarse_test"])
    data = archives.write_mnist(str(tmp_path))
    _, test, info = datasets.get_datasets("mnist", manual_dir=str(tmp_path), batch_size=3)
    assert info["input_shape"] == (28, 28, 1) and info["train_size"] == 7
    np.testing.assert_allclose(next(iter(test))[0].numpy()[..., 0], (data["x_test"] - 127.5) / 128)


def test_imagenet_from_the_tars(tmp_path):
    written = archives.write_imagenet(str(tmp_path), size=(256, 300), per_class=2, n_val=3)
    train, test, info = datasets.get_datasets(
        "imagenet2012", manual_dir=str(tmp_path), val_labels_file=written["labels_file"], batch_size=2,
        augmentation="imagenet_train", normalization="none",
    )
    assert info["input_shape"] == (224, 224, 3)
    assert (info["num_classes"], info["train_size"], info["test_size"]) == (3, 6, 3)
    x, y = next(iter(train))
    assert x.shape == (2, 224, 224, 3) and y.shape == (2,)
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    wnids = sorted({w for _, w in written["train"]})
    xs, ys = zip(*_batches(test, 2))
    for image, label, (_, data, wnid) in zip(np.concatenate(xs), np.concatenate(ys), written["val"]):
        decoded = tf.io.decode_jpeg(data, channels=3).numpy().astype(np.float32)  # 300 x 256 (H x W)
        np.testing.assert_allclose(image, decoded[38:262, 16:240], atol=1e-3)
        assert wnids[label] == wnid


BAD_ARGUMENTS = [
    (ValueError, "argument `name`.*Received: name='cifar'", dict(name="cifar")),
    (ValueError, r"argument `augmentation`.*'cifar10\+'", dict(augmentation="cifar10+")),
    (ValueError, "argument `eval_augmentation`", dict(eval_augmentation="centre")),
    (ValueError, "argument `normalization`", dict(normalization="zscore")),
    (ValueError, "argument `source`", dict(source="web")),
    (ValueError, "argument `batch_size`: expected a positive int", dict(batch_size=0)),
    (ValueError, "argument `label_mode`", dict(label_mode="coarse")),
    (ValueError, "argument `augmentation`.*ImageNet images differ in size",
     dict(name="imagenet2012", augmentation="flip")),
    (ValueError, "argument `batch_size`.*training set size", dict(batch_size=16)),
    (ValueError, "argument `channel_mean`", dict(channel_mean=("a", 1.0, 2.0))),
    (ValueError, "argument `channel_mean`", dict(channel_mean=3.0)),
    (DataNotFoundError, "needs manual_dir", dict(name="cifar100", manual_dir=None)),
]


@pytest.mark.parametrize("error, message, changes", BAD_ARGUMENTS)
def test_bad_arguments_are_named(cifar_dir, error, message, changes):
    kwargs = {"name": "cifar10", "manual_dir": cifar_dir[0], "batch_size": 2, **changes}
    with pytest.raises(error, match=message):
        datasets.get_datasets(kwargs.pop("name"), **kwargs)


def test_missing_archive_names_file_and_folder(cifar_dir):
    folder = cifar_dir[0]
    with pytest.raises(DataNotFoundError, match=f"cifar-100-binary.tar.gz not found in '{folder}'"):
        datasets.get_datasets("cifar100", manual_dir=folder, batch_size=2)

def test_fashion_mnist_defaults_to_the_debian_files():
    (_, _), (x_test, y_test) = fashion_mnist.load_fashion_mnist(allow_keras_fallback=False)
    _, test, info = datasets.get_datasets("fashion_mnist", batch_size=8, train_limit=16, test_limit=8)
    assert (info["train_size"], info["test_size"], info["input_shape"]) == (16, 8, (28, 28, 1))
    x, y = next(iter(test))
    np.testing.assert_allclose(x.numpy(), fashion_mnist.as_float_images(x_test[:8]))
    np.testing.assert_array_equal(y.numpy(), y_test[:8])


def test_feeds_keras_fit_and_evaluate(cifar_dir):
    import keras  # pylint: disable=import-outside-toplevel

    train, test, info = datasets.get_datasets(
        "cifar10", manual_dir=cifar_dir[0], batch_size=5, augmentation="cifar_plus"
    )
    model = keras.Sequential(
        [keras.Input(info["input_shape"]), keras.layers.Flatten(), keras.layers.Dense(info["num_classes"])]
    )
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    history = model.fit(train, steps_per_epoch=info["steps_per_epoch"], epochs=2, verbose=0, shuffle=False)
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()
    assert np.isfinite(model.evaluate(test, verbose=0)).all()


@pytest.mark.parametrize("name", sorted(archives.WRITERS))
def test_every_writer_feeds_get_datasets(tmp_path, name):
    written = archives.write(name, str(tmp_path))
    kwargs = {}
    if name == "imagenet2012":
        kwargs = {"val_labels_file": written["labels_file"], "augmentation": "imagenet_train"}
    train, test, info = datasets.get_datasets(name, manual_dir=str(tmp_path), batch_size=2, **kwargs)
    x, y = next(iter(train))
    assert x.shape[1:] == info["input_shape"] and x.shape[0] == 2
    assert 0 <= y.numpy().min() and y.numpy().max() < info["num_classes"]
    assert sum(int(b[1].shape[0]) for b in test) == info["test_size"] > 0


@pytest.mark.parametrize("normalization", ["centered_128", "mean_subtraction", "unit_interval"])
def test_normalize_false_yields_raw_pixels_and_reports_the_normalization(cifar_dir, normalization):
    """The runner's pipelines (`normalize=False`): raw pixels out, and `info` says what the model's first layer
    applies, the training images' per-channel mean (NumPy over the written archive) for mean_subtraction."""
    folder, data = cifar_dir
    _, test, info = datasets.get_datasets("cifar10", manual_dir=folder, batch_size=5, normalization=normalization,
                                          normalize=False)
    np.testing.assert_array_equal(next(iter(test))[0].numpy(), data["x_test"].astype(np.float32))
    assert info["normalization"] == normalization
    if normalization == "mean_subtraction":
        expected = data["x_train"].reshape(-1, 3).astype(np.float64).mean(axis=0)
        np.testing.assert_allclose(info["channel_mean"], expected, rtol=1e-6)
    with pytest.raises(ValueError, match="normalize"):
        datasets.get_datasets("cifar10", manual_dir=folder, batch_size=5, normalize="no")
