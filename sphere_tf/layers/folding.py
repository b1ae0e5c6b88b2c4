"""The layers' folding protocol: inference forms of a model without its training-time parameterisation.

A layer folds by one of two public methods, which `sphere_tf.export` calls (it
never looks at the layers' classes):

* `layer.fold()`: a built plain Keras layer with the same outputs. OPT layers
  (Liu et al., "Orthogonal Over-Parameterized Training", CVPR 2021) have it: their
  kernel is the product ``W = R·V`` of a learned orthogonal R and fixed neurons V;
  multiplied out once it is a plain `Conv2D` / `Dense`, so inference and export pay
  nothing for the over-parameterisation (thesis §7.4.1). `fold_opt_model` below
  folds every OPT layer of a model.
* `layer.fold_affine(scale, shift)`: a built copy computing ``scale·F(x) + shift``
  per output channel, where `layer.rescale_folds_into_kernel` is True (the
  hyperspherical and decoupled operators with a cosine angular function).
  `sphere_tf.export.fold_batch_norm` uses it to fold a following BatchNormalization.

`clone_model_replacing` is the copy both folds are made with.
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
