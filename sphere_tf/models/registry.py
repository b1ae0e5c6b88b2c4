"""Model registry: names to builder functions (timm's `register_model`, raising on duplicates)."""

MODELS = {}


def register_model(fn=None, *, name=None):
    """Decorator adding a builder `fn(**kwargs) -> keras.Model` under `name` (default fn.__name__)."""

    def decorate(f):
        key = name or f.__name__
        if key in MODELS:
            raise KeyError(f"Model {key!r} is already registered.")
        MODELS[key] = f
        return f

    return decorate(fn) if fn is not None else decorate


def get_model_fn(name):
    """The builder registered as `name`; unknown names list the valid ones."""
    if name not in MODELS:
        raise ValueError(f"Unknown model {name!r}; expected one of {sorted(MODELS)}.")
    return MODELS[name]


def create_model(name, **kwargs):
    """Builds the registered model `name` with `kwargs`."""
    return get_model_fn(name)(**kwargs)
