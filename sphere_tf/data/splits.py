"""What a data set's reader returns and what the input pipelines build from it; no TensorFlow, no Grain.

`sphere_tf.data.datasets.get_datasets` reads a split with the data set's reader (`Examples`: per-example arrays
read by index; `Stream`: shards read in order), applies the subsets and the label noise to the arrays, and hands
a `PipelineInputs` to one of the two pipelines that batch, augment and normalise: `grain_pipeline` (every Keras
backend) or `tf_pipeline` (tf.data, the TensorFlow backend's default).
"""

import collections

from sphere_tf import validation


class Examples(collections.namedtuple("Examples", ["arrays", "decode", "numpy_decode"], defaults=(None, None))):
    """One split read by index: per-example NumPy `arrays` (labels last) and how to decode an example.

    `decode(*columns)` maps the scalar tensors of one example's other arrays (file offsets, a path, ...) to its
    image tensor (uint8 `(H, W, C)`) in the tf.data pipeline; `numpy_decode(*values)` does the same with NumPy
    values for the Grain pipeline. Both None: `arrays` is `(images, labels)`. A reader that gives only `decode`
    feeds the tf.data pipeline only. The shared pipeline takes subsets of the arrays, so nothing is decoded
    before it is needed.
    """

    __slots__ = ()


class Stream(collections.namedtuple("Stream", ["open", "size", "decode"])):
    """One split that can only be read in order (tensorflow-datasets shards; the tf.data pipeline only).

    `open(shuffle_seed)` is a `tf.data.Dataset` of `(raw, label)` (`shuffle_seed` None: stored order, else the
    files in a seeded order); `size` the number of examples (an int, or a function giving it, so that a
    reader does no I/O before the arguments are checked); `decode(raw)` the image tensor. Limits take the first
    examples, a 10,000-example buffer shuffles the training stream, and `class_limits` and `label_noise`
    are not available.
    """

    __slots__ = ()


PipelineInputs = collections.namedtuple("PipelineInputs", [
    "train", "test", "batch_size", "seed", "initial_step", "drop_remainder", "augmentation", "eval_augmentation",
    "normalize", "mean", "num_classes", "normalization", "train_limit", "test_limit", "process_index",
    "process_count",
])
PipelineInputs.__doc__ = """Everything a pipeline builder needs, checked: the two splits (`Examples` after the
subsets and label noise, or `Stream`s), the global `batch_size`, `seed`, `initial_step`, `drop_remainder`, the
augmentations (names or callables of that pipeline's kind), `normalize(image, mean)`, `mean`, `num_classes`,
`normalization` (the name, for `info`), the stream limits, and which part of every global batch this process
reads (`process_index` of `process_count`)."""


def steps_per_epoch(train_size, batch_size, drop_remainder):
    """Training steps of one pass: `train_size // batch_size` (rounded up without `drop_remainder`)."""
    steps = train_size // batch_size if drop_remainder else -(-train_size // batch_size)
    if steps == 0:
        raise validation.invalid_argument(
            "batch_size", f"at most the training set size ({train_size}) with drop_remainder", batch_size
        )
    return steps


def info(input_shape, inputs, train_size, test_size, steps):
    """The `info` dict `get_datasets` returns."""
    return {
        "input_shape": tuple(input_shape),
        "num_classes": inputs.num_classes,
        "train_size": train_size,
        "test_size": test_size,
        "steps_per_epoch": steps,
        # Batches of one pass over the test split (`evaluate(..., steps=)`: a Grain dataset does not say).
        "test_steps": -(-test_size // inputs.batch_size),
        "channel_mean": inputs.mean,
        "normalization": inputs.normalization if isinstance(inputs.normalization, str) else None,
        "process_count": inputs.process_count,
    }
