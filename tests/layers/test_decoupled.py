"""Tests for SphereConv2D, SphereDense, DecoupledConv2D and DecoupledDense.

The references are `sphere_tf.testing.numpy_decoupled` on explicitly extracted patches
(`sphere_tf.testing.numpy_patches`), written from the papers' formulas in float64, with the
upstream numerics the layers document: ε = 1e-4 inside both square roots, ρ = ρ_raw² + 1e-4,
r = ρ·E{‖x‖} with E the batch mean of the patch norms in training (differentiated, as upstream) and
the zero-debiased moving average at inference, learnable k = |k_raw| + 0.05. Every case runs through
every training-path implementation of this backend (`sphere_tf.testing.training_paths`: the `keras.ops`
reference, and on TensorFlow the plug-in's compiled kernels, XLA clusters and plain ops), each compared
against the same NumPy references.
"""

import itertools

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from keras import ops

from sphere_tf import testing
from sphere_tf.layers import DecoupledConv2D
from sphere_tf.layers import DecoupledDense
from sphere_tf.layers import SphereConv2D
from sphere_tf.layers import SphereDense
from sphere_tf.ops import angular as angular_lib
from sphere_tf.ops import magnitude as magnitude_lib

MAGNITUDES = sorted(magnitude_lib.MAGNITUDE_FNS)
ANGULARS = sorted(angular_lib.ANGULAR_FNS)
COMBOS = list(itertools.product(MAGNITUDES, ANGULARS))
RHO_EPSILON = 1e-4  # upstream: radius ** 2 + 1e-4
K_MIN = 0.05  # upstream learnable sigmoid: |k| + 0.05
RTOL, ATOL = 1e-5, 1e-5

# (kernel_size, strides, padding, dilation_rate, (H, W)); stride 2 'same' on even and odd sizes
# (asymmetric TF padding), dilation 2, 1x1 kernels, asymmetric kernels/strides.
GEOMETRIES = [
    (3, 1, "valid", 1, (6, 5)),
    (3, 1, "same", 1, (5, 6)),
    (3, 2, "same", 1, (6, 6)),
    (3, 2, "same", 1, (7, 5)),
    (2, 2, "valid", 1, (7, 6)),
    (3, 1, "same", 2, (6, 7)),
    (3, 1, "valid", 2, (7, 6)),
    (1, 1, "valid", 1, (4, 3)),
    (1, 2, "same", 1, (5, 4)),
    ((2, 3), (2, 1), "same", 1, (5, 6)),
    (5, 1, "same", 1, (2, 3)),  # kernel larger than the input
    (3, 3, "same", 1, (7, 8)),  # stride 3: padding 1/1 on 7, 0/1 on 8
    (2, 1, "same", 2, (4, 4)),  # even kernel with dilation: asymmetric padding
]


# -- helpers ------------------------------------------------------------------------------


def _is_conv(layer):
    return isinstance(layer, (DecoupledConv2D, SphereConv2D))


def _inputs(rng, shape, zero_corner=True):
    """Random inputs with per-sample scales and a dead (all-zero) region, as after a ReLU."""
    x = rng.normal(size=shape) * rng.uniform(0.2, 3.0, size=(shape[0],) + (1,) * (len(shape) - 1))
    if zero_corner and len(shape) == 4:
        x[0, :2, :2, :] = 0.0
    elif zero_corner:
        x[0] = 0.0
    return x.astype(np.float32)


def _randomise(layer, rng, x):
    """Builds `layer` on `x` and gives every weight a random, non-trivial value."""
    layer(x[:1], training=False)  # build (inference: no moving-average update)
    layer.kernel.assign(rng.normal(size=layer.kernel.shape).astype(np.float32))
    if hasattr(layer, "rho_raw"):
        # Includes negative raw values: ρ = ρ_raw² + 1e-4 stays positive.
        layer.rho_raw.assign(rng.uniform(-1.5, 1.5, size=layer.rho_raw.shape).astype(np.float32))
    if getattr(layer, "learnable_k", False):
        layer.k_raw.assign(rng.uniform(-0.8, 0.8, size=layer.k_raw.shape).astype(np.float32))
    if getattr(layer, "rescale", False):
        layer.rescale_scale.assign(rng.uniform(0.5, 2.0, size=layer.rescale_scale.shape))
        layer.rescale_shift.assign(rng.normal(size=layer.rescale_shift.shape))
    if getattr(layer, "use_bias", False):
        layer.bias.assign(rng.normal(size=layer.bias.shape))


def _reference(layer, x, hp, norm_mean=None):
    """NumPy output of `layer` on `x` from the raw weights and the test's own hyperparameters."""
    if _is_conv(layer):
        patches = testing.numpy_patches(x, hp.get("kernel_size", 3), hp.get("strides", 1),
                                        hp.get("padding", "valid"), hp.get("dilation_rate", 1))
    else:
        patches = x
    mag = hp.get("magnitude", "sphere")
    weighted = hp.get("weighted")
    beta = hp.get("beta", magnitude_lib.MAGNITUDE_FNS[mag].default_beta)
    rho = None
    if magnitude_lib.MAGNITUDE_FNS[mag].has_radius or weighted == "nonlinear_separate":
        rho = layer.rho_raw.numpy().astype(np.float64) ** 2 + RHO_EPSILON
    k = hp.get("k", 0.3)
    if hp.get("learnable_k"):
        k = np.abs(layer.k_raw.numpy().astype(np.float64)) + K_MIN
    out, batch_mean = testing.numpy_decoupled(
        patches, layer.kernel.numpy(), mag, hp.get("angular", "cosine"), alpha=hp.get("alpha", 1.0),
        beta=beta, rho=rho, norm_mean=norm_mean, k=k, weighted=weighted,
        epsilon=hp.get("epsilon", 1e-4),
    )
    if hp.get("rescale"):
        out = out * layer.rescale_scale.numpy() + layer.rescale_shift.numpy()
    if hp.get("use_bias"):
        out = out + layer.bias.numpy()
    return out, batch_mean


