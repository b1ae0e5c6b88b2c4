"""The PyTorch plug-in agrees with the `keras.ops` reference, value and gradient, and traces without graph breaks.

For every magnitude × angular activation × kernel weighting of the registries (a new entry is covered without
an edit here), `decoupled_response_from_dot` on the plug-in's path must equal the reference's, value and
gradients with respect to the dot products, the one-channel norms, the radius and k, to float32 rounding; the
convolution and patch energy must equal NumPy loops and the reference for every conv geometry.
"""

import itertools
import logging

import keras
import numpy as np
import pytest

from sphere_tf import testing
from sphere_tf.ops import acceleration
from sphere_tf.ops import angular as angular_lib
from sphere_tf.ops import conv_geometry
from sphere_tf.ops import magnitude as magnitude_lib
from sphere_tf.ops import operator
from sphere_tf.ops import response

pytestmark = pytest.mark.backend_only("torch")

CASES = [
    (mag, ang, weighted)
    for mag, ang in itertools.product(sorted(magnitude_lib.MAGNITUDE_FNS), sorted(angular_lib.ANGULAR_FNS))
    for weighted in [None, "linear"] + (list(operator.NONLINEAR_WEIGHTINGS) if mag == "tanh" else [])
]
GEOMETRIES = testing.PLUGIN_CONV_GEOMETRIES


def _plugin():
    from sphere_tf.backends import torch as torch_plugin

    return torch_plugin


def _values_and_grads(path, dot, x_norm, w_norm, radius, k, mag, ang, weighted, learnable_k=True):
    import torch

    sources = [torch.tensor(v, requires_grad=True) for v in (dot, x_norm, radius, k)]
    d, n, r, kk = sources
    entry = magnitude_lib.MAGNITUDE_FNS[mag]
    out = response.decoupled_response_from_dot(
        d, n, 1.0 / n, torch.tensor(w_norm), magnitude=mag, angular=ang, alpha=1.3, beta=entry.default_beta,
        radius=r if entry.has_radius else None,
        k=(kk if learnable_k else float(k.ravel()[0])) if ang in angular_lib.USES_K else None,
        weighted=weighted, weight_radius=torch.tensor(np.full(w_norm.shape, 0.7, np.float32)), path=path,
    )
    loss = torch.sum(torch.sin(2.0 * out))
    grads = torch.autograd.grad(loss, sources, allow_unused=True)
    return [out.detach().numpy()] + [np.zeros(s.shape, np.float32) if g is None else g.numpy()
                                      for s, g in zip(sources, grads)]


def _gradient_scales(dot, x_norm, w_norm, radius, k, mag, ang, weighted, learnable_k):
    """Per output, the size of the terms its float32 sum adds (the broadcast inputs' gradients sum one term per
    unit or per position, which can cancel): the reference's gradients of those inputs at full size, summed
    back in absolute value (as in the TensorFlow plug-in's parity test)."""
    tiled = [np.broadcast_to(v, dot.shape).copy() for v in (x_norm, radius, k)]
    value, d_dot, d_norm, d_radius, d_k = _values_and_grads(
        acceleration.REFERENCE, dot, tiled[0], w_norm, tiled[1], tiled[2], mag, ang, weighted, learnable_k)
    return (np.abs(value), np.abs(d_dot), np.sum(np.abs(d_norm), axis=-1, keepdims=True),
            np.sum(np.abs(d_radius), axis=(0, 1)), np.sum(np.abs(d_k), axis=(0, 1)))


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("mag,ang,weighted", CASES)
def test_plugin_response_matches_reference(mag, ang, weighted, training):
    torch_plugin = _plugin()
    path = torch_plugin.TRAINING if training else torch_plugin.INFERENCE
    args = testing.response_case(mag, ang, weighted)
    for learnable_k in ([True, False] if ang in angular_lib.USES_K else [True]):
        expected = _values_and_grads(acceleration.REFERENCE, *args, mag, ang, weighted, learnable_k)
        got = _values_and_grads(path, *args, mag, ang, weighted, learnable_k)
        scales = _gradient_scales(*args, mag, ang, weighted, learnable_k)
        for name, e, g, scale in zip(("value", "d_dot", "d_norm", "d_radius", "d_k"), expected, got, scales):
            np.testing.assert_allclose(g, e, rtol=2e-5, atol=2e-5 * max(1.0, float(np.max(scale))),
                                       err_msg=f"{name} (learnable k: {learnable_k})")


