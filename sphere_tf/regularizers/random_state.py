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

State lives in a `keras.Variable` (int64, non-trainable, aggregation
'only_first_replica' so the update is well defined under tf.distribute; build the
model inside `strategy.scope()`). The value is also written to the regularizer's
config, so a model saved to `.keras` resumes the random stream where it stopped.
Plain tensors (no `.path`) never advance the counter; call `advance()` instead.
"""

import zlib

import keras
import numpy as np
from keras import ops


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
            dtype="int64",
            trainable=False,
            aggregation="only_first_replica",
            name="regularizer_step",
        )

    @property
    def variable(self):
        return self._variable

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
        self.variable.assign_add(count)

    def numpy_value(self):
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
