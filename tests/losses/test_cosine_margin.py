"""Tests for the margin losses on cosines (sphere_tf.losses.cosine_margin) vs a NumPy reference and MarginHead.

Backend-neutral (keras + NumPy): run also with `KERAS_BACKEND=jax` and `KERAS_BACKEND=torch`.
"""

import math
import os

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sphere_tf import losses
from sphere_tf.layers import MarginHead
from sphere_tf.layers import SphereDense
from sphere_tf.ops import angles

from tests.gradient_helpers import value_and_grads

# ---------------------------------------------------------------------------------------
# Independent NumPy reference: the papers' formulas on θ = arccos c, explicit loops over samples.

ACOS_DELTA = 1e-6


def np_psi(theta, m):
    """A-Softmax ψ(θ) = (−1)^k cos(mθ) − 2k on [kπ/m, (k+1)π/m], looping over k [T-2.6]."""
    for k in range(m):
        if theta <= (k + 1) * math.pi / m:
            return (-1) ** k * math.cos(m * theta) - 2 * k
    return (-1) ** (m - 1) * math.cos(m * theta) - 2 * (m - 1)


def np_additive(theta, m1, m2, m3):
    """cos(m1θ + m2) − m3 [ArcFace, combined margin], continued past π as (−1)^κ cos φ − 2κ (documented)."""
    phi = m1 * theta + m2
    kappa = 0
    while phi > (kappa + 1) * math.pi:
        kappa += 1
    return (-1) ** kappa * math.cos(phi) - 2 * kappa - m3


def np_g(theta, angular, k=0.3):
    """The angular functions of Deep Hyperspherical Learning: linear (Eq. 2), cosine, sigmoid (Eq. 4)."""
    if angular == "linear":
        return 1.0 - 2.0 * theta / math.pi
    if angular == "cosine":
        return math.cos(theta)
    a = math.exp(-math.pi / (2 * k))
    e = math.exp(theta / k - math.pi / (2 * k))
    return (1 + a) / (1 - a) * (1 - e) / (1 + e)


def np_target(theta, family, margin, angular="cosine", k=0.3):
    """ψ(θ_y) of each family, written from its paper."""
    if family == "cosface":
        return math.cos(theta) - margin  # CosFace's LMCL
    if family == "arcface":
        return np_additive(theta, 1.0, margin, 0.0)  # ArcFace
    if family == "combined":
        return np_additive(theta, *margin)
    if family == "sphereface":
        return np_psi(theta, margin)  # thesis Eq. 2.20
    if margin == 1:  # W-Softmax, thesis Eq. 3.10
        return np_g(theta, angular, k)
    if angular == "cosine":
        return np_psi(theta, int(margin))  # cosine GA-Softmax is A-Softmax
    return np_g(margin * theta, angular, k)  # GA-Softmax, thesis Eq. 3.11


def np_margin_loss(cosines, y, family, margin, scale=None, norms=None, angular="cosine", k=0.3, lam=0.0):
    """Per-sample −log softmax(f)_y with the label's logit replaced (float64, a loop over samples)."""
    out = []
    for i in range(len(y)):
        radius = scale if scale is not None else norms[i]
        # θ = arccos of c clipped to ±(1 − δ), δ = 1e-6: the package's documented `safe_acos` (finite gradients
        # at θ = 0, π); at c = ±1 ArcFace differs from the unclipped formula by s·√(2δ)·|sin φ| ≈ 0.01.
        thetas = [math.acos(min(1.0 - ACOS_DELTA, max(-1.0 + ACOS_DELTA, float(c)))) for c in cosines[i]]
        logits = np.array([radius * np_g(t, angular, k) for t in thetas])
        plain_y = logits[y[i]]
        target = radius * np_target(thetas[y[i]], family, margin, angular, k)
        logits[y[i]] = (lam * plain_y + target) / (1.0 + lam)
        top = logits.max()
        out.append(top + math.log(np.sum(np.exp(logits - top))) - logits[y[i]])
    return np.array(out)


