"""The JAX plug-in's patch energy equals the reference's (value and gradient) for every conv geometry."""

import numpy as np
import pytest

from sphere_tf import testing
from sphere_tf.ops import acceleration
from sphere_tf.ops import angles

pytestmark = pytest.mark.backend_only("jax")

GEOMETRIES = [
    ((3, 3), (1, 1), "same", (1, 1), (6, 5)),
    ((3, 3), (2, 2), "same", (1, 1), (7, 6)),
    ((2, 3), (1, 2), "valid", (1, 1), (6, 7)),
    ((3, 3), (1, 1), "same", (2, 2), (6, 7)),
    ((2, 2), (1, 1), "same", (2, 2), (4, 4)),
    ((5, 5), (1, 1), "same", (1, 1), (2, 3)),
    ((1, 1), (2, 2), "same", (1, 1), (5, 4)),
]


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
