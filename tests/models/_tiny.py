"""Tiny builds of any registered model, from its builder's signature (no per-model entry)."""

import inspect

from sphere_tf import models


def tiny_input_shape(name):
    """The builder's default input shape with each side at most 32 (a 224×224 ImageNet net is built on 32×32;
    no default: 32×32×3), read from its signature: a newly registered model needs no entry here."""
    parameter = inspect.signature(models.get_model_fn(name)).parameters.get("input_shape")
    default = None if parameter is None or parameter.default is inspect.Parameter.empty else parameter.default
    if default is None:
        return (32, 32, 3)
    return tuple(min(int(d), 32) for d in default[:-1]) + (int(default[-1]),)


def tiny_kwargs(name):
    """`width_multiplier=1/16` for builders that take it (by name or through `**kwargs`, as every zoo builder)."""
    parameters = inspect.signature(models.get_model_fn(name)).parameters
    takes = "width_multiplier" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())
    return {"width_multiplier": 1 / 16} if takes else {}