# Each case: (class, kwargs, family of the reference, reference kwargs); scale=None: y_pred carries ‖x‖.
CASES = {
    "cosface": (losses.CosFaceLoss, dict(scale=16.0, margin=0.35), "cosface", dict(margin=0.35, scale=16.0)),
    "arcface": (losses.ArcFaceLoss, dict(scale=16.0, margin=0.5), "arcface", dict(margin=0.5, scale=16.0)),
    "arcface_past_pi": (losses.ArcFaceLoss, dict(scale=8.0, margin=2.0), "arcface", dict(margin=2.0, scale=8.0)),
    "combined": (
        losses.CombinedMarginLoss, dict(scale=16.0, margin=(1.5, 0.3, 0.2)), "combined",
        dict(margin=(1.5, 0.3, 0.2), scale=16.0),
    ),
    "sphereface": (losses.SphereFaceLoss, dict(margin=4), "sphereface", dict(margin=4)),
    "sphereface_annealed": (
        losses.SphereFaceLoss, dict(margin=3, lam=5.0), "sphereface", dict(margin=3, lam=5.0),
    ),
    "sphereface_scaled": (
        losses.SphereFaceLoss, dict(margin=2, scale=10.0), "sphereface", dict(margin=2, scale=10.0),
    ),
    "gasoftmax_linear": (losses.GASoftmaxLoss, dict(margin=4), "ga", dict(margin=4, angular="linear")),
    "gasoftmax_sigmoid": (
        losses.GASoftmaxLoss, dict(margin=2.5, angular="sigmoid", k=0.4, lam=1.0), "ga",
        dict(margin=2.5, angular="sigmoid", k=0.4, lam=1.0),
    ),
    "gasoftmax_cosine": (losses.GASoftmaxLoss, dict(margin=3, angular="cosine"), "ga", dict(margin=3)),
    "wsoftmax": (losses.GASoftmaxLoss, dict(margin=1, angular="sigmoid"), "ga", dict(margin=1, angular="sigmoid")),
    "ssoftmax": (
        losses.GASoftmaxLoss, dict(margin=2.0, angular="linear", scale=12.0), "ga",
        dict(margin=2.0, angular="linear", scale=12.0),
    ),
}
FUNCTIONS = {
    losses.CosFaceLoss: losses.cosface_loss,
    losses.ArcFaceLoss: losses.arcface_loss,
    losses.CombinedMarginLoss: losses.combined_margin_loss,
    losses.SphereFaceLoss: losses.sphereface_loss,
    losses.GASoftmaxLoss: losses.ga_softmax_loss,
}


def _takes_norm(kwargs):
    return kwargs.get("scale") is None


def _batch(rng, n=12, c=5, with_norm=False):
    """Cosines of random features and class weights (edge cosines ±1 included), labels, norms."""
    x = rng.normal(size=(n, 6))
    w = rng.normal(size=(6, c))
    cosines = (x / np.linalg.norm(x, axis=1, keepdims=True)) @ (w / np.linalg.norm(w, axis=0, keepdims=True))
    y = rng.integers(0, c, size=n)
    cosines[0, y[0]], cosines[1, y[1]] = 1.0, -1.0  # θ_y = 0 and π
    norms = rng.uniform(0.5, 4.0, size=n)
    y_pred = np.concatenate([cosines, norms[:, None]], axis=1) if with_norm else cosines
    return cosines, norms, y, y_pred.astype(np.float32)


def _np(x):
    return np.asarray(keras.ops.convert_to_numpy(x))


# ---------------------------------------------------------------------------------------
# Correctness against the reference.


@pytest.mark.parametrize("case", sorted(CASES))
def test_loss_matches_numpy_reference(rng, case):
    cls, kwargs, family, ref_kwargs = CASES[case]
    cosines, norms, y, y_pred = _batch(rng, with_norm=_takes_norm(kwargs))
    expected = np_margin_loss(cosines.astype(np.float32), y, family, norms=norms.astype(np.float32), **ref_kwargs)
    per_sample = _np(FUNCTIONS[cls](y, y_pred, **kwargs))
    np.testing.assert_allclose(per_sample, expected, rtol=2e-4, atol=2e-4)
    assert float(cls(**kwargs)(y, y_pred)) == pytest.approx(expected.mean(), rel=2e-4, abs=2e-4)
    # Labels as (N, 1) floats, as Keras hands them to a loss, and a sum reduction.
    summed = cls(**kwargs, reduction="sum")(y[:, None].astype(np.float32), y_pred)
    assert float(summed) == pytest.approx(expected.sum(), rel=2e-4, abs=2e-4)


# MarginHead loss types and the equivalent loss; the cross-check, not the reference.
HEAD_EQUIVALENTS = {
    "cosface": (dict(margin=0.2, scale=8.0), losses.CosFaceLoss, dict(margin=0.2, scale=8.0)),
    "arcface": (dict(margin=0.5, scale=8.0), losses.ArcFaceLoss, dict(margin=0.5, scale=8.0)),
    "combined": (dict(margin=(2.0, 0.2, 0.1), scale=8.0), losses.CombinedMarginLoss,
                 dict(margin=(2.0, 0.2, 0.1), scale=8.0)),
    "asoftmax": (dict(margin=4, annealing="sphereface"), losses.SphereFaceLoss, dict(margin=4)),
    "gasoftmax": (dict(margin=3.0, angular="linear"), losses.GASoftmaxLoss, dict(margin=3.0, angular="linear")),
    "wsoftmax": (dict(angular="sigmoid"), losses.GASoftmaxLoss, dict(margin=1, angular="sigmoid")),
    "ssoftmax": (dict(margin=2, angular="cosine", scale=10.0), losses.GASoftmaxLoss,
                 dict(margin=2, angular="cosine", scale=10.0)),
}


