"""One entry point for every data set: `get_datasets(name, source=..., ...)` -> `(train_ds, test_ds, info)`.

Every data set is a registered loader (`register_dataset(name, DatasetSpec(..., reader=fn))`): the reader
returns the training and test splits (NumPy arrays, examples read by index, or a `tf.data` stream) and the
spec says what the data set is. The built-in ones below are registered exactly as a user's:
'cifar10', 'cifar100', 'mnist', 'fashion_mnist', 'imagenet2012', 'face_folder' (an identity-per-folder tree
of aligned face crops in `manual_dir`, `sphere_tf.data.faces`; its test split is the first `test_limit`
images of the same tree: the runner's test accuracy is a closed-set check there, faces are evaluated by
verification). `get_datasets` checks the arguments, calls the reader once, applies the class limits, subset and
label noise to the reader's arrays, then hands them to one of two pipelines that batch, permute, augment and
normalise: `grain_pipeline` (Grain and NumPy, every backend, no TensorFlow) or `tf_pipeline` (tf.data, the
TensorFlow backend's default); `pipeline=` picks one. The built-in readers take two sources, both offline:

- `source='manual'`: the archives as published, in `manual_dir` (file names in
  `DatasetSpec.manual_files`; Fashion-MNIST defaults to the Debian package's
  folder, `fashion_mnist.DEBIAN_DIR`, or `$SPHERE_TF_FASHION_MNIST_DIR`).
- `source='tfds'`: a tensorflow-datasets data folder `data_dir` with the data
  set prepared, read with `tfds.load(..., download=False)`.

The training set is an endless stream of batches of exactly `batch_size` (the
global batch): epoch e visits the examples in a permutation drawn from
`(seed, e)`, and example i of epoch e is augmented with a random stream keyed
by `(seed, e, i)` (`grain_pipeline.element_rng`, `preprocessing.element_seed`
on tf.data). `initial_step=s` starts the stream
at step s (the epoch and the batch within it), so a resumed run sees the same
batches as an uninterrupted one. The test set is one pass, in file order, with
the evaluation transform and the same normalisation. `label_noise=p` redraws
training labels (`label_noise.symmetric_label_noise`, ConvNorm's Table 6) after the
subsets; the test labels are never changed.
"""

import collections
import functools
import os

import keras
import numpy as np

from sphere_tf import dependencies
from sphere_tf import registry
from sphere_tf import validation
from sphere_tf.data import cifar
from sphere_tf.data import faces
from sphere_tf.data import fashion_mnist
from sphere_tf.data import imagenet
from sphere_tf.data import label_noise as label_noise_lib
from sphere_tf.data import normalization as normalization_lib
from sphere_tf.data import mnist
from sphere_tf.data import numpy_preprocessing
from sphere_tf.data import splits
from sphere_tf.data import tfds_source
from sphere_tf.data.errors import CorruptDataError
from sphere_tf.data.errors import DataNotFoundError
from sphere_tf.data.splits import Examples
from sphere_tf.data.splits import Stream

DatasetSpec = collections.namedtuple(
    "DatasetSpec",
    ["input_shape", "num_classes", "tfds_name", "manual_files", "eval_augmentation", "channel_mean", "train_size",
     "reader", "num_coarse_classes", "title"],
    defaults=(None, (), "none", None, None, None, None, None),
)
DatasetSpec.__doc__ = """What a data set is and how it is read: shapes, classes, files, evaluation transform, reader.

`input_shape` is None where the images differ in size (ImageNet: the augmentation sets 224x224x3);
`channel_mean` None means "computed over the training images" for `normalization='mean_subtraction'`
(a reader of examples read by index or of a stream must then give it, or the caller passes `channel_mean=`).
`train_size` is the published number of training images (None: known only once the files are read), which a
dry run uses to count the steps without reading the data. `reader` is the function `get_datasets` calls,
with keyword arguments `spec`, `source`, `manual_dir`, `data_dir`, `label_mode` and `val_labels_file` (take
`**options` for the ones not needed); it returns `(train, test)` or `(train, test, num_classes)` (the classes
found in the files), each split a pair `(images, labels)` of NumPy arrays (uint8 or float `(N, H, W, C)`,
int labels), an `Examples` or a `Stream`. `num_coarse_classes` is the class count of `label_mode='coarse'`
(None: no coarse labels); `title` names the data set in messages (None: its registry name)."""


