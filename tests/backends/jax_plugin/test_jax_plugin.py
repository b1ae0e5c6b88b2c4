"""The JAX plug-in's patch energy equals the reference's (value and gradient) for every conv geometry."""

import numpy as np
import pytest

from sphere_tf import testing
from sphere_tf.ops import acceleration
from sphere_tf.ops import angles

pytestmark = pytest.mark.backend_only("jax")

GEOMETRIES = testing.PLUGIN_CONV_GEOMETRIES


def _numpy_patch_energy(x, kernel_size, strides, padding, dilation):
    """Σ over each window of the zero-padded per-pixel energy, by explicit loops."""
    from sphere_tf.ops import conv_geometry

    energy = np.sum(x.astype(np.float64) ** 2, axis=-1)
    geo = [conv_geometry.axis_geometry(x.shape[1 + a], kernel_size[a], strides[a], dilation[a], padding)
           for a in (0, 1)]
    padded = np.pad(energy, [(0, 0), geo[0][:2], geo[1][:2]])
    out = np.zeros((x.shape[0], geo[0][2], geo[1][2], 1))
    for i in range(geo[0][2]):
        for j in range(geo[1][2]):
            for a in range(kernel_size[0]):
                for b in range(kernel_size[1]):
                    out[:, i, j, 0] += padded[:, i * strides[0] + a * dilation[0], j * strides[1] + b * dilation[1]]
    return out


@pytest.mark.parametrize("kernel_size,strides,padding,dilation,hw", GEOMETRIES)
def test_reduce_window_patch_energy_matches_numpy_and_reference(kernel_size, strides, padding, dilation, hw):
    from sphere_tf.backends import jax as jax_plugin

    x = np.random.default_rng(0).normal(size=(2, *hw, 3)).astype(np.float32)
    got = np.asarray(jax_plugin.patch_squared_norm(x, kernel_size, strides, padding, dilation))
    np.testing.assert_allclose(got, _numpy_patch_energy(x, kernel_size, strides, padding, dilation), rtol=1e-5)
    weights = np.random.default_rng(1).normal(size=got.shape).astype(np.float32)
    _, (grad_plugin,), _ = testing.gradients(
        lambda t: (jax_plugin.patch_squared_norm(t, kernel_size, strides, padding, dilation) * weights).sum(), [x])
    _, (grad_reference,), _ = testing.gradients(
        lambda t: (angles.patch_squared_norm(t, kernel_size, strides, padding, dilation) * weights).sum(), [x])
    np.testing.assert_allclose(grad_plugin, grad_reference, rtol=1e-5, atol=1e-5)


def test_jax_plugin_is_the_jax_backends_accelerator():
    from sphere_tf.backends import jax as jax_plugin

    assert acceleration.layer_path(True).accelerator is jax_plugin.ACCELERATOR
    acceleration.set_acceleration(False)
    try:
        assert acceleration.layer_path(True) == acceleration.REFERENCE
    finally:
        acceleration.set_acceleration(True)


