"""Readers of the published archives on tiny generated copies: values, labels, order and every error."""

import gzip
import os
import tarfile

import numpy as np
import pytest
import tensorflow as tf

from sphere_tf.data import cifar
from sphere_tf.data import imagenet
from sphere_tf.data import mnist
from sphere_tf.data.errors import CorruptDataError
from sphere_tf.data.errors import DataNotFoundError
from sphere_tf.data import archive_writers as archives


def test_cifar10_pixels_labels_and_order(tmp_path):
    data = archives.write_cifar10(str(tmp_path))
    x, y = cifar.load_cifar10(str(tmp_path), "train")
    np.testing.assert_array_equal(x, data["x_train"])
    np.testing.assert_array_equal(y, data["y_train"])
    x, y = cifar.load_cifar10(str(tmp_path), "test")
    np.testing.assert_array_equal(x, data["x_test"])
    np.testing.assert_array_equal(y, data["y_test"])
    assert x.dtype == np.uint8 and y.dtype == np.int32


def test_cifar10_record_layout_is_label_then_chw():
    # One record written by hand: label 7, red plane 1, green plane 2, blue plane 3, except pixel (0, 1).
    planes = np.stack([np.full((32, 32), c, np.uint8) for c in (1, 2, 3)])
    planes[:, 0, 1] = (10, 20, 30)
    x, y = cifar.decode_records(bytes([7]) + planes.tobytes(), 1, "hand")
    assert y.tolist() == [7]
    assert x[0, 0, 0].tolist() == [1, 2, 3] and x[0, 0, 1].tolist() == [10, 20, 30]


def test_cifar10_reads_an_extracted_folder(tmp_path):
    data = archives.write_cifar10(str(tmp_path))
    with tarfile.open(tmp_path / "cifar-10-binary.tar.gz") as tar:
        tar.extractall(tmp_path / "x", filter="data")
    x, _ = cifar.load_cifar10(str(tmp_path / "x"), "train")
    np.testing.assert_array_equal(x, data["x_train"])


def test_cifar100_fine_and_coarse(tmp_path):
    data = archives.write_cifar100(str(tmp_path))
    x, fine = cifar.load_cifar100(str(tmp_path), "train")
    np.testing.assert_array_equal(x, data["x_train"])
    np.testing.assert_array_equal(fine, data["fine_train"])
    _, coarse = cifar.load_cifar100(str(tmp_path), "test", label_mode="coarse")
    np.testing.assert_array_equal(coarse, data["coarse_test"])


def test_cifar_missing_archive_names_file_and_folder(tmp_path):
    with pytest.raises(DataNotFoundError, match=rf"cifar-10-binary.tar.gz not found in '{tmp_path}'"):
        cifar.load_cifar10(str(tmp_path), "train")
    with pytest.raises(DataNotFoundError, match="cifar-100-binary.tar.gz"):
        cifar.load_cifar100(str(tmp_path), "test")


def test_cifar_truncated_record_is_named(tmp_path):
    with tarfile.open(tmp_path / "cifar-100-binary.tar.gz", "w:gz") as tar:
        for split in ("train", "test"):
            archives.add_bytes(tar, f"cifar-100-binary/{split}.bin", bytes(3074 * 2 - 5))
    with pytest.raises(CorruptDataError, match=r"train.bin: 6143 bytes is not a whole number of 3074-byte"):
        cifar.load_cifar100(str(tmp_path), "train")


def test_cifar_wrong_format_and_broken_archive(tmp_path):
    # CIFAR-10 records (3073 bytes) inside a CIFAR-100 archive: the length check fails.
    with tarfile.open(tmp_path / "cifar-100-binary.tar.gz", "w:gz") as tar:
        archives.add_bytes(tar, "cifar-100-binary/test.bin", bytes(3073 * 5))
    with pytest.raises(CorruptDataError, match="3074-byte records"):
        cifar.load_cifar100(str(tmp_path), "test")
    (tmp_path / "cifar-10-binary.tar.gz").write_bytes(b"not a gzip file at all")
    with pytest.raises(CorruptDataError, match="cannot read the tar.gz archive"):
        cifar.load_cifar10(str(tmp_path), "test")
    with tarfile.open(tmp_path / "cifar-10-binary.tar.gz", "w:gz") as tar:
        archives.add_bytes(tar, "cifar-10-batches-bin/test_batch.bin", bytes([12]) + bytes(3072))
    with pytest.raises(CorruptDataError, match="lacks cifar-10-batches-bin/data_batch_1.bin"):
        cifar.load_cifar10(str(tmp_path), "train")
    with pytest.raises(CorruptDataError, match="label 12 is out of range for 10 classes"):
        cifar.load_cifar10(str(tmp_path), "test")