def _check_train_then_infer(cls, hp, rng, x_shape, momentum=0.9):
    """Two training calls, then inference with the zero-debiased moving average E{‖x‖}."""
    layer = cls(**hp, **({"norm_momentum": momentum} if cls in (DecoupledConv2D, DecoupledDense)
                         else {}))
    xs = [_inputs(rng, x_shape) for _ in range(3)]
    _randomise(layer, rng, xs[0])
    biased = weight = 0.0
    for x in xs[:2]:
        got = ops.convert_to_numpy(layer(x, training=True))
        expected, batch_mean = _reference(layer, x, hp)
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL, err_msg="training")
        biased = momentum * biased + (1.0 - momentum) * batch_mean
        weight = momentum * weight + (1.0 - momentum)
    got = ops.convert_to_numpy(layer(xs[2], training=False))
    expected, _ = _reference(layer, xs[2], hp, norm_mean=biased / weight)
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL, err_msg="inference")
    return layer


def _grads_finite(grads):
    for g in grads:
        if g is not None:
            assert np.all(np.isfinite(ops.convert_to_numpy(g))), g


# -- correctness vs NumPy ---------------------------------------------------------------------


@pytest.mark.parametrize("mag,ang", COMBOS)
def test_decoupled_conv_matches_numpy(rng, mag, ang, training_path):
    # Cycle the geometry with the combination so that every geometry meets several operators.
    ks, s, pad, d, hw = GEOMETRIES[COMBOS.index((mag, ang)) % len(GEOMETRIES)]
    hp = dict(filters=4, kernel_size=ks, strides=s, padding=pad, dilation_rate=d, magnitude=mag,
              angular=ang, alpha=1.3)
    _check_train_then_infer(DecoupledConv2D, hp, rng, (3, *hw, 2))


@pytest.mark.parametrize("mag,ang", COMBOS)
def test_decoupled_dense_matches_numpy(rng, mag, ang, training_path):
    hp = dict(units=5, magnitude=mag, angular=ang, alpha=0.7)
    _check_train_then_infer(DecoupledDense, hp, rng, (6, 7))


@pytest.mark.parametrize("kernel_size,strides,padding,dilation,hw", GEOMETRIES)
@pytest.mark.parametrize("mag,ang", [("tanh", "cosine"), ("seg", "linear"), ("ball", "sqcosine")])
def test_decoupled_conv_geometries(rng, kernel_size, strides, padding, dilation, hw, mag, ang):
    hp = dict(filters=3, kernel_size=kernel_size, strides=strides, padding=padding,
              dilation_rate=dilation, magnitude=mag, angular=ang)
    _check_train_then_infer(DecoupledConv2D, hp, rng, (2, *hw, 3))


@pytest.mark.parametrize("mag", MAGNITUDES)
@pytest.mark.parametrize("cls", [DecoupledConv2D, DecoupledDense])
def test_linearly_weighted_operators(rng, mag, cls):
    hp = dict(magnitude=mag, angular="cosine", weighted="linear")
    if cls is DecoupledConv2D:
        _check_train_then_infer(cls, dict(filters=3, kernel_size=3, padding="same", **hp), rng,
                                (2, 5, 5, 2))
    else:
        _check_train_then_infer(cls, dict(units=3, **hp), rng, (5, 6))


@pytest.mark.parametrize("weighted", ["nonlinear", "nonlinear_separate"])
@pytest.mark.parametrize("ang", ANGULARS)
@pytest.mark.parametrize("cls", [DecoupledConv2D, DecoupledDense])
def test_nonlinearly_weighted_tanh(rng, weighted, ang, cls):
    hp = dict(magnitude="tanh", angular=ang, weighted=weighted, alpha=1.5)
    if cls is DecoupledConv2D:
        _check_train_then_infer(cls, dict(filters=3, kernel_size=3, strides=2, padding="same", **hp),
                                rng, (2, 6, 6, 2))
    else:
        _check_train_then_infer(cls, dict(units=3, **hp), rng, (5, 6))


@pytest.mark.parametrize("mag", ["tanh", "ball", "linear", "sphere"])
@pytest.mark.parametrize("cls", [DecoupledConv2D, DecoupledDense])
def test_rescale_with_cosine_rides_on_the_kernel_at_inference(rng, mag, cls, training_path):
    # At inference the per-filter scale multiplies ŵ instead of f (exact for cosine g):
    # the NumPy reference applies it to f after the operator, as training does.
    hp = dict(magnitude=mag, angular="cosine", alpha=0.7, rescale=True, use_bias=True)
    if cls is DecoupledConv2D:
        hp.update(filters=4, kernel_size=3, padding="same")
        layer = _check_train_then_infer(cls, hp, rng, (2, 6, 5, 3))
    else:
        hp.update(units=4)
        layer = _check_train_then_infer(cls, hp, rng, (5, 6))
    assert layer.rescale_folds_into_kernel
    assert not cls(4, **({"kernel_size": 3} if cls is DecoupledConv2D else {}),
                   angular="linear").rescale_folds_into_kernel


def test_large_rescale_stays_finite_at_inference_under_float16(rng):
    # cos θ·s with s = 1e4 is representable in float16, but a float16 conv with s·ŵ would reach ‖x‖·1e4.
    layer = SphereConv2D(3, 3, angular="cosine", rescale=True, dtype="mixed_float16")
    x = (100.0 * _inputs(rng, (2, 5, 5, 4), zero_corner=False)).astype(np.float32)
    layer(x[:1], training=False)
    layer.rescale_scale.assign(np.full((3,), 1e4, np.float32))
    got = ops.convert_to_numpy(layer(x, training=False)).astype(np.float64)
    patches = testing.numpy_patches(x, 3, 1, "valid", 1)
    cos, _ = testing.numpy_decoupled(patches, layer.kernel.numpy(), "sphere", "cosine")
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, 1e4 * cos, rtol=2e-3, atol=20.0)


@pytest.mark.parametrize("mag,beta", [("seg", 0.2), ("mix", 2.5)])
def test_explicit_beta(rng, mag, beta):
    hp = dict(filters=3, kernel_size=2, magnitude=mag, angular="cosine", beta=beta, alpha=0.5)
    _check_train_then_infer(DecoupledConv2D, hp, rng, (2, 5, 5, 2))


SPHERE_VARIANTS = [(ang, variant) for ang in ANGULARS for variant in ("plain", "k=0.7", "rescale+bias")]
SPHERE_VARIANTS += [(ang, "learnable_k") for ang in ANGULARS if ang in angular_lib.USES_K]


