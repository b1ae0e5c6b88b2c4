"""The TensorFlow plug-in agrees with the `keras.ops` reference, value and gradient, on every path.

For every magnitude × angular activation × kernel weighting of the registries (so a new registry entry is
covered without an edit here), the plug-in's paths ('plain' hand-written gradients, 'xla' clusters,
'kernels' compiled kernels, 'inference') compute `decoupled_response_from_dot` and the patch energy; each
value and each gradient (with respect to the dot products, the one-channel norms, the radius and k) must
equal the reference's to float32 rounding.
"""

import itertools

import numpy as np
import pytest
import tensorflow as tf

from sphere_tf.backends.tensorflow import fused
from sphere_tf.backends.tensorflow.kernels import build as kernel_build
from sphere_tf import testing
from sphere_tf.ops import acceleration
from sphere_tf.ops import angular as angular_lib
from sphere_tf.ops import magnitude as magnitude_lib
from sphere_tf.ops import operator
from sphere_tf.ops import response

CASES = [
    (mag, ang, weighted)
    for mag, ang in itertools.product(sorted(magnitude_lib.MAGNITUDE_FNS), sorted(angular_lib.ANGULAR_FNS))
    for weighted in [None, "linear"] + (list(operator.NONLINEAR_WEIGHTINGS) if mag == "tanh" else [])
]


def _plugin_paths():
    kernels = kernel_build.compiled_kernels()
    assert kernels is not None, kernel_build.status()
    return {"plain": fused.PLAIN, "xla": fused.XLA, "kernels": fused.as_path(True), "inference": fused.INFERENCE}


def _values_and_grads(path, dot, x_norm, w_norm, radius, k, mag, ang, weighted):
    sources = [tf.constant(v) for v in (dot, x_norm, radius, k)]
    with tf.GradientTape() as tape:
        for s in sources:
            tape.watch(s)
        d, n, r, kk = sources
        out = response.decoupled_response_from_dot(
            d, n, 1.0 / n, tf.constant(w_norm), magnitude=mag, angular=ang, alpha=1.3,
            beta=magnitude_lib.MAGNITUDE_FNS[mag].default_beta, radius=r if magnitude_lib.MAGNITUDE_FNS[mag].has_radius
            else None, k=kk if ang in angular_lib.USES_K else None, weighted=weighted,
            weight_radius=tf.constant(np.full(w_norm.shape, 0.7, np.float32)), path=path,
        )
        loss = tf.reduce_sum(tf.sin(2.0 * out))
    grads = tape.gradient(loss, sources, unconnected_gradients=tf.UnconnectedGradients.ZERO)
    return [out.numpy()] + [g.numpy() for g in grads]


def _gradient_scales(dot, x_norm, w_norm, radius, k, mag, ang, weighted):
    """Per output, the size of the terms its float32 sum adds: the rounding a correct path may differ by.

    The gradients of the norms, the radius and k sum one term per unit or per position (they are broadcast
    in the forward pass); terms of size 30 can cancel to 0.02, and two correct float32 paths then differ by
    the terms' rounding, not the sum's. The terms are the reference's gradients with respect to those
    inputs broadcast to the full shape; their absolute values summed back give the scale.
    """
    full = dot.shape
    tiled = [np.broadcast_to(v, full).copy() for v in (x_norm, radius, k)]
    value, d_dot, d_norm, d_radius, d_k = _values_and_grads(acceleration.REFERENCE, dot, tiled[0], w_norm, tiled[1],
                                                            tiled[2], mag, ang, weighted)
    return (np.abs(value), np.abs(d_dot), np.sum(np.abs(d_norm), axis=-1, keepdims=True),
            np.sum(np.abs(d_radius), axis=(0, 1)), np.sum(np.abs(d_k), axis=(0, 1)))


