"""Writers of small data sets in their published formats: generated archives for tests and smoke runs.

`get_datasets(source='manual')` reads what these write exactly as it reads the
real archives, so a test or a two-step run of a config can use a folder of
generated files in place of the real data. Each writer returns the arrays it
wrote, for comparison.
"""

import gzip
import io
import os
import struct
import tarfile

import numpy as np

from sphere_tf import dependencies
from sphere_tf import registry



def _tf():
    """TensorFlow, for the JPEG encoder of the ImageNet tars only (the other writers are NumPy)."""
    return dependencies.tensorflow(__name__)


def add_bytes(tar, name, data):
    """Adds a regular file `name` holding `data` to an open `tarfile`."""
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def cifar_records(images, *label_columns):
    """Records of the CIFAR binary format: label byte(s), then the image in CHW order."""
    chw = images.transpose(0, 3, 1, 2).reshape(len(images), -1)
    labels = np.stack(label_columns, axis=1).astype(np.uint8)
    return np.concatenate([labels, chw.astype(np.uint8)], axis=1).tobytes()


def write_cifar10(folder, per_batch=2, n_test=3, seed=0):
    """cifar-10-binary.tar.gz with 5 train batches of `per_batch` records; returns the arrays written."""
    rng = np.random.default_rng(seed)
    n_train = 5 * per_batch
    data = {
        "x_train": rng.integers(0, 256, (n_train, 32, 32, 3), dtype=np.uint8),
        "y_train": rng.integers(0, 10, n_train),
        "x_test": rng.integers(0, 256, (n_test, 32, 32, 3), dtype=np.uint8),
        "y_test": rng.integers(0, 10, n_test),
    }
    path = os.path.join(folder, "cifar-10-binary.tar.gz")
    with tarfile.open(path, "w:gz") as tar:
        for b in range(5):
            part = slice(b * per_batch, (b + 1) * per_batch)
            add_bytes(tar, f"cifar-10-batches-bin/data_batch_{b + 1}.bin",
                       cifar_records(data["x_train"][part], data["y_train"][part]))
        add_bytes(tar, "cifar-10-batches-bin/test_batch.bin", cifar_records(data["x_test"], data["y_test"]))
        add_bytes(tar, "cifar-10-batches-bin/batches.meta.txt", "\n".join(f"c{i}" for i in range(10)).encode())
    return data


def write_cifar100(folder, n_train=6, n_test=4, seed=0):
    """cifar-100-binary.tar.gz with random images, coarse and fine labels; returns the arrays written."""
    rng = np.random.default_rng(seed)
    data = {}
    for split, n in (("train", n_train), ("test", n_test)):
        data[f"x_{split}"] = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
        data[f"coarse_{split}"] = rng.integers(0, 20, n)
        data[f"fine_{split}"] = rng.integers(0, 100, n)
    path = os.path.join(folder, "cifar-100-binary.tar.gz")
    with tarfile.open(path, "w:gz") as tar:
        for split in ("train", "test"):
            add_bytes(tar, f"cifar-100-binary/{split}.bin",
                       cifar_records(data[f"x_{split}"], data[f"coarse_{split}"], data[f"fine_{split}"]))
    return data


def write_idx(path, array, magic):
    """A gzipped idx file: big-endian `magic`, the dimensions, then `array` as unsigned bytes."""
    header = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape)
    with gzip.open(path, "wb") as f:
        f.write(header + array.astype(np.uint8).tobytes())


def write_mnist(folder, n_train=7, n_test=3, seed=0):
    """The four MNIST / Fashion-MNIST idx .gz files with random images and labels; returns the arrays."""
    rng = np.random.default_rng(seed)
    data = {
        "x_train": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "y_train": rng.integers(0, 10, n_train),
        "x_test": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "y_test": rng.integers(0, 10, n_test),
    }
    for prefix, split in (("train", "train"), ("t10k", "test")):
        write_idx(os.path.join(folder, f"{prefix}-images-idx3-ubyte.gz"), data[f"x_{split}"], 2051)
        write_idx(os.path.join(folder, f"{prefix}-labels-idx1-ubyte.gz"), data[f"y_{split}"], 2049)
    return data


def jpeg(image):
    """JPEG bytes of a uint8 HWC image (quality 100, no chroma subsampling)."""
    return _tf().io.encode_jpeg(image, quality=100, chroma_downsampling=False).numpy()


def write_imagenet(folder, wnids=("n02000002", "n01000001", "n03000003"), per_class=2, n_val=4, seed=0,
                   size=(20, 28)):
    """ILSVRC2012_img_train.tar (a tar of per-class tars) and ILSVRC2012_img_val.tar plus a labels file.

    `size` is (height, width) of the training images; validation images are (width, height), so both
    orientations occur. Returns a dict: `train`, a list of (jpeg bytes, wnid) in archive order; `val`, a
    list of (name, jpeg bytes, wnid) in archive order; `labels_file`, one wnid per line in sorted
    file-name order.
    """
    rng = np.random.default_rng(seed)
    train = []
    with tarfile.open(os.path.join(folder, "ILSVRC2012_img_train.tar"), "w") as outer:
        for wnid in wnids:
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as inner:
                for k in range(per_class):
                    data = jpeg(rng.integers(0, 256, (*size, 3), dtype=np.uint8))
                    add_bytes(inner, f"{wnid}_{k}.JPEG", data)
                    train.append((data, wnid))
            add_bytes(outer, f"{wnid}.tar", buf.getvalue())
    val = []
    # Archive order deliberately differs from sorted name order.
    names = [f"ILSVRC2012_val_{i:08d}.JPEG" for i in range(n_val, 0, -1)]
    with tarfile.open(os.path.join(folder, "ILSVRC2012_img_val.tar"), "w") as tar:
        for i, name in enumerate(names):
            data = jpeg(rng.integers(0, 256, (size[1], size[0], 3), dtype=np.uint8))
            wnid = wnids[i % len(wnids)]
            add_bytes(tar, name, data)
            val.append((name, data, wnid))
    labels_file = os.path.join(folder, "validation_labels.txt")
    with open(labels_file, "w") as f:
        f.write("\n".join(w for _, _, w in sorted(val)) + "\n")
    return {"train": train, "val": val, "labels_file": labels_file}


WRITERS = {
    "cifar10": write_cifar10,
    "cifar100": write_cifar100,
    "mnist": write_mnist,
    "fashion_mnist": write_mnist,
    "imagenet2012": write_imagenet,
}


def write(name, folder, **kwargs):
    """Writes a small copy of data set `name` (a key of `WRITERS`) into `folder`; returns what was written.

    For 'imagenet2012' the result's `labels_file` is the `val_labels_file` to pass to `get_datasets`.
    """
    return registry.lookup(WRITERS, name, "dataset writer")(folder, **kwargs)
