"""The tensorflow-datasets route on a data folder prepared by the real `cifar10` builder from generated files.

tensorflow-datasets checks the checksums of what it downloads, so the test does what the library's own builder
tests do (`tfds.testing.DatasetBuilderTestCase`): it points the download manager's `download_and_extract` at a
folder holding a generated `cifar-10-batches-bin/`. The real builder then parses those binary files and writes
the prepared data, and `get_datasets(source='tfds')` reads it through the real `tfds.load(download=False)`.
"""

import os
import tarfile
from unittest import mock

import numpy as np
import pytest

from sphere_tf.data import datasets
from sphere_tf.data.errors import DataNotFoundError
from sphere_tf.data import archive_writers as archives

tfds = pytest.importorskip("tensorflow_datasets")


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("tfds"))
    data = archives.write_cifar10(folder, per_batch=2, n_test=3, seed=5)
    extracted = os.path.join(folder, "extracted")
    with tarfile.open(os.path.join(folder, "cifar-10-binary.tar.gz")) as tar:
        tar.extractall(extracted, filter="data")
    data_dir = os.path.join(folder, "tfds_data")
    with mock.patch.object(tfds.download.DownloadManager, "download_and_extract", lambda self, url: extracted):
        tfds.builder("cifar10", data_dir=data_dir).download_and_prepare(
            download_config=tfds.download.DownloadConfig(try_download_gcs=False)
        )
    return data_dir, data


def _match(images, labels, x_ref, y_ref):
    """Index of each image in the reference arrays; its label must agree."""
    found = []
    for image, label in zip(images, labels):
        (hits,) = np.nonzero((x_ref == image).all(axis=(1, 2, 3)))
        assert len(hits) == 1 and y_ref[hits[0]] == label
        found.append(int(hits[0]))
    return found


def test_reads_the_prepared_folder(prepared):
    data_dir, data = prepared
    train, test, info = datasets.get_datasets(
        "cifar10", source="tfds", data_dir=data_dir, batch_size=5, normalization="none"
    )
    assert (info["train_size"], info["test_size"], info["num_classes"]) == (10, 3, 10)
    xs, ys = zip(*[(x.numpy(), y.numpy()) for x, y in test])
    found = _match(np.concatenate(xs).astype(np.uint8), np.concatenate(ys), data["x_test"], data["y_test"])
    assert sorted(found) == [0, 1, 2]
    xs, ys = zip(*[(x.numpy(), y.numpy()) for x, y in train.take(2)])
    found = _match(np.concatenate(xs).astype(np.uint8), np.concatenate(ys), data["x_train"], data["y_train"])
    assert sorted(found) == list(range(10))  # one epoch visits every training image once


def test_same_stream_as_manual_up_to_the_stored_order(prepared, tmp_path):
    data_dir, data = prepared
    _, test, _ = datasets.get_datasets(
        "cifar10", source="tfds", data_dir=data_dir, batch_size=3, normalization="centered_128"
    )
    x = next(iter(test))[0].numpy()
    assert x.min() >= -1 and x.max() <= 1
    np.testing.assert_allclose(np.sort(x.ravel()), np.sort((data["x_test"].ravel() - 127.5) / 128))


def test_unprepared_folder_names_it(tmp_path):
    message = rf"cifar100 is not prepared in the tensorflow-datasets folder '{tmp_path}'"
    with pytest.raises(DataNotFoundError, match=message):
        datasets.get_datasets("cifar100", source="tfds", data_dir=str(tmp_path), batch_size=2)
    with pytest.raises(DataNotFoundError, match="needs data_dir"):
        datasets.get_datasets("mnist", source="tfds", batch_size=2)


def test_imagenet2012_prepared_by_the_real_builder_from_generated_tars(tmp_path):
    # The real `imagenet2012` builder reads ILSVRC2012_img_{train,val}.tar from its manual dir (no download);
    # it labels validation images by zipping their sorted names with its bundled validation_labels.txt.
    labels_txt = tfds.core.tfds_path("datasets/imagenet2012/labels.txt").read_text().split()
    val_txt = tfds.core.tfds_path("datasets/imagenet2012/validation_labels.txt").read_text().split()
    manual = tmp_path / "manual"
    manual.mkdir()
    written = archives.write_imagenet(str(manual), wnids=tuple(labels_txt[:2]), per_class=2, n_val=3,
                                      size=(256, 300))
    data_dir = str(tmp_path / "tfds_data")
    tfds.builder("imagenet2012", data_dir=data_dir).download_and_prepare(
        download_config=tfds.download.DownloadConfig(manual_dir=str(manual), try_download_gcs=False)
    )
    train, test, info = datasets.get_datasets(
        "imagenet2012", source="tfds", data_dir=data_dir, batch_size=2, augmentation="imagenet_train",
        normalization="none", seed=1,
    )
    assert (info["train_size"], info["test_size"], info["input_shape"]) == (4, 3, (224, 224, 3))
    x, y = next(iter(train))
    assert x.shape == (2, 224, 224, 3) and set(y.numpy().tolist()) <= {0, 1}
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    expected = {}
    for name, data, _ in written["val"]:
        crop = tf.io.decode_jpeg(data, channels=3).numpy().astype(np.float32)[38:262, 16:240]
        rank = sorted(n for n, _, _ in written["val"]).index(name)
        expected[name] = (crop, labels_txt.index(val_txt[rank]))
    got = [(im, int(lab)) for xb, yb in test for im, lab in zip(xb.numpy(), yb.numpy())]
    assert len(got) == 3
    for crop, label in expected.values():
        assert any(np.allclose(im, crop, atol=1e-3) and lab == label for im, lab in got)


def test_runner_trains_from_the_prepared_folder(prepared, tmp_path):
    """`data.data_dir` alone selects the tfds route in the runner (source 'auto'); two steps run on it."""
    import json  # pylint: disable=import-outside-toplevel

    from sphere_tf.runners import classifier  # pylint: disable=import-outside-toplevel

    data_dir, _ = prepared
    config = {
        "data": {"name": "cifar10", "data_dir": data_dir, "augmentation": "cifar_plus"},
        "model": {"name": "small_cnn", "widths": [4], "convs_per_stage": 1, "dense_units": 8},
        "train": {"batch_size": 5, "epochs": 1, "steps_per_epoch": 2, "verbose": 0},
        "export": False,
    }
    results = classifier.train_and_evaluate(config, str(tmp_path / "run"))
    assert results["steps"] == 2 and np.isfinite(results["test_loss"])
    # 3 test images: the accuracy is a multiple of 1/3.
    assert round(results["test_accuracy"] * 3 / 100, 6) in (0.0, 1.0, 2.0, 3.0)
    with open(tmp_path / "run" / "config.json") as f:
        assert json.load(f)["data"]["data_dir"] == data_dir
