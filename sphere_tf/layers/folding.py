"""Copies of a model with some layers replaced: OPT layers folded into plain Keras layers.

After Orthogonal Over-Parameterized Training (Liu et al., "Orthogonal
Over-Parameterized Training", CVPR 2021) a layer's kernel is the product
``W = R·V`` of a learned orthogonal R and fixed neurons V. Multiplying it out once
gives a plain `keras.layers.Conv2D` / `Dense` with the same outputs, so inference
and export pay nothing for the over-parameterisation (thesis §7.4.1).
`sphere_tf.export` re-exports `fold_opt_model` and folds BatchNormalization with
the same `clone_model_replacing`.
"""

import keras

from sphere_tf.layers.opt import OPTLayer


def fold_opt_model(model):
    """Return a copy of a Sequential/functional model with every OPT layer folded.

    Each `OPTConv2D` / `OPTDense` becomes a `keras.layers.Conv2D` / `Dense` with
    kernel ``W = R·V`` and the same bias and activation (`layer.fold()`); every
    other layer is re-created from its config and gets a copy of its weights.
    The result has the same outputs (up to float rounding) and no OPT parameters,
    and exports like any plain Keras model (`sphere_tf.export.export_saved_model`).

    Args:
        model: a built Sequential or functional `keras.Model`.

    Returns:
        A new `keras.Model` of the same kind.

    Raises:
        ValueError: for a subclassed model (fold its layers with `layer.fold()`).
    """
    def replace(layer):
        if isinstance(layer, OPTLayer):
            return layer.fold()
        if isinstance(layer, keras.Model):
            return fold_opt_model(layer)
        return None

    try:
        return clone_model_replacing(model, replace)
    except ValueError as error:
        raise ValueError(
            "Invalid value for argument `model`: `fold_opt_model` needs a Sequential or functional model; "
            f"fold the layers of a subclassed model with `layer.fold()`. Received: {type(model).__name__}"
        ) from error


def clone_model_replacing(model, replace):
    """`keras.models.clone_model` with `replace(layer)` (a new layer, or None for a copy with its weights)."""
    copies = []

    def clone(layer):
        new = replace(layer)
        if new is None:
            new = layer.__class__.from_config(layer.get_config())
            copies.append((layer, new))
        return new

    result = keras.models.clone_model(model, clone_function=clone)
    for old, new in copies:
        if old.weights:
            new.set_weights(old.get_weights())
    return result
