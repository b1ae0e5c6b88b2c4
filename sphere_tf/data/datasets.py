"""One entry point for every data set: `get_datasets(name, source=..., ...)` -> `(train_ds, test_ds, info)`.

Data sets (`DATASETS`): 'cifar10', 'cifar100', 'mnist', 'fashion_mnist',
'imagenet2012', 'face_folder' (an identity-per-folder tree of aligned face crops
in `manual_dir`, `sphere_tf.data.faces`; its test split is the first
`test_limit` images of the same tree: the runner's test accuracy is a
closed-set check there, faces are evaluated by verification). Two sources, both offline:

- `source='manual'`: the archives as published, in `manual_dir` (file names in
  `DatasetSpec.manual_files`; Fashion-MNIST defaults to the Debian package's
  folder, `fashion_mnist.DEBIAN_DIR`, or `$SPHERE_TF_FASHION_MNIST_DIR`).
- `source='tfds'`: a tensorflow-datasets data folder `data_dir` with the data
  set prepared, read with `tfds.load(..., download=False)`.

The training set is an endless stream of batches of exactly `batch_size` (the
global batch): epoch e visits the examples in a permutation drawn from
`(seed, e)`, and example i of epoch e is augmented with
`preprocessing.element_seed(seed, e, i)`. `initial_step=s` starts the stream
at step s (the epoch and the batch within it), so a resumed run sees the same
batches as an uninterrupted one. The test set is one pass, in file order, with
the evaluation transform and the same normalisation. `label_noise=p` redraws
training labels (`label_noise.symmetric_label_noise`, ConvNorm's Table 6) after the
subsets; the test labels are never changed.
"""

import collections
import os

import numpy as np
import tensorflow as tf

from sphere_tf import registry
from sphere_tf import validation
from sphere_tf.data import cifar
from sphere_tf.data import faces
from sphere_tf.data import fashion_mnist
from sphere_tf.data import imagenet
from sphere_tf.data import label_noise as label_noise_lib
from sphere_tf.data import mnist
from sphere_tf.data import preprocessing
from sphere_tf.data import tfds_source
from sphere_tf.data.errors import DataNotFoundError

DatasetSpec = collections.namedtuple(
    "DatasetSpec",
    ["input_shape", "num_classes", "tfds_name", "manual_files", "eval_augmentation", "channel_mean", "train_size"],
    defaults=(None,),
)
DatasetSpec.__doc__ = """What a data set is: shapes, classes, file names, evaluation transform.

`input_shape` is None for ImageNet (set by the augmentation: 224x224x3);
`channel_mean` None means "computed over the training images" for
`normalization='mean_subtraction'`. `train_size` is the published number of training images (None: known only
once the files are read), which a dry run uses to count the steps without reading the data."""

# Per-channel RGB mean of the ILSVRC-2012 training images as used by the Caffe/VGG models
# (`keras.applications.imagenet_utils.preprocess_input`, mode 'caffe', lists it in BGR order).
IMAGENET_CHANNEL_MEAN = (123.68, 116.779, 103.939)

DATASETS = {
    "cifar10": DatasetSpec((32, 32, 3), 10, "cifar10", (cifar.CIFAR10_ARCHIVE,), "none", None, 50000),
    "cifar100": DatasetSpec((32, 32, 3), 100, "cifar100", (cifar.CIFAR100_ARCHIVE,), "none", None, 50000),
    "mnist": DatasetSpec((28, 28, 1), 10, "mnist", tuple(fashion_mnist.FILES.values()), "none", None, 60000),
    "fashion_mnist": DatasetSpec(
        (28, 28, 1), 10, "fashion_mnist", tuple(fashion_mnist.FILES.values()), "none", None, 60000
    ),
    "imagenet2012": DatasetSpec(
        None, 1000, "imagenet2012", (imagenet.TRAIN_ARCHIVE, imagenet.VAL_ARCHIVE), "imagenet_eval",
        IMAGENET_CHANNEL_MEAN, 1281167,
    ),
    # Shapes of the SphereFace crops of CASIA-WebFace (10,575 identities); a run takes both from the folder.
    "face_folder": DatasetSpec(faces.SPHEREFACE_CROP + (3,), 10575, None, ("<identity>/<image> folders",), "none",
                               None),
}
SOURCES = ("manual", "tfds")
_PERMUTATION_TAG = -1