@pytest.mark.parametrize("loss_type", sorted(HEAD_EQUIVALENTS))
def test_loss_equals_margin_head_on_the_same_weights(rng, loss_type):
    head_kwargs, cls, kwargs = HEAD_EQUIVALENTS[loss_type]
    head = MarginHead(5, loss_type=loss_type, **head_kwargs)
    x = rng.normal(size=(10, 6)).astype(np.float32)
    y = rng.integers(0, 5, size=10).astype(np.int32)
    logits = head(x, labels=y, training=True)  # step 1: λ_1 for the annealed head
    head_loss = float(keras.losses.SparseCategoricalCrossentropy(from_logits=True)(y, logits))
    x_unit, _ = angles.normalize(x, axis=-1, epsilon=head.epsilon)
    cosines = keras.ops.matmul(x_unit, head.normalized_kernel())
    if kwargs.get("scale") is None:
        cosines = losses.with_feature_norm(cosines, x, epsilon=head.epsilon)
    if head.annealing is not None:
        kwargs = {**kwargs, "lam": float(head.current_lambda())}
    assert float(cls(**kwargs)(y, cosines)) == pytest.approx(head_loss, rel=1e-5, abs=1e-6)


def test_sphere_dense_with_cosface_loss_is_margin_head_cosface(rng):
    """`SphereDense(C)` outputs MarginHead's cosines (ε = 1e-4 in both norms): same loss, same gradient."""
    x = rng.normal(size=(8, 6)).astype(np.float32)
    y = rng.integers(0, 4, size=8).astype(np.int32)
    head = MarginHead(4, loss_type="cosface", scale=16.0, margin=0.35)
    head.build(x.shape)
    dense = SphereDense(4)
    dense.build(x.shape)
    dense.kernel.assign(head.kernel)
    xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    cosface = losses.CosFaceLoss(scale=16.0, margin=0.35)
    head_loss, (head_grad,) = value_and_grads(lambda f: xent(y, head(f, labels=y, training=True)), x)
    loss, (grad,) = value_and_grads(lambda f: cosface(y, dense(f)), x)
    assert float(loss) == pytest.approx(float(head_loss), rel=1e-5)
    np.testing.assert_allclose(grad, head_grad, rtol=1e-4, atol=1e-6)


def test_out_of_range_label_gives_nan_loss_for_that_sample():
    cosines = np.array([[0.5, 0.1], [0.2, 0.3], [0.0, 0.9]], np.float32)
    per_sample = _np(losses.cosface_loss(np.array([0, 2, -1]), cosines, scale=10.0, margin=0.2))
    assert np.isfinite(per_sample[0]) and np.isnan(per_sample[1:]).all()


# ---------------------------------------------------------------------------------------
# Configuration, saving, training.


@pytest.mark.parametrize("case", sorted(CASES))
def test_config_round_trip(case):
    cls, kwargs, _, _ = CASES[case]
    loss = cls(**kwargs, name="my_loss", reduction="sum")
    config = loss.get_config()
    assert config["name"] == "my_loss" and config["reduction"] == "sum"
    assert cls.from_config(config).get_config() == config
    rebuilt = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(loss))
    assert type(rebuilt) is cls and rebuilt.get_config() == config


def _cosine_model(num_classes, with_norm):
    """Features → SphereDense cosines, with the feature norm appended when the loss reads ‖x‖."""
    inputs = keras.Input((6,))
    features = keras.layers.Dense(5, name="features")(inputs)
    cosines = SphereDense(num_classes, name="cosines")(features)
    outputs = losses.with_feature_norm(cosines, features) if with_norm else cosines
    return keras.Model(inputs, outputs)


@pytest.mark.parametrize("case", ["cosface", "arcface", "combined", "sphereface", "gasoftmax_sigmoid"])
def test_compiled_model_fits_two_steps_and_keras_file_round_trips(rng, tmp_path, case):
    cls, kwargs, _, _ = CASES[case]
    x = rng.normal(size=(16, 6)).astype(np.float32)
    y = rng.integers(0, 4, size=16).astype(np.int32)
    model = _cosine_model(4, with_norm=_takes_norm(kwargs))
    model.compile(keras.optimizers.SGD(0.05), loss=cls(**kwargs))
    history = model.fit(x, y, batch_size=8, epochs=1, verbose=0)  # two steps
    assert np.isfinite(history.history["loss"]).all()
    before = model.evaluate(x, y, verbose=0)
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    restored = keras.saving.load_model(path)
    assert type(restored.loss) is cls and restored.loss.get_config() == model.loss.get_config()
    assert restored.evaluate(x, y, verbose=0) == pytest.approx(before, rel=1e-5)


