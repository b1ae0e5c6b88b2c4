"""The pixel normalisations of the data pipelines, `fn(image, channel_mean) -> image`, free of TensorFlow.

They are plain arithmetic, so the same function normalises a `tf.data` element, a NumPy array (the in-memory
loops of `bench/gpu/reproduce.py`) and the serving graph's input:

- `none`: pixels 0..255 as float32;
- `centered_128`: (x − 127.5)/128, the authors' TF repositories (`feat = (rgb - 127.5) / 128.0`);
- `mean_subtraction`: x − per-channel mean (the L-Softmax recipe the papers follow subtracts the training set's
  mean, `mean_file` in the authors' Caffe prototxts);
- `unit_interval`: x/255 in [0, 1], TensorFlow's MNIST tutorial reader (`input_data.read_data_sets`), which the MLP
  repository OPT's MNIST experiment follows (thesis App. F.3) reads its images with.
"""

import numpy as np

from sphere_tf import registry


def _no_normalization(image, channel_mean):
    del channel_mean
    return image


def _centered_128(image, channel_mean):
    del channel_mean
    return (image - 127.5) / 128.0


def _mean_subtraction(image, channel_mean):
    return image - np.asarray(channel_mean, np.float32)


def _unit_interval(image, channel_mean):
    del channel_mean
    return image / 255.0


NORMALIZATIONS = {
    "none": _no_normalization,
    "centered_128": _centered_128,
    "mean_subtraction": _mean_subtraction,
    "unit_interval": _unit_interval,
}


def register_normalization(name, fn):
    """Adds `fn(image, channel_mean) -> image` as normalisation `name` (a taken name raises `KeyError`)."""
    return registry.register(NORMALIZATIONS, name, fn, "normalization")


def get_normalization(name):
    """The normalisation registered as `name`; a callable passes through."""
    return name if callable(name) else registry.lookup(NORMALIZATIONS, name, "normalization")


__all__ = ["NORMALIZATIONS", "get_normalization", "register_normalization"]
