"""The pixel normalisations, `fn(image, channel_mean) -> image`: plain arithmetic, free of TensorFlow.

One registry serves the data pipelines (`sphere_tf.data.normalization` re-exports it), the model's first layer
(`sphere_tf.layers.PixelNormalization`) and the readers of a trained model (export, face verification,
adversarial pixel budgets). The functions use Python operators only, so the same function normalises a
`tf.data` element, a NumPy array and a Keras tensor of any backend and dtype:

- `none`: pixels 0..255 unchanged;
- `centered_128`: (x − 127.5)/128, the authors' TF repositories (`feat = (rgb - 127.5) / 128.0`);
- `mean_subtraction`: x − per-channel mean (the L-Softmax recipe the papers follow subtracts the training set's
  mean, `mean_file` in the authors' Caffe prototxts);
- `unit_interval`: x/255 in [0, 1], TensorFlow's MNIST tutorial reader (`input_data.read_data_sets`), which the MLP
  repository OPT's MNIST experiment follows (thesis App. F.3) reads its images with.

`channel_mean` is None for the normalisations that ignore it; for those that use it (`MEAN_NORMALIZATIONS`) it is a
sequence of floats (cast to float32 NumPy) or a tensor of the image's dtype (used as given: a layer passes one of
its compute dtype).
"""

import numpy as np

from sphere_tf import registry
from sphere_tf import validation

# The normalisation a model or pipeline gets when none is named: written here once, read everywhere.
DEFAULT_NORMALIZATION = "centered_128"


def _no_normalization(image, channel_mean):
    del channel_mean
    return image


def _centered_128(image, channel_mean):
    del channel_mean
    return (image - 127.5) / 128.0


def _mean_subtraction(image, channel_mean):
    if isinstance(channel_mean, (list, tuple, np.ndarray)) or validation.is_real(channel_mean):
        channel_mean = np.asarray(channel_mean, np.float32)
    return image - channel_mean  # a backend tensor (a layer's, in its compute dtype) as it is


def _unit_interval(image, channel_mean):
    del channel_mean
    return image / 255.0


NORMALIZATIONS = {
    "none": _no_normalization,
    "centered_128": _centered_128,
    "mean_subtraction": _mean_subtraction,
    "unit_interval": _unit_interval,
}
# The names whose function reads `channel_mean` (the others ignore it).
MEAN_NORMALIZATIONS = {"mean_subtraction"}


def register_normalization(name, fn, uses_channel_mean=False):
    """Adds `fn(image, channel_mean) -> image` as normalisation `name` (a taken name raises `KeyError`).

    `uses_channel_mean=True` marks a normalisation that reads the per-channel means (it then needs them, and a
    `PixelNormalization` layer of it stores them). A normalisation meant for the model's first layer
    (`sphere_tf.layers.PixelNormalization`) must use operators or `keras.ops` only (no NumPy on the image).
    """
    fn = registry.register(NORMALIZATIONS, name, fn, "normalization")
    if uses_channel_mean:
        MEAN_NORMALIZATIONS.add(name)
    return fn


def get_normalization(name):
    """The normalisation registered as `name`; a callable passes through."""
    return name if callable(name) else registry.lookup(NORMALIZATIONS, name, "normalization")


def uses_channel_mean(name):
    """True when normalisation `name` reads `channel_mean` (`MEAN_NORMALIZATIONS`)."""
    return name in MEAN_NORMALIZATIONS


def check_channel_mean(channel_mean, name="channel_mean"):
    """`channel_mean` as a tuple of finite floats (None passes through).

    Raises:
        ValueError: not a non-empty sequence of finite floats (naming `name`).
    """
    if channel_mean is None:
        return None
    try:
        values = tuple(validation.real(m, name) for m in np.ravel(np.asarray(channel_mean, dtype=object)))
    except (TypeError, ValueError) as error:
        raise validation.invalid_argument(name, "a sequence of finite floats", channel_mean) from error
    if not values:
        raise validation.invalid_argument(name, "a non-empty sequence of finite floats", channel_mean)
    return values


__all__ = ["DEFAULT_NORMALIZATION", "MEAN_NORMALIZATIONS", "NORMALIZATIONS", "check_channel_mean",
           "get_normalization", "register_normalization", "uses_channel_mean"]
