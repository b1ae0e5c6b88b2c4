"""The tensorflow-datasets route: prepared data in a TFDS data folder, read with `tfds.load(download=False)`.

`data_dir` is a folder in which the tensorflow-datasets builders have already
prepared the data (`<data_dir>/cifar10/3.0.2/...`, as
`tfds.builder(name, data_dir=...).download_and_prepare()` leaves it). Nothing
is downloaded here. ImageNet is prepared by the real `imagenet2012` builder
from the archives in its manual dir (see the tensorflow-datasets catalogue).
"""

import numpy as np

from sphere_tf.data.errors import DataNotFoundError


def _tfds():
    import tensorflow_datasets as tfds  # noqa: PLC0415 (optional dependency, slow import)

    return tfds


def _require_prepared(name, data_dir):
    tfds = _tfds()
    if data_dir is None:
        raise DataNotFoundError(
            f"source='tfds' needs data_dir, a tensorflow-datasets data folder with {name} prepared."
        )
    builder = tfds.builder(name, data_dir=data_dir)
    if not builder.is_prepared():
        raise DataNotFoundError(
            f"{name} is not prepared in the tensorflow-datasets folder {data_dir!r} (expected "
            f"{builder.data_dir}). Prepare it with tfds.builder({name!r}, data_dir=...).download_and_prepare() "
            "(ImageNet: with the archives in the builder's manual_dir)."
        )
    return builder


def split_size(name, split, data_dir):
    """The number of examples of a prepared split."""
    return _require_prepared(name, data_dir).info.splits[split].num_examples


def load_arrays(name, split, data_dir, label_key="label"):
    """A whole prepared split as NumPy arrays: uint8 `(N, H, W, C)` images and int32 labels, in stored order.

    Args:
        name: str, the tensorflow-datasets name ('cifar10', 'cifar100', 'mnist', 'fashion_mnist').
        split: 'train' or 'test'.
        data_dir: str, the tensorflow-datasets data folder.
        label_key: str, the feature holding the label ('label'; CIFAR-100's 'coarse_label').

    Raises:
        DataNotFoundError: the data set is not prepared in `data_dir`.
    """
    tfds = _tfds()
    _require_prepared(name, data_dir)
    data = tfds.as_numpy(tfds.load(name, split=split, data_dir=data_dir, download=False, batch_size=-1))
    images = np.asarray(data["image"], np.uint8)
    return images, np.asarray(data[label_key], np.int32)


def load_encoded(name, split, data_dir, shuffle_seed=None):
    """A prepared split as a `tf.data.Dataset` of (encoded image bytes, label), images not decoded.

    With `shuffle_seed` the shard files are read in a seeded shuffled order, reshuffled each pass.
    """
    tfds = _tfds()
    _require_prepared(name, data_dir)
    read_config = tfds.ReadConfig(shuffle_seed=shuffle_seed, shuffle_reshuffle_each_iteration=True)
    ds = tfds.load(
        name,
        split=split,
        data_dir=data_dir,
        download=False,
        shuffle_files=shuffle_seed is not None,
        read_config=read_config,
        decoders={"image": tfds.decode.SkipDecoding()},
    )
    return ds.map(lambda ex: (ex["image"], ex["label"]))