# Per-channel RGB mean of the ILSVRC-2012 training images as used by the Caffe/VGG models
# (`keras.applications.imagenet_utils.preprocess_input`, mode 'caffe', lists it in BGR order).
IMAGENET_CHANNEL_MEAN = (123.68, 116.779, 103.939)
SOURCES = ("manual", "tfds")
# 'tf_data': tf.data (needs TensorFlow; the TensorFlow backend's default), 'grain': Grain (every backend).
PIPELINES = ("tf_data", "grain")
DATASETS = {}


def register_dataset(name, spec):
    """Adds the data set `name`: a `DatasetSpec` whose `reader` reads it; returns the spec.

    The registered name is then valid wherever a data set is named (`get_datasets`, the runner's
    `data.name`); a config file makes a user's data set known by importing the module that registers it.

    Raises:
        KeyError: `name` is taken.
        TypeError: `spec` is not a `DatasetSpec` with a callable `reader`.
    """
    if not isinstance(spec, DatasetSpec) or not callable(spec.reader):
        raise TypeError(f"register_dataset({name!r}, spec): expected a DatasetSpec whose `reader` is the function "
                        f"reading the data. Received: {spec!r}")
    return registry.register(DATASETS, name, spec, "dataset")


def _manual_dir(manual_dir, spec, default=None):
    """The folder a built-in reader reads (`default()` when `manual_dir` is None), else `DataNotFoundError`."""
    if manual_dir is None and default is not None:
        manual_dir = default()
    if manual_dir is None:
        raise DataNotFoundError(
            f"source='manual' needs manual_dir, the folder holding {', '.join(spec.manual_files)}."
        )
    return manual_dir


def _in_memory_reader(read_split, default_manual_dir=None):
    """A reader of a data set loaded whole into memory: `read_split(manual_dir, split, label_mode)` for
    source='manual', `spec.tfds_name` from tensorflow-datasets for source='tfds'."""

    def read(*, spec, source, manual_dir, data_dir, label_mode, **_):
        if source == "tfds":
            label_key = "coarse_label" if label_mode == "coarse" else "label"
            return tuple(tfds_source.load_arrays(spec.tfds_name, split, data_dir, label_key)
                         for split in ("train", "test"))
        manual_dir = _manual_dir(manual_dir, spec, default_manual_dir)
        return tuple(read_split(manual_dir, split, label_mode) for split in ("train", "test"))

    return read


def _cifar10_split(manual_dir, split, label_mode):
    del label_mode
    return cifar.load_cifar10(manual_dir, split)


def _idx_split(dataset):
    return lambda manual_dir, split, label_mode: mnist.load_idx_split(manual_dir, split, dataset=dataset)


_MANUAL_SPLITS = {
    "cifar10": _cifar10_split,
    "cifar100": cifar.load_cifar100,
    "mnist": _idx_split("mnist"),
    "fashion_mnist": _idx_split("fashion_mnist"),
}


def _load_manual(name, manual_dir, split, label_mode):
    """Per-example arrays of one split of an in-memory built-in data set; the last array holds the labels."""
    if name not in _MANUAL_SPLITS:
        raise ValueError(f"no manual reader for {name!r}")
    return _MANUAL_SPLITS[name](manual_dir, split, label_mode)


def _fashion_mnist_dir():
    return os.environ.get("SPHERE_TF_FASHION_MNIST_DIR") or fashion_mnist.DEBIAN_DIR


def _tf_pipeline(name="sphere_tf.data.get_datasets(pipeline='tf_data')"):
    """The tf.data pipeline module; where TensorFlow is not installed, `name`'s one-line error."""
    dependencies.require_tensorflow(name, "sphere_tf.data.tf_pipeline")
    return dependencies.import_for(name, "sphere_tf.data.tf_pipeline")


def _tar_jpeg(path, offset, length):
    return _tf_pipeline().decode_tar_jpeg(path, offset, length)


def _tar_jpeg_numpy(path, offset, length):
    return numpy_preprocessing.decode_image(imagenet.read_bytes(path, offset, length),
                                            what=f"{path} (bytes {int(offset)}..{int(offset) + int(length)})")


def _jpeg(encoded):
    return _tf_pipeline().decode_jpeg(encoded)


