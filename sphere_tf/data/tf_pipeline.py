"""The tf.data input pipeline: the TensorFlow backend's default (`get_datasets(..., pipeline='tf_data')`).

Why tf.data stays on TensorFlow: its `map` runs the augmentations as graph ops on TensorFlow's own threads (no
Python per example), and a run started by an earlier release resumes on exactly the batches it would have read
(its augmentation draws are TensorFlow's stateless Philox streams, `preprocessing.element_seed`). The Grain
pipeline (`grain_pipeline`) draws with NumPy, so the same seed gives other crops and flips there.

The training set is an endless stream of batches of exactly `batch_size`: epoch e visits the examples in the
permutation `epoch_order(seed, e, n)`, example i of epoch e is augmented with `preprocessing.element_seed(seed,
e, i)`, and `initial_step=s` starts at step s without reading the steps before it (resume). Streamed splits
(tensorflow-datasets shards) are keyed by position instead (`stream_datasets`).
"""

import numpy as np

from sphere_tf import dependencies
from sphere_tf.data import imagenet
from sphere_tf.data import preprocessing
from sphere_tf.data import splits

tf = dependencies.lazy_tensorflow(__name__)  # imported on first use: this module imports without TensorFlow

AUGMENTATIONS = preprocessing.AUGMENTATIONS
get_augmentation = preprocessing.get_augmentation
_PERMUTATION_TAG = -1
_STREAM_SHUFFLE_BUFFER = 10_000


def decode_tar_jpeg(path, offset, length):
    """The image of the JPEG stored at bytes `[offset, offset + length)` of the tar file `path` (uint8 HWC)."""
    data = tf.numpy_function(lambda o, n: imagenet.read_bytes(path, o, n),
                             [tf.cast(offset, tf.int64), tf.cast(length, tf.int64)], tf.string, stateful=False)
    return tf.io.decode_jpeg(tf.reshape(data, []), channels=3)


def decode_jpeg(encoded):
    """The image of JPEG bytes `encoded` (a scalar string tensor), uint8 HWC with 3 channels."""
    return tf.io.decode_jpeg(encoded, channels=3)


class _Indexed:
    """n examples addressable by index: `load(i)` -> (uint8 HWC image tensor, int32 label)."""

    def __init__(self, examples):
        *columns, labels = examples.arrays
        if examples.decode is None and examples.numpy_decode is not None:
            raise ValueError("this data set's reader gives a NumPy decoder only (Examples.numpy_decode): use "
                             "pipeline='grain'.")
        tensors = [tf.constant(column) for column in columns]
        labels_t = tf.constant(labels, tf.int32)
        decode = examples.decode or (lambda image: image)
        self.size = len(labels)
        self.load = lambda i: (decode(*[tf.gather(t, i) for t in tensors]), tf.gather(labels_t, i))


def epoch_order(seed, epoch, size):
    """The order (int32 permutation of `range(size)`) in which epoch `epoch` visits the training examples."""
    permutation_seed = tf.random.experimental.stateless_fold_in(
        tf.stack([tf.cast(seed, tf.int64), tf.cast(epoch, tf.int64)]), _PERMUTATION_TAG
    )
    return tf.argsort(tf.random.stateless_uniform([size], seed=permutation_seed))


def _input_shape(dataset):
    return tuple(dataset.element_spec[0].shape[1:].as_list())


def datasets(inputs):
    """`(train_ds, test_ds, info)` of two `Examples` splits as `tf.data.Dataset`s (`splits.PipelineInputs`)."""
    if inputs.process_count != 1:
        raise ValueError("the tf.data pipeline reads the global batch (tf.distribute shards it); process_count "
                         f"must be 1, got {inputs.process_count}.")
    if isinstance(inputs.train, splits.Stream):
        return stream_datasets(inputs)
    train, test = _Indexed(inputs.train), _Indexed(inputs.test)
    batch_size, seed = inputs.batch_size, inputs.seed
    augment = preprocessing.get_augmentation(inputs.augmentation)
    augment_eval = preprocessing.get_augmentation(inputs.eval_augmentation)
    steps_per_epoch = splits.steps_per_epoch(train.size, batch_size, inputs.drop_remainder)

    def example(examples, i, epoch, transform):
        image, label = examples.load(i)
        image = transform(tf.cast(image, tf.float32), preprocessing.element_seed(seed, epoch, i))
        return inputs.normalize(image, inputs.mean), label

    start_epoch, start_batch = divmod(inputs.initial_step, steps_per_epoch)

    def one_epoch(epoch):
        order = epoch_order(seed, epoch, train.size)
        skip = tf.where(epoch == start_epoch, tf.constant(start_batch * batch_size, tf.int64), 0)
        return (
            tf.data.Dataset.from_tensor_slices(order)
            .skip(skip)
            .map(lambda i: example(train, i, epoch, augment), num_parallel_calls=tf.data.AUTOTUNE)
            .batch(batch_size, drop_remainder=inputs.drop_remainder)
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
    return train_ds, test_ds, splits.info(_input_shape(train_ds), inputs, train.size, test.size, steps_per_epoch)


def stream_datasets(inputs):
    """The datasets of two `Stream` splits (ImageNet from tensorflow-datasets): shard files and a 10k buffer
    shuffled under `seed`.

    Streams give no random access, so the training stream is keyed by position: element k of the stream
    (across epochs) is augmented with `element_seed(seed, 0, k)`, and `initial_step` skips
    `initial_step * batch_size` undecoded elements.
    """
    train, test = inputs.train, inputs.test
    batch_size, seed = inputs.batch_size, inputs.seed
    augment = preprocessing.get_augmentation(inputs.augmentation)
    augment_eval = preprocessing.get_augmentation(inputs.eval_augmentation)
    sizes = [split.size() if callable(split.size) else split.size for split in (train, test)]
    train_size = min(sizes[0], inputs.train_limit or sizes[0])
    test_size = min(sizes[1], inputs.test_limit or sizes[1])
    steps_per_epoch = splits.steps_per_epoch(train_size, batch_size, inputs.drop_remainder)

    def decode(split, k, raw, label, transform):
        image = tf.cast(split.decode(raw), tf.float32)
        image = transform(image, preprocessing.element_seed(seed, 0, k))
        return inputs.normalize(image, inputs.mean), tf.cast(label, tf.int32)

    train_ds = (
        # A limited run keeps one fixed subset (the first examples in stored order); a full one reads the shard
        # files in a seeded order that changes every pass.
        train.open(None if inputs.train_limit else seed)
        .take(train_size)
        .repeat()
        .shuffle(_STREAM_SHUFFLE_BUFFER, seed=seed, reshuffle_each_iteration=True)
        .enumerate()
        .skip(inputs.initial_step * batch_size)
        .map(lambda k, ex: decode(train, k, ex[0], ex[1], augment), num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch_size, drop_remainder=inputs.drop_remainder)
        .prefetch(tf.data.AUTOTUNE)
    )
    test_ds = (
        test.open(None)
        .take(test_size)
        .enumerate()
        .map(lambda k, ex: decode(test, k, ex[0], ex[1], augment_eval), num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch_size)
        .prefetch(tf.data.AUTOTUNE)
    )
    return train_ds, test_ds, splits.info(_input_shape(train_ds), inputs, train_size, test_size, steps_per_epoch)
