"""`PartialFCOptimizer`: the user's optimizer, with the unsampled classes of Partial FC heads left alone.

A `sphere_tf.layers.PartialFCHead` computes each training step on a sample of
its classes. The gather gives the other columns of its kernel and bias zero
gradient, but a Keras optimizer still changes them: SGD's momentum keeps moving
a column after its gradient stops, Adam decays m and v and moves the weight by
m/(√v + ε), weight decay shrinks it. insightface's v1 Partial FC
(`recognition/arcface_torch/partial_fc.py`) avoids all of that by handing the
optimizer only the sampled rows of the weight and of its momentum buffer
(`sub_weight`, `sub_weight_mom`) and scattering both back after the step, so an
unsampled centre and its momentum are frozen. Its v2 (`partial_fc_v2.py`)
gathers only the weight and steps plain torch SGD over the whole parameter, so
there the momentum of an unsampled centre decays (and moves it) on zero
gradient. This wrapper implements v1's semantics for any Keras optimizer whose
per-variable slots have the variable's shape.
"""

import keras
from keras import ops

from sphere_tf.optimizers import wrapping

# Marker attribute a PartialFCHead sets on its kernel and bias: `(weakref to the head, class axis)`.
COLUMNS_ATTRIBUTE = "_partial_fc_columns"


def class_axis_owner(variable):
    """`(head, class_axis)` for the kernel (axis 1) or bias (axis 0) of a `PartialFCHead`, else None."""
    marker = getattr(variable, COLUMNS_ATTRIBUTE, None)
    if marker is None:
        return None
    head = marker[0]()
    return None if head is None else (head, marker[1])


def is_partial_fc_variable(variable):
    """True for the kernel or bias of a live `PartialFCHead`."""
    return class_axis_owner(variable) is not None


class _SlotTable:
    """The slots of each Partial FC variable, by `id(variable)`. A plain object: Keras's optimizer attribute
    tracking would otherwise list the slots among this wrapper's own variables (they are the inner optimizer's)."""

    def __init__(self):
        self.by_variable = {}


def _optimizer_chain(optimizer):
    """`optimizer` and the optimizers it wraps (`inner_optimizer`, e.g. a `LossScaleOptimizer`'s)."""
    chain = [optimizer]
    while getattr(chain[-1], "inner_optimizer", None) is not None:
        chain.append(chain[-1].inner_optimizer)
    return chain


