"""Chooses the convolution/dense operator of a model by name, so configs can swap them."""

import keras

from sphere_tf import layers
from sphere_tf import validation

_CONV = {
    "conv2d": keras.layers.Conv2D,
    "decoupled": layers.DecoupledConv2D,
    "sphere": layers.SphereConv2D,
}
_DENSE = {
    "dense": keras.layers.Dense,
    "conv2d": keras.layers.Dense,
    "decoupled": layers.DecoupledDense,
    "sphere": layers.SphereDense,
}


def _split(operator):
    operator = dict(operator or {"layer": "conv2d"})
    kind = validation.one_of(operator.pop("layer", "conv2d"), "operator['layer']", tuple(sorted(_CONV)))
    return kind, operator


def conv_layer(operator, filters, kernel_size, **kwargs):
    """A 2-D convolution of the kind named by `operator['layer']` with its other keys as kwargs.

    Plain `Conv2D` gets no bias when a BatchNorm follows (the caller passes `use_bias`).
    """
    kind, options = _split(operator)
    if kind == "conv2d":
        options = {}
    return _CONV[kind](filters, kernel_size, **options, **kwargs)


def dense_layer(operator, units, **kwargs):
    """A dense layer of the same kind as `conv_layer` would build."""
    kind, options = _split(operator)
    if kind == "conv2d":
        options = {}
    return _DENSE[kind](units, **options, **kwargs)


def validate_operator(operator):
    """Builds one throwaway layer so that typos in an operator spec fail before data is read."""
    conv_layer(operator, 1, 1)
