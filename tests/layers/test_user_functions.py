"""A user's magnitude and angular functions: one function and one registry entry each, then usable by name in
`DecoupledConv2D` / `DecoupledDense` on every path (the `keras.ops` reference, and the backend's accelerator,
which computes them or declines to the reference with no edit of its own), equal to a NumPy reference."""

import numpy as np
import pytest
from keras import ops

from sphere_tf.layers import DecoupledConv2D
from sphere_tf.layers import DecoupledDense
from sphere_tf.ops import acceleration
from sphere_tf.ops import angular as angular_lib
from sphere_tf.ops import magnitude as magnitude_lib

EPSILON = 1e-4  # the layers' default ε inside both norms
K = 1.5


def root_magnitude(x_norm, radius, alpha, beta):
    """h(‖x‖) = α·√‖x‖ (the user's function; no radius, no β)."""
    del radius, beta
    return alpha * ops.sqrt(x_norm)


def tanh_angular(cos_theta, k=K):
    """g(θ) = tanh(k·cos θ) / tanh(k): g(0) = 1, g(π/2) = 0, g(π) = −1."""
    c = ops.cast(cos_theta, "float32")
    return ops.tanh(k * c) / ops.tanh(k)


@pytest.fixture(scope="module", autouse=True)
def user_functions():
    saved = (angular_lib.NEEDS_THETA, angular_lib.USES_K)
    magnitude_lib.register_magnitude("user_root", magnitude_lib.Magnitude(root_magnitude))
    angular_lib.register_angular_fn("user_tanh", tanh_angular, needs_theta=False, uses_k=True)
    yield
    magnitude_lib.MAGNITUDE_FNS.pop("user_root")
    angular_lib.ANGULAR_FNS.pop("user_tanh")
    angular_lib.NEEDS_THETA, angular_lib.USES_K = saved


def _numpy_response(patches, kernel, alpha):
    """f = α·√‖x‖ · tanh(k cos θ)/tanh(k) per patch row (float64); `patches` (..., d), `kernel` (d, units)."""
    x_norm = np.sqrt((patches**2).sum(-1, keepdims=True) + EPSILON)
    w_hat = kernel / np.sqrt((kernel**2).sum(0) + EPSILON)
    cos = (patches @ w_hat) / x_norm
    return alpha * np.sqrt(x_norm) * np.tanh(K * cos) / np.tanh(K)


def _numpy_patches(x, size):
    """Valid, stride-1 `size`×`size` patches of NHWC `x`, flattened in the kernel's (kh, kw, c) order."""
    n, h, w, c = x.shape
    rows = [[x[:, i:i + size, j:j + size, :].reshape(n, -1) for j in range(w - size + 1)]
            for i in range(h - size + 1)]
    return np.stack([np.stack(row, axis=1) for row in rows], axis=1)


# (name, training, acceleration, training fusion): the reference, and the accelerator's inference, plain and
# fused training paths where the backend has them.
PATHS = [("reference", True, False, True), ("reference_inference", False, False, True),
         ("accelerated_inference", False, True, True), ("accelerated_plain", True, True, False),
         ("accelerated_fused", True, True, True)]


@pytest.mark.parametrize("path, training, accelerate, fusion", PATHS, ids=[p[0] for p in PATHS])
@pytest.mark.parametrize("layer_type", ["conv", "dense"])
def test_user_functions_match_numpy_on_every_path(layer_type, path, training, accelerate, fusion):
    rng = np.random.default_rng(0)
    alpha = 1.3
    if layer_type == "conv":
        layer = DecoupledConv2D(4, 3, magnitude="user_root", angular="user_tanh", alpha=alpha, k=K)
        x = rng.normal(size=(2, 5, 6, 3)).astype(np.float32)
    else:
        layer = DecoupledDense(4, magnitude="user_root", angular="user_tanh", alpha=alpha, k=K)
        x = rng.normal(size=(3, 7)).astype(np.float32)
    layer(x[:1])
    kernel = rng.normal(size=layer.kernel.shape).astype(np.float32)
    layer.kernel.assign(kernel)
    patches = _numpy_patches(x, 3) if layer_type == "conv" else x
    expected = _numpy_response(patches.astype(np.float64), kernel.reshape(-1, 4).astype(np.float64), alpha)
    acceleration.set_acceleration(accelerate)
    acceleration.set_training_fusion(fusion)
    try:
        got = ops.convert_to_numpy(layer(x, training=training))
    finally:
        acceleration.set_acceleration(True)
        acceleration.set_training_fusion(True)
    np.testing.assert_allclose(got, expected, rtol=2e-5, atol=2e-5)


def test_user_functions_train_and_round_trip_by_name():
    import keras  # noqa: PLC0415

    layer = DecoupledConv2D(2, 3, magnitude="user_root", angular="user_tanh", learnable_k=True)
    model = keras.Sequential([keras.Input((6, 6, 1)), layer, keras.layers.GlobalAveragePooling2D()])
    model.compile("sgd", "mse")
    x = np.random.default_rng(1).normal(size=(4, 6, 6, 1)).astype(np.float32)
    loss = model.train_on_batch(x, np.zeros((4, 2), np.float32))
    assert np.isfinite(loss)
    config = layer.get_config()
    assert (config["magnitude"], config["angular"]) == ("user_root", "user_tanh")
    again = DecoupledConv2D.from_config(config)
    assert again.magnitude == "user_root" and again.learnable_k


def test_an_unregistered_name_lists_the_registered_ones():
    with pytest.raises(ValueError, match=r"Unknown magnitude function 'user_rot'.*'user_root'"):
        DecoupledDense(2, magnitude="user_rot")
    with pytest.raises(ValueError, match=r"Unknown angular function 'user_tan'.*'user_tanh'"):
        DecoupledDense(2, angular="user_tan")
