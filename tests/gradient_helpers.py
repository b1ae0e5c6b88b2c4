"""Backend-neutral gradients for tests: `value_and_grads(fn, *inputs)` on TensorFlow, JAX and PyTorch.

A thin wrapper over `sphere_tf.ops.autodiff.value_and_grad` (one input at a time)
that returns NumPy arrays; tests use it where they used `tf.GradientTape`.
"""

import numpy as np
from keras import ops

from sphere_tf.ops import autodiff


def to_numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


def value_and_grads(fn, *inputs):
    """`(fn(*inputs), [∂fn/∂input_i])` as NumPy, for a scalar `fn` of float tensors/arrays."""
    tensors = [ops.convert_to_tensor(x, "float32") if isinstance(x, np.ndarray) else x for x in inputs]
    grads, value = [], None
    for i in range(len(tensors)):

        def partial(x, i=i):
            return fn(*tensors[:i], x, *tensors[i + 1 :])

        value, grad = autodiff.value_and_grad(partial, tensors[i])
        grads.append(to_numpy(grad))
    if not tensors:
        value = fn()
    return to_numpy(value), grads