def read_imagenet(*, spec, source, manual_dir, data_dir, val_labels_file, **_):
    """ILSVRC-2012: the two published tars indexed in place (source='manual'; classes: the WordNet ids found),
    or the prepared tensorflow-datasets shards as streams (source='tfds')."""
    if source == "tfds":
        def stream(split, size):
            return Stream(lambda shuffle_seed: tfds_source.load_encoded(spec.tfds_name, split, data_dir,
                                                                        shuffle_seed=shuffle_seed),
                          size, _jpeg)

        return (stream("train", lambda: tfds_source.split_size(spec.tfds_name, "train", data_dir)),
                stream("validation", lambda: tfds_source.split_size(spec.tfds_name, "validation", data_dir)))
    manual_dir = _manual_dir(manual_dir, spec)
    train_index = imagenet.index_train_tar(manual_dir)
    val_index = imagenet.index_val_tar(manual_dir, val_labels_file, train_index["wnids"])
    keys = ("offsets", "lengths", "labels")
    train_tar, val_tar = (os.path.join(manual_dir, name) for name in (imagenet.TRAIN_ARCHIVE, imagenet.VAL_ARCHIVE))
    train = Examples(tuple(train_index[k] for k in keys), functools.partial(_tar_jpeg, train_tar),
                     functools.partial(_tar_jpeg_numpy, train_tar))
    test = Examples(tuple(val_index[k] for k in keys), functools.partial(_tar_jpeg, val_tar),
                    functools.partial(_tar_jpeg_numpy, val_tar))
    return train, test, len(train_index["wnids"])


def read_face_folder(*, spec, source, manual_dir, **_):
    """An identity-per-folder tree (`faces.index_identity_folder`); the test split is the same tree."""
    if source != "manual":
        raise validation.invalid_argument("source", "'manual' for face_folder (a folder of images)", source)
    folder = faces.index_identity_folder(_manual_dir(manual_dir, spec))
    shape = faces.image_shape(folder.paths[0])
    examples = Examples((np.asarray(folder.paths, dtype=str), folder.labels),
                        lambda path: faces.decode_image(path, shape),
                        lambda path: faces.decode_image_numpy(path, shape))
    return examples, examples, folder.num_classes


register_dataset("cifar10", DatasetSpec(
    (32, 32, 3), 10, "cifar10", (cifar.CIFAR10_ARCHIVE,), train_size=50000, reader=_in_memory_reader(_cifar10_split),
    title="CIFAR-10"))
register_dataset("cifar100", DatasetSpec(
    (32, 32, 3), 100, "cifar100", (cifar.CIFAR100_ARCHIVE,), train_size=50000,
    reader=_in_memory_reader(cifar.load_cifar100), num_coarse_classes=20, title="CIFAR-100"))
register_dataset("mnist", DatasetSpec(
    (28, 28, 1), 10, "mnist", tuple(fashion_mnist.FILES.values()), train_size=60000,
    reader=_in_memory_reader(_MANUAL_SPLITS["mnist"]), title="MNIST"))
register_dataset("fashion_mnist", DatasetSpec(
    (28, 28, 1), 10, "fashion_mnist", tuple(fashion_mnist.FILES.values()), train_size=60000,
    reader=_in_memory_reader(_MANUAL_SPLITS["fashion_mnist"], default_manual_dir=_fashion_mnist_dir),
    title="Fashion-MNIST"))
register_dataset("imagenet2012", DatasetSpec(
    None, 1000, "imagenet2012", (imagenet.TRAIN_ARCHIVE, imagenet.VAL_ARCHIVE), "imagenet_eval",
    IMAGENET_CHANNEL_MEAN, 1281167, reader=read_imagenet, title="ImageNet"))
# Shapes of the SphereFace crops of CASIA-WebFace (10,575 identities); a run takes both from the folder.
register_dataset("face_folder", DatasetSpec(
    faces.SPHEREFACE_CROP + (3,), 10575, None, ("<identity>/<image> folders",), reader=read_face_folder,
    title="face folder"))


def _as_split(split, name, spec, what):
    """A reader's split as `Examples` or `Stream`; a pair of arrays is checked (shapes, lengths)."""
    if isinstance(split, (Examples, Stream)):
        return split
    if not isinstance(split, (tuple, list)) or len(split) != 2:
        raise TypeError(f"the reader of data set {name!r} returned a {what} split of type {type(split).__name__}; "
                        "expected (images, labels) arrays, an Examples or a Stream.")
    images, labels = np.asarray(split[0]), np.asarray(split[1])
    if images.ndim != 4 or labels.ndim != 1 or len(images) != len(labels):
        raise ValueError(f"the reader of data set {name!r} returned {what} images of shape {images.shape} and "
                         f"labels of shape {labels.shape}; expected (N, H, W, C) images and N labels.")
    if spec.input_shape is not None and tuple(images.shape[1:]) != tuple(spec.input_shape):
        raise ValueError(f"the reader of data set {name!r} returned {what} images of shape {images.shape[1:]}; "
                         f"its DatasetSpec says input_shape={tuple(spec.input_shape)}.")
    return Examples((images, labels))


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