@keras.saving.register_keras_serializable(package="sphere_tf")
class PartialFCOptimizer(wrapping.WrappingOptimizer):
    """`optimizer`, except that the unsampled classes of `PartialFCHead`s keep their weights and slots.

    Every variable goes to `optimizer` as usual. For the kernel and bias of each
    `sphere_tf.layers.PartialFCHead` (found by a marker the head puts on them),
    the columns of the classes the head did not use in this step
    (`head.update_mask()`) are restored after the update, in the variable and in
    every slot `optimizer` created for it (`add_variable_from_reference`: SGD's
    momentum, Adam's m and v, Adam's v̂ with amsgrad, the EMA copy with
    `use_ema`). That is insightface's v1 Partial FC (`partial_fc.py`, which steps
    SGD on the gathered `sub_weight` and `sub_weight_mom` and scatters them back):
    an unsampled centre, its momentum and Adam moments are frozen, not decayed,
    and weight decay (an optimizer's `weight_decay` or a kernel regularizer)
    reaches sampled centres only. insightface's v2 (`partial_fc_v2.py`, plain torch
    SGD on the whole parameter) instead lets an unsampled centre's momentum
    decay and move it; a plain Keras optimizer without this wrapper does the same.

    The sampled columns take exactly `optimizer`'s update. Step-count dependent
    terms (Adam's bias correction) use `optimizer.iterations`, the global step,
    not a per-class count of updates. `learning_rate` and `iterations` are
    `optimizer`'s. During the update the wrapper holds a copy of each head
    variable and slot (memory of the same size); upstream instead updates the
    gathered rows only.

    On JAX the head's mask reaches the update as a value of the same traced step
    (`PartialFCHead.update_mask`), which is what `model.fit` does; a custom loop
    must run the head's forward pass and `stateless_apply` in one trace (or both
    eagerly).

    Args:
        optimizer: a Keras optimizer (or its name / config), unbuilt, whose slots
            for a head's variables have the variable's shape (SGD, Adam, AdamW,
            RMSprop, ... ; not Adafactor's factored moments); no
            `gradient_accumulation_steps` (the mask is per step).
        name: str.

    Example:
        >>> optimizer = PartialFCOptimizer(keras.optimizers.SGD(0.1, momentum=0.9))
        >>> model.compile(optimizer=optimizer, loss=None)  # doctest: +SKIP
    """

    def __init__(self, optimizer="sgd", name="partial_fc_optimizer", **kwargs):
        if kwargs:
            raise ValueError(
                "PartialFCOptimizer does not take base optimizer arguments; set them on `optimizer`. "
                f"Received: {sorted(kwargs)}"
            )
        super().__init__(optimizer, name=name)
        for inner in _optimizer_chain(self.optimizer):
            if isinstance(inner, PartialFCOptimizer):
                raise ValueError("Invalid value for argument `optimizer`: it already is a PartialFCOptimizer.")
            if getattr(inner, "gradient_accumulation_steps", None):
                raise ValueError(
                    "Invalid value for argument `optimizer`: expected an optimizer without "
                    "`gradient_accumulation_steps` (the sampled classes change every step). Received: "
                    f"gradient_accumulation_steps={inner.gradient_accumulation_steps}"
                )
        self._slots = _SlotTable()

    def build(self, var_list):
        if self.built:
            return
        chain = _optimizer_chain(self.optimizer)
        if any(inner.built for inner in chain):
            raise ValueError(
                "Invalid value for argument `optimizer`: expected an unbuilt optimizer (PartialFCOptimizer "
                "records the slots it creates for each variable while it builds)."
            )
        slots = {}

        def recorder(inner):
            create = inner.add_variable_from_reference

            def add_variable_from_reference(reference_variable, name=None, initializer="zeros"):
                slot = create(reference_variable, name=name, initializer=initializer)
                slots.setdefault(id(reference_variable), []).append(slot)
                return slot

            return add_variable_from_reference

        for inner in chain:  # shadow the method on the instance while it builds
            inner.add_variable_from_reference = recorder(inner)
        try:
            self.optimizer.build(var_list)
        finally:
            for inner in chain:
                del inner.add_variable_from_reference
        for variable in var_list:
            if not is_partial_fc_variable(variable):
                continue
            for slot in slots.get(id(variable), []):
                if tuple(slot.shape) != tuple(variable.shape):
                    raise ValueError(
                        f"PartialFCOptimizer: {type(self.optimizer).__name__} keeps a slot {slot.name!r} of shape "
                        f"{tuple(slot.shape)} for the Partial FC variable {variable.path!r} of shape "
                        f"{tuple(variable.shape)}; only slots of the variable's shape can be kept per class."
                    )
            self._slots.by_variable[id(variable)] = list(slots.get(id(variable), []))
        super().build(var_list)

    @property
    def variables(self):
        return self._variables + self.optimizer.variables

    def apply(self, grads, trainable_variables=None):
        if trainable_variables is None:
            trainable_variables = self._trainable_variables
        grads, trainable_variables = list(grads), list(trainable_variables)
        if not self.built:
            self.build(trainable_variables)
            self.built = True
        masks, kept = {}, []
        for variable in trainable_variables:
            owner = class_axis_owner(variable)
            if owner is None:
                continue
            head, axis = owner
            if id(head) not in masks:
                masks[id(head)] = ops.convert_to_tensor(head.update_mask()) > 0
            sampled = masks[id(head)]
            if axis == 1:
                sampled = sampled[None, :]
            for target in [variable, *self._slots.by_variable.get(id(variable), [])]:
                # A copy: PyTorch updates variables in place.
                kept.append((target, ops.copy(target.value), sampled))
        self.optimizer.apply(grads, trainable_variables)
        for target, before, sampled in kept:
            target.assign(ops.where(sampled, target.value, before))



    def get_config(self):
        return {"name": self.name, "optimizer": keras.optimizers.serialize(self.optimizer)}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        optimizer = keras.optimizers.deserialize(config.pop("optimizer"), custom_objects=custom_objects)
        return cls(optimizer, **config)