def register_dataset(name, spec):
    """Adds a `DatasetSpec` under `name` (a taken name raises `KeyError`)."""
    return registry.register(DATASETS, name, spec, "dataset")


class _Examples:
    """n examples addressable by index: `load(i)` -> (uint8 HWC image tensor, int32 label)."""

    def __init__(self, size, load):
        self.size, self.load = size, load


def _array_examples(images, labels):
    images_t, labels_t = tf.constant(images), tf.constant(labels, tf.int32)
    return _Examples(len(images), lambda i: (tf.gather(images_t, i), tf.gather(labels_t, i)))


def _tar_examples(path, offsets, lengths, labels):
    offsets_t, lengths_t = tf.constant(offsets, tf.int64), tf.constant(lengths, tf.int64)
    labels_t = tf.constant(labels, tf.int32)

    def load(i):
        data = tf.numpy_function(
            lambda o, n: imagenet.read_bytes(path, o, n), [tf.gather(offsets_t, i), tf.gather(lengths_t, i)],
            tf.string, stateful=False,
        )
        image = tf.io.decode_jpeg(tf.reshape(data, []), channels=3)
        return image, tf.gather(labels_t, i)

    return _Examples(len(labels), load)


def _face_examples(folder, train_limit, test_limit, rng, noisy=lambda labels: labels):
    """Training and test `_Examples` of a `faces.IdentityFolder` (test: its first `test_limit` images);
    `noisy` maps the training labels to the ones trained on."""
    shape = faces.image_shape(folder.paths[0])
    paths = np.asarray(folder.paths, dtype=object)

    def examples(paths, labels):
        paths_t, labels_t = tf.constant(list(paths), tf.string), tf.constant(labels, tf.int32)
        return _Examples(
            len(labels), lambda i: (faces.decode_image(tf.gather(paths_t, i), shape), tf.gather(labels_t, i))
        )

    train_paths, train_labels = _subset((paths, folder.labels), train_limit, rng)
    train = examples(train_paths, noisy(train_labels))
    test = examples(paths[: test_limit or None], folder.labels[: test_limit or None])
    return train, test, folder.num_classes


def _subset(arrays, limit, rng):
    """The first `limit` of a seeded permutation of the examples (all when limit is 0), order kept."""
    n = len(arrays[-1])
    if not limit or limit >= n:
        return arrays
    index = np.sort(rng.permutation(n)[:limit])
    return tuple(a[index] if isinstance(a, np.ndarray) else tuple(a[j] for j in index) for a in arrays)


def check_class_limits(class_limits, num_classes, name="class_limits"):
    """`class_limits` as a tuple of ints >= 0 (None and [] give ()); at most `num_classes` of them.

    Raises:
        ValueError: not a list of ints >= 0, or more entries than classes (named `name`).
    """
    if class_limits is None:
        return ()
    if not isinstance(class_limits, (list, tuple)) or len(class_limits) > num_classes:
        raise validation.invalid_argument(
            name, f"a list of at most {num_classes} ints >= 0 (images kept of classes 0, 1, ...; 0: all)",
            class_limits)
    return tuple(validation.integer(k, f"{name}[{c}]", minimum=0) for c, k in enumerate(class_limits))


