"""One walk over a model's layer tree, shared by every function that looks for layers of a kind.

Nested models are visited through `.layers`, custom blocks through the layers
they hold as attributes (directly, or in lists, tuples and dicts), each layer
once, parents before their children. Keras tracks sub-layers the same way but
exposes the walk only through private API (`Layer._flatten_layers`).
"""

import keras

# Guards against pathological attribute graphs; real models are a few levels deep.
_MAX_DEPTH = 64


def iter_layers(root, descend=None):
    """Every `keras.layers.Layer` under `root` (itself included), depth first, without duplicates.

    Args:
        root: a `keras.Model` or `keras.layers.Layer`.
        descend: optional callable `layer -> bool`; False stops the walk below that
            layer (the layer itself is still yielded). Default: descend everywhere.

    Yields:
        layers, in a stable order (model order for Sequential and functional models).
    """
    seen = set()

    def visit(obj, depth):
        if depth > _MAX_DEPTH:
            return
        if isinstance(obj, keras.layers.Layer):
            if id(obj) in seen:
                return
            seen.add(id(obj))
            yield obj
            if descend is not None and not descend(obj):
                return
            if isinstance(obj, keras.Model):
                for layer in obj.layers:
                    yield from visit(layer, depth + 1)
            for value in list(vars(obj).values()):
                yield from visit(value, depth + 1)
        elif isinstance(obj, (list, tuple)):
            for value in obj:
                yield from visit(value, depth + 1)
        elif isinstance(obj, dict):
            for value in list(obj.values()):
                yield from visit(value, depth + 1)

    yield from visit(root, 0)


def find_layers(root, predicate, descend=None):
    """`[layer for layer in iter_layers(root, descend) if predicate(layer)]`."""
    return [layer for layer in iter_layers(root, descend) if predicate(layer)]