def test_tanh_cosine_vjp_matches_autodiff_of_the_formula():
    """The hand-written VJP of f = dot·tanh(‖x‖·a)·v against JAX autodiff of the same expression."""
    import jax
    from jax import numpy as jnp

    from sphere_tf.backends import jax as jax_plugin

    rng = np.random.default_rng(2)
    dot = jnp.asarray(rng.normal(size=(2, 3, 4, 5)), jnp.float32)
    x_norm = jnp.asarray(np.abs(rng.normal(size=(2, 3, 4, 1))) + 0.1, jnp.float32)
    factor = 1.3 / x_norm
    inv_radius = jnp.asarray(np.abs(rng.normal(size=(5,))) + 0.2, jnp.float32)
    weights = jnp.asarray(rng.normal(size=(2, 3, 4, 5)), jnp.float32)

    def loss(fn):
        return lambda *args: jnp.sum(jnp.sin(fn(*args)) * weights)

    formula = lambda d, n, v, a: d * (jnp.tanh(n * a) * v)  # noqa: E731
    args = (dot, x_norm, factor, inv_radius)
    got = jax.grad(loss(jax_plugin.tanh_cosine), argnums=(0, 1, 2, 3))(*args)
    expected = jax.grad(loss(formula), argnums=(0, 1, 2, 3))(*args)
    np.testing.assert_allclose(np.asarray(jax_plugin.tanh_cosine(*args)), np.asarray(formula(*args)), rtol=1e-6)
    for name, g, e in zip(("dot", "x_norm", "factor", "inv_radius"), got, expected):
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=1e-5, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("alpha", [1.0, 1.7])
def test_tanh_cosine_layer_on_the_plugin_matches_the_reference(alpha):
    from sphere_tf.layers import DecoupledConv2D

    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 6, 6, 3)).astype(np.float32)
    upstream = rng.normal(size=(2, 6, 6, 4)).astype(np.float32)
    results = []
    for accelerated in (True, False):
        layer = DecoupledConv2D(4, 3, padding="same", magnitude="tanh", angular="cosine", alpha=alpha,
                                learnable_rho=True)
        layer(x)
        layer.set_weights([np.linspace(-1.0, 1.0, int(np.prod(w.shape)), dtype=np.float32).reshape(w.shape)
                           if w.trainable else np.asarray(w) for w in layer.weights])
        acceleration.set_acceleration(accelerated)
        try:
            value, x_grads, var_grads = testing.gradients(
                lambda t: (layer(t, training=True) * upstream).sum(), [x], layer.trainable_variables,
                state=layer.non_trainable_variables)
        finally:
            acceleration.set_acceleration(True)
        results.append([value] + x_grads + var_grads)
    for got, expected in zip(*results):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5 * max(1.0, float(np.max(np.abs(expected)))))


@pytest.mark.parametrize(
    "shape,axis,num_shards,sample_size",
    [((5, 40), 1, 1, 4), ((5, 40), 1, 4, 3), ((3, 36), 1, 3, 12), ((40,), 0, 2, 5)],
)
def test_gather_columns_value_and_gradient_equal_the_reference(shape, axis, num_shards, sample_size):
    """The plug-in's gather of sampled columns: the reference's values and gradient (a scatter), bit for bit."""
    import jax
    import jax.numpy as jnp

    from sphere_tf.backends import jax as jax_plugin
    from sphere_tf.ops import sampling

    rng = np.random.default_rng(0)
    values = jnp.asarray(rng.normal(size=shape).astype(np.float32))
    labels = rng.integers(0, shape[axis], size=3)
    index, _, _, _ = sampling.sample_classes(labels, shape[axis], num_shards, sample_size, sampling.step_seed(1, 2))
    upstream = jnp.asarray(rng.normal(size=shape[:axis] + (index.shape[0],) + shape[axis + 1:]).astype(np.float32))

    def loss(gather):
        return lambda v: jnp.sum(gather(v, index, num_shards, axis) * upstream)

    reference = sampling.reference_gather_columns
    np.testing.assert_array_equal(jax_plugin.gather_columns(values, index, num_shards, axis),
                                  reference(values, index, num_shards, axis))
    expected = jax.grad(loss(reference))(values)
    np.testing.assert_array_equal(jax.grad(loss(jax_plugin.gather_columns))(values), expected)
    np.testing.assert_array_equal(jax.jit(jax.grad(loss(jax_plugin.gather_columns)))(values), expected)
    # Through the dispatcher: the accelerator's version unless acceleration is off.
    assert acceleration.accelerator() is jax_plugin.ACCELERATOR
    np.testing.assert_array_equal(jax.grad(loss(sampling.gather_columns))(values), expected)