def check_labels(labels, num_classes, what):
    """Refuses class labels that are not integers in 0..num_classes-1, naming `what`, the first one and its index.

    Such a label is not an error every backend reports during training: TensorFlow's sparse softmax
    cross-entropy raises on a CPU but returns NaN on a GPU (its documentation says so), Keras on JAX one-hot
    encodes it as a row of zeros, so that the example adds a loss of 0 and trains nothing, and PyTorch raises an
    IndexError from inside the step. The labels are therefore checked once, when the data is read, the same way
    on every backend.

    Args:
        labels: array of class labels (integers; integral floats are accepted).
        num_classes: int, the data set's class count.
        what: str, the data named in the message (a file, or a split of a data set and its folder).

    Raises:
        CorruptDataError: (a `ValueError`) a label is out of range, not an integer, or the labels are not numbers.
    """
    labels = np.asarray(labels).reshape(-1)
    if not labels.size:
        return
    if labels.dtype.kind in "iu":
        bad = (labels < 0) | (labels >= num_classes)
    elif labels.dtype.kind == "f":
        bad = ~np.isfinite(labels) | (labels != np.round(labels)) | (labels < 0) | (labels >= num_classes)
    else:
        raise CorruptDataError(f"{what}: the labels are of dtype {labels.dtype}, not integer class indices.")
    if bad.any():
        index = int(np.flatnonzero(bad)[0])
        value = labels[index].item()
        raise CorruptDataError(
            f"{what}: label {value!r} of example {index} is not a class index of the {num_classes} classes "
            f"(0..{num_classes - 1}); {int(bad.sum())} of the {labels.size} labels are not. Fix the labels (or the "
            "data set's class count) before training.")


