"""`OPTOptimizer`: Cayley SGD for OGD rotations, the user's optimizer for the rest.

The original OGD code trains the rotations with its own optimizer (Cayley SGD,
lr 0.02) and every other variable with momentum SGD [T-7.3.5]; the thesis's GCN
experiments do the same with "the original optimizer" for the other variables.
`OPTOptimizer` packages that split as one Keras optimizer, so `model.compile`,
`fit`, `LossScaleOptimizer` and `.keras` saving work unchanged.
"""

import keras

from sphere_tf import saving
from sphere_tf.optimizers import cayley_sgd
from sphere_tf.optimizers import wrapping

# Name of the raw rotation variable of OPT layers with orthogonalization='ogd'
# (`sphere_tf.layers.OPTConv2D` / `OPTDense` name their variable from this constant).
OGD_VARIABLE_NAME = "ogd_rotation"


def is_rotation_variable(variable):
    """True for the raw rotation of an ``orthogonalization='ogd'`` OPT layer."""
    return variable.name == OGD_VARIABLE_NAME


@saving.register_serializable()
class OPTOptimizer(wrapping.WrappingOptimizer):
    """Route OGD rotation variables to a Cayley-SGD optimizer, the rest to `optimizer`.

    Variables named ``'ogd_rotation'`` (the raw rotations of OPT layers with
    ``orthogonalization='ogd'``) are updated by `rotation_optimizer` (default
    ``CayleySGD(0.02)``, the original code's setting); all other variables by
    `optimizer`.  `learning_rate` and `iterations` are those of `optimizer`
    (so `LearningRateScheduler` acts on the main optimizer; schedule the rotation
    learning rate with a schedule object on `rotation_optimizer`).

    Args:
        optimizer: a Keras optimizer (or its name / config) for the other variables.
        rotation_optimizer: optimizer for the rotations, default `CayleySGD()`.
        name: str.

    Example:
        >>> model.compile(optimizer=OPTOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)),
        ...               loss="sparse_categorical_crossentropy")  # doctest: +SKIP
    """

    def __init__(self, optimizer="sgd", rotation_optimizer=None, name="opt_optimizer", **kwargs):
        if kwargs:
            raise ValueError(
                "OPTOptimizer does not take base optimizer arguments; set them on `optimizer` or "
                f"`rotation_optimizer`. Received: {sorted(kwargs)}"
            )
        super().__init__(optimizer, name=name)
        self.rotation_optimizer = (
            cayley_sgd.CayleySGD() if rotation_optimizer is None
            else wrapping.resolve_optimizer(rotation_optimizer, "rotation_optimizer")
        )
        if self.optimizer is self.rotation_optimizer:
            raise ValueError("Invalid value for argument `rotation_optimizer`: must differ from `optimizer`.")

    @staticmethod
    def _split(pairs):
        main, rotation = [], []
        for pair in pairs:
            (rotation if is_rotation_variable(pair[-1]) else main).append(pair)
        return main, rotation

    def build(self, var_list):
        if self.built:
            return
        main = [v for v in var_list if not is_rotation_variable(v)]
        rotation = [v for v in var_list if is_rotation_variable(v)]
        self.optimizer.build(main)
        self.rotation_optimizer.build(rotation)
        super().build(var_list)

    @property
    def variables(self):
        """This wrapper's own variables, then those of the main optimizer and of the rotations' optimizer."""
        return self._variables + self.optimizer.variables + self.rotation_optimizer.variables

    def apply(self, grads, trainable_variables=None):
        if trainable_variables is None:
            trainable_variables = self._trainable_variables
        grads, trainable_variables = list(grads), list(trainable_variables)
        if not self.built:
            self.build(trainable_variables)
            self.built = True
        main, rotation = self._split(list(zip(grads, trainable_variables)))
        if main:
            self.optimizer.apply([g for g, _ in main], [v for _, v in main])
        if rotation:
            self.rotation_optimizer.apply([g for g, _ in rotation], [v for _, v in rotation])


    def finalize_variable_values(self, var_list):
        self.optimizer.finalize_variable_values([v for v in var_list if not is_rotation_variable(v)])

    def get_config(self):
        return {
            "name": self.name,
            "optimizer": keras.optimizers.serialize(self.optimizer),
            "rotation_optimizer": keras.optimizers.serialize(self.rotation_optimizer),
        }

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        optimizer = keras.optimizers.deserialize(config.pop("optimizer"), custom_objects=custom_objects)
        rotation = keras.optimizers.deserialize(config.pop("rotation_optimizer"), custom_objects=custom_objects)
        return cls(optimizer, rotation, **config)
