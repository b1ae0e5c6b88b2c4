"""Model registry: names to builder functions (timm's `register_model` and `list_models`, raising on duplicates).

A new model family is one builder `fn(input_shape=..., num_classes=..., **options) -> keras.Model` decorated with
`@register_model`; `create_model(name, ...)`, the runner's `model.name` and the model tests
(`tests/models/test_zoo.py`, parametrised over `list_models()`) then find it.
"""

import fnmatch

import keras

from sphere_tf import registry
from sphere_tf import validation

MODELS = {}


def register_model(fn=None, *, name=None):
    """Decorator adding a builder `fn(**kwargs) -> keras.Model` under `name` (default fn.__name__)."""

    def decorate(f):
        return registry.register(MODELS, name or f.__name__, f, "Model")

    return decorate(fn) if fn is not None else decorate


def list_models(pattern="*"):
    """The registered model names matching the shell-style wildcard `pattern` (`'resnet*'`), sorted."""
    return sorted(fnmatch.filter(MODELS, pattern))


def get_model_fn(name):
    """The builder registered as `name`; unknown names list the valid ones."""
    return registry.lookup(MODELS, name, "model")


def create_model(name, bn_momentum=None, **kwargs):
    """Builds the registered model `name` with `kwargs`.

    Args:
        name: str, a registered model.
        bn_momentum: float in [0, 1) or None, the momentum of every `BatchNormalization` layer's moving
            averages (None: Keras's 0.99, a memory of ~100 steps); a smaller one (0.9) lets short runs'
            averages converge, see also `sphere_tf.training.precise_bn`.
        **kwargs: the model function's arguments.
    """
    fn = get_model_fn(name)
    if bn_momentum is not None:
        validation.real(bn_momentum, "bn_momentum", low=0.0, high=1.0, high_open=True)
    model = fn(**kwargs)
    if bn_momentum is not None:
        # Read at each training call and saved by get_config, so setting it after construction is the same as
        # passing it to every BatchNormalization of every builder.
        for layer in model._flatten_layers(include_self=False, recursive=True):
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.momentum = float(bn_momentum)
    return model