def _with_noisy_labels(arrays, noisy):
    """`arrays` (labels last) with the labels replaced by `noisy(labels)`."""
    return tuple(arrays[:-1]) + (noisy(np.asarray(arrays[-1])),)


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
    normalization=normalization_lib.DEFAULT_NORMALIZATION,
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
    normalize=True,
    pipeline=None,
    process_index=0,
    process_count=1,
):
    """Batched train and test datasets of (float32 image, int32 label) for data set `name`, for `model.fit`.

    Args:
        name: str, a registered data set (`DATASETS`: the built-in ones and those added by
            `register_dataset`).
        batch_size: int > 0, the global batch.
        source: 'manual' (published archives in `manual_dir`) or 'tfds' (prepared data in `data_dir`).
        manual_dir: str, the folder holding the archives (Fashion-MNIST: default the Debian folder).
        data_dir: str, the tensorflow-datasets data folder (source='tfds').
        augmentation: str, a name in `preprocessing.AUGMENTATIONS` for training images.
        eval_augmentation: str or None, the test transform; None: the data set's default
            ('imagenet_eval' for ImageNet, 'none' otherwise).
        normalization: str, a name in `preprocessing.NORMALIZATIONS` (default `DEFAULT_NORMALIZATION`); 'none' feeds
            raw pixels to a model whose first layer normalises them (`sphere_tf.layers.PixelNormalization`).
        normalize: bool; False leaves the normalisation to the model: the pipeline yields the augmented raw
            pixels, and `info['normalization']` / `info['channel_mean']` are what the model's first layer
            (`sphere_tf.layers.PixelNormalization`) applies (the runner builds its models so).
        seed: int, keys the subset, the epoch permutations and every augmentation draw.
        train_limit, test_limit: int >= 0, use this many examples (0: all); the training subset is
            a seeded random one, the test subset the first ones in file order.
        label_mode: 'fine' or 'coarse' (data sets with `num_coarse_classes`: CIFAR-100).
        val_labels_file: str, ImageNet validation ground truth (source='manual'; see
            `imagenet.read_val_labels`).
        class_limits: None or a list of ints >= 0: keep at most `class_limits[c]` training
            examples of class c (0: all; classes past the list: all), a seeded random choice
            made before `train_limit` (the imbalanced-data settings of MHE, NeurIPS 2018, §5 and
            Liu's thesis 2020, App. D.1). Not for streamed data (ImageNet from tensorflow-datasets).
        initial_step: int >= 0, the training step the stream starts at (resume).
        drop_remainder: bool, every training batch holds exactly `batch_size` examples.
        channel_mean: sequence of floats or None, the means for 'mean_subtraction' (None: the
            per-channel mean of all training images; ImageNet: `IMAGENET_CHANNEL_MEAN`).
        label_noise: float in [0, 1), the fraction of training labels redrawn at random (0: none), after
            `class_limits` and `train_limit`, keyed by `seed`; the test labels are never changed
            (`label_noise.symmetric_label_noise`: ConvNorm, NeurIPS 2021, Table 6). Not for streamed data
            (ImageNet from tensorflow-datasets).
        label_noise_type: 'symmetric' (a name in `label_noise.LABEL_NOISE_TYPES`): the authors' `sym` noise,
            exactly ⌈label_noise·n⌉ labels redrawn uniformly over all classes (their own included).

    Returns:
        `(train_ds, test_ds, info)`: train_ds endless, test_ds one pass; info a dict with
        `input_shape`, `num_classes`, `train_size`, `test_size`, `steps_per_epoch`, `channel_mean`,
        `normalization` (the name; None for a callable).

    Raises:
        ValueError: a bad argument, named.
        DataNotFoundError: the data are not where the source says; the message names the files and folder.
        CorruptDataError: a file is not in its published format.
        TypeError: a registered reader returned something other than the documented splits.
    """
    name = validation.one_of(name, "name", tuple(DATASETS))
    spec = DATASETS[name]
    title = spec.title or name
    source = validation.one_of(source, "source", SOURCES)
    batch_size = validation.positive_int(batch_size, "batch_size")
    seed = validation.integer(seed, "seed", minimum=0)
    train_limit = validation.integer(train_limit, "train_limit", minimum=0)
    test_limit = validation.integer(test_limit, "test_limit", minimum=0)
    initial_step = validation.integer(initial_step, "initial_step", minimum=0)
    label_mode = validation.one_of(label_mode, "label_mode", ("fine", "coarse"))
    if label_mode == "coarse" and spec.num_coarse_classes is None:
        coarse = sorted(n for n, s in DATASETS.items() if s.num_coarse_classes is not None)
        raise validation.invalid_argument(
            "label_mode", f"'fine' (only {' and '.join(coarse)} {'has' if len(coarse) == 1 else 'have'} coarse "
            "labels)", label_mode)
    num_classes = spec.num_coarse_classes if label_mode == "coarse" else spec.num_classes
    class_limits = check_class_limits(class_limits, num_classes)
    label_noise, label_noise_type = label_noise_lib.check_label_noise(label_noise, label_noise_type)
    pipeline = resolve_pipeline(pipeline)
    process_count = validation.positive_int(process_count, "process_count")
    process_index = validation.integer(process_index, "process_index", minimum=0)
    if process_index >= process_count:
        raise validation.invalid_argument("process_index", f"less than process_count={process_count}", process_index)
    if process_count > 1 and pipeline != "grain":
        raise validation.invalid_argument(
            "process_count", "1 with pipeline='tf_data' (tf.distribute shards the global batch itself)", process_count)
    augmentations = augmentation_names(pipeline)
    if not callable(augmentation):
        validation.one_of(augmentation, "augmentation", tuple(augmentations))
    eval_augmentation = spec.eval_augmentation if eval_augmentation is None else eval_augmentation
    if not callable(eval_augmentation):
        validation.one_of(eval_augmentation, "eval_augmentation", tuple(augmentations))
    if spec.input_shape is None:
        for arg, value in (("augmentation", augmentation), ("eval_augmentation", eval_augmentation)):
            if isinstance(value, str) and value not in numpy_preprocessing.FIXED_SIZE_AUGMENTATIONS:
                raise validation.invalid_argument(
                    arg, f"one of {sorted(numpy_preprocessing.FIXED_SIZE_AUGMENTATIONS)} ({title} images differ in "
                    "size)", value,
                )
    if not callable(normalization):
        validation.one_of(normalization, "normalization", tuple(normalization_lib.NORMALIZATIONS))
    if channel_mean is not None:
        try:
            channel_mean = tuple(validation.real(m, "channel_mean") for m in channel_mean)
        except (TypeError, ValueError):
            raise validation.invalid_argument("channel_mean", "a sequence of finite floats or None", channel_mean)
    validation.one_of(normalize, "normalize", (True, False))
    # normalize=False: the model's PixelNormalization applies `normalization` (with `mean`, reported in `info`).
    normalize_fn = normalization_lib.get_normalization(normalization if normalize else "none")
    if pipeline == "grain" and source == "tfds":
        raise validation.invalid_argument(
            "source", "'manual' with pipeline='grain' (tensorflow-datasets folders are read with TensorFlow; use "
            "pipeline='tf_data' with TensorFlow installed)", source)

    # The reader: the one part that differs between data sets.
    read = spec.reader(spec=spec, source=source, manual_dir=manual_dir, data_dir=data_dir, label_mode=label_mode,
                       val_labels_file=val_labels_file)
    if not isinstance(read, (tuple, list)) or len(read) not in (2, 3):
        raise TypeError(f"the reader of data set {name!r} returned {type(read).__name__}; expected "
                        "(train, test) or (train, test, num_classes).")
    train, test = (_as_split(split, name, spec, what) for split, what in zip(read[:2], ("training", "test")))
    if len(read) == 3 and read[2] is not None:
        num_classes = validation.positive_int(read[2], "num_classes")
    folder = manual_dir if source == "manual" else data_dir
    for split, what in ((train, "training"), (test, "test")):
        if isinstance(split, Examples):  # a Stream's labels are read while it runs (ImageNet: indices of its own)
            check_labels(split.arrays[-1], num_classes, f"the {what} split of data set {name!r}"
                         + (f" read from {folder}" if folder else ""))
    streamed = isinstance(train, Stream)
    if streamed != isinstance(test, Stream):
        raise TypeError(f"the reader of data set {name!r} returned one Stream split; both splits must be streams "
                        "or neither.")
    for arg, value, unset in (("class_limits", class_limits, "None"), ("label_noise", label_noise, "0")):
        if streamed and value:
            raise validation.invalid_argument(arg, f"{unset} for {name} from {source} (streamed shards)", value)

    # The shared pipeline.
    in_memory = not streamed and train.decode is None
    if channel_mean is not None:
        mean = channel_mean
    elif in_memory and normalization == "mean_subtraction":
        mean = _channel_mean(train.arrays[0])
    else:
        mean = spec.channel_mean
        if normalization == "mean_subtraction" and mean is None:
            raise validation.invalid_argument("channel_mean", f"the channel means for {name} with "
                                              "normalization='mean_subtraction'", channel_mean)
    inputs = dict(batch_size=batch_size, seed=seed, initial_step=initial_step, drop_remainder=drop_remainder,
                  augmentation=augmentation, eval_augmentation=eval_augmentation, normalize=normalize_fn, mean=mean,
                  num_classes=num_classes, normalization=normalization, train_limit=train_limit,
                  test_limit=test_limit, process_index=process_index, process_count=process_count)
    if not streamed:
        rng = np.random.default_rng(seed)
        train_arrays = _class_subset(train.arrays, class_limits, rng)
        train_arrays = _subset(train_arrays, train_limit, rng)
        train_arrays = _with_noisy_labels(train_arrays, lambda labels: label_noise_lib.add_label_noise(
            labels, label_noise, num_classes, seed, label_noise_type))
        train = train._replace(arrays=train_arrays)
        test = test._replace(arrays=tuple(a[: test_limit or None] for a in test.arrays))
    inputs = splits.PipelineInputs(train=train, test=test, **inputs)
    if pipeline == "grain":
        return dependencies.import_for("sphere_tf.data.get_datasets(pipeline='grain')",
                                       "sphere_tf.data.grain_pipeline").datasets(inputs)
    return _tf_pipeline().datasets(inputs)


def augmentation_names(pipeline=None):
    """The augmentation names `pipeline` knows (the built-in ones and those registered for it)."""
    pipeline = resolve_pipeline(pipeline)
    table = numpy_preprocessing.NUMPY_AUGMENTATIONS if pipeline == "grain" else _tf_pipeline().AUGMENTATIONS
    return tuple(sorted(table))


def resolve_pipeline(pipeline):
    """'tf_data' or 'grain': `pipeline` checked, None resolved for the running Keras backend (tf.data on
    TensorFlow, Grain elsewhere)."""
    if pipeline is None:
        return "tf_data" if keras.backend.backend() == "tensorflow" else "grain"
    return validation.one_of(pipeline, "pipeline", PIPELINES)


def __getattr__(name):
    # `epoch_order` (the tf.data pipeline's permutation) moved with the pipeline; it needs TensorFlow.
    if name == "epoch_order":
        return _tf_pipeline("sphere_tf.data.datasets.epoch_order").epoch_order
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