@pytest.mark.parametrize("ang,variant", SPHERE_VARIANTS)
@pytest.mark.parametrize("cls", [SphereConv2D, SphereDense])
def test_sphere_layers_match_numpy(rng, ang, variant, cls, training_path):
    hp = dict(angular=ang)
    if variant == "k=0.7":
        hp["k"] = 0.7
    elif variant == "learnable_k":
        hp["learnable_k"] = True
    elif variant == "rescale+bias":
        hp.update(rescale=True, use_bias=True)
    if cls is SphereConv2D:
        hp.update(filters=4, kernel_size=3, strides=2, padding="same")
        layer = _check_train_then_infer(cls, hp, rng, (2, 7, 6, 3))
    else:
        hp.update(units=4)
        layer = _check_train_then_infer(cls, hp, rng, (5, 6))
    if not hp.get("rescale"):
        assert np.all(np.abs(ops.convert_to_numpy(layer(_inputs(rng, (2, 7, 6, 3) if cls is SphereConv2D
                                                                    else (5, 6))))) <= 1.0 + 1e-6)


def test_dense_on_rank3_inputs(rng):
    hp = dict(units=3, magnitude="tanh", angular="linear")
    _check_train_then_infer(DecoupledDense, hp, rng, (2, 4, 5))


def test_learnable_k_initialised_per_filter_to_half(rng):
    layer = SphereConv2D(5, 3, angular="sigmoid", learnable_k=True)
    layer(_inputs(rng, (1, 4, 4, 2)))
    np.testing.assert_allclose(ops.convert_to_numpy(layer.effective_k()), [0.5] * 5, rtol=1e-6)
    layer = DecoupledDense(4, magnitude="ball")
    layer(_inputs(rng, (2, 3)))
    np.testing.assert_allclose(ops.convert_to_numpy(layer.effective_rho()), 1.0 + RHO_EPSILON,
                               rtol=1e-6)
    assert layer.norm_momentum == 0.999  # upstream EMA momentum


def test_moving_average_before_training_is_one(rng):
    layer = DecoupledDense(3, magnitude="tanh", angular="cosine")
    x = _inputs(rng, (4, 5))
    got = ops.convert_to_numpy(layer(x, training=False))
    expected, _ = _reference(layer, x, dict(magnitude="tanh"), norm_mean=1.0)
    np.testing.assert_allclose(got, expected, rtol=RTOL, atol=ATOL)
    assert float(layer.norm_mean()) == 1.0


# -- gradients vs finite differences of the NumPy reference -------------------------------------


# (magnitude, angular, weighted, learnable_k, alpha): every angular function with a fixed and (where
# it has one) a learnable k, each weighting, constant h (sphere, α = 1 and α ≠ 1), and the
# LinearConv + cosine case in which the patch norms cancel.
GRADIENT_CASES = [("tanh", a, None, False, 1.0) for a in ANGULARS] + [
    ("tanh", "sigmoid", None, True, 1.0), ("ball", "linear", None, False, 1.0),
    ("seg", "sigmoid", None, True, 0.8), ("log", "sqcosine", None, False, 1.0),
    ("sphere", "sigmoid", None, False, 1.0), ("sphere", "linear", None, False, 1.7),
    ("sphere", "cosine", None, False, 1.0), ("linear", "cosine", None, False, 1.3),
    ("linear", "cosine", "linear", False, 1.0), ("mix", "linear", "linear", False, 1.0),
    ("tanh", "cosine", "nonlinear", False, 1.0), ("tanh", "sqcosine", "nonlinear_separate", False, 1.0),
]


@pytest.mark.parametrize("mag,ang,weighted,learnable_k,alpha", GRADIENT_CASES)
@pytest.mark.parametrize("conv", [True, False])
def test_gradients_match_finite_differences_of_numpy_reference(rng, mag, ang, weighted, learnable_k,
                                                              alpha, conv, training_path):
    """Gradients wrt inputs, kernel, ρ_raw and k_raw (a custom or fused gradient must agree).

    The batch mean E{‖x‖} of the radius is recomputed inside the differentiated NumPy function, so
    the input gradient includes its term (the authors' graph differentiates it too).
    """
    hp = dict(magnitude=mag, angular=ang, weighted=weighted, learnable_k=learnable_k, alpha=alpha)
    if conv:
        hp.update(kernel_size=2, strides=2, padding="same")
        layer, x = DecoupledConv2D(2, **{k: v for k, v in hp.items()}), _inputs(rng, (2, 3, 3, 2))
    else:
        layer, x = DecoupledDense(2, **hp), _inputs(rng, (3, 4))
    _randomise(layer, rng, x)
    if hasattr(layer, "rho_raw"):
        layer.rho_raw.assign(rng.uniform(0.6, 1.4, size=layer.rho_raw.shape).astype(np.float32))
    if hp["learnable_k"]:
        layer.k_raw.assign(rng.uniform(0.2, 0.8, size=layer.k_raw.shape).astype(np.float32))
    y0 = layer(x, training=True)
    weights = rng.normal(size=y0.shape)
    params = {"x": x, "kernel": layer.kernel.numpy()}
    if hasattr(layer, "rho_raw"):
        params["rho_raw"] = layer.rho_raw.numpy()
    if hp["learnable_k"]:
        params["k_raw"] = layer.k_raw.numpy()
    base_patches = testing.numpy_patches(x, 2, 2, "same", 1) if conv else x

    def loss_np(name, value):
        p = {k: np.asarray(v, np.float64) for k, v in params.items()}
        p[name] = value
        patches = base_patches
        if name == "x":
            patches = testing.numpy_patches(value, 2, 2, "same", 1) if conv else value
        rho = p["rho_raw"] ** 2 + RHO_EPSILON if "rho_raw" in p else None
        k = np.abs(p["k_raw"]) + K_MIN if "k_raw" in p else 0.3
        out, _ = testing.numpy_decoupled(
            patches, p["kernel"], mag, ang, alpha=alpha,
            beta=magnitude_lib.MAGNITUDE_FNS[mag].default_beta, rho=rho, norm_mean=None, k=k,
            weighted=weighted)
        return float(np.sum(out * weights))

    variables = {"kernel": layer.kernel, "rho_raw": getattr(layer, "rho_raw", None),
                 "k_raw": getattr(layer, "k_raw", None)}
    names = [n for n in params if n != "x"]
    _, (x_grad,), var_grads = testing.gradients(
        lambda xt: ops.sum(ops.multiply(layer(xt, training=True), weights.astype(np.float32))), [x],
        [variables[n] for n in names], state=layer.non_trainable_variables)
    grads = dict(zip(names, var_grads), x=x_grad)
    for name in params:
        grad = grads[name]
        # A small step: c·|c| (square cosine) at the all-zero sample has a second-order kink
        # whose central difference is off by O(step / sqrt(ε)).
        expected = testing.numeric_gradient(lambda v, n=name: loss_np(n, v), params[name], step=1e-7)
        np.testing.assert_allclose(grad, expected, rtol=2e-4,
                                   atol=2e-4 * np.max(np.abs(expected)) + 1e-6, err_msg=name)


