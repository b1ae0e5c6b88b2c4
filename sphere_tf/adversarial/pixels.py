"""Attack budgets given on the 0–255 pixel scale, converted into a model's input space.

DCNet's adversarial protocol (Liu et al., Decoupled Networks, CVPR 2018, §6.2 and
App. A.2) gives ε = 8, τ = 2 in pixel units. A model sees normalised inputs
(`sphere_tf.data.preprocessing.NORMALIZATIONS`), so the budget and the valid
range are mapped through the normalisation in use:

```
input = a·pixel + b_c                  (affine; a shared by all channels)
ε_input = a·ε_pixel                    'centered_128': a = 1/128, 'mean_subtraction'/'none': a = 1
valid range per channel = [b_c, a·255 + b_c]
```

`pixel_space` finds a and b_c by evaluating the registered normalisation at
pixel values 0, 100 and 255, so any affine normalisation registered with
`preprocessing.register_normalization` works; a non-affine one, or one whose
scale differs between channels (an ℓ∞ ball in pixels would not be a ball in the
input), is refused.

`input_space(model)` reads the space from the model: a model whose first layer is
a `sphere_tf.layers.PixelNormalization` normalises its pixels itself, so its
inputs are the raw pixels (a = 1, range [0, 255], whatever the layer computes);
an older model without the layer was trained on pipeline-normalised inputs, whose
normalisation must be named (`DEFAULT_NORMALIZATION` when not). `space_for(model,
space)` is what the attacks and evaluations call: the space given, checked
against the model, or `input_space(model)` when None.

Nothing here needs TensorFlow (the normalisations are plain arithmetic, probed on a
NumPy image), so the backend-neutral attacks (`gradient_attacks`) use it on every
Keras backend.
"""

import dataclasses

import keras
import numpy as np

from sphere_tf import validation
from sphere_tf.data import normalization as normalization_lib  # the normalisations, free of TensorFlow
from sphere_tf.layers import pixel_normalization

PIXEL_MAX = 255.0
_PROBE = (0.0, 100.0, PIXEL_MAX)


@dataclasses.dataclass(frozen=True)
class PixelSpace:
    """The affine map pixel (0–255) -> model input of one normalisation.

    Attributes:
        scale: float > 0, input units per pixel unit (a).
        lower: tuple of floats, per channel the input value of pixel 0 (b_c).
        upper: tuple of floats, per channel the input value of pixel 255.
        normalization: str, the normalisation's name (for messages).
    """

    scale: float
    lower: tuple
    upper: tuple
    normalization: str = ""

    @property
    def channels(self):
        """int, the number of channels."""
        return len(self.lower)

    def epsilon(self, pixels, name="epsilon"):
        """`pixels` (a budget on the 0–255 scale, >= 0) in input units."""
        return validation.non_negative_float(pixels, name) * self.scale

    def clip_bounds(self):
        """`(clip_min, clip_max)` for cleverhans: floats when every channel shares them, else `(C,)` float32
        tensors of the Keras backend (`tf.Tensor` on TensorFlow)."""
        if len(set(self.lower)) == 1 and len(set(self.upper)) == 1:
            return self.lower[0], self.upper[0]
        return keras.ops.convert_to_tensor(self.lower, "float32"), keras.ops.convert_to_tensor(self.upper, "float32")

    def to_pixels(self, inputs):
        """Model inputs (..., C) back to the 0–255 scale (NumPy)."""
        return (np.asarray(inputs, np.float64) - np.asarray(self.lower)) / self.scale

    def from_pixels(self, pixels):
        """0–255 pixels (..., C) to model inputs (NumPy, float32)."""
        return (np.asarray(pixels, np.float64) * self.scale + np.asarray(self.lower)).astype(np.float32)


