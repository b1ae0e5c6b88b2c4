"""`WrappingOptimizer`: the base of optimizers that hand the update to the user's `optimizer`.

`OPTOptimizer` (rotations to Cayley SGD) and `PartialFCOptimizer` (unsampled
classes left alone) wrap a Keras optimizer the way `LossScaleOptimizer` does:
the wrapper owns no learning rate or step count of its own; `learning_rate`,
`iterations`, `apply_gradients` and the final variable values are the wrapped
optimizer's. Subclasses implement `apply`.
"""

import keras


class WrappingOptimizer(keras.optimizers.Optimizer):
    """A Keras optimizer whose learning rate and step count are those of `self.optimizer`."""

    def __init__(self, optimizer, name):
        super().__init__(learning_rate=0.0, name=name)
        self.optimizer = keras.optimizers.get(optimizer)

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
