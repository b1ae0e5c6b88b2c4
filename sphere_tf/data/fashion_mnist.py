"""Fashion-MNIST from local idx files, with `keras.datasets` as the fallback.

The Debian package `dataset-fashion-mnist` installs the original gzipped idx
files in `/usr/share/datasets/fashion-mnist`; they are read directly, with their
headers checked. Only if they are missing does the loader ask
`keras.datasets.fashion_mnist` (which downloads unless Keras has cached it), and
if both fail the error names both places.
"""

import gzip
import math
import os
import struct
import zlib

import keras
import numpy as np

from sphere_tf.data import untrusted
from sphere_tf.data.errors import CorruptDataError
from sphere_tf.data.errors import DataNotFoundError

DEBIAN_DIR = "/usr/share/datasets/fashion-mnist"
FILES = {
    "train_images": "train-images-idx3-ubyte.gz",
    "train_labels": "train-labels-idx1-ubyte.gz",
    "test_images": "t10k-images-idx3-ubyte.gz",
    "test_labels": "t10k-labels-idx1-ubyte.gz",
}
CLASS_NAMES = (
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot",
)
# idx magic numbers: 0x0803 = unsigned byte, 3 dims; 0x0801 = unsigned byte, 1 dim.
_IMAGES_MAGIC = 2051
_LABELS_MAGIC = 2049
# The most data an idx header may declare: MNIST's largest file holds 47 MB. A header declaring more (2^31
# images, say) is refused before anything of that size is allocated.
MAX_IDX_BYTES = 2**30


def read_idx(path, max_bytes=MAX_IDX_BYTES):
    """Reads one (optionally gzipped) idx file of unsigned bytes into a NumPy array.

    The file is untrusted input: the header's shape is checked against `max_bytes` before anything is allocated,
    and the data are decompressed in 1 MiB chunks into an array of the size the header declares; a file holding
    more (a decompression bomb's gigabytes after a small header) is refused after that many bytes.

    Raises:
        CorruptDataError: (a `ValueError`) the file is not an idx file of the size its header declares, or the
            header declares more than `max_bytes`; the message names the file.
    """
    opener = gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            head = f.read(4)
            if len(head) < 4:
                raise CorruptDataError(f"{path}: {len(head)} bytes is too short for an idx header.")
            magic = struct.unpack(">I", head)[0]
            if magic not in (_IMAGES_MAGIC, _LABELS_MAGIC):
                raise CorruptDataError(
                    f"{path}: bad idx magic number {magic:#x}; expected {_IMAGES_MAGIC:#x} (images) "
                    f"or {_LABELS_MAGIC:#x} (labels)."
                )
            ndim = magic & 0xFF
            header = f.read(4 * ndim)
            if len(header) < 4 * ndim:
                raise CorruptDataError(f"{path}: {4 + len(header)} bytes is too short for a {ndim}-d idx header.")
            dims = struct.unpack(">" + "I" * ndim, header)
            expected = math.prod(dims)  # Python ints: NumPy's int64 product would wrap for 2^32-sized dimensions
            if expected > max_bytes:
                raise CorruptDataError(
                    f"{path}: the header declares shape {dims} ({expected:,} bytes), more than the "
                    f"{max_bytes:,} bytes an idx file may hold here; refused before reading it."
                )
            payload = untrusted.read_exactly(f, expected, path)
    except (OSError, EOFError, zlib.error) as e:
        raise CorruptDataError(f"{path}: cannot read an idx file ({e}).") from e
    return payload.reshape(dims)


def load_idx_dir(data_dir):
    """Reads the four Fashion-MNIST idx files from `data_dir`.

    Returns:
        `((x_train, y_train), (x_test, y_test))`, uint8 images (N, 28, 28), uint8 labels.

    Raises:
        DataNotFoundError: a file is missing.
        ValueError: a file is corrupt or the counts do not match.
    """
    paths = {key: os.path.join(data_dir, name) for key, name in FILES.items()}
    missing = [p for p in paths.values() if not os.path.exists(p)]
    if missing:
        raise DataNotFoundError(f"Missing Fashion-MNIST idx files: {', '.join(missing)}")
    arrays = {key: read_idx(path) for key, path in paths.items()}
    for split in ("train", "test"):
        images, labels = arrays[f"{split}_images"], arrays[f"{split}_labels"]
        if images.ndim != 3 or labels.ndim != 1 or len(images) != len(labels):
            raise ValueError(
                f"{data_dir}: {split} images {images.shape} and labels {labels.shape} do not match."
            )
    return (
        (arrays["train_images"], arrays["train_labels"]),
        (arrays["test_images"], arrays["test_labels"]),
    )


def load_fashion_mnist(data_dir=None, allow_keras_fallback=True):
    """Loads Fashion-MNIST: local idx files first, then `keras.datasets`.

    Args:
        data_dir: str or None, a folder with the four idx files; default the
            Debian package's folder (or `$SPHERE_TF_FASHION_MNIST_DIR` if set).
        allow_keras_fallback: bool, ask `keras.datasets.fashion_mnist` when the
            files are missing.

    Returns:
        `((x_train, y_train), (x_test, y_test))` as uint8 NumPy arrays,
        images `(N, 28, 28)`.

    Raises:
        DataNotFoundError: neither source worked; the message names both.
        ValueError: local files exist but are corrupt (never silently replaced).
    """
    data_dir = data_dir or os.environ.get("SPHERE_TF_FASHION_MNIST_DIR") or DEBIAN_DIR
    try:
        return load_idx_dir(data_dir)
    except DataNotFoundError as local_error:
        if not allow_keras_fallback:
            raise
        try:
            return keras.datasets.fashion_mnist.load_data()
        except Exception as keras_error:  # network errors come in many types
            raise DataNotFoundError(
                "Fashion-MNIST not found. Looked for the idx files "
                f"({', '.join(FILES.values())}) in {data_dir} ({local_error}; install the Debian "
                "package `dataset-fashion-mnist` or pass data_dir), then asked "
                f"keras.datasets.fashion_mnist, which failed: {keras_error!r}"
            ) from keras_error


def as_float_images(images):
    """uint8 (N, 28, 28) → float32 (N, 28, 28, 1) scaled as upstream: (x − 127.5)/128."""
    return ((images.astype(np.float32) - 127.5) / 128.0)[..., None]
