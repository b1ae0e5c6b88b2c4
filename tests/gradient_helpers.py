"""Backend-neutral gradients for tests: `value_and_grads(fn, *inputs)` on TensorFlow, JAX and PyTorch.

`sphere_tf.testing.gradients` with NumPy inputs taken as float32; tests use it where they used `tf.GradientTape`.
"""

import numpy as np
from keras import ops

from sphere_tf import testing


def to_numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


def value_and_grads(fn, *inputs):
    """`(fn(*inputs), [∂fn/∂input_i])` as NumPy, for a scalar `fn` of float tensors/arrays."""
    tensors = [x.astype(np.float32) if isinstance(x, np.ndarray) else x for x in inputs]
    value, grads, _ = testing.gradients(fn, tensors)
    return value, grads
