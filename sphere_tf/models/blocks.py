"""Building blocks shared by the model families: conv units, hidden FC layers, heads.

Every conv slot goes through `conv_unit` (operator → optional BatchNorm →
optional activation), so each family takes any operator spec of
`sphere_tf.models.operators` in every slot, 1×1 shortcuts included.

Heads. ``head=None`` (default) puts a plain `keras.layers.Dense(num_classes)`
on the features. ``head`` may also be a dict ``{'layer': NAME, **kwargs}`` with
NAME in `HEADS` (`'dense'`, `'margin'` = `sphere_tf.layers.MarginHead`, or its
sampled form `sphere_tf.layers.PartialFCHead` when the spec sets `sample_rate` < 1 or `num_shards` > 1,
`'sphere'`, `'decoupled'`) or any Keras layer instance. A `MarginHead` needs the
labels in training (the margin is put on the target class), so a model with
one takes two named inputs, ``{'images': x, 'labels': y}`` (`model.input` is
that dict; `needs_labels(model)` says so). The runner feeds
``pack_inputs(images, labels)``; at evaluation and inference the head ignores
the labels (`training=False`) and returns the plain logits, so any integer
labels in range (zeros, say) do there.
"""

import contextlib
import contextvars

import keras

from sphere_tf import layers
from sphere_tf import validation
from sphere_tf.models import operators

ACTIVATIONS = ("relu", "prelu")

HEADS = {
    "dense": keras.layers.Dense,
    "decoupled": layers.DecoupledDense,
    "margin": layers.MarginHead,
    "sphere": layers.SphereDense,
}


def check_common(batch_norm, relu, activation, width_multiplier):
    """Validates the switches every builder shares; returns the width multiplier as a float."""
    validation.one_of(batch_norm, "batch_norm", (True, False))
    validation.one_of(relu, "relu", (True, False))
    validation.one_of(activation, "activation", ACTIVATIONS)
    return float(validation.positive_float(width_multiplier, "width_multiplier"))


def scale_widths(widths, width_multiplier, name="widths"):
    """`widths` scaled by `width_multiplier` (rounded, at least 1 channel), as a tuple of ints."""
    widths = tuple(widths) if isinstance(widths, (list, tuple)) else (widths,)
    for i, width in enumerate(widths):
        validation.positive_int(width, f"{name}[{i}]")
    return tuple(max(1, int(round(w * width_multiplier))) for w in widths)


def activation_layer(x, activation, name):
    """`x` through a ReLU or a per-channel PReLU named `name`."""
    if activation == "prelu":  # one slope per channel, as Caffe's PReLU (channel_shared: false)
        return keras.layers.PReLU(shared_axes=tuple(range(1, len(x.shape) - 1)) or None, name=name)(x)
    return keras.layers.ReLU(name=name)(x)


def conv_unit(x, operator, filters, kernel_size, strides=1, batch_norm=True, relu=True,
              activation="relu", name="conv"):
    """`operator` conv ('same' padding) → BatchNorm (if `batch_norm`) → activation (if `relu`).

    A `'conv_norm'` operator holds its own BatchNorm (the authors' `PreConv`,
    shengliu66/ConvNorm `models/prec_conv.py`), so `batch_norm` is passed to the
    layer (unless the spec sets it) and no separate BatchNorm is added.
    """
    kind = operators.kind(operator)
    if kind == "conv_norm":
        spec = dict(operator) if isinstance(operator, dict) else {"layer": kind}
        spec.setdefault("batch_norm", batch_norm)
        x = operators.conv_layer(spec, filters, kernel_size, strides=strides, padding="same", name=name)(x)
    else:
        x = operators.conv_layer(
            operator, filters, kernel_size, strides=strides, padding="same", use_bias=not batch_norm, name=name
        )(x)
        if batch_norm:
            x = keras.layers.BatchNormalization(name=f"bn_{name}")(x)
    if relu:
        x = activation_layer(x, activation, f"{activation}_{name}")
    return x


STEMS = ("cifar", "imagenet")


def stem_unit(x, stem, width, operator, batch_norm=True, relu=True, activation="relu"):
    """The stem `conv0`: 'cifar' a 3×3 stride-1 conv unit; 'imagenet' a 7×7 stride-2 conv unit and a 3×3
    stride-2 max-pool `pool0` (He et al., 2016)."""
    validation.one_of(stem, "stem", STEMS)
    if stem == "imagenet":
        x = conv_unit(x, operator, width, 7, strides=2, batch_norm=batch_norm, relu=relu,
                      activation=activation, name="conv0")
        return keras.layers.MaxPooling2D(3, strides=2, padding="same", name="pool0")(x)
    return conv_unit(x, operator, width, 3, batch_norm=batch_norm, relu=relu, activation=activation, name="conv0")


def fc_unit(x, operator, units, batch_norm=True, relu=True, activation="relu", name="fc"):
    """A hidden FC layer of the kind of `operator` → BatchNorm → activation."""
    x = operators.dense_layer(operator, units, use_bias=not batch_norm, name=name)(x)
    if batch_norm:
        x = keras.layers.BatchNormalization(name=f"bn_{name}")(x)
    if relu:
        x = activation_layer(x, activation, f"{activation}_{name}")
    return x