def test_polynomial_acos_is_within_float32_rounding_of_float64_arccos():
    """Over every float32 in [−1, 1] sampled densely (ends included), as close to the float64 arccos as
    `jnp.arccos` itself, and its derivative is −1/√(1 − c²)."""
    import jax
    from jax import numpy as jnp

    from sphere_tf.backends import jax as jax_plugin

    c = np.concatenate([np.linspace(-1.0, 1.0, 400_001, dtype=np.float32),
                        np.float32(1.0) - np.arange(1, 200, dtype=np.float32) * np.finfo(np.float32).epsneg,
                        np.float32(0.5) + np.arange(-50, 50, dtype=np.float32) * np.finfo(np.float32).eps])
    exact = np.arccos(c.astype(np.float64))
    got = np.asarray(jax.jit(jax_plugin.polynomial_acos)(c), np.float64)
    error = np.abs(got - exact)
    assert np.max(error) <= max(4e-7, 1.25 * np.max(np.abs(np.asarray(jnp.arccos(c), np.float64) - exact)))
    assert np.all(error <= 2.5e-7 * np.maximum(exact, 1e-3) + 1.5e-7)  # a few ulp of θ, near θ = 0 too
    inner = c[np.abs(c) < 0.999]
    derivative = np.asarray(jax.vmap(jax.grad(jax_plugin.polynomial_acos))(inner))
    np.testing.assert_allclose(derivative, np.asarray(jax.vmap(jax.grad(jnp.arccos))(inner)), rtol=2e-6)
    np.testing.assert_allclose(derivative, -1.0 / np.sqrt(1.0 - inner.astype(np.float64) ** 2), rtol=2e-6)


# The θ activations under the magnitudes of each kind (a constant, a radius, α·h₁ and one mixing α with β) and
# the weightings; the plug-in's h·g is the reference's own `response.magnitude_times`.
@pytest.mark.parametrize("mag,ang,weighted", [
    ("sphere", "linear", None), ("sphere", "sigmoid", None), ("tanh", "linear", "linear"),
    ("tanh", "sigmoid", "nonlinear"), ("seg", "linear", None), ("log", "sigmoid", "linear"),
])
def test_theta_activations_match_the_reference(mag, ang, weighted):
    """`decoupled_response_from_dot` with θ from `polynomial_acos` against the reference's `jnp.arccos`, value
    and gradients (the dot products, the norms, the radius, k)."""
    import jax
    from jax import numpy as jnp

    from sphere_tf.backends import jax as jax_plugin
    from sphere_tf.ops import magnitude as magnitude_lib
    from sphere_tf.ops import response

    rng = np.random.default_rng(7)
    x_norm = jnp.asarray(np.abs(rng.normal(size=(3, 4, 1))) + 0.2, jnp.float32)
    cos = np.clip(rng.normal(size=(3, 4, 5)) * 0.5, -0.999, 0.999)
    dot = jnp.asarray(cos, jnp.float32) * x_norm
    w_norm = jnp.asarray(np.abs(rng.normal(size=(5,))) + 0.5, jnp.float32)
    radius = jnp.asarray(np.abs(rng.normal(size=(5,))) + 0.5, jnp.float32)
    k = jnp.asarray(np.abs(rng.normal(size=(5,))) * 0.2 + 0.2, jnp.float32)
    entry = magnitude_lib.MAGNITUDE_FNS[mag]

    def loss(path, d, n, r, kk):
        out = response.decoupled_response_from_dot(
            d, n, 1.0 / n, w_norm, magnitude=mag, angular=ang, alpha=1.3, beta=entry.default_beta,
            radius=r if entry.has_radius else None, k=kk if ang == "sigmoid" else None, weighted=weighted,
            weight_radius=jnp.full((5,), 0.7, jnp.float32), path=path)
        return jnp.sum(jnp.sin(2.0 * out)), out

    for path in (jax_plugin.TRAINING, jax_plugin.INFERENCE):
        (_, expected), expected_grads = jax.value_and_grad(
            lambda *a: loss(acceleration.REFERENCE, *a), argnums=(0, 1, 2, 3), has_aux=True)(dot, x_norm, radius, k)
        (_, got), got_grads = jax.value_and_grad(
            lambda *a: loss(path, *a), argnums=(0, 1, 2, 3), has_aux=True)(dot, x_norm, radius, k)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
        for name, g, e in zip(("d_dot", "d_norm", "d_radius", "d_k"), got_grads, expected_grads):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5 * max(1.0, float(np.max(np.abs(e)))), err_msg=name)