def test_theta_gradient_is_zero_where_the_clip_binds():
    """Cosines beyond the clip of `angles.safe_acos` get no gradient, on the plug-in as on the reference."""
    import torch

    torch_plugin = _plugin()
    dot = torch.tensor([[2.0, -2.0, 0.5, 0.999]], requires_grad=True)
    inv_norm = torch.tensor([[1.0]], requires_grad=True)
    for ang, k in (("linear", None), ("sigmoid", 0.3)):
        g = torch_plugin.theta_activation(dot, inv_norm, ang, k)
        (d_dot,) = torch.autograd.grad(g.sum(), [dot])
        np.testing.assert_array_equal(d_dot.numpy()[0, :2], [0.0, 0.0])
        assert np.all(np.isfinite(d_dot.numpy())) and np.all(d_dot.numpy()[0, 2:] > 0)
        expected = angular_lib.ANGULAR_FNS[ang](np.clip([0.5, 0.999], -1 + 1e-6, 1 - 1e-6), k if k else None)
        np.testing.assert_allclose(g.detach().numpy()[0, 2:], keras.ops.convert_to_numpy(expected), rtol=1e-6)


def _numpy_conv_and_energy(x, w, strides, padding, dilation):
    """The convolution and Σ over each window of x², by explicit loops over the zero-padded input."""
    kernel_size = w.shape[:2]
    geo = [conv_geometry.axis_geometry(x.shape[1 + a], kernel_size[a], strides[a], dilation[a], padding)
           for a in (0, 1)]
    padded = np.pad(x.astype(np.float64), [(0, 0), geo[0][:2], geo[1][:2], (0, 0)])
    dot = np.zeros((x.shape[0], geo[0][2], geo[1][2], w.shape[-1]))
    energy = np.zeros((x.shape[0], geo[0][2], geo[1][2], 1))
    for i in range(geo[0][2]):
        for j in range(geo[1][2]):
            for a in range(kernel_size[0]):
                for b in range(kernel_size[1]):
                    pixel = padded[:, i * strides[0] + a * dilation[0], j * strides[1] + b * dilation[1], :]
                    dot[:, i, j, :] += pixel @ w[a, b].astype(np.float64)
                    energy[:, i, j, 0] += np.sum(pixel ** 2, axis=-1)
    return dot, energy


@pytest.mark.parametrize("kernel_size,strides,padding,dilation,hw", GEOMETRIES)
def test_conv_and_patch_energy_match_numpy_and_reference(kernel_size, strides, padding, dilation, hw):
    import torch

    torch_plugin = _plugin()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, *hw, 3)).astype(np.float32)
    w = rng.normal(size=kernel_size + (3, 4)).astype(np.float32)
    expected_dot, expected_energy = _numpy_conv_and_energy(x, w, strides, padding, dilation)

    def run(path):
        xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
        dot, energy = response.conv_and_patch_squared_norm(xt, wt, strides, padding, dilation, True, path)
        loss = torch.sum(torch.sin(dot)) + torch.sum(torch.sqrt(energy + 1.0))
        grads = torch.autograd.grad(loss, [xt, wt])
        return [dot.detach().numpy(), energy.detach().numpy()] + [g.numpy() for g in grads]

    got = run(torch_plugin.TRAINING)
    np.testing.assert_allclose(got[0], expected_dot, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(got[1], expected_energy, rtol=1e-5, atol=1e-4)
    for name, e, g in zip(("dot", "energy", "d_x", "d_w"), run(acceleration.REFERENCE), got):
        np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5 * max(1.0, float(np.max(np.abs(e)))), err_msg=name)


def test_plugin_is_the_torch_backends_accelerator():
    torch_plugin = _plugin()
    assert acceleration.accelerator() is torch_plugin.ACCELERATOR
    assert acceleration.layer_path(True) == torch_plugin.TRAINING
    assert acceleration.layer_path(False) == torch_plugin.INFERENCE
    acceleration.set_acceleration(False)
    try:
        assert acceleration.layer_path(True) == acceleration.REFERENCE
    finally:
        acceleration.set_acceleration(True)