@pytest.mark.parametrize("path_name", ["plain", "xla", "kernels", "inference"])
@pytest.mark.parametrize("mag,ang,weighted", CASES)
def test_plugin_response_matches_reference(mag, ang, weighted, path_name):
    dot, x_norm, w_norm, radius, k = testing.response_case(mag, ang, weighted)
    args = (dot, x_norm, w_norm, radius, k, mag, ang, weighted)
    expected = _values_and_grads(acceleration.REFERENCE, *args)
    got = _values_and_grads(_plugin_paths()[path_name], *args)
    scales = _gradient_scales(*args)
    for name, e, g, scale in zip(("value", "d_dot", "d_norm", "d_radius", "d_k"), expected, got, scales):
        np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-5 * max(1.0, float(np.max(scale))), err_msg=name)


@pytest.mark.parametrize("path_name", ["plain", "xla", "kernels", "inference"])
@pytest.mark.parametrize("kernel_size,strides,padding,dilation", [
    ((3, 3), (1, 1), "same", (1, 1)), ((3, 3), (2, 2), "same", (1, 1)), ((2, 3), (1, 2), "valid", (1, 1)),
    ((3, 3), (1, 1), "same", (2, 2)),
])
def test_plugin_conv_and_patch_energy_match_reference(kernel_size, strides, padding, dilation, path_name):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(2, 7, 6, 3)).astype(np.float32))
    w = tf.constant(rng.normal(size=kernel_size + (3, 4)).astype(np.float32))

    def run(path):
        with tf.GradientTape() as tape:
            tape.watch([x, w])
            dot, energy = response.conv_and_patch_squared_norm(x, w, strides, padding, dilation, True, path)
            loss = tf.reduce_sum(tf.sin(dot)) + tf.reduce_sum(tf.sqrt(energy + 1.0))
        return [dot.numpy(), energy.numpy()] + [g.numpy() for g in tape.gradient(loss, [x, w])]

    for name, e, g in zip(("dot", "energy", "d_x", "d_w"), run(acceleration.REFERENCE), run(_plugin_paths()[path_name])):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5 * max(1.0, float(np.max(np.abs(e)))), err_msg=name)


def test_plugin_registers_for_tensorflow_only():
    assert acceleration.accelerator() is fused.ACCELERATOR
    assert acceleration.layer_path(True).accelerator is fused.ACCELERATOR
    acceleration.set_acceleration(False)
    try:
        assert acceleration.layer_path(True) == acceleration.REFERENCE
        assert acceleration.layer_path(False) == acceleration.REFERENCE_INFERENCE
    finally:
        acceleration.set_acceleration(True)


def test_a_magnitude_registered_later_runs_on_every_path(rng=np.random.default_rng(3)):
    """A new registry entry needs no edit of the plug-in: every path computes it, equal to the reference."""
    from sphere_tf.layers import DecoupledConv2D

    def softsign(x_norm, radius, alpha, beta):
        del radius, beta
        return alpha * x_norm / (1.0 + x_norm)

    magnitude_lib.register_magnitude("softsign_test", magnitude_lib.Magnitude(softsign))
    try:
        x = rng.normal(size=(2, 6, 6, 3)).astype(np.float32)
        outputs = {}
        for name, path in [("reference", None)] + list(_plugin_paths().items()):
            layer = DecoupledConv2D(4, 3, padding="same", magnitude="softsign_test", angular="linear", alpha=1.5)
            layer(x)
            layer.kernel.assign(np.linspace(-1.0, 1.0, int(np.prod(layer.kernel.shape)), dtype=np.float32)
                                .reshape(layer.kernel.shape))
            training = name not in ("inference",)
            if path is None:
                acceleration.set_acceleration(False)
            else:
                kernel_build.set_enabled(name == "kernels")
                acceleration.set_training_fusion(name != "plain")
            try:
                outputs[name] = layer(x, training=training).numpy()
            finally:
                acceleration.set_acceleration(True)
                kernel_build.set_enabled(True)
                acceleration.set_training_fusion(True)
        for name, out in outputs.items():
            np.testing.assert_allclose(out, outputs["reference"], rtol=1e-5, atol=1e-5, err_msg=name)
    finally:
        magnitude_lib.MAGNITUDE_FNS.pop("softsign_test")