def _class_subset(arrays, limits, rng):
    """Keeps at most `limits[c]` examples of class c (0: all; classes past the list: all), a seeded choice.

    The kept examples of class c are the first `limits[c]` of a permutation of its
    examples drawn from `rng`, class by class in order; file order is kept.
    """
    labels = np.asarray(arrays[-1])
    keep = np.ones(len(labels), bool)
    for c, limit in enumerate(limits):
        members = np.flatnonzero(labels == c)
        if limit and limit < len(members):
            keep[members] = False
            keep[members[rng.permutation(len(members))[:limit]]] = True
    if keep.all():
        return arrays
    index = np.flatnonzero(keep)
    return tuple(a[index] if isinstance(a, np.ndarray) else tuple(a[j] for j in index) for a in arrays)


def _with_noisy_labels(arrays, noisy):
    """`arrays` (labels last) with the labels replaced by `noisy(labels)`."""
    return tuple(arrays[:-1]) + (noisy(np.asarray(arrays[-1])),)


def _load_manual(name, manual_dir, split, label_mode):
    """Per-example arrays of one split from the published files; the last array holds the labels."""
    if name == "cifar10":
        return cifar.load_cifar10(manual_dir, split)
    if name == "cifar100":
        return cifar.load_cifar100(manual_dir, split, label_mode)
    if name in ("mnist", "fashion_mnist"):
        return mnist.load_idx_split(manual_dir, split, dataset=name)
    raise ValueError(f"no manual reader for {name!r}")


def epoch_order(seed, epoch, size):
    """The order (int32 permutation of `range(size)`) in which epoch `epoch` visits the training examples."""
    permutation_seed = tf.random.experimental.stateless_fold_in(
        tf.stack([tf.cast(seed, tf.int64), tf.cast(epoch, tf.int64)]), _PERMUTATION_TAG
    )
    return tf.argsort(tf.random.stateless_uniform([size], seed=permutation_seed))


def _channel_mean(images):
    return tuple(float(m) for m in images.reshape(-1, images.shape[-1]).mean(axis=0, dtype=np.float64))


