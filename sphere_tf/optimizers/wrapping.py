"""`WrappingOptimizer`: the base of optimizers that hand the update to the user's `optimizer`.

`OPTOptimizer` (rotations to Cayley SGD) and `PartialFCOptimizer` (unsampled
classes left alone) wrap a Keras optimizer the way `LossScaleOptimizer` does:
the wrapper owns no learning rate or step count of its own; `learning_rate`,
`iterations`, `apply_gradients` and the final variable values are the wrapped
optimizer's. Subclasses implement `apply`.
"""

import math

import keras
import numpy as np

from sphere_tf import validation


def resolve_optimizer(value, name):
    """`keras.optimizers.get(value)` for the argument `name`, refusing (named) what Keras lets through: None
    (which it returns as is) and a learning rate that is not a finite number >= 0 (a NaN rate in a config
    turns every weight NaN at the first step)."""
    if value is None:
        raise validation.invalid_argument(name, "a Keras optimizer, its name or its config (a dict)", value)
    optimizer = validation.keras_object(keras.optimizers.get, value, name, "optimizer")
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise validation.invalid_argument(name, "a Keras optimizer, its name or its config (a dict)", value)
    rate = float(np.asarray(keras.ops.convert_to_numpy(optimizer.learning_rate)))
    if not (math.isfinite(rate) and rate >= 0):
        raise validation.invalid_argument(name, "an optimizer with a finite learning rate >= 0",
                                          f"{type(optimizer).__name__}(learning_rate={rate})")
    return optimizer


class WrappingOptimizer(keras.optimizers.Optimizer):
    """A Keras optimizer whose learning rate and step count are those of `self.optimizer`."""

    def __init__(self, optimizer, name):
        validation.text(name, "name")
        super().__init__(learning_rate=0.0, name=name)
        self.optimizer = resolve_optimizer(optimizer, "optimizer")

    def apply_gradients(self, grads_and_vars):
        grads, trainable_variables = zip(*grads_and_vars)
        self.apply(grads, trainable_variables)
        return self.iterations

    @property
    def learning_rate(self):
        """The wrapped optimizer's learning rate (setting it sets the wrapped optimizer's)."""
        return self.optimizer.learning_rate

    @learning_rate.setter
    def learning_rate(self, learning_rate):
        self.optimizer.learning_rate = learning_rate

    @property
    def iterations(self):
        """The wrapped optimizer's step count."""
        return self.optimizer.iterations

    def finalize_variable_values(self, var_list):
        self.optimizer.finalize_variable_values(var_list)
