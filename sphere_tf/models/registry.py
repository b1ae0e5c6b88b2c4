"""Model registry: names to builder functions (timm's `register_model`, raising on duplicates)."""

from sphere_tf import registry

MODELS = {}


def register_model(fn=None, *, name=None):
    """Decorator adding a builder `fn(**kwargs) -> keras.Model` under `name` (default fn.__name__)."""

    def decorate(f):
        return registry.register(MODELS, name or f.__name__, f, "Model")

    return decorate(fn) if fn is not None else decorate


def get_model_fn(name):
    """The builder registered as `name`; unknown names list the valid ones."""
    return registry.lookup(MODELS, name, "model")


def create_model(name, **kwargs):
    """Builds the registered model `name` with `kwargs`."""
    return get_model_fn(name)(**kwargs)
