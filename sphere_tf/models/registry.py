"""Model registry: names to builder functions (timm's `register_model` and `list_models`, raising on duplicates).

A new model family is one builder `fn(input_shape=..., num_classes=..., **options) -> keras.Model` decorated with
`@register_model`; `create_model(name, ...)`, the runner's `model.name` and the model tests
(`tests/models/test_zoo.py`, parametrised over `list_models()`) then find it.
"""

import fnmatch
import inspect

import keras

from sphere_tf import layers
from sphere_tf import registry
from sphere_tf import validation
from sphere_tf import walk
from sphere_tf.models import blocks

MODELS = {}
# builder -> the function its `**kwargs` are passed on to (`register_model(passes_kwargs_to=...)`).
_KWARGS_TARGETS = {}
# Set by `create_model` itself, not by the builder.
_SHAPE_ARGUMENTS = ("input_shape", "num_classes")


def register_model(fn=None, *, name=None, passes_kwargs_to=None):
    """Decorator adding a builder `fn(**kwargs) -> keras.Model` under `name` (default fn.__name__).

    `passes_kwargs_to`: the function a builder with `**kwargs` passes them on to (`build_plain_cnn` for the CNN-N
    family), so that `model_options(name)` knows every option the builder takes without building a model.
    """

    def decorate(f):
        if passes_kwargs_to is not None:
            _KWARGS_TARGETS[f] = passes_kwargs_to
        return registry.register(MODELS, name or f.__name__, f, "Model")

    return decorate(fn) if fn is not None else decorate


def model_options(name):
    """The keyword arguments `create_model(name, ...)` passes to the builder (besides `input_shape`,
    `num_classes`), read from the signatures of the builder and of what its `**kwargs` go on to; None when a
    builder's `**kwargs` go where the registry was not told (they are then checked when the model is built)."""
    fn, options = get_model_fn(name), set()
    while fn is not None:
        parameters = inspect.signature(fn).parameters
        options |= {key for key, p in parameters.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
            return sorted(options - set(_SHAPE_ARGUMENTS))
        fn = _KWARGS_TARGETS.get(fn)
    return None


def list_models(pattern="*"):
    """The registered model names matching the shell-style wildcard `pattern` (`'resnet*'`), sorted."""
    return sorted(fnmatch.filter(MODELS, pattern))


def get_model_fn(name):
    """The builder registered as `name`; unknown names list the valid ones."""
    return registry.lookup(MODELS, name, "model")


def create_model(name, bn_momentum=None, normalization=None, channel_mean=None, **kwargs):
    """Builds the registered model `name` with `kwargs`.

    Args:
        name: str, a registered model.
        bn_momentum: float in [0, 1) or None, the momentum of every `BatchNormalization` layer's moving
            averages (None: Keras's 0.99, a memory of ~100 steps); a smaller one (0.9) lets short runs'
            averages converge, see also `sphere_tf.training.precise_bn`.
        normalization: str or None; a registered pixel normalisation makes the model take raw pixels: its first
            layer is `layers.PixelNormalization(normalization, channel_mean)` (the builders put it there through
            `blocks.pixels`; a builder that does not call it gets it by `with_pixel_normalization`). None: the
            model takes what its builder's first layer takes.
        channel_mean: the per-channel means of a normalisation that reads them ('mean_subtraction'), else None.
        **kwargs: the model function's arguments.
    """
    fn = get_model_fn(name)
    if bn_momentum is not None:
        validation.real(bn_momentum, "bn_momentum", low=0.0, high=1.0, high_open=True)
    if normalization is None:
        if channel_mean is not None:
            raise validation.invalid_argument("channel_mean", "None without a normalization", channel_mean)
        model = fn(**kwargs)
    else:
        # Made here, so bad arguments fail before the builder runs (named by the layer).
        layer = layers.PixelNormalization(normalization, channel_mean=channel_mean, name="pixel_normalization")
        with blocks.pixel_normalization(layer):
            model = fn(**kwargs)
        if layers.model_normalization(model) is None:  # a builder that does not call `blocks.pixels`
            model = with_pixel_normalization(model, normalization, channel_mean)
    if bn_momentum is not None:
        # Read at each training call and saved by get_config, so setting it after construction is the same as
        # passing it to every BatchNormalization of every builder.
        for layer in model._flatten_layers(include_self=False, recursive=True):
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.momentum = float(bn_momentum)
    return model


def _input_structure(model, input_shape):
    """The symbolic inputs of `model` (a tensor, or a dict for a `MarginHead` model); for a subclassed model, an
    image input of `input_shape`."""
    try:
        return model.input
    except (AttributeError, ValueError):  # a Sequential answers `inputs` only; a subclassed model neither
        pass
    inputs = getattr(model, "inputs", None)
    if inputs and len(inputs) == 1:
        return inputs[0]
    if input_shape is None:
        raise validation.invalid_argument("input_shape", "the (height, width, channels) of the images of a model "
                                          "without symbolic inputs (subclassed)", input_shape)
    return keras.Input(tuple(input_shape))


def with_pixel_normalization(model, normalization, channel_mean=None, name="pixel_normalization", input_shape=None):
    """`model` taking raw pixels: a `layers.PixelNormalization(normalization, channel_mean)` first on its images.

    The layers (and so the weights) are `model`'s own, re-applied after the new layer: a functional or Sequential
    model's graph is called again on the normalised images (`walk.call_graph`: a node added to each of the same
    layers), so the result is flat (`result.layers` is `model.layers` with the new
    layer after the inputs) and a `MarginHead` model keeps its `{'images', 'labels'}` inputs. A subclassed model
    has no graph to re-run and is called as one layer. Readers of the trained model
    (`layers.model_normalization`: export, face verification, adversarial pixel budgets) find the layer.

    Args:
        model: a `keras.Model` of `create_model` (or any built Keras model on an image input).
        normalization: str, a registered pixel normalisation (`sphere_tf.data.normalization.NORMALIZATIONS`).
        channel_mean: the per-channel means for a normalisation that reads them ('mean_subtraction'), else None.
        name: str, the layer's name.
        input_shape: the image shape of a subclassed model (the others tell theirs).

    Raises:
        ValueError: bad `normalization` / `channel_mean` (named, by the layer), or `model` already normalises its
            pixels (`model`).
    """
    if layers.model_normalization(model) is not None:
        raise validation.invalid_argument("model", "a model without a PixelNormalization (it has one)", model.name)
    normalize = layers.PixelNormalization(normalization, channel_mean=channel_mean, name=name)
    structure = _input_structure(model, input_shape)
    image_input = structure["images"] if isinstance(structure, dict) else structure
    images = keras.Input(tuple(image_input.shape[1:]), dtype=image_input.dtype, name="images")
    pixels = normalize(images)
    if isinstance(structure, dict):
        inputs = {key: images if key == "images" else keras.Input(tuple(value.shape[1:]), dtype=value.dtype, name=key)
                  for key, value in structure.items()}
        call_inputs = {**inputs, "images": pixels}
    else:
        inputs, call_inputs = images, pixels
    outputs = walk.call_graph(model, call_inputs) if walk.graph_nodes(model) is not None else model(call_inputs)
    return keras.Model(inputs, outputs, name=model.name)
