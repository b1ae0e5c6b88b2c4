"""`PixelNormalization`: the data pipeline's pixel normalisation as the model's first layer, saved with the model.

A model that starts with this layer takes raw pixels (0..255, after augmentation) and normalises them itself, so
everything that reads the trained model (`sphere_tf.export.export_model`, `sphere_tf.evaluation.face.verify`, the
adversarial pixel budgets `sphere_tf.adversarial.input_space`) learns the normalisation from the model
(`model_normalization`) instead of being told it; the pipeline feeding such a model uses `normalization='none'`.
The functions are the registry's (`sphere_tf.ops.pixel_normalization.NORMALIZATIONS`, re-exported as
`sphere_tf.data.normalization`), so the layer and the pipeline compute the same thing:

```
none              x
centered_128      (x − 127.5) / 128          (the default, DEFAULT_NORMALIZATION)
mean_subtraction  x − channel_mean           (per channel; channel_mean required)
unit_interval     x / 255
```

The layer has no weights; it computes in its compute dtype (float16 under `mixed_float16`: pixels 0..255 are exact
there) on every Keras backend. Saving: registered as `"sphere_tf>PixelNormalization"`, so a `.keras` file loads
after `import sphere_tf`.
"""

import keras
from keras import ops

from sphere_tf import saving
from sphere_tf import validation
from sphere_tf import walk
from sphere_tf.ops import pixel_normalization as normalization_lib


@saving.register_serializable()
class PixelNormalization(keras.layers.Layer):
    """Raw pixels (0..255) -> the model's input scale, by a registered pixel normalisation.

    Args:
        normalization: str, a name in `sphere_tf.data.normalization.NORMALIZATIONS` (default
            `DEFAULT_NORMALIZATION`, 'centered_128').
        channel_mean: sequence of floats (one per channel, or one for all) for a normalisation that reads it
            ('mean_subtraction'); None for the others.
        **kwargs: `keras.layers.Layer` arguments (`name`, `dtype`, ...).

    Raises:
        ValueError: an unknown `normalization` (the message lists the registered ones); `channel_mean` missing
            for a normalisation that needs it, given for one that ignores it, not finite floats, or (when the
            layer is built) neither 1 nor one value per channel.
    """

    def __init__(self, normalization=normalization_lib.DEFAULT_NORMALIZATION, channel_mean=None, **kwargs):
        super().__init__(**kwargs)
        validation.one_of(normalization, "normalization", tuple(normalization_lib.NORMALIZATIONS))
        channel_mean = normalization_lib.check_channel_mean(channel_mean)
        if normalization_lib.uses_channel_mean(normalization) and channel_mean is None:
            raise validation.invalid_argument(
                "channel_mean", f"the per-channel means (a sequence of floats) for normalization={normalization!r}",
                channel_mean)
        if not normalization_lib.uses_channel_mean(normalization) and channel_mean is not None:
            raise validation.invalid_argument(
                "channel_mean", f"None for normalization={normalization!r}, which ignores it (only "
                f"{sorted(normalization_lib.MEAN_NORMALIZATIONS)} read it)", list(channel_mean))
        self.normalization = normalization
        self.channel_mean = channel_mean
        self._normalize = normalization_lib.get_normalization(normalization)

    def build(self, input_shape):
        channels = input_shape[-1] if input_shape else None
        if self.channel_mean is not None and channels is not None and len(self.channel_mean) not in (1, channels):
            raise validation.invalid_argument(
                "channel_mean", f"1 or {channels} values (the input has {channels} channels)", list(self.channel_mean))
        self.built = True

    def call(self, inputs):
        x = ops.cast(inputs, self.compute_dtype)
        # A tensor of the compute dtype (not a float32 NumPy array): the registered functions apply it as given.
        mean = None if self.channel_mean is None else ops.convert_to_tensor(self.channel_mean, self.compute_dtype)
        return self._normalize(x, mean)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "normalization": self.normalization,
                "channel_mean": None if self.channel_mean is None else list(self.channel_mean)}


def _image_input(model):
    """The symbolic image input of a functional model: the only input, `input['images']` of a dict, or the first
    of a list (the images-and-labels models of docs/losses.md)."""
    structure = model.input
    if isinstance(structure, dict):
        if "images" in structure:
            return structure["images"]
        if len(structure) == 1:
            return next(iter(structure.values()))
        raise validation.invalid_argument("model", "a model whose dict inputs name its images 'images'",
                                          sorted(structure))
    if isinstance(structure, (list, tuple)):
        return structure[0]
    return structure


def _first_layer(model):
    """The first layer applied to `model`'s images (descending into a nested model), None when the model has
    no graph (subclassed) or applies nothing to them."""
    if isinstance(model, keras.Sequential):
        layers = [layer for layer in model.layers if not isinstance(layer, keras.layers.InputLayer)]
        if not layers:
            return None
        return _first_layer(layers[0]) if isinstance(layers[0], keras.Model) else layers[0]
    if not isinstance(model, keras.Model) or walk.graph_nodes(model) is None:
        return model if not isinstance(model, keras.Model) else None
    images = _image_input(model)
    consumers = []
    for node in walk.graph_nodes(model):
        if isinstance(node.operation, keras.layers.InputLayer):
            continue
        if any(t is images for t in node.input_tensors) and all(node.operation is not c for c in consumers):
            consumers.append(node.operation)
    if not consumers:
        return None
    normalizing = [c for c in consumers if isinstance(c, PixelNormalization)]
    if normalizing and len(consumers) > 1:
        raise validation.invalid_argument(
            "model", "a model whose images go through one PixelNormalization first (here they also reach "
            f"{[c.name for c in consumers if not isinstance(c, PixelNormalization)]} unnormalised)", model.name)
    first = consumers[0]
    return _first_layer(first) if isinstance(first, keras.Model) else first


def model_normalization(model):
    """`(normalization, channel_mean)` of the `PixelNormalization` layer `model` applies first to its images, or
    None for a model without one (saved before the layer existed, or normalised outside the model).

    `channel_mean` is a tuple of floats or None. For a model with dict inputs the layer is the first one on
    `input['images']`; a nested model first on the images is looked into.

    Raises:
        ValueError: `model` holds a `PixelNormalization` elsewhere than first on its images (a reader would
            normalise twice), or holds one but has no graph to tell (a subclassed model): naming `model`.
    """
    if not isinstance(model, keras.layers.Layer):
        raise validation.invalid_argument("model", "a keras.Model", type(model).__name__)
    first = _first_layer(model)
    if isinstance(first, PixelNormalization):
        return first.normalization, first.channel_mean
    held = walk.find_layers(model, lambda layer: isinstance(layer, PixelNormalization))
    if held:
        raise validation.invalid_argument(
            "model", "a model whose PixelNormalization is the first layer on its images (readers feed it raw "
            f"pixels); {[layer.name for layer in held]} is not (or the model has no graph to tell)",
            getattr(model, "name", model))
    return None


__all__ = ["PixelNormalization", "model_normalization"]
