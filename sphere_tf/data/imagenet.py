"""ImageNet (ILSVRC-2012) from the published tar files, streamed: nothing is extracted.

`ILSVRC2012_img_train.tar` is a tar of 1000 per-class tars (`n01440764.tar`,
named by WordNet id) of JPEGs; `ILSVRC2012_img_val.tar` is a flat tar of
50,000 JPEGs (`ILSVRC2012_val_00000001.JPEG`, ...). Only the tar headers are
read up front: `index_train_tar` and `index_val_tar` walk them and record each
JPEG's byte offset and length inside the outer file, so an input pipeline
shuffles the whole index and reads any image with one seek and one read
(`read_bytes`). Walking the train tar's headers touches every one of its
1.28 M member headers once per call.

Class ids are the positions of the WordNet ids in sorted order (the order of
tensorflow-datasets' `imagenet2012` labels file, so both sources agree). The
validation tar carries no labels; `read_val_labels` takes one of two files:

- one WordNet id per line, for the validation images in sorted file-name order
  (the `validation_labels.txt` format of tensorflow-datasets' `imagenet2012`);
- a CSV with header `ImageId,PredictionString` whose second column starts with
  the WordNet id (`LOC_val_solution.csv` of the ImageNet localisation release).

The tars are untrusted input (`untrusted`): a member name or link that leaves
the archive's folder is refused, a member (or an inner tar's member) whose
declared size runs past the end of the tar holding it is refused before it is
indexed, headers are read through a `BoundedReader` (no pax header larger than
the archive is read), and the member counts are bounded (`MAX_*_MEMBERS`, well
above the published 1000 class tars of at most 1300 images and 50,000
validation images).
"""

import csv
import os
import tarfile

import numpy as np

from sphere_tf.data import untrusted
from sphere_tf.data.errors import CorruptDataError
from sphere_tf.data.errors import DataNotFoundError

TRAIN_ARCHIVE = "ILSVRC2012_img_train.tar"
VAL_ARCHIVE = "ILSVRC2012_img_val.tar"
_JPEG_SUFFIXES = (".jpeg", ".jpg")
# Bounds on the headers an index reads (`tarfile` keeps each one): ten times the published counts and more.
MAX_TRAIN_MEMBERS = 10_000
MAX_CLASS_MEMBERS = 100_000
MAX_VAL_MEMBERS = 500_000


def _require(manual_dir, name):
    path = os.path.join(manual_dir, name)
    if not os.path.isfile(path):
        raise DataNotFoundError(
            f"{name} not found in {manual_dir!r}. Put the published ImageNet archive there "
            "or pass the folder holding it as manual_dir."
        )
    return path


def _is_jpeg(name):
    return name.lower().endswith(_JPEG_SUFFIXES)


def _check_within(what, member, offset, size):
    """Raises `CorruptDataError` when `member`'s data (at `offset` of the tar `what`) run past its `size` bytes:
    a declared size the tar does not hold, which `read_bytes` would otherwise try to read."""
    if offset + member.size > size:
        raise CorruptDataError(
            f"{what}: member {member.name!r} declares {member.size:,} bytes at byte {offset:,}, past the end of the "
            f"{size:,}-byte tar; refused (a truncated, corrupt or hostile archive).")


def index_train_tar(manual_dir):
    """Offsets of every JPEG in `ILSVRC2012_img_train.tar`.

    Returns:
        dict with `wnids` (sorted tuple of the class tars' WordNet ids), `offsets` and
        `lengths` (int64 arrays, byte ranges inside the outer tar), `labels` (int32
        class ids), `names` (JPEG file names), all in archive order.

    Raises:
        DataNotFoundError: the archive is not in `manual_dir`.
        CorruptDataError: it is not a tar of per-class tars of JPEGs, or it is refused as untrusted input (a
            member name leaving its folder, a declared size past its end: the module docstring).
    """
    path = _require(manual_dir, TRAIN_ARCHIVE)
    archive_bytes = os.path.getsize(path)
    per_class = []
    try:
        with untrusted.open_tar(path, max_read=archive_bytes, max_total=archive_bytes,
                                compressed=False) as outer:
            for member in untrusted.members(outer, path, MAX_TRAIN_MEMBERS):
                if not member.isfile():
                    continue
                if not member.name.endswith(".tar"):
                    raise CorruptDataError(
                        f"{path}: member {member.name!r} is not a per-class .tar; the train archive "
                        "holds one tar per WordNet id."
                    )
                _check_within(path, member, member.offset_data, archive_bytes)
                wnid = os.path.basename(member.name)[: -len(".tar")]
                what = f"{path}:{member.name}"
                entries = []
                inner_file = untrusted.BoundedReader(outer.extractfile(member), what, member.size, member.size)
                with tarfile.open(fileobj=inner_file, mode="r:") as inner:
                    for item in untrusted.members(inner, what, MAX_CLASS_MEMBERS):
                        if item.isfile():
                            _check_within(what, item, item.offset_data, member.size)
                        if item.isfile() and _is_jpeg(item.name):
                            entries.append((member.offset_data + item.offset_data, item.size, item.name))
                per_class.append((wnid, entries))
    except tarfile.TarError as e:
        raise CorruptDataError(f"{path}: cannot read the tar archive ({e}).") from e
    if not per_class or not any(entries for _, entries in per_class):
        raise CorruptDataError(f"{path}: no JPEGs found in per-class tars.")
    wnids = tuple(sorted(w for w, _ in per_class))
    class_id = {w: i for i, w in enumerate(wnids)}
    rows = [(off, size, class_id[w], name) for w, entries in per_class for off, size, name in entries]
    return {
        "wnids": wnids,
        "offsets": np.array([r[0] for r in rows], np.int64),
        "lengths": np.array([r[1] for r in rows], np.int64),
        "labels": np.array([r[2] for r in rows], np.int32),
        "names": tuple(r[3] for r in rows),
    }