def test_sequential_model_with_sphere_dense_and_cosface(rng):
    """The docs' shortest form: a Sequential model ending in cosines, compiled with the loss."""
    x = rng.normal(size=(16, 6)).astype(np.float32)
    y = rng.integers(0, 3, size=16)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(8), SphereDense(3)])
    model.compile("adam", loss=losses.CosFaceLoss(scale=16.0, margin=0.35))
    history = model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert model.predict(x, verbose=0).shape == (16, 3)


# ---------------------------------------------------------------------------------------
# Bad hyperparameters raise at construction, naming the argument.


@pytest.mark.parametrize(
    "cls,kwargs,argument",
    [
        (losses.CosFaceLoss, dict(scale=0.0), "scale"),
        (losses.CosFaceLoss, dict(scale=None), "scale"),
        (losses.CosFaceLoss, dict(margin=2.0), "margin"),
        (losses.CosFaceLoss, dict(margin=-0.1), "margin"),
        (losses.ArcFaceLoss, dict(margin=math.pi), "margin"),
        (losses.ArcFaceLoss, dict(scale=-1.0), "scale"),
        (losses.CombinedMarginLoss, dict(margin=(0.5, 0.2, 0.0)), "margin"),
        (losses.CombinedMarginLoss, dict(margin=0.5), "margin"),
        (losses.SphereFaceLoss, dict(margin=2.5), "margin"),
        (losses.SphereFaceLoss, dict(margin=5), "margin"),
        (losses.SphereFaceLoss, dict(lam=-1.0), "lam"),
        (losses.SphereFaceLoss, dict(scale=0.0), "scale"),
        (losses.GASoftmaxLoss, dict(angular="tanh"), "angular"),
        (losses.GASoftmaxLoss, dict(margin=0.5), "margin"),
        (losses.GASoftmaxLoss, dict(margin=2.5, angular="cosine"), "margin"),
        (losses.GASoftmaxLoss, dict(k=0.0, angular="sigmoid"), "k"),
        (losses.GASoftmaxLoss, dict(lam=float("nan")), "lam"),
    ],
)
def test_bad_hyperparameters_raise_naming_the_argument(cls, kwargs, argument):
    with pytest.raises(ValueError, match=rf"Invalid value for argument `{argument}`.*Received: {argument}="):
        cls(**kwargs)


# ---------------------------------------------------------------------------------------
# Properties.

_COSINE = st.one_of(st.sampled_from([-1.0, 1.0, 0.0]), st.floats(-1.0, 1.0, width=32))


@given(
    rows=st.lists(st.lists(_COSINE, min_size=3, max_size=3), min_size=1, max_size=4),
    label=st.integers(0, 2),
    case=st.sampled_from(sorted(CASES)),
)
def test_degenerate_cosines_give_finite_losses_and_gradients(rows, label, case):
    cls, kwargs, _, _ = CASES[case]
    cosines = np.array(rows, np.float32)
    y = np.full(len(rows), label)
    if _takes_norm(kwargs):
        cosines = np.concatenate([cosines, np.full((len(rows), 1), 3.0, np.float32)], axis=1)
    loss = cls(**kwargs)
    value, (grad,) = value_and_grads(lambda c: loss(y, c), cosines)
    assert np.isfinite(float(value)) and float(value) >= -1e-6
    assert np.isfinite(grad).all()


@given(
    rows=st.lists(st.lists(_COSINE, min_size=4, max_size=4), min_size=1, max_size=4),
    label=st.integers(0, 3),
    scale=st.floats(1.0, 64.0),
)
def test_zero_margin_is_plain_scaled_softmax(rows, label, scale):
    cosines = np.array(rows, np.float32)
    y = np.full(len(rows), label)
    plain = _np(losses.sparse_crossentropy(y, scale * cosines))
    zero_margin = [
        losses.cosface_loss(y, cosines, scale=scale, margin=0.0),
        losses.arcface_loss(y, cosines, scale=scale, margin=0.0),
        losses.combined_margin_loss(y, cosines, scale=scale, margin=(1.0, 0.0, 0.0)),
        losses.sphereface_loss(y, cosines, margin=1, scale=scale),
        losses.ga_softmax_loss(y, cosines, margin=1, angular="cosine", scale=scale),
    ]
    for per_sample in zero_margin:
        # ArcFace goes through safe_acos (c clipped to ±(1 − 1e-6)): cos(arccos c) is c to ~1e-6.
        np.testing.assert_allclose(_np(per_sample), plain, rtol=1e-5, atol=2e-4 * scale)
