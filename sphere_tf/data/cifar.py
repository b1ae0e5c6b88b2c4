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

The archive is untrusted input (`untrusted`): a member name or link that leaves
the archive's folder is refused, a member declaring more bytes than the
published file holds (`PUBLISHED_RECORDS`) is refused before it is read, and
the decompressed archive is bounded (`MAX_ARCHIVE_BYTES`). The python version
(`cifar-10-python.tar.gz`, `cifar-10-batches-py/`, which `keras.datasets`
caches) is never read: its batches are pickles, and unpickling a file runs
whatever code it names. When only that version is found, the error says so.
"""

import lzma
import os
import tarfile
import zlib

import numpy as np

from sphere_tf import validation
from sphere_tf.data import untrusted
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
# Records in each published file: a file (or archive member) larger than these records is refused unread.
PUBLISHED_RECORDS = {**{name: 10000 for name in CIFAR10_FILES["train"] + CIFAR10_FILES["test"]},
                     "train.bin": 50000, "test.bin": 10000}
# The published archives expand to about 185 MB (and hold under ten members): a bound on the decompression and the
# headers read, with room for a repacked archive.
MAX_ARCHIVE_BYTES = 512 * 2**20
MAX_ARCHIVE_MEMBERS = 1000
# The python version, which is not read (pickles): named in the error when it is what `manual_dir` holds.
PICKLED_VERSIONS = {CIFAR10_ARCHIVE: ("cifar-10-python.tar.gz", "cifar-10-batches-py"),
                    CIFAR100_ARCHIVE: ("cifar-100-python.tar.gz", "cifar-100-python")}


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


def _size_limit(name, record):
    """The bytes of the published file `name` of `record`-byte records, and the phrase naming that bound."""
    records = PUBLISHED_RECORDS[name]
    return records * record, f"the published {name} ({records} records of {record} bytes)"


def _read_members(manual_dir, archive, folder, names, record):
    """The bytes of `folder/name` for each name, from `manual_dir/archive` or the extracted folder.

    `record` is the record size: no file may hold more than its published records (`PUBLISHED_RECORDS`).
    """
    archive_path = os.path.join(manual_dir, archive)
    folder_path = os.path.join(manual_dir, folder)
    if os.path.isfile(archive_path):
        wanted = {f"{folder}/{name}": name for name in names}
        largest = max(_size_limit(name, record)[0] for name in names)
        found = {}
        try:
            with untrusted.open_tar(archive_path, max_read=largest, max_total=MAX_ARCHIVE_BYTES) as tar:
                for member in untrusted.members(tar, archive_path, MAX_ARCHIVE_MEMBERS):
                    name = wanted.get(untrusted.member_name(member))
                    if name is None:
                        continue
                    untrusted.check_regular(archive_path, member)
                    untrusted.check_member_size(archive_path, member, *_size_limit(name, record))
                    found[name] = tar.extractfile(member).read()
        except (tarfile.TarError, OSError, EOFError, zlib.error, lzma.LZMAError) as e:
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
        for name, p in zip(names, paths):
            limit, why = _size_limit(name, record)
            if os.path.getsize(p) > limit:  # before reading it: a file of many GB would be read whole
                raise CorruptDataError(f"{p}: {os.path.getsize(p):,} bytes, more than {why} ({limit:,} bytes); "
                                       "refused unread.")
            with open(p, "rb") as f:
                result.append((p, f.read()))
        return result
    pickled = [name for name in PICKLED_VERSIONS[archive] if os.path.exists(os.path.join(manual_dir, name))]
    hint = (f" {manual_dir!r} holds {' and '.join(pickled)}, the python version, which is not read: its batches "
            "are pickles, and loading a pickle runs the code it names. Download the binary version "
            "(https://www.cs.toronto.edu/~kriz/cifar.html)." if pickled else "")
    raise DataNotFoundError(
        f"{archive} not found in {manual_dir!r} (nor an extracted {folder}/ folder holding "
        f"{', '.join(names)}). Put the published archive there or pass the folder holding it as manual_dir."
        + hint
    )


def load_cifar10(manual_dir, split):
    """CIFAR-10 `split` ('train' or 'test') as uint8 `(N, 32, 32, 3)` images and int32 labels in 0..9.

    Records keep the file order (data_batch_1 ... data_batch_5 for 'train').

    Raises:
        DataNotFoundError: neither the archive nor the extracted folder is in `manual_dir`.
        CorruptDataError: a file is truncated or not in the binary CIFAR-10 format, or the archive is refused as
            untrusted input (a member name leaving its folder, a member larger than the published file, a
            decompression bomb: the module docstring).
    """
    split = validation.one_of(split, "split", ("train", "test"))
    chunks = [
        decode_records(data, 1, path, num_classes=10)
        for path, data in _read_members(manual_dir, CIFAR10_ARCHIVE, CIFAR10_FOLDER, CIFAR10_FILES[split],
                                        1 + _IMAGE_BYTES)
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
        CorruptDataError: a file is truncated or not in the binary CIFAR-100 format, or the archive is refused as
            untrusted input (as `load_cifar10`).
    """
    split = validation.one_of(split, "split", ("train", "test"))
    label_mode = validation.one_of(label_mode, "label_mode", ("fine", "coarse"))
    index, classes = (1, 100) if label_mode == "fine" else (0, 20)
    ((path, data),) = _read_members(manual_dir, CIFAR100_ARCHIVE, CIFAR100_FOLDER, CIFAR100_FILES[split],
                                    2 + _IMAGE_BYTES)
    images, labels = decode_records(data, 2, path, label_index=index, num_classes=classes)
    if index == 1:  # the coarse byte is checked too, whichever label is returned
        coarse = np.frombuffer(data, np.uint8).reshape(-1, 2 + _IMAGE_BYTES)[:, 0]
        if coarse.max() >= 20:
            raise CorruptDataError(
                f"{path}: coarse label {int(coarse.max())} is out of range for 20 classes; "
                "the file is not a CIFAR-100 binary file."
            )
    return images, labels