def pixel_space(normalization, channels, channel_mean=None):
    """The `PixelSpace` of a registered (or callable) normalisation.

    Args:
        normalization: str, a name in `preprocessing.NORMALIZATIONS`, or a callable
            `fn(image, channel_mean) -> image`.
        channels: int > 0, image channels.
        channel_mean: sequence of floats or None, the means passed to the
            normalisation ('mean_subtraction' needs them: `get_datasets`' `info['channel_mean']`).

    Returns:
        PixelSpace.

    Raises:
        ValueError: unknown name, `channel_mean` of the wrong length, or a
            normalisation that is not affine with one positive scale for all channels.
    """
    channels = validation.positive_int(channels, "channels")
    name = normalization if isinstance(normalization, str) else getattr(normalization, "__name__", "normalization")
    fn = normalization_lib.get_normalization(normalization)
    if channel_mean is not None:
        channel_mean = tuple(float(m) for m in np.ravel(channel_mean))
        if len(channel_mean) != channels:
            raise validation.invalid_argument("channel_mean", f"{channels} values (one per channel)", channel_mean)
    probe = np.array([[[v] * channels for v in _PROBE]], np.float32)  # (1, 3, C)
    try:
        out = np.asarray(keras.ops.convert_to_numpy(fn(probe, channel_mean)), np.float64)[0]
    except Exception as error:  # noqa: BLE001 (any failure of a user's normalisation is reported the same way)
        raise ValueError(f"Normalisation {name!r} could not be evaluated on a probe image "
                         f"(channel_mean={channel_mean!r}): {error}") from error
    lower, middle, upper = out
    scale = (upper - lower) / PIXEL_MAX
    if not np.all(np.isfinite(out)) or np.any(scale <= 0):
        raise validation.invalid_argument("normalization", "an increasing affine map of the pixels", name)
    if not np.allclose(middle, lower + _PROBE[1] * scale, rtol=1e-5, atol=1e-5):
        raise validation.invalid_argument(
            "normalization", "an affine map of the pixels (an ε-ball on the 0–255 scale must stay a ball)", name)
    if not np.allclose(scale, scale[0], rtol=1e-6):
        raise validation.invalid_argument(
            "normalization", f"one scale for every channel (got {scale.tolist()})", name)
    return PixelSpace(float(scale[0]), tuple(float(v) for v in lower), tuple(float(v) for v in upper), name)


def _channels(model):
    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        inputs = None
    if not isinstance(model, keras.Model) or not inputs or inputs[0].shape[-1] is None:
        raise validation.invalid_argument("model", "a built keras.Model with a known number of image channels",
                                          getattr(model, "name", model))
    images = inputs[0]
    if isinstance(model.input, dict) and "images" in model.input:
        images = model.input["images"]
    return int(images.shape[-1])


def input_space(model, normalization=None, channel_mean=None):
    """The `PixelSpace` of `model`'s inputs, read from the model where it can be.

    A model whose first layer is a `PixelNormalization` takes raw pixels: the space of 'none' (scale 1, range
    [0, 255] per channel); `normalization`, if given, must be the layer's (and `channel_mean` the layer's, when
    both are given). A model without the layer (saved before it existed) takes inputs normalised by
    `normalization` (`DEFAULT_NORMALIZATION` when None) with `channel_mean`: `pixel_space` of those.

    Args:
        model: a built `keras.Model` (images -> logits).
        normalization: None or the name of the normalisation the model was trained with.
        channel_mean: sequence of floats or None (a model without the layer trained with 'mean_subtraction').

    Returns:
        PixelSpace.

    Raises:
        ValueError: an argument that disagrees with the model's layer, or as `pixel_space` (named).
    """
    channels = _channels(model)
    in_model = pixel_normalization.model_normalization(model)
    if in_model is None:
        name = normalization_lib.DEFAULT_NORMALIZATION if normalization is None else normalization
        return pixel_space(name, channels, channel_mean)
    name, layer_mean = in_model
    if normalization is not None and normalization != name:
        raise validation.invalid_argument(
            "normalization", f"None or {name!r}: the model's first layer (PixelNormalization) normalises its pixels "
            f"with {name!r}", normalization)
    if channel_mean is not None and layer_mean is not None and (
            np.size(channel_mean) != len(layer_mean) or not np.allclose(np.ravel(channel_mean), layer_mean)):
        raise validation.invalid_argument(
            "channel_mean", f"None or the model's PixelNormalization channel_mean {list(layer_mean)}", channel_mean)
    return pixel_space("none", channels)


def space_for(model, space=None):
    """`space` checked against `model`, or `input_space(model)` when None.

    Raises:
        ValueError: `space` is not a `PixelSpace`, or `model` takes raw pixels (its first layer is a
            `PixelNormalization`) and `space` is not the raw pixel space (scale 1, range [0, 255]): budgets
            would be converted for a normalisation the model applies itself.
    """
    if space is None:
        return input_space(model)
    if not isinstance(space, PixelSpace):
        raise validation.invalid_argument("space", "a PixelSpace (sphere_tf.adversarial.input_space) or None", space)
    if pixel_normalization.model_normalization(model) is not None:
        raw = pixel_space("none", space.channels)
        if (space.scale, space.lower, space.upper) != (raw.scale, raw.lower, raw.upper):
            raise validation.invalid_argument(
                "space", f"None or the raw pixel space (scale 1, range [0, 255]): model {model.name!r} normalises "
                "its pixels itself (its first layer is a PixelNormalization)", space)
    return space


__all__ = ["PIXEL_MAX", "PixelSpace", "input_space", "pixel_space", "space_for"]
