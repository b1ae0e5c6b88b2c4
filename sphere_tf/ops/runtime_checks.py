"""Checks and branches on tensor values: `assert_all` raises on every Keras backend where it can; `cond`.

A check on tensor *values* (labels in range) cannot be written in `keras.ops`: eager
tensors can be inspected in Python, traced ones cannot. This module is the one place
that dispatches on how the value is available; each branch imports its framework
lazily.

* Concrete values (eager TensorFlow, PyTorch, JAX outside `jit`): `ValueError` now.
* JAX under `jit` (Keras `fit` on JAX): `jax.debug.callback` raises on the host; the
  step fails with a `JaxRuntimeError` carrying the message.
* TensorFlow graph (`tf.function` without XLA): `tf.debugging.Assert`, an
  `InvalidArgumentError` carrying the message.
* TensorFlow under XLA (`jit_compile=True`): XLA compiles `Assert` to nothing and
  has no host callback on CPU/GPU, so nothing can raise; callers must make the
  result an explicit error signal themselves (MarginHead returns NaN logits).
"""

import keras
import numpy as np
from keras import ops


def concrete_value(x):
    """`x` as a NumPy array when its value is known now (eager), else None (being traced)."""
    try:
        return np.asarray(ops.convert_to_numpy(x))
    except Exception:  # a TF graph tensor or a JAX tracer has no value yet
        return None


def cond(pred, true_fn, false_fn):
    """`keras.ops.cond`, decided in Python when `pred` has a value now (eager calls).

    Inside a trace (a TF graph, a JAX `jit` or gradient trace of `pred`) it is `ops.cond`.
    Eagerly on JAX, `ops.cond` is `lax.cond`, which traces and compiles both branches on
    every call because the branch closures are new objects each time (a ConvNorm2D
    inference call compiled its running-average branch at every call).
    """
    value = concrete_value(pred)
    if value is not None:
        return true_fn() if bool(value) else false_fn()
    return ops.cond(pred, true_fn, false_fn)


def assert_all(condition, message_fn, data=None):
    """Raises when a boolean tensor `condition` is not all True.

    Args:
        condition: bool tensor.
        message_fn: callable `(data_numpy or None) -> str`, the error message
            (given the offending `data` as NumPy where it can be read).
        data: optional tensor passed to `message_fn` (e.g. the labels).

    Returns:
        `data` (or `condition`), ordered after the check where the backend needs
        it (TF graphs), so reading the returned tensor runs the check first.

    Raises:
        ValueError: eagerly, when `condition` has a False entry.
    """
    result = condition if data is None else data
    value = concrete_value(condition)
    if value is not None:
        if not bool(np.all(value)):
            raise ValueError(message_fn(None if data is None else concrete_value(data)))
        return result
    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        def check(ok, values):
            # The callback runs on XLA's host-callback thread while the main thread waits for the step, and JAX
            # hands it `jax.Array`s: reducing one there (`np.all(array)` calls `array.all()`) starts a JAX
            # computation that waits for the step, which waits for the callback, a deadlock (`fit` hung at 0 % CPU).
            # NumPy copies of the buffers first; everything after is NumPy.
            ok, values = np.asarray(ok), np.asarray(values)
            if not bool(np.all(ok)):
                raise ValueError(message_fn(values))

        jax.debug.callback(check, condition, result)
        return result
    if backend == "tensorflow":
        import tensorflow as tf

        # Compiled to nothing under XLA (see the module docstring).
        check = tf.debugging.Assert(tf.reduce_all(condition), [message_fn(None), result], summarize=16)
        with tf.control_dependencies([check]):
            return tf.identity(result)
    return result
