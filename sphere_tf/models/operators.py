"""Chooses the convolution/dense operator of a model by name, so configs can swap them.

An operator spec is a dict ``{'layer': KIND, **options}`` (or just the string
``KIND``); the options go to the layer's constructor unchanged, so every
argument of the layer (magnitude, angular function, weighting, orthogonalisation,
ConvNorm's `affine`, initialisers, ...) is reachable from a config:

| KIND          | conv slot                       | hidden FC slot                |
|---------------|---------------------------------|-------------------------------|
| `'conv2d'`    | `keras.layers.Conv2D`           | `keras.layers.Dense`          |
| `'sphere'`    | `sphere_tf.layers.SphereConv2D` | `sphere_tf.layers.SphereDense`|
| `'decoupled'` | `DecoupledConv2D`               | `DecoupledDense`              |
| `'opt'`       | `OPTConv2D`                     | `OPTDense`                    |
| `'conv_norm'` | `ConvNorm2D`                    | `keras.layers.Dense`          |

ConvNorm is defined for convolutions only (Liu et al., "Convolutional
Normalization", NeurIPS 2021); its FC layers stay plain, as in the authors'
networks (shengliu66/ConvNorm `models/resnet.py`), so a `'conv_norm'` spec
gives a plain `Dense` (its options are conv-only and are not used there).

SphereNorm (Liu et al., "Deep Hyperspherical Learning", NIPS 2017, §2.5 and
Fig. 5) is cosine SphereConv used in place of BatchNorm:
``{'layer': 'sphere', 'angular': 'cosine'}`` with the model's
``batch_norm=False``; "SphereNorm+BatchNorm" keeps ``batch_norm=True``; the
rescaled variant adds ``'rescale': True``.
"""

import re
import zlib

import keras

from sphere_tf import layers
from sphere_tf import validation

_CONV = {
    "conv2d": keras.layers.Conv2D,
    "conv_norm": layers.ConvNorm2D,
    "decoupled": layers.DecoupledConv2D,
    "opt": layers.OPTConv2D,
    "sphere": layers.SphereConv2D,
}
_DENSE = {
    "dense": keras.layers.Dense,
    "conv2d": keras.layers.Dense,
    "conv_norm": keras.layers.Dense,
    "decoupled": layers.DecoupledDense,
    "opt": layers.OPTDense,
    "sphere": layers.SphereDense,
}
KINDS = tuple(sorted(_CONV))


def _split(operator, name="operator"):
    if isinstance(operator, str):
        operator = {"layer": operator}
    if operator is not None and not isinstance(operator, dict):
        try:
            operator = dict(operator)  # ConfigDict, mappings
        except (TypeError, ValueError):
            raise validation.invalid_argument(name, "a dict {'layer': KIND, **options} or a KIND string", operator)
    operator = dict(operator or {"layer": "conv2d"})
    kind = validation.one_of(operator.pop("layer", "conv2d"), f"{name}['layer']", KINDS)
    return kind, operator


def kind(operator, name="operator"):
    """The operator kind (`'conv2d'`, `'sphere'`, ...) of a spec; None gives `'conv2d'`."""
    return _split(operator, name)[0]


def conv_layer(operator, filters, kernel_size, **kwargs):
    """A 2-D convolution of the kind named by `operator['layer']` with its other keys as kwargs.

    The caller passes `use_bias` (no bias when a BatchNorm follows). `ConvNorm2D`
    has no `use_bias` (its affine depthwise conv carries the bias), so it is
    dropped for that kind.

    Args:
        operator: dict `{'layer': KIND, **options}`, a KIND string, or None (`'conv2d'`).
        filters: int, output channels.
        kernel_size: int or pair.
        **kwargs: geometry and naming (`strides`, `padding`, `use_bias`, `name`, ...).

    Returns:
        An unbuilt layer.
    """
    kind_, options = _split(operator)
    if kind_ == "conv_norm":
        kwargs.pop("use_bias", None)
    return _CONV[kind_](filters, kernel_size, **{**kwargs, **_per_layer_seed(options, kwargs.get("name"))})


def dense_layer(operator, units, **kwargs):
    """A dense layer of the same kind as `conv_layer` would build (plain `Dense` for `'conv_norm'`)."""
    kind_, options = _split(operator)
    if kind_ == "conv_norm":
        options = {}
    return _DENSE[kind_](units, **{**kwargs, **_per_layer_seed(options, kwargs.get("name"))})


def layer_seed(seed, layer_name):
    """The seed a layer named `layer_name` gets from an operator spec's `seed` (a 31-bit int).

    One `seed` in a model's operator spec seeds the whole model: every layer
    draws from its own stream (seed and layer name), so two layers of the same
    shape do not start from the same fixed kernel V or rotation (OPT).
    """
    return zlib.crc32(f"{int(seed)}/{layer_name}".encode("utf-8")) & 0x7FFFFFFF


def _per_layer_seed(options, layer_name):
    if options.get("seed") is None or layer_name is None:
        return options
    return {**options, "seed": layer_seed(options["seed"], layer_name)}


def validate_operator(operator, name="operator", dense=False):
    """Builds one throwaway layer so that typos in an operator spec fail before data is read.

    Args:
        operator: the spec.
        name: str, how errors name it (`'shortcut_operator'`, a config key, ...).
        dense: bool, check it as a hidden-FC spec (`dense_layer`) instead of a conv spec.

    Raises:
        ValueError: an unknown kind (naming `name['layer']` and the kinds) or a bad option.
    """
    kind_, options = _split(operator, name)
    try:
        if dense:
            if kind_ != "conv_norm":
                _DENSE[kind_](1, **options)
        else:
            _CONV[kind_](1, 1, **options)
    except (ValueError, TypeError) as error:
        # The layer names its own argument (`magnitude`, or a keyword it does not take): name the spec's key,
        # as the config or caller wrote it, and the kind it was given to.
        message = str(error)
        keys = [key for key in options if re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", message)]
        named = ", ".join(f"{name}[{key!r}]" for key in keys) or name
        raise ValueError(f"Invalid value for {named} ({name}['layer']={kind_!r}): {message}") from None
