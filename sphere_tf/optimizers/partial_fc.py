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

Two ways to get there (the choice is logged once per variable):

* **Masked rule** (SGD with or without momentum / Nesterov, Adam with or without
  AMSGrad, AdamW; `COLUMN_RULES`): the wrapper computes the optimizer's update
  itself, as one elementwise pass per variable and slot,
  `new = where(sampled, rule(old, gradient), old)`, in the optimizer's exact
  formulas (Keras `sgd.py` / `adam.py`, weight decay as `BaseOptimizer`), and the
  inner optimizer never sees the head's variables. Unsampled columns and slots
  are selected, not recomputed: bit for bit unchanged.
* **Copy and restore** (every other optimizer, or options the rules do not
  cover): the inner optimizer updates every column, then the unsampled columns
  of the variable and of each slot are put back from a copy taken before.

Why a masked pass over all C columns and not upstream's update of the K gathered
rows: upstream's weight is `(C, d)`, a class a contiguous row; here the kernel
is `MarginHead`'s `(d, C)`, a class a strided column, and at r = 0.1 a gather or
scatter of K columns touches ≈ 80 % of the kernel's cache lines anyway (16
float32 per line). Measured on the 2-core CPU host at d = 512, C = 10^6,
K = 10^5 (docs/partial_fc.md): SGD momentum on the gathered columns of kernel and
momentum, scattered back in place, 1.34 s per step on JAX (TensorFlow's
`scatter_nd_update` of one variable's K columns alone: 1.7 s); the masked pass
over both, 0.32 s on JAX and on TensorFlow.
"""

import logging

import keras
from keras import ops

from sphere_tf import saving
from sphere_tf.ops import acceleration
from sphere_tf.optimizers import wrapping

_LOGGER = logging.getLogger(__name__)
# Marker attribute a PartialFCHead sets on its kernel and bias: `(weakref to the head, class axis)`.
COLUMNS_ATTRIBUTE = "_partial_fc_columns"


def class_axis_owner(variable):
    """`(head, class_axis)` for the kernel (class-major: axis 0) or bias (axis 0) of a `PartialFCHead`, else None."""
    marker = getattr(variable, COLUMNS_ATTRIBUTE, None)
    if marker is None:
        return None
    head = marker[0]()
    return None if head is None else (head, marker[1])


def is_partial_fc_variable(variable):
    """True for the kernel or bias of a live `PartialFCHead`."""
    return class_axis_owner(variable) is not None


class _SlotTable:
    """The `_Update` (slots, rule) of each Partial FC variable, by `id(variable)`, and the paths logged. A plain
    object: Keras's optimizer attribute tracking would otherwise list the slots among this wrapper's own
    variables (they are the inner optimizer's)."""

    def __init__(self):
        self.by_variable = {}
        self.logged = set()


def _optimizer_chain(optimizer):
    """`optimizer` and the optimizers it wraps (`inner_optimizer`, e.g. a `LossScaleOptimizer`'s)."""
    chain = [optimizer]
    while getattr(chain[-1], "inner_optimizer", None) is not None:
        chain.append(chain[-1].inner_optimizer)
    return chain


def _decayed(optimizer, variable, value, learning_rate):
    """`value` after Keras's decoupled weight decay (`BaseOptimizer._apply_weight_decay`), before the rule."""
    if optimizer.weight_decay is None or not optimizer._use_weight_decay(variable):
        return value
    weight_decay = ops.cast(optimizer.weight_decay, value.dtype)
    return value - value * weight_decay * learning_rate


def _sgd_rule(optimizer, variable):
    """Keras SGD's `update_step` (momentum, Nesterov), masked: `(w, [m], g, sampled, lr, step) -> (w', [m'])`."""
    momentum = optimizer.momentum

    def update(value, *rest):
        *slots, gradient, sampled, learning_rate, _ = rest
        learning_rate = ops.cast(learning_rate, value.dtype)
        gradient = ops.cast(gradient, value.dtype)
        decayed = _decayed(optimizer, variable, value, learning_rate)
        if momentum == 0:
            return [ops.where(sampled, decayed - gradient * learning_rate, value)]
        (m,) = slots
        mu = ops.cast(momentum, value.dtype)
        new_m = ops.where(sampled, m * mu - gradient * learning_rate, m)
        # Each output a function of its own old value and the new slots: XLA then writes both in place.
        step = new_m * mu - gradient * learning_rate if optimizer.nesterov else new_m
        return [ops.where(sampled, decayed + step, value), new_m]

    return update


def _adam_rule(optimizer, variable):
    """Keras Adam's `update_step` (AMSGrad; AdamW through the weight decay), masked:
    `(w, m, v[, v̂], g, sampled, lr, step) -> (w', m', v'[, v̂'])`."""

    def update(value, *rest):
        *slots, gradient, sampled, learning_rate, local_step = rest
        dtype = value.dtype
        learning_rate = ops.cast(learning_rate, dtype)
        gradient = ops.cast(gradient, dtype)
        local_step = ops.cast(local_step, dtype)
        beta_1_power = ops.power(ops.cast(optimizer.beta_1, dtype), local_step)
        beta_2_power = ops.power(ops.cast(optimizer.beta_2, dtype), local_step)
        alpha = learning_rate * ops.sqrt(1 - beta_2_power) / (1 - beta_1_power)
        decayed = _decayed(optimizer, variable, value, learning_rate)
        m, v = slots[0], slots[1]
        new_m = ops.where(sampled, m + (gradient - m) * (1 - optimizer.beta_1), m)
        new_v = ops.where(sampled, v + (ops.square(gradient) - v) * (1 - optimizer.beta_2), v)
        new_slots = [new_m, new_v]
        denominator_v = new_v
        if optimizer.amsgrad:
            new_v_hat = ops.where(sampled, ops.maximum(slots[2], new_v), slots[2])
            new_slots.append(new_v_hat)
            denominator_v = new_v_hat
        step = (new_m * alpha) / (ops.sqrt(denominator_v) + optimizer.epsilon)
        return [ops.where(sampled, decayed - step, value), *new_slots]

    return update


def _sgd_slots(optimizer):
    return 0 if optimizer.momentum == 0 else 1


def _adam_slots(optimizer):
    return 3 if optimizer.amsgrad else 2


# Optimizer class (exactly; a subclass may change `update_step`) -> (rule factory, number of slots per variable).
# A rule factory takes `(optimizer, variable)` and returns the pure elementwise update of that variable.
COLUMN_RULES = {
    keras.optimizers.SGD: (_sgd_rule, _sgd_slots),
    keras.optimizers.Adam: (_adam_rule, _adam_slots),
    keras.optimizers.AdamW: (_adam_rule, _adam_slots),
}


def _rule_class(optimizer):
    """The `COLUMN_RULES` key of `optimizer`'s class, or None."""
    cls = type(optimizer)
    if cls in COLUMN_RULES:
        return cls
    # Keras's PyTorch backend makes `keras.optimizers.SGD(...)` an instance of its own subclass
    # (keras/src/backend/torch/optimizers/torch_sgd.py, ...: the same formulas, batched with torch._foreach ops).
    if cls.__module__.startswith("keras.src.backend.torch.optimizers."):
        return next((base for base in cls.__mro__[1:] if base in COLUMN_RULES), None)
    return None


def _masked_rule_unavailable(chain, variable, slots):
    """Why the masked rule cannot update `variable` (a reason, str), or None when it can."""
    optimizer = chain[-1]
    if len(chain) > 1:
        return f"the optimizer is wrapped in {type(chain[0]).__name__}"
    if _rule_class(optimizer) is None:
        return f"no masked rule for {type(optimizer).__name__} (rules: SGD, Adam, AdamW)"
    for option in ("clipnorm", "clipvalue", "global_clipnorm", "loss_scale_factor"):
        if getattr(optimizer, option, None) is not None:
            return f"{type(optimizer).__name__} has {option}={getattr(optimizer, option)}"
    if optimizer.use_ema:
        return f"{type(optimizer).__name__} has use_ema=True"
    if variable.constraint is not None:
        return f"{variable.path!r} has a constraint"
    expected = COLUMN_RULES[_rule_class(optimizer)][1](optimizer)
    if len(slots) != expected:
        return f"{type(optimizer).__name__} made {len(slots)} slots for {variable.path!r}, the rule expects {expected}"
    return None


class _Update:
    """How one Partial FC variable is updated: the masked rule (`rule` set) or copy and restore (`reason` set)."""

    def __init__(self, slots, rule=None, reason=None):
        self.slots, self.rule, self.reason = slots, rule, reason


@saving.register_serializable()
class PartialFCOptimizer(wrapping.WrappingOptimizer):
    """`optimizer`, except that the unsampled classes of `PartialFCHead`s keep their weights and slots.

    Every variable that is not a `sphere_tf.layers.PartialFCHead`'s kernel or bias
    goes to `optimizer` as usual. For the kernel and bias of each head (found by a
    marker the head puts on them) only the columns of the classes the head used in
    this step (`head.update_mask()`) change, in the variable and in every slot
    `optimizer` keeps for it (SGD's momentum, Adam's m and v, v̂ with AMSGrad).
    That is insightface's v1 Partial FC (`partial_fc.py`, which steps SGD on the
    gathered `sub_weight` and `sub_weight_mom` and scatters them back): an
    unsampled centre, its momentum and Adam moments are frozen, not decayed, and
    weight decay (an optimizer's `weight_decay` or a kernel regularizer) reaches
    sampled centres only. insightface's v2 (`partial_fc_v2.py`, plain torch SGD on
    the whole parameter) instead lets an unsampled centre's momentum decay and
    move it; a plain Keras optimizer without this wrapper does the same.

    Two update paths, chosen per variable when the optimizer is built and logged
    once (INFO for the masked rule, WARNING for copy and restore, with the reason):

    * the **masked rule** when `optimizer` is a plain `SGD` (momentum, Nesterov,
      `weight_decay`), `Adam` (AMSGrad, `weight_decay`) or `AdamW` without
      gradient clipping, EMA or loss scaling, and the variable has no constraint
      (`COLUMN_RULES`): the wrapper applies the optimizer's own formulas as
      `where(sampled, rule(old, gradient), old)`, one elementwise pass per
      variable and slot (on TensorFlow an XLA cluster that writes the variables in
      place), and `optimizer` never sees these variables. Under a `tf.distribute`
      strategy the update must go through Keras's replica machinery, so the step
      takes the other path (logged);
    * **copy and restore** otherwise: `optimizer` updates every column, then the
      unsampled columns of the variable and of each slot are put back from a copy
      taken before (memory and time of a copy and a select per variable and slot).

    Either way the sampled columns take `optimizer`'s update with the learning
    rate (schedule) of this step, and step-count dependent terms (Adam's bias
    correction 1 − β^t) use t = `optimizer.iterations` + 1, the global step,
    not a per-class count of updates (upstream v1's torch SGD has no such term);
    `optimizer.iterations` advances once per step on both paths. `learning_rate`
    and `iterations` are `optimizer`'s.

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
            variable_slots = list(slots.get(id(variable), []))
            reason = _masked_rule_unavailable(chain, variable, variable_slots)
            if reason is None:
                factory = COLUMN_RULES[_rule_class(self.optimizer)][0]
                update = _Update(variable_slots, rule=factory(self.optimizer, variable))
            else:
                update = _Update(variable_slots, reason=reason)
            self._slots.by_variable[id(variable)] = update
            self._log_path(variable, update.reason)
        super().build(var_list)

    def _log_path(self, variable, reason):
        """Logs, once per variable and path, how the wrapper updates a Partial FC variable."""
        key = (id(variable), reason)
        if key in self._slots.logged:
            return
        self._slots.logged.add(key)
        if reason is None:
            _LOGGER.info(
                "PartialFCOptimizer: %s updates the sampled columns of %r (and of its slots) by its masked rule, one "
                "elementwise pass; unsampled columns are left as they are.", type(self.optimizer).__name__,
                variable.path,
            )
        else:
            _LOGGER.warning(
                "PartialFCOptimizer: %r is updated by copy and restore (%s): the inner optimizer updates every "
                "column, then the unsampled columns and slots are restored from a copy (exact, but a copy and a "
                "select over the whole variable and each slot per step).", variable.path, reason,
            )

    @property
    def variables(self):
        """This wrapper's own variables, then the wrapped optimizer's (its step count and slots)."""
        return self._variables + self.optimizer.variables

    def apply(self, grads, trainable_variables=None):
        if trainable_variables is None:
            trainable_variables = self._trainable_variables
        grads, trainable_variables = list(grads), list(trainable_variables)
        if not self.built:
            self.build(trainable_variables)
            self.built = True
        masks, kept, ruled, rest = {}, [], [], []
        replicated = acceleration.replicated_updates()
        for grad, variable in zip(grads, trainable_variables):
            owner = class_axis_owner(variable)
            if owner is None:
                rest.append((grad, variable))
                continue
            head, axis = owner
            if id(head) not in masks:
                masks[id(head)] = ops.convert_to_tensor(head.update_mask()) > 0
            sampled = masks[id(head)]
            if len(variable.shape) > 1:  # the class mask along the variable's class axis, broadcast elsewhere
                shape = [1] * len(variable.shape)
                shape[axis] = -1
                sampled = ops.reshape(sampled, shape)
            update = self._slots.by_variable[id(variable)]
            if update.rule is not None and replicated:
                self._log_path(variable, "a tf.distribute strategy updates the variables of each replica")
            if update.rule is not None and not replicated:
                if grad is not None:  # as Keras, no gradient: no update
                    ruled.append((update, variable, grad, sampled))
                continue
            rest.append((grad, variable))
            for target in [variable, *update.slots]:
                # A copy: PyTorch updates variables in place.
                kept.append((target, ops.copy(target.value), sampled))
        if ruled:
            # Before the inner optimizer's step counter moves: its learning rate (schedule) and Adam's step of
            # this step, as Keras's `apply` uses them.
            learning_rate = ops.convert_to_tensor(self.optimizer.learning_rate)
            local_step = ops.convert_to_tensor(self.optimizer.iterations + 1)
            for update, variable, grad, sampled in ruled:
                acceleration.update_variables(
                    update.rule, [variable, *update.slots], [grad, sampled, learning_rate, local_step]
                )
        if rest:
            self.optimizer.apply([g for g, _ in rest], [v for _, v in rest])
        else:  # every variable took the masked rule: the inner optimizer's step counts this step all the same
            self.optimizer.iterations.assign_add(1)
        for target, before, sampled in kept:
            target.assign(ops.where(sampled, target.value, before))

    def get_config(self):
        return {"name": self.name, "optimizer": keras.optimizers.serialize(self.optimizer)}

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        optimizer = keras.optimizers.deserialize(config.pop("optimizer"), custom_objects=custom_objects)
        return cls(optimizer, **config)
