"""The Grain input pipeline: every Keras backend, without TensorFlow (`get_datasets(..., pipeline='grain')`).

Grain (`grain.MapDataset`, google/grain) is the JAX ecosystem's deterministic loader: a dataset is a function of
an index, so the batches of a run are a pure function of the global step and resuming at step s reads step s
next, without reading (or decoding) the ones before. Keras 3 feeds a Grain dataset to `fit` on every backend
(`keras/src/trainers/data_adapters/grain_dataset_adapter.py`).

The training stream has the tf.data pipeline's structure (`tf_pipeline`): epoch e visits the examples in its own
permutation (Grain's `shuffle`, reseeded every epoch by `repeat`), batches never straddle two epochs, and example
i of epoch e is augmented with a NumPy generator keyed by `(seed, e, i)` (`element_rng`), so a crop does not depend
on which batch or process reads the example. The NumPy augmentations are `numpy_preprocessing`'s; the draws differ
from TensorFlow's Philox streams, so the same seed gives other (equally distributed) crops and flips than tf.data.

Multi-process training reads each global batch in `process_count` parts: process p takes rows
`[p·b, (p+1)·b)` of every global batch, b = `batch_size / process_count` (what `keras.distribution` expects of
each process under `DataParallel`). The position to save is the global step; nothing else.
"""

import os

import grain
import numpy as np

from sphere_tf import validation
from sphere_tf.data import numpy_preprocessing
from sphere_tf.data import splits

AUGMENTATIONS = numpy_preprocessing.NUMPY_AUGMENTATIONS
get_augmentation = numpy_preprocessing.get_numpy_augmentation
# Threads that load and augment batches ahead of the training step (NumPy releases the GIL in its copies).
_READ_THREADS = max(1, min(4, os.cpu_count() or 1))
_PREFETCH_BATCHES = 2 * _READ_THREADS
# Grain datasets have a length: "endless" is this many steps past the start.
_ENDLESS = 2**62


def element_rng(seed, epoch, index):
    """The NumPy generator that augments example `index` in `epoch` of a run seeded with `seed`."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(epoch), int(index)]))


class _Split:
    """An `Examples` split read by index in batches: `load(indices)` -> list of uint8/float images, labels."""

    def __init__(self, examples):
        *self._columns, labels = examples.arrays
        if examples.numpy_decode is None and examples.decode is not None:
            raise ValueError("this data set's reader gives a TensorFlow decoder only (Examples.decode): give it a "
                             "NumPy one (Examples.numpy_decode) or use pipeline='tf_data'.")
        self._decode = examples.numpy_decode
        self.labels = np.asarray(labels).astype(np.int32)
        self.size = len(self.labels)

    def images(self, indices):
        if self._decode is None:
            return self._columns[0][indices]
        return [self._decode(*(column[i] for column in self._columns)) for i in indices]


class _Loader:
    """Loads, augments and normalises a batch of example indices (`__call__(indices, epoch)`)."""

    def __init__(self, split, augmentation, inputs):
        self.split = split
        self.identity = augmentation == "none"
        self.augment = get_augmentation(augmentation)
        self.augment_batch = numpy_preprocessing.get_batch_augmentation(augmentation)
        self.inputs = inputs

    def __call__(self, indices, epoch):
        indices = np.asarray(indices)
        raw = self.split.images(indices)
        if self.identity and isinstance(raw, np.ndarray):
            images = raw.astype(np.float32)  # the whole batch at once
        elif self.augment_batch is not None and isinstance(raw, np.ndarray):
            # Equal to the per-example path below, bit for bit, with less Python work per image.
            images = self.augment_batch(raw, [element_rng(self.inputs.seed, epoch, i) for i in indices])
        else:
            images = np.stack([
                self.augment(np.asarray(image, np.float32), element_rng(self.inputs.seed, epoch, i))
                for image, i in zip(raw, indices)
            ]).astype(np.float32, copy=False)
        images = np.asarray(self.inputs.normalize(images, self.inputs.mean), np.float32)
        return images, self.split.labels[indices]


def _part(indices, inputs):
    """This process's rows of a global batch of example indices."""
    if inputs.process_count == 1:
        return indices
    size = len(indices) // inputs.process_count
    return indices[inputs.process_index * size:(inputs.process_index + 1) * size]


def _read_options():
    return grain.ReadOptions(num_threads=_READ_THREADS, prefetch_buffer_size=_PREFETCH_BATCHES)


def datasets(inputs):
    """`(train_ds, test_ds, info)` of two `Examples` splits as Grain datasets (`splits.PipelineInputs`).

    `train_ds` is an endless `grain.IterDataset` of this process's part of every global batch from
    `initial_step` on, read ahead by a few threads; `test_ds` a `grain.MapDataset` of the test batches in file
    order (this process's part of each).
    """
    if isinstance(inputs.train, splits.Stream):
        raise validation.invalid_argument(
            "pipeline", "'tf_data' for streamed shards (tensorflow-datasets folders are read by tf.data)", "grain")
    count, index = inputs.process_count, inputs.process_index
    if inputs.batch_size % count:
        raise validation.invalid_argument(
            "batch_size", f"a multiple of the {count} processes (each reads an equal part of every global batch)",
            inputs.batch_size)
    if count > 1 and not inputs.drop_remainder:
        raise validation.invalid_argument(
            "drop_remainder", f"True with {count} processes (every process reads an equal part of each batch)",
            inputs.drop_remainder)
    train, test = _Split(inputs.train), _Split(inputs.test)
    steps = splits.steps_per_epoch(train.size, inputs.batch_size, inputs.drop_remainder)
    load_train = _Loader(train, inputs.augmentation, inputs)
    load_test = _Loader(test, inputs.eval_augmentation, inputs)
    # Example indices of every global batch, epoch after epoch, each epoch in its own permutation.
    order = (grain.MapDataset.range(train.size).shuffle(seed=inputs.seed)
             .batch(inputs.batch_size, drop_remainder=inputs.drop_remainder).repeat())
    train_ds = (grain.MapDataset.range(inputs.initial_step, inputs.initial_step + _ENDLESS)
                .map(lambda step: load_train(_part(order[step], inputs), step // steps))
                .to_iter_dataset(_read_options()))
    if count > 1 and test.size % count:
        raise validation.invalid_argument(
            "test_limit", f"a test set size divisible by the {count} processes (each evaluates an equal part of every "
            "batch)", test.size)
    test_ds = (grain.MapDataset.range(test.size).batch(inputs.batch_size)
               .map(lambda indices: load_test(_part(indices, inputs), 0)))
    input_shape = load_train(np.arange(1), 0)[0].shape[1:]
    return train_ds, test_ds, splits.info(input_shape, inputs, train.size, test.size, steps)