def read_val_labels(labels_file, names):
    """WordNet ids of the validation images `names` from a ground-truth file (see the module doc).

    Raises:
        DataNotFoundError: `labels_file` is None or missing.
        CorruptDataError: the file does not cover every image.
    """
    if labels_file is None or not os.path.isfile(labels_file):
        raise DataNotFoundError(
            f"ImageNet validation labels file not found (val_labels_file={labels_file!r}); pass a file "
            "with one WordNet id per line in sorted image order (tensorflow-datasets' "
            "validation_labels.txt) or LOC_val_solution.csv."
        )
    with open(labels_file, newline="") as f:
        text = f.read()
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if lines and lines[0].replace(" ", "").lower().startswith("imageid,predictionstring"):
        by_name = {}
        for row in csv.reader(lines[1:]):
            if len(row) < 2 or not row[1].split():
                raise CorruptDataError(f"{labels_file}: bad row {row!r}; expected ImageId,PredictionString.")
            by_name[row[0]] = row[1].split()[0]
        stems = [os.path.splitext(os.path.basename(n))[0] for n in names]
        missing = [s for s in stems if s not in by_name]
        if missing:
            raise CorruptDataError(f"{labels_file}: no label for {len(missing)} images, e.g. {missing[0]}.")
        return [by_name[s] for s in stems]
    order = sorted(range(len(names)), key=lambda i: os.path.basename(names[i]))
    if len(lines) != len(names):
        raise CorruptDataError(
            f"{labels_file}: {len(lines)} labels for {len(names)} validation images; a plain labels file "
            "holds one WordNet id per image, in sorted file-name order."
        )
    result = [None] * len(names)
    for rank, i in enumerate(order):
        result[i] = lines[rank]
    return result


def index_val_tar(manual_dir, labels_file, wnids):
    """Offsets and class ids of every JPEG in `ILSVRC2012_img_val.tar`, in archive order.

    Args:
        manual_dir: str, the folder holding the archive.
        labels_file: str, the ground-truth file (see `read_val_labels`).
        wnids: sorted WordNet ids defining the class ids (from `index_train_tar`).

    Raises:
        DataNotFoundError: the archive or the labels file is missing.
        CorruptDataError: the tar is unreadable or refused as untrusted input (as `index_train_tar`), or a
            label is not one of `wnids`.
    """
    path = _require(manual_dir, VAL_ARCHIVE)
    archive_bytes = os.path.getsize(path)
    entries = []
    try:
        with untrusted.open_tar(path, max_read=archive_bytes, max_total=archive_bytes,
                                compressed=False) as tar:
            for member in untrusted.members(tar, path, MAX_VAL_MEMBERS):
                if member.isfile():
                    _check_within(path, member, member.offset_data, archive_bytes)
                if member.isfile() and _is_jpeg(member.name):
                    entries.append((member.offset_data, member.size, member.name))
    except tarfile.TarError as e:
        raise CorruptDataError(f"{path}: cannot read the tar archive ({e}).") from e
    if not entries:
        raise CorruptDataError(f"{path}: no JPEGs found.")
    names = [e[2] for e in entries]
    class_id = {w: i for i, w in enumerate(wnids)}
    labels = []
    for name, wnid in zip(names, read_val_labels(labels_file, names)):
        if wnid not in class_id:
            raise CorruptDataError(f"{labels_file}: {name} is labelled {wnid!r}, not a class of the train archive.")
        labels.append(class_id[wnid])
    return {
        "offsets": np.array([e[0] for e in entries], np.int64),
        "lengths": np.array([e[1] for e in entries], np.int64),
        "labels": np.array(labels, np.int32),
        "names": tuple(names),
    }


def read_bytes(path, offset, length):
    """`length` bytes of `path` from `offset` (one JPEG inside a tar)."""
    with open(path, "rb") as f:
        f.seek(int(offset))
        data = f.read(int(length))
    if len(data) != int(length):
        raise CorruptDataError(f"{path}: {len(data)} of {int(length)} bytes at offset {int(offset)}; truncated.")
    return data
