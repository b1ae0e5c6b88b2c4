"""sphere_tf.ops.autodiff against closed-form gradients, on whichever Keras backend runs the suite."""

import numpy as np
from keras import ops

from sphere_tf.ops import autodiff


def test_value_and_grad_of_a_cubic_matches_closed_form(rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    value, grad = autodiff.value_and_grad(lambda t: ops.sum(t**3), ops.convert_to_tensor(x))
    np.testing.assert_allclose(ops.convert_to_numpy(value), np.sum(x.astype(np.float64) ** 3), rtol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(grad), 3.0 * x**2, rtol=1e-5)


def test_nested_gradient_reaches_closed_over_tensors(rng):
    """d/dw Σ_k ∂/∂p_k (p·w)² at p0 = d/dw 2(p0·w)Σw = 2(p0 Σw + (p0·w)·1): the inner gradient is differentiable."""
    p0 = rng.standard_normal(5).astype(np.float32)
    w0 = rng.standard_normal(5).astype(np.float32)
    p = ops.convert_to_tensor(p0)

    def outer(w):
        _, inner = autodiff.value_and_grad(lambda q: ops.sum(q * w) ** 2, p)
        return ops.sum(inner)

    value, grad = autodiff.value_and_grad(outer, ops.convert_to_tensor(w0))
    s = float(np.dot(p0, w0))
    np.testing.assert_allclose(ops.convert_to_numpy(value), 2.0 * s * w0.sum(), rtol=1e-4)
    np.testing.assert_allclose(ops.convert_to_numpy(grad), 2.0 * (p0 * w0.sum() + s), rtol=1e-4, atol=1e-5)


def test_compiled_step_equals_eager_step(rng):
    x = ops.convert_to_tensor(rng.standard_normal(6).astype(np.float32))

    def step(t):
        return t - 0.1 * autodiff.value_and_grad(lambda u: ops.sum(ops.square(u)), t)[1]

    np.testing.assert_allclose(ops.convert_to_numpy(autodiff.compiled(step)(x)), 0.8 * ops.convert_to_numpy(x),
                               rtol=1e-6)
