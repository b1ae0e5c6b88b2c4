"""CIFAR-10 and CIFAR-100 from the published binary tarballs, read offline.

`cifar-10-binary.tar.gz` holds `cifar-10-batches-bin/data_batch_{1..5}.bin` and
`test_batch.bin`; every record is 1 label byte followed by 3072 image bytes in
channel-major order (1024 red, 1024 green, 1024 blue, rows top to bottom).
`cifar-100-binary.tar.gz` holds `cifar-100-binary/train.bin` and `test.bin`
with records of a coarse-label byte, a fine-label byte and the same 3072 image
bytes. Both formats are described on the data set's page
(https://www.cs.toronto.edu/~kriz/cifar.html, "Binary version") and read the
same way by the authors' `cifar10_input.py` (wy1iu/SphereNet); the files are
fixed-length records, so they are parsed with NumPy straight from the tarball
(the whole of CIFAR is about 180 MB of pixels). An already extracted folder
(`cifar-10-batches-bin/` or `cifar-100-binary/` inside `manual_dir`) is read
when the tarball is absent.
"""

import os
import tarfile

import numpy as np

from sphere_tf import validation
from sphere_tf.data.errors import CorruptDataError
from sphere_tf.data.errors import DataNotFoundError

IMAGE_SHAPE = (32, 32, 3)
_IMAGE_BYTES = 32 * 32 * 3

CIFAR10_ARCHIVE = "cifar-10-binary.tar.gz"
CIFAR10_FOLDER = "cifar-10-batches-bin"
CIFAR10_FILES = {
    "train": tuple(f"data_batch_{i}.bin" for i in range(1, 6)),
    "test": ("test_batch.bin",),
}
CIFAR100_ARCHIVE = "cifar-100-binary.tar.gz"
CIFAR100_FOLDER = "cifar-100-binary"
CIFAR100_FILES = {"train": ("train.bin",), "test": ("test.bin",)}


def decode_records(data, label_bytes, path, label_index=0, num_classes=None):
    """Splits fixed-length CIFAR records into images and labels.

    Args:
        data: bytes, the whole `.bin` file.
        label_bytes: int, 1 (CIFAR-10) or 2 (CIFAR-100: coarse, fine).
        path: str, the file's name for error messages.
        label_index: int, which label byte to return.
        num_classes: int or None, labels must be below it.

    Returns:
        `(images, labels)`: uint8 `(N, 32, 32, 3)` (HWC) and int32 `(N,)`.

    Raises:
        CorruptDataError: the length is not a whole number of records, or a label is out of range.
    """
    record = label_bytes + _IMAGE_BYTES
    if not data or len(data) % record:
        raise CorruptDataError(
            f"{path}: {len(data)} bytes is not a whole number of {record}-byte records "
            f"({label_bytes} label byte(s) + {_IMAGE_BYTES} image bytes); the file is truncated or corrupt."
        )
    rows = np.frombuffer(data, dtype=np.uint8).reshape(-1, record)
    labels = rows[:, label_index].astype(np.int32)
    if num_classes is not None and labels.size and labels.max() >= num_classes:
        raise CorruptDataError(
            f"{path}: label {int(labels.max())} is out of range for {num_classes} classes; "
            "the file is not a CIFAR binary file of this kind."
        )
    images = rows[:, label_bytes:].reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(images), labels


def _read_members(manual_dir, archive, folder, names):
    """The bytes of `folder/name` for each name, from `manual_dir/archive` or the extracted folder."""
    archive_path = os.path.join(manual_dir, archive)
    folder_path = os.path.join(manual_dir, folder)
    if os.path.isfile(archive_path):
        wanted = {f"{folder}/{name}": name for name in names}
        found = {}
        try:
            with tarfile.open(archive_path, "r:*") as tar:
                for member in tar:
                    name = wanted.get(member.name.lstrip("./"))
                    if name is not None and member.isfile():
                        found[name] = tar.extractfile(member).read()
        except (tarfile.TarError, OSError, EOFError) as e:
            raise CorruptDataError(f"{archive_path}: cannot read the tar.gz archive ({e}).") from e
        missing = [f"{folder}/{name}" for name in names if name not in found]
        if missing:
            raise CorruptDataError(
                f"{archive_path}: the archive lacks {', '.join(missing)}; it is not the published "
                f"{archive}."
            )
        return [(f"{archive_path}:{folder}/{name}", found[name]) for name in names]
    paths = [os.path.join(folder_path, name) for name in names]
    if all(os.path.isfile(p) for p in paths):
        result = []
        for p in paths:
            with open(p, "rb") as f:
                result.append((p, f.read()))
        return result
    raise DataNotFoundError(
        f"{archive} not found in {manual_dir!r} (nor an extracted {folder}/ folder holding "
        f"{', '.join(names)}). Put the published archive there or pass the folder holding it as manual_dir."
    )


def load_cifar10(manual_dir, split):
    """CIFAR-10 `split` ('train' or 'test') as uint8 `(N, 32, 32, 3)` images and int32 labels in 0..9.

    Records keep the file order (data_batch_1 ... data_batch_5 for 'train').

    Raises:
        DataNotFoundError: neither the archive nor the extracted folder is in `manual_dir`.
        CorruptDataError: a file is truncated or not in the binary CIFAR-10 format.
    """
    split = validation.one_of(split, "split", ("train", "test"))
    chunks = [
        decode_records(data, 1, path, num_classes=10)
        for path, data in _read_members(manual_dir, CIFAR10_ARCHIVE, CIFAR10_FOLDER, CIFAR10_FILES[split])
    ]
    return np.concatenate([c[0] for c in chunks]), np.concatenate([c[1] for c in chunks])


def load_cifar100(manual_dir, split, label_mode="fine"):
    """CIFAR-100 `split` as uint8 `(N, 32, 32, 3)` images and int32 labels.

    Args:
        manual_dir: str, the folder holding `cifar-100-binary.tar.gz`.
        split: 'train' or 'test'.
        label_mode: 'fine' (100 classes, the papers' setting) or 'coarse' (20 superclasses).

    Raises:
        DataNotFoundError: neither the archive nor the extracted folder is in `manual_dir`.
        CorruptDataError: a file is truncated or not in the binary CIFAR-100 format.
    """
    split = validation.one_of(split, "split", ("train", "test"))
    label_mode = validation.one_of(label_mode, "label_mode", ("fine", "coarse"))
    index, classes = (1, 100) if label_mode == "fine" else (0, 20)
    ((path, data),) = _read_members(manual_dir, CIFAR100_ARCHIVE, CIFAR100_FOLDER, CIFAR100_FILES[split])
    images, labels = decode_records(data, 2, path, label_index=index, num_classes=classes)
    if index == 1:  # the coarse byte is checked too, whichever label is returned
        coarse = np.frombuffer(data, np.uint8).reshape(-1, 2 + _IMAGE_BYTES)[:, 0]
        if coarse.max() >= 20:
            raise CorruptDataError(
                f"{path}: coarse label {int(coarse.max())} is out of range for 20 classes; "
                "the file is not a CIFAR-100 binary file."
            )
    return images, labels