@pytest.mark.tensorflow_only  # JAX and PyTorch trace with concrete shapes
@pytest.mark.parametrize("kernel_size,strides,padding,dilation,hw", GEOMETRIES[:6])
def test_unknown_spatial_size_matches_numpy(rng, kernel_size, strides, padding, dilation, hw):
    """Traced with unknown H, W (e.g. `keras.Input((None, None, C))`), the layer is still exact."""
    import tensorflow as tf

    hp = dict(filters=3, kernel_size=kernel_size, strides=strides, padding=padding,
              dilation_rate=dilation, magnitude="tanh", angular="linear")
    layer = DecoupledConv2D(**hp)
    x = _inputs(rng, (2, *hw, 2))
    _randomise(layer, rng, x)
    traced = tf.function(lambda inp: layer(inp, training=True),
                         input_signature=[tf.TensorSpec((None, None, None, 2), tf.float32)])
    expected, _ = _reference(layer, x, hp)
    np.testing.assert_allclose(traced(x).numpy(), expected, rtol=RTOL, atol=ATOL)


# -- geometry ---------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel_size", [1, 2, 3, (3, 2)])
@pytest.mark.parametrize("strides,dilation", [(1, 1), (2, 1), (3, 1), ((1, 2), 1), (1, 2)])
@pytest.mark.parametrize("padding", ["valid", "same"])
@pytest.mark.parametrize("size", [(7, 8), (9, 9)])
def test_output_shape_equals_conv2d(kernel_size, strides, dilation, padding, size):
    x = np.zeros((1, *size, 2), np.float32)
    conv = keras.layers.Conv2D(3, kernel_size, strides=strides, padding=padding,
                               dilation_rate=dilation)
    expected = tuple(conv(x).shape)
    for cls in (DecoupledConv2D, SphereConv2D):
        layer = cls(3, kernel_size, strides=strides, padding=padding, dilation_rate=dilation)
        assert tuple(layer(x).shape) == expected
        assert tuple(layer.compute_output_shape((1, *size, 2))) == expected
        assert tuple(layer.compute_output_shape((None, None, None, 2))) == (None, None, None, 3)


# -- invariances and special cases -------------------------------------------------------------


@pytest.mark.parametrize("ang", ANGULARS)
def test_sphere_conv_invariant_to_positive_scaling(rng, ang):
    # ε = 0 makes the invariance exact (with ε the norms carry a tiny ε/‖x‖² error).
    layer = SphereConv2D(4, 3, padding="valid", angular=ang, epsilon=0.0)
    x = _inputs(rng, (2, 6, 6, 3), zero_corner=False)
    _randomise(layer, rng, x)
    base = ops.convert_to_numpy(layer(x))
    kernel = layer.kernel.numpy()
    for scale in (1e-3, 0.37, 25.0, 1e3):
        np.testing.assert_allclose(ops.convert_to_numpy(layer(x * scale)), base, rtol=1e-5,
                                   atol=1e-5, err_msg=f"input x{scale}")
        layer.kernel.assign(kernel * scale)
        np.testing.assert_allclose(ops.convert_to_numpy(layer(x)), base, rtol=1e-5, atol=1e-5,
                                   err_msg=f"kernel x{scale}")
        layer.kernel.assign(kernel)