def test_mnist_idx_values_and_errors(tmp_path):
    data = archives.write_mnist(str(tmp_path))
    x, y = mnist.load_idx_split(str(tmp_path), "train")
    np.testing.assert_array_equal(x[..., 0], data["x_train"])
    np.testing.assert_array_equal(y, data["y_train"])
    assert x.shape == (7, 28, 28, 1)
    # Images and labels swapped: the image file has the labels' magic and shape.
    archives.write_idx(str(tmp_path / "t10k-images-idx3-ubyte.gz"), data["y_test"], 2049)
    with pytest.raises(CorruptDataError, match="t10k-images-idx3-ubyte.gz: expected 28x28 images"):
        mnist.load_idx_split(str(tmp_path), "test")
    with gzip.open(tmp_path / "t10k-images-idx3-ubyte.gz", "wb") as f:
        f.write(b"\x00\x00\x09\x99" + bytes(20))
    with pytest.raises(CorruptDataError, match="bad idx magic number 0x999"):
        mnist.load_idx_split(str(tmp_path), "test")
    os.remove(tmp_path / "train-labels-idx1-ubyte.gz")
    with pytest.raises(DataNotFoundError, match=rf"train-labels-idx1-ubyte.gz not found in '{tmp_path}'"):
        mnist.load_idx_split(str(tmp_path), "train", dataset="mnist")


def _decode(data):
    return tf.io.decode_jpeg(data, channels=3).numpy()


def test_imagenet_index_reads_every_jpeg_by_offset(tmp_path):
    written = archives.write_imagenet(str(tmp_path))
    index = imagenet.index_train_tar(str(tmp_path))
    assert index["wnids"] == ("n01000001", "n02000002", "n03000003")
    path = str(tmp_path / imagenet.TRAIN_ARCHIVE)
    assert len(index["labels"]) == len(written["train"]) == 6
    for off, n, label, (data, wnid) in zip(index["offsets"], index["lengths"], index["labels"], written["train"]):
        assert imagenet.read_bytes(path, off, n) == data
        assert index["wnids"][label] == wnid
    val = imagenet.index_val_tar(str(tmp_path), written["labels_file"], index["wnids"])
    path = str(tmp_path / imagenet.VAL_ARCHIVE)
    for off, n, label, (name, data, wnid) in zip(val["offsets"], val["lengths"], val["labels"], written["val"]):
        assert imagenet.read_bytes(path, off, n) == data
        assert index["wnids"][label] == wnid, name


def test_imagenet_csv_labels(tmp_path):
    written = archives.write_imagenet(str(tmp_path))
    csv_path = tmp_path / "LOC_val_solution.csv"
    rows = [f"{name[:-5]},{wnid} 1 2 3 4" for name, _, wnid in written["val"]]
    csv_path.write_text("ImageId,PredictionString\n" + "\n".join(rows[::-1]) + "\n")
    wnids = ("n01000001", "n02000002", "n03000003")
    val = imagenet.index_val_tar(str(tmp_path), str(csv_path), wnids)
    assert [wnids[i] for i in val["labels"]] == [w for _, _, w in written["val"]]


def test_imagenet_errors(tmp_path):
    with pytest.raises(DataNotFoundError, match=rf"ILSVRC2012_img_train.tar not found in '{tmp_path}'"):
        imagenet.index_train_tar(str(tmp_path))
    written = archives.write_imagenet(str(tmp_path))
    wnids = ("n01000001", "n02000002", "n03000003")
    with pytest.raises(DataNotFoundError, match="validation labels file not found"):
        imagenet.index_val_tar(str(tmp_path), None, wnids)
    short = tmp_path / "short.txt"
    short.write_text("n01000001\n")
    with pytest.raises(CorruptDataError, match="1 labels for 4 validation images"):
        imagenet.index_val_tar(str(tmp_path), str(short), wnids)
    with pytest.raises(CorruptDataError, match="not a class of the train archive"):
        imagenet.index_val_tar(str(tmp_path), written["labels_file"], wnids[:2])
    # A train archive of loose JPEGs (the val layout) is refused.
    os.replace(tmp_path / imagenet.VAL_ARCHIVE, tmp_path / imagenet.TRAIN_ARCHIVE)
    with pytest.raises(CorruptDataError, match="is not a per-class .tar"):
        imagenet.index_train_tar(str(tmp_path))
    (tmp_path / imagenet.TRAIN_ARCHIVE).write_bytes(b"\x01" * 700)
    with pytest.raises(CorruptDataError, match="cannot read the tar archive"):
        imagenet.index_train_tar(str(tmp_path))


def test_cifar100_coarse_byte_is_checked(tmp_path):
    images = np.zeros((2, 32, 32, 3), np.uint8)
    with tarfile.open(tmp_path / "cifar-100-binary.tar.gz", "w:gz") as tar:
        archives.add_bytes(tar, "cifar-100-binary/test.bin", archives.cifar_records(images, [3, 25], [4, 5]))
    with pytest.raises(CorruptDataError, match="coarse label 25 is out of range for 20 classes"):
        cifar.load_cifar100(str(tmp_path), "test")