def test_a_call_it_cannot_serve_runs_the_reference_after_one_info_line(caplog):
    """A float64 response is left to the reference, with one INFO line naming why (not one per call)."""
    import torch

    torch_plugin = _plugin()
    torch_plugin._fall_back.reported.clear()
    dot = torch.full((2, 3), 0.3, dtype=torch.float64)
    inv_norm = torch.ones((2, 1), dtype=torch.float64)
    mag = magnitude_lib.get_magnitude("sphere")
    with caplog.at_level(logging.INFO, logger=torch_plugin.__name__):
        for _ in range(3):
            out = torch_plugin.ACCELERATOR.response_from_dot(
                dot, inv_norm, inv_norm, None, magnitude=mag, angular="linear", alpha=1.0, beta=None, radius=None,
                k=None, weighted=None, weight_radius=None, path=torch_plugin.TRAINING)
            assert out is NotImplemented
    lines = [r.getMessage() for r in caplog.records if r.name == torch_plugin.__name__]
    assert len(lines) == 1 and "torch.float64" in lines[0], lines
    reference = response.decoupled_response_from_dot(dot, inv_norm, inv_norm, magnitude="sphere", angular="linear",
                                                     path=torch_plugin.TRAINING)
    np.testing.assert_allclose(reference.numpy(), 1.0 - 2.0 * np.arccos(0.3) / np.pi, rtol=1e-6)  # float32 maths


@pytest.mark.parametrize("layer_fn", [
    lambda: __import__("sphere_tf").layers.SphereConv2D(4, 3, padding="same", angular="linear"),
    lambda: __import__("sphere_tf").layers.SphereConv2D(4, 3, strides=2, padding="same", angular="sigmoid",
                                                        learnable_k=True),
    lambda: __import__("sphere_tf").layers.DecoupledConv2D(4, 3, padding="same", magnitude="tanh",
                                                           angular="cosine"),
], ids=["sphere_linear", "sphere_learnable_sigmoid", "tanh_cosine"])
def test_layer_traces_without_graph_breaks(layer_fn):
    """The hot path of an operator layer is one `torch.compile` graph (no breaks from the plug-in's functions),
    forward and backward, with the plug-in's values."""
    import torch

    layer = layer_fn()
    x = torch.tensor(np.random.default_rng(1).normal(size=(2, 6, 6, 3)).astype(np.float32), requires_grad=True)
    layer(x)  # build outside the trace

    def step(t):
        out = layer.call(t, training=True)
        return torch.sum(out * out)

    explanation = torch._dynamo.explain(step)(x)
    assert explanation.graph_break_count == 0, explanation.break_reasons
    compiled = torch.compile(step, backend="aot_eager", fullgraph=True)
    value = compiled(x)
    (grad,) = torch.autograd.grad(value, [x])
    x_eager = x.detach().clone().requires_grad_(True)
    eager_value = step(x_eager)
    (eager_grad,) = torch.autograd.grad(eager_value, [x_eager])
    np.testing.assert_allclose(value.detach().numpy(), eager_value.detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(grad.numpy(), eager_grad.numpy(), rtol=1e-4, atol=1e-5)


def test_plugin_functions_compile_whole_with_the_eager_values():
    """The plug-in's functions in one `torch.compile(fullgraph=True)` graph (a break would raise), forward and
    backward equal to their eager run."""
    import torch

    torch_plugin = _plugin()
    rng = np.random.default_rng(4)
    x = torch.tensor(rng.normal(size=(2, 6, 6, 3)).astype(np.float32), requires_grad=True)
    w = torch.tensor(rng.normal(size=(3, 3, 3, 4)).astype(np.float32), requires_grad=True)
    k = torch.tensor(np.full((4,), 0.3, np.float32), requires_grad=True)
    inv_radius = torch.tensor(np.full((4,), 0.8, np.float32), requires_grad=True)

    def tails(x, w, k, inv_radius):
        dot = torch_plugin.conv_nhwc(x, w / torch.sqrt(torch.sum(w * w, dim=(0, 1, 2))), 1, "same", 1)
        x_norm = torch.sqrt(torch_plugin.patch_squared_norm(x, (3, 3), 1, "same", 1) + 1e-4)
        inv_norm = 1.0 / x_norm
        linear = torch_plugin.theta_activation(dot, inv_norm, "linear")
        sigmoid = torch_plugin.theta_activation(dot, inv_norm, "sigmoid", k)
        tanh = torch_plugin.TanhCosine.apply(dot, x_norm, inv_norm, inv_radius)
        return torch.sum(torch.sin(linear + 2.0 * sigmoid + 3.0 * tanh))

    sources = [x, w, k, inv_radius]
    eager = torch.autograd.grad(tails(*sources), sources)
    compiled_fn = torch.compile(tails, backend="aot_eager", fullgraph=True)
    value = compiled_fn(*sources)
    compiled = torch.autograd.grad(value, sources)
    np.testing.assert_allclose(value.detach().numpy(), tails(*sources).detach().numpy(), rtol=1e-5)
    for e, c in zip(eager, compiled):
        np.testing.assert_allclose(c.numpy(), e.numpy(), rtol=1e-4, atol=1e-5)