def get_datasets(
    name,
    *,
    batch_size,
    source="manual",
    manual_dir=None,
    data_dir=None,
    augmentation="none",
    eval_augmentation=None,
    normalization="centered_128",
    seed=0,
    train_limit=0,
    test_limit=0,
    label_mode="fine",
    val_labels_file=None,
    class_limits=None,
    initial_step=0,
    drop_remainder=True,
    channel_mean=None,
    label_noise=0.0,
    label_noise_type="symmetric",
):
    """Batched train and test `tf.data.Dataset`s of (float32 image, int32 label) for data set `name`.

    Args:
        name: str, one of `DATASETS`.
        batch_size: int > 0, the global batch.
        source: 'manual' (published archives in `manual_dir`) or 'tfds' (prepared data in `data_dir`).
        manual_dir: str, the folder holding the archives (Fashion-MNIST: default the Debian folder).
        data_dir: str, the tensorflow-datasets data folder (source='tfds').
        augmentation: str, a name in `preprocessing.AUGMENTATIONS` for training images.
        eval_augmentation: str or None, the test transform; None: the data set's default
            ('imagenet_eval' for ImageNet, 'none' otherwise).
        normalization: str, a name in `preprocessing.NORMALIZATIONS`.
        seed: int, keys the subset, the epoch permutations and every augmentation draw.
        train_limit, test_limit: int >= 0, use this many examples (0: all); the training subset is
            a seeded random one, the test subset the first ones in file order.
        label_mode: 'fine' or 'coarse' (CIFAR-100 only).
        val_labels_file: str, ImageNet validation ground truth (source='manual'; see
            `imagenet.read_val_labels`).
        class_limits: None or a list of ints >= 0: keep at most `class_limits[c]` training
            examples of class c (0: all; classes past the list: all), a seeded random choice
            made before `train_limit` (the imbalanced-data settings of MHE, NeurIPS 2018, §5 and
            Liu's thesis 2020, App. D.1). Not for ImageNet from tensorflow-datasets.
        initial_step: int >= 0, the training step the stream starts at (resume).
        drop_remainder: bool, every training batch holds exactly `batch_size` examples.
        channel_mean: sequence of floats or None, the means for 'mean_subtraction' (None: the
            per-channel mean of all training images; ImageNet: `IMAGENET_CHANNEL_MEAN`).
        label_noise: float in [0, 1), the fraction of training labels redrawn at random (0: none), after
            `class_limits` and `train_limit`, keyed by `seed`; the test labels are never changed
            (`label_noise.symmetric_label_noise`: ConvNorm, NeurIPS 2021, Table 6). Not for ImageNet from
            tensorflow-datasets.
        label_noise_type: 'symmetric' (a name in `label_noise.LABEL_NOISE_TYPES`): the authors' `sym` noise,
            exactly ⌈label_noise·n⌉ labels redrawn uniformly over all classes (their own included).

    Returns:
        `(train_ds, test_ds, info)`: train_ds endless, test_ds one pass; info a dict with
        `input_shape`, `num_classes`, `train_size`, `test_size`, `steps_per_epoch`, `channel_mean`.

    Raises:
        ValueError: a bad argument, named.
        DataNotFoundError: the data are not where the source says; the message names the files and folder.
        CorruptDataError: a file is not in its published format.
    """
    name = validation.one_of(name, "name", tuple(DATASETS))
    spec = DATASETS[name]
    source = validation.one_of(source, "source", SOURCES)
    batch_size = validation.positive_int(batch_size, "batch_size")
    seed = validation.integer(seed, "seed", minimum=0)
    train_limit = validation.integer(train_limit, "train_limit", minimum=0)
    test_limit = validation.integer(test_limit, "test_limit", minimum=0)
    initial_step = validation.integer(initial_step, "initial_step", minimum=0)
    label_mode = validation.one_of(label_mode, "label_mode", ("fine", "coarse"))
    if label_mode == "coarse" and name != "cifar100":
        raise validation.invalid_argument("label_mode", "'fine' (only cifar100 has coarse labels)", label_mode)
    class_limits = check_class_limits(class_limits, 20 if label_mode == "coarse" else spec.num_classes)
    if class_limits and name == "imagenet2012" and source == "tfds":
        raise validation.invalid_argument("class_limits", "None for imagenet2012 from tfds (streamed shards)",
                                          class_limits)
    label_noise, label_noise_type = label_noise_lib.check_label_noise(label_noise, label_noise_type)
    if label_noise and name == "imagenet2012" and source == "tfds":
        raise validation.invalid_argument("label_noise", "0 for imagenet2012 from tfds (streamed shards)",
                                          label_noise)
    if not callable(augmentation):
        validation.one_of(augmentation, "augmentation", tuple(preprocessing.AUGMENTATIONS))
    eval_augmentation = spec.eval_augmentation if eval_augmentation is None else eval_augmentation
    if not callable(eval_augmentation):
        validation.one_of(eval_augmentation, "eval_augmentation", tuple(preprocessing.AUGMENTATIONS))
    if name == "imagenet2012":
        for arg, value in (("augmentation", augmentation), ("eval_augmentation", eval_augmentation)):
            if isinstance(value, str) and value not in preprocessing.FIXED_SIZE_AUGMENTATIONS:
                raise validation.invalid_argument(
                    arg, f"one of {sorted(preprocessing.FIXED_SIZE_AUGMENTATIONS)} (ImageNet images differ in size)",
                    value,
                )
    if not callable(normalization):
        validation.one_of(normalization, "normalization", tuple(preprocessing.NORMALIZATIONS))
    if channel_mean is not None:
        try:
            channel_mean = tuple(validation.real(m, "channel_mean") for m in channel_mean)
        except (TypeError, ValueError):
            raise validation.invalid_argument("channel_mean", "a sequence of finite floats or None", channel_mean)
    augment = preprocessing.get_augmentation(augmentation)
    augment_eval = preprocessing.get_augmentation(eval_augmentation)
    normalize = preprocessing.get_normalization(normalization)
    if source == "manual" and manual_dir is None:
        if name != "fashion_mnist":
            raise DataNotFoundError(
                f"source='manual' needs manual_dir, the folder holding {', '.join(spec.manual_files)}."
            )
        manual_dir = os.environ.get("SPHERE_TF_FASHION_MNIST_DIR") or fashion_mnist.DEBIAN_DIR
    rng = np.random.default_rng(seed)

    def noisy(labels, num_classes):
        return label_noise_lib.add_label_noise(labels, label_noise, num_classes, seed, label_noise_type)

    if name == "imagenet2012" and source == "manual":
        train_index = imagenet.index_train_tar(manual_dir)
        val_index = imagenet.index_val_tar(manual_dir, val_labels_file, train_index["wnids"])
        num_classes = len(train_index["wnids"])
        keys = ("offsets", "lengths", "labels")
        train_arrays = _class_subset(tuple(train_index[k] for k in keys), class_limits, rng)
        train_arrays = _subset(train_arrays, train_limit, rng)
        train_arrays = _with_noisy_labels(train_arrays, lambda labels: noisy(labels, num_classes))
        test_arrays = tuple(val_index[k][: test_limit or None] for k in keys)
        train = _tar_examples(os.path.join(manual_dir, imagenet.TRAIN_ARCHIVE), *train_arrays)
        test = _tar_examples(os.path.join(manual_dir, imagenet.VAL_ARCHIVE), *test_arrays)
        mean = spec.channel_mean
    elif name == "face_folder":
        if source != "manual":
            raise validation.invalid_argument("source", "'manual' for face_folder (a folder of images)", source)
        folder = faces.index_identity_folder(manual_dir)
        train, test, num_classes = _face_examples(folder, train_limit, test_limit, rng,
                                                  lambda labels: noisy(labels, folder.num_classes))
        mean = spec.channel_mean
        if normalization == "mean_subtraction" and channel_mean is None:
            raise validation.invalid_argument("channel_mean", "the channel means for face_folder with "
                                              "normalization='mean_subtraction'", channel_mean)
    elif name == "imagenet2012":
        return _imagenet_tfds(
            spec, data_dir, batch_size, augment, augment_eval, normalize, seed, train_limit, test_limit,
            initial_step, drop_remainder, channel_mean or spec.channel_mean,
        )
    else:
        label_key = "coarse_label" if label_mode == "coarse" else "label"
        if source == "manual":
            train_arrays = _load_manual(name, manual_dir, "train", label_mode)
            test_arrays = _load_manual(name, manual_dir, "test", label_mode)
        else:
            train_arrays = tfds_source.load_arrays(spec.tfds_name, "train", data_dir, label_key)
            test_arrays = tfds_source.load_arrays(spec.tfds_name, "test", data_dir, label_key)
        mean = _channel_mean(train_arrays[0]) if normalization == "mean_subtraction" else spec.channel_mean
        num_classes = 20 if label_mode == "coarse" else spec.num_classes
        train_arrays = _class_subset(train_arrays, class_limits, rng)
        train_arrays = _subset(train_arrays, train_limit, rng)
        train_arrays = _with_noisy_labels(train_arrays, lambda labels: noisy(labels, num_classes))
        test_arrays = tuple(a[: test_limit or None] for a in test_arrays)
        train = _array_examples(*train_arrays)
        test = _array_examples(*test_arrays)
    if channel_mean is not None:
        mean = channel_mean
    steps_per_epoch = train.size // batch_size if drop_remainder else -(-train.size // batch_size)
    if steps_per_epoch == 0:
        raise validation.invalid_argument(
            "batch_size", f"at most the training set size ({train.size}) with drop_remainder", batch_size
        )

    def example(examples, i, epoch, transform):
        image, label = examples.load(i)
        image = transform(tf.cast(image, tf.float32), preprocessing.element_seed(seed, epoch, i))
        return normalize(image, mean), label

    start_epoch, start_batch = divmod(initial_step, steps_per_epoch)

    def one_epoch(epoch):
        order = epoch_order(seed, epoch, train.size)
        skip = tf.where(epoch == start_epoch, tf.constant(start_batch * batch_size, tf.int64), 0)
        return (
            tf.data.Dataset.from_tensor_slices(order)
            .skip(skip)
            .map(lambda i: example(train, i, epoch, augment), num_parallel_calls=tf.data.AUTOTUNE)
            .batch(batch_size, drop_remainder=drop_remainder)
        )

    train_ds = (
        tf.data.Dataset.range(start_epoch, np.iinfo(np.int64).max).flat_map(one_epoch).prefetch(tf.data.AUTOTUNE)
    )
    test_ds = (
        tf.data.Dataset.range(test.size)
        .map(lambda i: example(test, i, tf.constant(0, tf.int64), augment_eval), num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch_size)
        .prefetch(tf.data.AUTOTUNE)
    )
    input_shape = tuple(train_ds.element_spec[0].shape[1:].as_list())
    info = {
        "input_shape": input_shape,
        "num_classes": num_classes,
        "train_size": train.size,
        "test_size": test.size,
        "steps_per_epoch": steps_per_epoch,
        "channel_mean": mean,
    }
    return train_ds, test_ds, info


