"""A layer's `*_initializer`, `*_regularizer` and `*_constraint` arguments, resolved at construction by Keras's
getters and named in their errors (the decoupled operators and the margin heads take the same six)."""

import keras

from sphere_tf import validation

_GETTERS = {
    "initializer": keras.initializers.get,
    "regularizer": keras.regularizers.get,
    "constraint": keras.constraints.get,
}


def resolve(**arguments):
    """`{name: object}` for keyword arguments named `*_initializer`, `*_regularizer` or `*_constraint`, each resolved
    by the Keras getter of its suffix.

    Raises:
        ValueError: a value Keras does not take, naming the argument (`validation.keras_object`).
    """
    resolved = {}
    for name, value in arguments.items():
        kind = name.rsplit("_", 1)[-1]
        if kind not in _GETTERS:
            raise ValueError(f"weight_arguments.resolve: {name!r} names no initializer, regularizer or constraint")
        resolved[name] = validation.keras_object(_GETTERS[kind], value, name, kind)
    return resolved
