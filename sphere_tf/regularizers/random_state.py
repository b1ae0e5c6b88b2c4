"""Random state of the regularizers that draw random numbers (MHE subsets, RP-CoMHE).

`stable_key` and `variable_key` name a regularized variable reproducibly (they
seed its stateless draws); `StepCounter` counts train steps; `SeededDraws` draws
`keras.random` numbers that are a pure function of a seed *tensor*.

Keras calls a weight regularizer once per regularized variable whenever the
model's losses are collected (every train step), passing the variable itself.
`StepCounter` advances once per such round: the first variable a regularizer
instance ever sees is its *leader*, and the counter is incremented whenever the
leader comes by. Every other variable of the same round reads the incremented
value, so layers sharing one regularizer instance see the same step (this is what
makes projections shared across layers of equal dimension).

State lives in a `keras.Variable` (Keras's "int": int64 on TensorFlow and
PyTorch, int32 on JAX without x64; non-trainable, aggregation
'only_first_replica' so the update is well defined under tf.distribute; build the
model inside `strategy.scope()`). The value is also written to the regularizer's
config, so a model saved to `.keras` resumes the random stream where it stopped.
Plain tensors (no `.path`) never advance the counter; call `advance()` instead.

Under JAX, Keras's train step is a pure function: it calls each regularizer with
the kernel's current *value* (a tracer, no `.path`) and carries over only the
variables the model tracks, so state held by the regularizer alone would neither
know its kernel nor survive the step. `track_state(model)` therefore makes every
such variable part of the layer it regularizes, the way a dropout layer carries
its `SeedGenerator` (in `layer.variables` / `non_trainable_variables`, not in
`layer.weights`, so `.keras` weight files are unchanged), and registers the
kernel with its regularizer (`KernelRegistry`), which then recognises the
kernel's value inside the step.
"""

import warnings
import zlib

import keras
import numpy as np
from keras import ops

from sphere_tf import walk


def variable_key(x):
    """A stable name for a regularized variable, else None.

    The last two components of a Keras variable's `path` ('<layer>/<weight>'):
    the outer model prefix changes when a model is reloaded, layer names do not.
    """
    path = getattr(x, "path", None)
    if not isinstance(path, str):
        return None
    return "/".join(path.split("/")[-2:])


def stable_key(text):
    """A process-independent 31-bit integer for a string (Python's hash() is salted)."""
    return zlib.crc32(text.encode("utf-8")) & 0x7FFFFFFF


class StepCounter:
    """Train-step counter of one regularizer instance (see the module docstring).

    Args:
        initial_step: int, the starting value (restored from a config).
    """

    def __init__(self, initial_step=0):
        self._initial_step = int(initial_step)
        self._leader = None
        # Created with the regularizer (eagerly), never inside a traced step.
        self._variable = keras.Variable(
            self._initial_step,
            dtype="int",
            trainable=False,
            aggregation="only_first_replica",
            name="regularizer_step",
        )

    @property
    def variable(self):
        """The int `keras.Variable` holding the step (saved with the regularizer's state)."""
        return self._variable

    def claim(self, x):
        """Makes variable `x` the leader unless one is set (`track_state` order: the model's weight order)."""
        if self._leader is None:
            self._leader = variable_key(x)

    def step_for(self, x):
        """Current step; advances first when `x` is the leader variable."""
        var = self.variable
        key = variable_key(x)
        if key is not None and self._leader is None:
            self._leader = key
        if key is not None and key == self._leader:
            var.assign_add(1)
        return var.value

    def advance(self, count=1):
        """Adds `count` steps (for custom loops that call the regularizer on plain tensors)."""
        self.variable.assign_add(count)

    def numpy_value(self):
        """The current step as a Python int (the initial step inside a trace, where it cannot be read)."""
        try:
            return int(np.asarray(ops.convert_to_numpy(self._variable.value)))
        except Exception:  # inside a trace: fall back to the constructor value
            return self._initial_step


class SeededDraws:
    """`keras.random` draws that are a pure function of an integer seed tensor `(2,)`.

    `keras.random` takes an int or a `keras.random.SeedGenerator` as `seed`, not a
    tensor computed inside a step (seed ⊕ key, step). A private generator whose
    state is set to that tensor right before each draw gives the backend's
    stateless draw for it (`SeedGenerator.next()` returns the state it holds; on
    TensorFlow that is `tf.random.stateless_uniform(shape, seed)`). The generator is
    created with its owner, outside any traced step; its state is rewritten before
    every draw, so nothing depends on its value between steps.
    """

    def __init__(self):
        self._generator = keras.random.SeedGenerator(0)

    def _seed(self, seed):
        state = self._generator.state
        self._generator.state.assign(ops.cast(ops.convert_to_tensor(seed), state.dtype))
        return self._generator

    def uniform(self, shape, seed):
        """float32 U[0, 1) samples of `shape` for `seed` (int tensor `(2,)`)."""
        return keras.random.uniform(shape, dtype="float32", seed=self._seed(seed))

    def normal(self, shape, seed):
        """float32 N(0, 1) samples of `shape` for `seed` (int tensor `(2,)`)."""
        return keras.random.normal(shape, dtype="float32", seed=self._seed(seed))