def make_head(head, num_classes):
    """The classifier layer for `head` (see the module docstring), named 'logits' when built here."""
    if head is None:
        return keras.layers.Dense(num_classes, name="logits", dtype="float32")
    if isinstance(head, keras.layers.Layer):
        return head
    if not isinstance(head, dict):
        try:
            head = dict(head)
        except (TypeError, ValueError):
            raise validation.invalid_argument("head", "None, a dict {'layer': NAME, **kwargs} or a Keras layer", head)
    options = dict(head)
    name = validation.one_of(options.pop("layer", "dense"), "head['layer']", tuple(sorted(HEADS)))
    options.setdefault("name", "logits")
    if name == "margin":
        return _margin_head(num_classes, options)
    options.setdefault("dtype", "float32")
    return HEADS[name](num_classes, **options)


# The Partial FC keys of a margin head spec (`sphere_tf.layers.PartialFCHead`) and their defaults: the dense
# `MarginHead` semantics.
PARTIAL_FC_DEFAULTS = {"sample_rate": 1.0, "num_shards": 1, "seed": None}


def is_partial_fc(head):
    """True when the margin head spec `head` (a dict) asks for sampled or blocked classes: `sample_rate` < 1 or
    `num_shards` > 1 (then `make_head` gives a `PartialFCHead`)."""
    if not isinstance(head, dict) or head.get("layer", "dense") != "margin":
        return False
    return head.get("sample_rate", 1.0) != 1.0 or head.get("num_shards", 1) != 1


def _margin_head(num_classes, options):
    """A `MarginHead`, or a `PartialFCHead` when `options` ask for sampling (`sample_rate` < 1) or class blocks
    (`num_shards` > 1); `sample_rate=1`, `num_shards=1` is the dense head, whatever `seed` says."""
    partial = {key: options.pop(key) for key in PARTIAL_FC_DEFAULTS if key in options}
    if is_partial_fc({"layer": "margin", **partial}):
        return layers.PartialFCHead(num_classes, **partial, **options)
    if partial:  # the dense head: the values must still be valid ones
        validation.unit_interval(partial.get("sample_rate", 1.0), "head['sample_rate']")
        validation.positive_int(partial.get("num_shards", 1), "head['num_shards']")
        validation.integer(partial.get("seed"), "head['seed']", minimum=0, allow_none=True)
    return layers.MarginHead(num_classes, **options)


def finish(images, features, head, num_classes, name):
    """Puts the head on `features` and returns the functional model (two inputs for a MarginHead)."""
    num_classes = validation.positive_int(num_classes, "num_classes")
    layer = make_head(head, num_classes)
    if isinstance(layer, layers.MarginHead):
        labels = keras.Input((), dtype="int32", name="labels")
        logits = layer(features, labels)
        return keras.Model({"images": images, "labels": labels}, logits, name=name)
    return keras.Model(images, layer(features), name=name)


def needs_labels(model):
    """True when `model` takes ``{'images': ..., 'labels': ...}`` (a `MarginHead` model)."""
    return isinstance(model.input, dict) and "labels" in model.input


def pack_inputs(images, labels):
    """The inputs of a `MarginHead` model: ``{'images': images, 'labels': labels}``.

    For a `tf.data` pipeline of ``(x, y)``: ``ds.map(lambda x, y: (pack_inputs(x, y), y))``.
    """
    return {"images": images, "labels": labels}


# The `PixelNormalization` layer `create_model(..., normalization=...)` asks the builder it calls to put first.
_PIXEL_NORMALIZATION = contextvars.ContextVar("pixel_normalization", default=None)


@contextlib.contextmanager
def pixel_normalization(layer):
    """Within it, `pixels(images)` applies `layer` (a `layers.PixelNormalization`) first (the builders of
    `create_model(..., normalization=...)`: the model takes raw pixels)."""
    token = _PIXEL_NORMALIZATION.set(layer)
    try:
        yield
    finally:
        _PIXEL_NORMALIZATION.reset(token)


def pixels(images):
    """What a builder's first layer takes: `images` normalised by the `PixelNormalization` that
    `create_model(..., normalization=...)` asks for, else `images` as they are. Every built-in builder starts
    `x = blocks.pixels(images)`."""
    layer = _PIXEL_NORMALIZATION.get()
    if layer is None:
        return images
    _PIXEL_NORMALIZATION.set(None)  # one layer per build: a builder calling a builder normalises once
    return layer(images)


def images_input(input_shape):
    """The image input of every model, named 'images'."""
    try:
        shape = tuple(input_shape)
    except TypeError:
        shape = ()
    if len(shape) != 3 or any(not validation.is_int(d) or d <= 0 for d in shape):
        raise validation.invalid_argument("input_shape", "(height, width, channels) of positive ints", input_shape)
    return keras.Input(tuple(int(d) for d in shape), name="images")