def _imagenet_tfds(
    spec, data_dir, batch_size, augment, augment_eval, normalize, seed, train_limit, test_limit, initial_step,
    drop_remainder, mean,
):
    """ImageNet from a prepared `imagenet2012`: shard files and a 10k buffer shuffled under `seed`.

    tensorflow-datasets gives no random access here, so the stream is keyed by position: element k of
    the stream (across epochs) is augmented with `element_seed(seed, 0, k)`, and `initial_step` skips
    `initial_step * batch_size` undecoded elements.
    """
    train_size = tfds_source.split_size(spec.tfds_name, "train", data_dir)
    test_size = tfds_source.split_size(spec.tfds_name, "validation", data_dir)
    train_size = min(train_size, train_limit or train_size)
    test_size = min(test_size, test_limit or test_size)

    def decode(k, encoded, label, transform):
        image = tf.cast(tf.io.decode_jpeg(encoded, channels=3), tf.float32)
        return normalize(transform(image, preprocessing.element_seed(seed, 0, k)), mean), tf.cast(label, tf.int32)

    train_ds = (
        # A limited run keeps one fixed subset (the first examples in stored order); a full one reads the shard
        # files in a seeded order that changes every pass.
        tfds_source.load_encoded(spec.tfds_name, "train", data_dir, shuffle_seed=None if train_limit else seed)
        .take(train_size)
        .repeat()
        .shuffle(10_000, seed=seed, reshuffle_each_iteration=True)
        .enumerate()
        .skip(initial_step * batch_size)
        .map(lambda k, ex: decode(k, ex[0], ex[1], augment), num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch_size, drop_remainder=drop_remainder)
        .prefetch(tf.data.AUTOTUNE)
    )
    test_ds = (
        tfds_source.load_encoded(spec.tfds_name, "validation", data_dir)
        .take(test_size)
        .enumerate()
        .map(lambda k, ex: decode(k, ex[0], ex[1], augment_eval), num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch_size)
        .prefetch(tf.data.AUTOTUNE)
    )
    info = {
        "input_shape": (224, 224, 3),
        "num_classes": spec.num_classes,
        "train_size": train_size,
        "test_size": test_size,
        "steps_per_epoch": train_size // batch_size if drop_remainder else -(-train_size // batch_size),
        "channel_mean": mean,
    }
    return train_ds, test_ds, info