class KernelRegistry:
    """The kernel variables a regularizer instance is attached to (`track_state`).

    Keras passes a regularizer the variable itself (TensorFlow, PyTorch, eager
    calls) or, inside JAX's stateless train step, the variable's current value;
    `resolve` maps either back to the variable, so the value gets the same key and
    step as the variable would.
    """

    def __init__(self):
        self._variables = []
        self._warned = False

    def add(self, variable):
        """Attaches kernel `variable` (once; adding it again does nothing)."""
        if not any(v is variable for v in self._variables):
            self._variables.append(variable)

    def resolve(self, x, owner="regularizer"):
        """The `keras.Variable` `x` is, or whose value `x` is in the current step; None if unknown."""
        if isinstance(x, keras.Variable):
            return x
        for variable in self._variables:
            # Inside Keras's stateless scope a variable's `.value` is the very array
            # the scope maps it to, which is what the regularizer was given.
            if variable.value is x:
                return variable
        if not self._warned and keras.backend.backend() == "jax":
            import jax

            if isinstance(x, jax.core.Tracer):
                self._warned = True
                warnings.warn(
                    f"{owner}: a kernel this stateful regularizer is not tracked for reached it inside a "
                    "compiled JAX step, so its step counter / projection cannot advance there. Call "
                    "`sphere_tf.regularizers.track_state(model)` once the model is built and before `fit` "
                    "(SphereModel does it in `fit`).",
                    stacklevel=3,
                )
        return None


class LayerState(keras.random.SeedGenerator):
    """A regularizer variable carried by a layer, as `keras.layers.Dropout` carries its seed.

    A `SeedGenerator` is the one kind of layer state Keras puts in
    `layer.variables` (so JAX's train step threads it and writes back its
    updates) but not in `layer.weights` (so `.keras` weight files, written from
    `weights`, keep their layout and old files still load). It holds a variable
    of any shape and dtype here and draws no seeds.
    """

    def __init__(self, variable):
        # Not SeedGenerator.__init__: that would create a seed variable of its own.
        self.name = variable.name
        self.backend = None
        self._initial_seed = None
        self.state = variable

    def next(self, ordered=True):
        raise TypeError(f"LayerState {self.name!r} holds regularizer state; it is not a seed generator.")

    def get_config(self):
        return {"name": self.name}


def track(layer, variables):
    """Adds each of `variables` to `layer.variables` (once) as a `LayerState`."""
    held = {id(getattr(sg, "state", None)) for sg in layer._seed_generators}
    new = [v for v in variables if id(v) not in held]
    if not new:
        return
    # Keras locks a built layer's tracker; it unlocks it the same way to untrack
    # a variable (`Layer._untrack_variable`). Nothing is set as an attribute, so
    # the layer's saved state is untouched.
    tracker = layer._tracker
    locked = tracker.locked
    tracker.unlock()
    try:
        for variable in new:
            tracker.add_to_store("seed_generators", LayerState(variable))
    finally:
        if locked:
            tracker.lock()


def track_state(model):
    """Makes the state of `model`'s stateful regularizers part of the layers they regularize.

    Every trainable weight whose regularizer (or a term of a summed one,
    `.parts`) has a `layer_state(kernel)` method (`MHE` with `num_samples`,
    `CoMHE` random / angle-preserving / adversarial) gets that state tracked by
    the innermost layer owning the weight. Needed on JAX before `fit`
    (see the module docstring); harmless and idempotent elsewhere.

    Args:
        model: a built `keras.Model` or layer.

    Returns:
        `model`.
    """
    owners = {}  # the innermost layer holding each weight: of those holding it, the one holding fewest
    for layer in walk.iter_layers(model):
        weights = layer.trainable_weights
        for variable in weights:
            if id(variable) not in owners or len(weights) < len(owners[id(variable)].trainable_weights):
                owners[id(variable)] = layer
    for variable in model.trainable_weights:  # Keras's order of regularizer calls
        regularizer = getattr(variable, "regularizer", None)
        for part in getattr(regularizer, "parts", None) or [regularizer]:
            method = getattr(part, "layer_state", None)
            if callable(method):
                track(owners.get(id(variable), model), method(variable))
    return model