@pytest.mark.parametrize("kernel_size,strides,padding,dilation,hw", GEOMETRIES)
def test_linearly_weighted_linear_cosine_is_plain_conv(rng, kernel_size, strides, padding, dilation,
                                                      hw):
    x = _inputs(rng, (2, *hw, 3), zero_corner=False)
    conv = keras.layers.Conv2D(4, kernel_size, strides=strides, padding=padding,
                               dilation_rate=dilation, use_bias=True, bias_initializer="random_normal")
    layer = DecoupledConv2D(4, kernel_size, strides=strides, padding=padding, dilation_rate=dilation,
                            magnitude="linear", angular="cosine", weighted="linear", epsilon=0.0,
                            use_bias=True)
    expected = ops.convert_to_numpy(conv(x))
    layer(x)
    layer.kernel.assign(conv.kernel)
    layer.bias.assign(conv.bias)
    np.testing.assert_allclose(ops.convert_to_numpy(layer(x, training=True)), expected, rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(ops.convert_to_numpy(layer(x, training=False)), expected, rtol=1e-5,
                               atol=1e-5)


def test_linearly_weighted_linear_cosine_dense_is_plain_dense(rng):
    x = _inputs(rng, (4, 6), zero_corner=False)
    dense = keras.layers.Dense(3, use_bias=False)
    expected = ops.convert_to_numpy(dense(x))
    layer = DecoupledDense(3, magnitude="linear", angular="cosine", weighted="linear", epsilon=0.0)
    layer(x)
    layer.kernel.assign(dense.kernel)
    np.testing.assert_allclose(ops.convert_to_numpy(layer(x)), expected, rtol=1e-5, atol=1e-5)


def test_standard_operators_ignore_kernel_norm(rng):
    layer = DecoupledConv2D(3, 3, magnitude="tanh", angular="linear")
    assert layer.supports_weight_projection
    assert not DecoupledConv2D(3, 3, weighted="linear").supports_weight_projection
    x = _inputs(rng, (2, 5, 5, 2))
    _randomise(layer, rng, x)
    base = ops.convert_to_numpy(layer(x))
    kernel = layer.kernel.numpy()
    layer.kernel.assign(kernel * 40.0)  # ε inside ‖w‖ is negligible at this scale
    np.testing.assert_allclose(ops.convert_to_numpy(layer(x)), base, rtol=1e-4, atol=1e-5)


# -- degenerate inputs (hypothesis) ---------------------------------------------------------------

SCALES = [0.0, 1e-8, 1e-3, 1.0, 1e3, 1e6]


@st.composite
def _operator_case(draw):
    mag = draw(st.sampled_from(MAGNITUDES))
    ang = draw(st.sampled_from(ANGULARS))
    weighted = draw(st.sampled_from([None, "linear"] + (["nonlinear", "nonlinear_separate"]
                                                        if mag == "tanh" else [])))
    return dict(
        conv=draw(st.booleans()), magnitude=mag, angular=ang, weighted=weighted,
        learnable_k=ang in angular_lib.USES_K and draw(st.booleans()),
        pattern=draw(st.sampled_from(["random", "parallel", "antiparallel", "zero_input",
                                      "zero_kernel"])),
        x_scale=draw(st.sampled_from(SCALES)), w_scale=draw(st.sampled_from(SCALES[1:])),
        sphere=draw(st.booleans()), seed=draw(st.integers(0, 2**16)),
        # Each training-path implementation of this backend.
        path=draw(st.sampled_from(testing.training_paths())),
    )


@given(_operator_case())
def test_outputs_and_gradients_finite_for_degenerate_inputs(case):
    _check_degenerate_case(case)


@given(_operator_case(), st.sampled_from(["mixed_float16", "mixed_bfloat16"]))
def test_low_precision_outputs_and_gradients_finite_for_degenerate_inputs(case, policy):
    # float16 holds inputs up to 65504: cap the input scale at 1e3 (Σx² over a patch still
    # overflows float16, so this also checks that the norms are computed in float32).
    case = dict(case, x_scale=min(case["x_scale"], 1e3))
    keras.mixed_precision.set_global_policy(policy)
    try:
        _check_degenerate_case(case)
    finally:
        keras.mixed_precision.set_global_policy("float32")


def _check_degenerate_case(case):
    with testing.training_path(case["path"]):
        _check_degenerate_case_on_path(case)


def _check_degenerate_case_on_path(case):
    rng = np.random.default_rng(case["seed"])
    kwargs = dict(angular=case["angular"], learnable_k=case["learnable_k"])
    if case["sphere"]:
        layer = SphereConv2D(3, 2, **kwargs) if case["conv"] else SphereDense(3, **kwargs)
    else:
        kwargs.update(magnitude=case["magnitude"], weighted=case["weighted"])
        layer = DecoupledConv2D(3, 2, **kwargs) if case["conv"] else DecoupledDense(3, **kwargs)
    shape = (2, 2, 2, 3) if case["conv"] else (2, 12)  # one conv patch per sample
    layer(np.zeros(shape, np.float32), training=False)
    kernel = rng.normal(size=layer.kernel.shape) * case["w_scale"]
    if case["pattern"] == "zero_kernel":
        kernel[...] = 0.0
    layer.kernel.assign(kernel.astype(np.float32))
    x = rng.normal(size=shape) * case["x_scale"]
    if case["pattern"] in ("parallel", "antiparallel"):
        # Sample 0 is ±(a multiple of) filter 0, sample 1 the opposite direction.
        sign = 1.0 if case["pattern"] == "parallel" else -1.0
        direction = kernel[..., 0] / (np.abs(kernel[..., 0]).max() + 1e-30)
        x[0] = sign * case["x_scale"] * direction.reshape(shape[1:])
        x[1] = -x[0]
    elif case["pattern"] == "zero_input":
        x[...] = 0.0
    x = x.astype(np.float32)
    variables = [v for v in layer.trainable_variables]
    for training in (True, False):
        y = layer(x, training=training)
        assert keras.backend.standardize_dtype(y.dtype) == layer.compute_dtype
        assert np.all(np.isfinite(ops.convert_to_numpy(ops.cast(y, "float32")))), case
        upstream = rng.normal(size=y.shape).astype(np.float32)
        _, x_grads, var_grads = testing.gradients(
            lambda xt, t=training: ops.sum(ops.multiply(ops.cast(layer(xt, training=t), "float32"), upstream)), [x],
            variables, state=layer.non_trainable_variables)
        _grads_finite(x_grads + var_grads)
    if case["pattern"] == "parallel" and case["x_scale"] >= 1.0 and case["w_scale"] >= 1.0:
        # cos θ = 1 for sample 0 / filter 0 (up to ε): g ≈ 1 for every angular function.
        cos_out = SphereDense(3, angular="cosine") if not case["conv"] else SphereConv2D(3, 2)
        cos_out(x)
        cos_out.kernel.assign(layer.kernel)
        got = ops.convert_to_numpy(ops.cast(cos_out(x), "float32")).reshape(2, 3)[:, 0]
        np.testing.assert_allclose(got, [1.0, -1.0], atol=1e-3 if layer.compute_dtype == "float32"
                                   else 2e-2)


# -- mixed precision ------------------------------------------------------------------------------


@pytest.mark.parametrize("policy,tol", [("mixed_float16", 5e-3), ("mixed_bfloat16", 4e-2)])
@pytest.mark.parametrize("cls,mag,ang", [
    (DecoupledConv2D, m, a) for m, a in itertools.product(MAGNITUDES, ["cosine"])
] + [(SphereConv2D, None, a) for a in ANGULARS] + [
    (DecoupledDense, "tanh", "sqcosine"), (SphereDense, None, "sigmoid"),
    (DecoupledConv2D, "linear", "linear"),
])
def test_mixed_precision_close_to_float32(rng, policy, tol, cls, mag, ang):
    conv = cls in (DecoupledConv2D, SphereConv2D)
    hp = dict(angular=ang, **({"magnitude": mag} if mag else {}))
    args = (4, 3) if conv else (4,)
    if conv:
        hp.update(padding="same")
    # Elements of ~100: a 3x3x2 window has Σx² ≈ 1.8e5 > float16's max 65504, so norms computed in
    # float16 would overflow.
    x = (_inputs(rng, (2, 5, 5, 2) if conv else (4, 18)) * 40.0).astype(np.float32)
    ref_layer = cls(*args, **hp)
    _randomise(ref_layer, rng, x)
    expected_train = ops.convert_to_numpy(ref_layer(x, training=True))
    expected_infer = ops.convert_to_numpy(ref_layer(x, training=False))
    keras.mixed_precision.set_global_policy(policy)
    layer = cls(*args, **hp)
    layer(x[:1], training=False)
    for v in layer.weights:
        assert v.dtype == "float32", v.name  # variables stay float32
    layer.set_weights(ref_layer.get_weights())
    compute_dtype = policy.split("_")[1]
    for training, expected in ((True, expected_train), (False, expected_infer)):
        y = layer(x, training=training)
        assert keras.backend.standardize_dtype(y.dtype) == compute_dtype
        y = ops.convert_to_numpy(ops.cast(y, "float32"))
        assert np.all(np.isfinite(y))
        scale = np.max(np.abs(expected))
        np.testing.assert_allclose(y, expected, rtol=tol, atol=tol * scale)
    # Gradients in low precision are finite too.
    _, x_grads, var_grads = testing.gradients(
        lambda xt: ops.sum(ops.cast(layer(xt, training=True), "float32")), [x], layer.trainable_variables,
        state=layer.non_trainable_variables)
    _grads_finite(x_grads + var_grads)


# -- learnable parameters -------------------------------------------------------------------------


def test_learnable_k_and_rho_get_gradients_and_stay_positive(rng):
    x = np.abs(_inputs(rng, (4, 5, 5, 2), zero_corner=False))
    sphere = SphereConv2D(3, 3, angular="sigmoid", learnable_k=True)
    tanh = DecoupledConv2D(3, 3, magnitude="tanh", angular="sigmoid", learnable_k=True)
    ball = DecoupledDense(3, magnitude="ball", angular="cosine")
    xd = x.reshape(4, -1)
    for layer, inp in ((sphere, x), (tanh, x), (ball, xd)):
        layer(inp)
        # Kernels in the positive orthant: every cos θ > 0, so the losses below push k (sharper
        # sigmoid) and ρ (larger tanh / ball output) towards zero and beyond.
        layer.kernel.assign(np.abs(layer.kernel.numpy()))
    optimizer = keras.optimizers.SGD(learning_rate=10.0)
    learnables = [sphere.k_raw, tanh.k_raw, tanh.rho_raw, ball.rho_raw]
    for _ in range(5):
        _, _, grads = testing.gradients(
            lambda: -(ops.sum(sphere(x, training=True)) + ops.sum(tanh(x, training=True))
                      + ops.sum(ball(xd, training=True))), [], learnables,
            state=tanh.non_trainable_variables + ball.non_trainable_variables)
        for v, g in zip(learnables, grads):
            assert np.all(np.isfinite(g)) and np.any(g != 0.0), v.name
        optimizer.apply_gradients(zip([ops.convert_to_tensor(g) for g in grads], learnables))
    # The raw variables were pushed through zero, the effective values stay positive.
    assert np.any(sphere.k_raw.numpy() < 0.0) or np.any(tanh.k_raw.numpy() < 0.0)
    for k in (sphere.effective_k(), tanh.effective_k()):
        assert np.all(ops.convert_to_numpy(k) >= K_MIN)
    for rho in (tanh.effective_rho(), ball.effective_rho()):
        assert np.all(ops.convert_to_numpy(rho) >= RHO_EPSILON)
    for layer, inp in ((sphere, x), (tanh, x), (ball, xd)):
        for training in (True, False):
            assert np.all(np.isfinite(ops.convert_to_numpy(layer(inp, training=training))))


def test_fixed_rho_is_not_trainable(rng):
    layer = DecoupledConv2D(3, 3, magnitude="tanh", learnable_rho=False, rho=2.0)
    layer(_inputs(rng, (1, 4, 4, 2)))
    assert all(v is not layer.rho_raw for v in layer.trainable_variables)
    assert any(v is layer.rho_raw for v in layer.non_trainable_variables)
    np.testing.assert_allclose(ops.convert_to_numpy(layer.effective_rho()), 2.0 + RHO_EPSILON,
                               rtol=1e-6)


# -- the E{‖x‖} moving average -------------------------------------------------------------------


def _upstream_moving_average(batch_means, decay):
    """`tf.train.ExponentialMovingAverage(decay).apply([batch_mean])` of a tensor (wy1iu/DCNets
    `architecture.py`), transcribed: the shadow starts at 0 and `zero_debias` is off (its default),
    ``shadow -= (1 − decay)·(shadow − value)`` per training step."""
    shadow, history = 0.0, []
    for value in batch_means:
        shadow -= (1.0 - decay) * (shadow - value)
        history.append(shadow)
    return history


def _debiased_moving_average(batch_means, decay):
    """The same average divided by its weight 1 − decay^t (1.0 before any step)."""
    return [m / (1.0 - decay ** (t + 1)) for t, m in enumerate(_upstream_moving_average(batch_means, decay))]


@pytest.mark.parametrize("zero_debias", [True, False], ids=["debiased", "upstream"])
@pytest.mark.parametrize("cls", [DecoupledConv2D, DecoupledDense])
def test_moving_average_recurrence(rng, cls, zero_debias):
    momentum = 0.8
    if cls is DecoupledConv2D:
        layer = cls(3, 3, strides=2, padding="same", magnitude="seg", norm_momentum=momentum,
                    zero_debias=zero_debias)
        shape, patches = (2, 6, 5, 2), lambda x: testing.numpy_patches(x, 3, 2, "same", 1)
    else:
        layer = cls(3, magnitude="ball", norm_momentum=momentum, zero_debias=zero_debias)
        shape, patches = (5, 4), lambda x: x
    layer(_inputs(rng, shape), training=False)
    assert float(layer.norm_mean()) == (1.0 if zero_debias else 0.0)
    average = _debiased_moving_average if zero_debias else _upstream_moving_average
    batch_means = []
    for step in range(4):
        x = _inputs(rng, shape) * (step + 1.0)
        batch_means.append(np.mean(np.sqrt(np.sum(patches(x).astype(np.float64) ** 2, -1) + 1e-4)))
        layer(x, training=True)
        np.testing.assert_allclose(float(layer.norm_mean()), average(batch_means, momentum)[-1], rtol=1e-5)
        # Inference calls (and calls without `training`) leave it alone.
        before = (layer.norm_mean_biased.numpy(), layer.norm_mean_weight.numpy())
        layer(x * 3.0, training=False)
        layer(x * 5.0)
        assert (layer.norm_mean_biased.numpy(), layer.norm_mean_weight.numpy()) == before
    # After one step the debiased average is exactly the first batch mean (no bias towards 0).
    fresh = cls(3, 3, magnitude="tanh") if cls is DecoupledConv2D else cls(3, magnitude="tanh")
    x = _inputs(rng, (2, 5, 5, 2) if cls is DecoupledConv2D else (5, 4))
    fresh(x, training=True)
    p = testing.numpy_patches(x, 3, 1, "valid", 1) if cls is DecoupledConv2D else x
    np.testing.assert_allclose(float(fresh.norm_mean()),
                               np.mean(np.sqrt(np.sum(p**2, -1) + 1e-4)), rtol=1e-5)


def test_operators_without_radius_have_no_moving_average(rng):
    for mag in ("sphere", "linear", "log", "mix"):
        layer = DecoupledDense(2, magnitude=mag)
        layer(_inputs(rng, (2, 3)))
        assert not hasattr(layer, "norm_mean_biased") and layer.effective_rho() is None
        assert len(layer.non_trainable_weights) == 0


# -- Keras citizenship ----------------------------------------------------------------------------

LAYER_FACTORIES = {
    "decoupled_conv": lambda: DecoupledConv2D(4, 3, strides=2, padding="same", magnitude="tanh",
                                              angular="sigmoid", learnable_k=True, use_bias=True),
    "decoupled_conv_weighted": lambda: DecoupledConv2D(4, 2, dilation_rate=2, magnitude="tanh",
                                                       weighted="nonlinear_separate"),
    "sphere_conv": lambda: SphereConv2D(4, 3, padding="same", angular="linear", rescale=True),
    "decoupled_dense": lambda: DecoupledDense(4, magnitude="seg", angular="sqcosine", beta=0.3),
    "sphere_dense": lambda: SphereDense(4, angular="sigmoid", learnable_k=True, use_bias=True),
}


SAVED_MODEL_CASES = ("decoupled_conv", "sphere_conv", "decoupled_dense")


def _fit_two_steps(model, x):
    y = np.random.default_rng(1).normal(size=model(x[:2]).shape[1:])[None].repeat(x.shape[0], 0)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), loss="mse")
    history = model.fit(x, y.astype(np.float32), batch_size=x.shape[0] // 2, epochs=1, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))


@pytest.mark.parametrize("name", sorted(LAYER_FACTORIES))
def test_config_roundtrip(name):
    layer = LAYER_FACTORIES[name]()
    rebuilt = testing.assert_config_roundtrip(layer)
    config = layer.get_config()
    if isinstance(layer, (SphereConv2D, SphereDense)):
        assert "magnitude" not in config and "rho" not in config
    for key in ("angular", "k", "learnable_k", "epsilon", "use_bias", "rescale"):
        assert config[key] == getattr(rebuilt, key)


@pytest.mark.parametrize("name", sorted(LAYER_FACTORIES))
def test_sequential_fit_and_save_roundtrips(rng, tmp_path, name):
    dense = "dense" in name
    x = _inputs(rng, (8, 6) if dense else (8, 6, 6, 2))
    model = keras.Sequential()
    model.add(keras.Input(x.shape[1:]))
    model.add(LAYER_FACTORIES[name]())
    _fit_two_steps(model, x)
    layer = model.layers[0]
    if hasattr(layer, "norm_mean_weight"):
        assert float(layer.norm_mean_weight.numpy()) > 0.0  # moving average is non-trivial
    testing.assert_keras_roundtrip(model, x, tmp_path / "keras", rtol=1e-6, atol=1e-6)
    # SavedModel export is the TensorFlow backend's (sphere_tf.export reloads other backends' .keras files under
    # TensorFlow); export is slow, so the functional/subclassed tests cover the other layers.
    if name in SAVED_MODEL_CASES and keras.backend.backend() == "tensorflow":
        testing.assert_saved_model_roundtrip(model, x, tmp_path / "sm", rtol=1e-6, atol=1e-6)


def test_functional_model_fit_and_roundtrips(rng, tmp_path):
    inputs = keras.Input((6, 6, 2))
    h = DecoupledConv2D(4, 3, padding="same", magnitude="ball", angular="linear")(inputs)
    h = SphereConv2D(4, 1, angular="sqcosine")(h)
    h = keras.layers.Flatten()(h)
    outputs = DecoupledDense(3, magnitude="tanh", weighted="nonlinear")(h)
    model = keras.Model(inputs, outputs)
    x = _inputs(rng, (8, 6, 6, 2))
    _fit_two_steps(model, x)
    testing.assert_keras_roundtrip(model, x, tmp_path)
    if keras.backend.backend() == "tensorflow":  # SavedModel export is the TensorFlow backend's
        testing.assert_saved_model_roundtrip(model, x, tmp_path)


class SubclassedNet(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.conv = DecoupledConv2D(4, 3, magnitude="tanh", angular="cosine")
        self.pool = keras.layers.GlobalAveragePooling2D()
        self.head = SphereDense(3, angular="linear")

    def call(self, inputs, training=None):
        return self.head(self.pool(self.conv(inputs, training=training)), training=training)


def test_subclassed_model_fit_and_saved_model(rng, tmp_path):
    model = SubclassedNet()
    x = _inputs(rng, (8, 6, 6, 2))
    model(x[:1])
    _fit_two_steps(model, x)
    assert float(model.conv.norm_mean_weight.numpy()) > 0.0
    if keras.backend.backend() == "tensorflow":  # SavedModel export is the TensorFlow backend's
        testing.assert_saved_model_roundtrip(model, x, tmp_path)


# -- eager vs XLA -------------------------------------------------------------------------------


# -- bad arguments ---------------------------------------------------------------------------------

BAD_ARGS = [
    (DecoupledConv2D, dict(filters=2, kernel_size=3, magnitude="tanhh"), "tanhh"),
    (DecoupledConv2D, dict(filters=2, kernel_size=3, angular="cos"), "cos"),
    (SphereConv2D, dict(filters=2, kernel_size=3, angular="arc"), "arc"),
    (SphereConv2D, dict(filters=2, kernel_size=3, angular="sigmoid", k=0.0), "`k`"),
    (SphereDense, dict(units=2, angular="sigmoid", k=-1.0), "`k`"),
    (DecoupledConv2D, dict(filters=2, kernel_size=3, rho=0.0), "`rho`"),
    (DecoupledDense, dict(units=2, rho=-2.0), "`rho`"),
    (DecoupledConv2D, dict(filters=2, kernel_size=3, alpha=0.0), "`alpha`"),
    (DecoupledDense, dict(units=2, alpha=-1.0), "`alpha`"),
    (DecoupledConv2D, dict(filters=2, kernel_size=3, magnitude="tanh", beta=0.5), "`beta`"),
    (DecoupledConv2D, dict(filters=2, kernel_size=3, magnitude="seg", beta=-0.5), "`beta`"),
    (DecoupledConv2D, dict(filters=2, kernel_size=3, magnitude="ball", weighted="nonlinear"),
     "`weighted`"),
    (DecoupledDense, dict(units=2, magnitude="linear", weighted="nonlinear_separate"), "`weighted`"),
    (DecoupledDense, dict(units=2, weighted="quadratic"), "`weighted`"),
    (SphereConv2D, dict(filters=2, kernel_size=3, angular="cosine", learnable_k=True),
     "`learnable_k`"),
    (DecoupledConv2D, dict(filters=2, kernel_size=3, angular="linear", learnable_k=True),
     "`learnable_k`"),
    (SphereConv2D, dict(filters=2, kernel_size=3, angular="sigmoid", learnable_k=True,
                        learnable_k_init=0.01), "`learnable_k_init`"),
    (DecoupledConv2D, dict(filters=2, kernel_size=3, padding="causal"), "`padding`"),
    (SphereConv2D, dict(filters=2, kernel_size=3, padding=1), "`padding`"),
    (DecoupledConv2D, dict(filters=2, kernel_size=3, strides=0), "`strides`"),
    (SphereConv2D, dict(filters=2, kernel_size=3, strides=(1, 2, 3)), "`strides`"),
    (DecoupledConv2D, dict(filters=2, kernel_size=0), "`kernel_size`"),
    (SphereConv2D, dict(filters=2, kernel_size=(3, -1)), "`kernel_size`"),
    (DecoupledConv2D, dict(filters=0, kernel_size=3), "`filters`"),
    (SphereConv2D, dict(filters=2.5, kernel_size=3), "`filters`"),
    (DecoupledDense, dict(units=0), "`units`"),
    (SphereConv2D, dict(filters=2, kernel_size=3, dilation_rate=0), "`dilation_rate`"),
    (DecoupledConv2D, dict(filters=2, kernel_size=3, strides=2, dilation_rate=2), "strides"),
    (DecoupledConv2D, dict(filters=2, kernel_size=3, epsilon=-1e-4), "`epsilon`"),
    (DecoupledConv2D, dict(filters=2, kernel_size=3, norm_momentum=1.0), "`norm_momentum`"),
]


@pytest.mark.parametrize("cls,kwargs,fragment", BAD_ARGS,
                         ids=[f"{c.__name__}-{'-'.join(map(str, k.items()))}" for c, k, _ in BAD_ARGS])
def test_bad_arguments_raise_value_error_naming_the_argument(cls, kwargs, fragment):
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(")):
        cls(**kwargs)


@pytest.mark.parametrize("cls,args", [(SphereConv2D, (2, 3)), (SphereDense, (2,))])
@pytest.mark.parametrize("key,value", [("magnitude", "tanh"), ("rho", 2.0), ("weighted", "linear"),
                                       ("zero_debias", False)])
def test_sphere_layers_reject_decoupled_only_arguments(cls, args, key, value):
    decoupled = cls.__name__.replace("Sphere", "Decoupled")
    with pytest.raises(ValueError, match=f"`{key}`.*SphereConv has no magnitude.*{decoupled}"):
        cls(*args, **{key: value})


def test_float_kernel_size_raises_value_error():
    with pytest.raises(ValueError, match="`kernel_size`"):
        DecoupledConv2D(2, 3.0)


def test_numpy_scalar_arguments_are_accepted_and_stored_as_python_numbers(tmp_path):
    layer = DecoupledConv2D(np.int64(3), np.int32(3), strides=(np.int64(1), 1), magnitude="seg",
                            angular="sigmoid", k=np.float32(0.3), rho=np.float64(2.0),
                            beta=np.float32(0.25), alpha=np.float32(1.5), epsilon=np.float32(1e-4))
    config = layer.get_config()
    for key in ("filters", "kernel_size", "strides", "k", "rho", "beta", "alpha", "epsilon"):
        values = config[key] if isinstance(config[key], tuple) else (config[key],)
        assert all(type(v) in (int, float) for v in values), (key, config[key])
    testing.assert_config_roundtrip(layer)


@pytest.mark.parametrize("factory", [
    lambda: DecoupledConv2D(2, 3, padding="same", magnitude="linear", angular="cosine",
                            weighted="linear", epsilon=0.0),
    lambda: SphereConv2D(2, 3, padding="same", angular="linear", epsilon=0.0),
    lambda: DecoupledDense(2, magnitude="tanh", angular="sigmoid", epsilon=0.0),
])
def test_zero_epsilon_stays_finite_for_zero_patches_and_kernels(factory):
    layer = factory()
    dense = isinstance(layer, DecoupledDense)
    x = np.zeros((2, 4) if dense else (1, 4, 4, 2), np.float32)
    layer(x)
    for kernel in (np.ones(layer.kernel.shape), np.zeros(layer.kernel.shape)):
        layer.kernel.assign(kernel.astype(np.float32))
        y = ops.convert_to_numpy(layer(x, training=True))
        assert np.all(np.isfinite(y))
        np.testing.assert_allclose(y, 0.0, atol=1e-6)  # cos θ = 0 → g(π/2) = 0
        _, x_grads, var_grads = testing.gradients(
            lambda xt: ops.sum(layer(xt, training=True)), [x], layer.trainable_variables,
            state=layer.non_trainable_variables)
        _grads_finite(x_grads + var_grads)
