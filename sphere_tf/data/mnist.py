"""MNIST and Fashion-MNIST from the published gzipped idx files, read offline.

Both data sets ship as the same four files (http://yann.lecun.com/exdb/mnist/,
"FILE FORMATS FOR THE MNIST DATABASE"; Fashion-MNIST copies the layout):
`train-images-idx3-ubyte.gz`, `train-labels-idx1-ubyte.gz`,
`t10k-images-idx3-ubyte.gz`, `t10k-labels-idx1-ubyte.gz`. Each holds a
big-endian header (magic 0x00000803 for images, 0x00000801 for labels, then
the dimensions) and unsigned bytes; `fashion_mnist.read_idx` checks both.
"""

import os

import numpy as np

from sphere_tf import validation
from sphere_tf.data import fashion_mnist
from sphere_tf.data.errors import CorruptDataError
from sphere_tf.data.errors import DataNotFoundError

IMAGE_SHAPE = (28, 28, 1)
SPLIT_FILES = {
    "train": (fashion_mnist.FILES["train_images"], fashion_mnist.FILES["train_labels"]),
    "test": (fashion_mnist.FILES["test_images"], fashion_mnist.FILES["test_labels"]),
}


def load_idx_split(manual_dir, split, dataset="mnist"):
    """One split of MNIST or Fashion-MNIST as uint8 `(N, 28, 28, 1)` images and int32 labels in 0..9.

    Args:
        manual_dir: str, the folder holding the four `.gz` idx files.
        split: 'train' or 'test'.
        dataset: str, the data set's name for error messages.

    Raises:
        DataNotFoundError: a file is missing; the message names it and the folder.
        CorruptDataError: a file has a bad magic number, the wrong size, or images and labels disagree.
    """
    split = validation.one_of(split, "split", ("train", "test"))
    names = SPLIT_FILES[split]
    paths = [os.path.join(manual_dir, name) for name in names]
    missing = [name for name, path in zip(names, paths) if not os.path.isfile(path)]
    if missing:
        raise DataNotFoundError(
            f"{dataset} {split} split: {', '.join(missing)} not found in {manual_dir!r}. Put the "
            "published idx .gz files there or pass the folder holding them as manual_dir."
        )
    images, labels = (fashion_mnist.read_idx(path) for path in paths)
    if images.ndim != 3 or images.shape[1:] != (28, 28):
        raise CorruptDataError(f"{paths[0]}: expected 28x28 images (an idx3 file), got shape {images.shape}.")
    if labels.ndim != 1:
        raise CorruptDataError(f"{paths[1]}: expected a label vector (an idx1 file), got shape {labels.shape}.")
    if len(images) != len(labels):
        raise CorruptDataError(
            f"{manual_dir}: {names[0]} holds {len(images)} images but {names[1]} {len(labels)} labels."
        )
    if labels.size and labels.max() > 9:
        raise CorruptDataError(f"{paths[1]}: label {int(labels.max())} is out of range for 10 classes.")
    return images[..., None], labels.astype(np.int32)
