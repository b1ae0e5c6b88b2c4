"""Tests for sphere_tf.regularizers.MHE / DataDependentMHE / get (NumPy loop references)."""

import itertools
import math

import keras
import numpy as np
import pytest

from sphere_tf import layers as sphere_layers
from sphere_tf import regularizers
from sphere_tf import testing

from tests.gradient_helpers import value_and_grads


def np_mhe(w, power, half_space=False, log_form="code", eps=1e-4, columns=None):
    """Explicit double loop over ordered pairs (upstream: squared distance 2 − 2cos)."""
    w2d = np.asarray(w, np.float64).reshape(-1, np.shape(w)[-1])
    if columns is not None:
        w2d = w2d[:, list(columns)]
    pts = [w2d[:, i] / math.sqrt(np.sum(w2d[:, i] ** 2) + eps) for i in range(w2d.shape[1])]
    if half_space:
        pts = pts + [-p for p in pts]
    vals = []
    for i, j in itertools.permutations(range(len(pts)), 2):
        d2 = max(2 - 2 * float(np.dot(pts[i], pts[j])), 1e-6)
        if power == 0:
            vals.append(-math.log(d2) * (1.0 if log_form == "code" else 0.5))
        else:
            vals.append(d2 ** (-power / 2))
    return float(np.mean(vals))


@pytest.mark.parametrize("power", [0, 1, 2])
@pytest.mark.parametrize("half_space", [False, True])
def test_mhe_value_matches_reference(rng, power, half_space):
    w = rng.standard_normal((3, 3, 2, 5)).astype(np.float32)
    reg = regularizers.MHE(factor=0.7, power=power, half_space=half_space)
    np.testing.assert_allclose(float(reg(w)), 0.7 * np_mhe(w, power, half_space), rtol=2e-5)
    # The thesis s = 0 form is half the code form.
    if power == 0:
        thesis = regularizers.MHE(factor=0.7, power=0, half_space=half_space, log_form="thesis")
        np.testing.assert_allclose(float(thesis(w)), 0.7 * np_mhe(w, 0, half_space, "thesis"), rtol=2e-5)


def test_upstream_default_factors_and_output_role(rng):
    w = rng.standard_normal((6, 4)).astype(np.float32)
    assert regularizers.MHE().factor == 1.0
    out = regularizers.MHE(role="output")
    assert out.factor == 10.0 and not out.half_space
    np.testing.assert_allclose(float(out(w)), 10 * np_mhe(w, 2), rtol=2e-5)
    with pytest.raises(ValueError, match="`half_space`"):
        regularizers.MHE(role="output", half_space=True)


def test_weighted_mhe_regularizer(rng):
    w = rng.standard_normal((5, 3)).astype(np.float32)
    beta = [1.0, 2.0, 4.0]
    pts = [w[:, i] / math.sqrt(float(np.sum(w[:, i].astype(np.float64) ** 2)) + 1e-4) for i in range(3)]
    want = np.mean([(beta[i] ** 2 + beta[j] ** 2 - 2 * beta[i] * beta[j] * float(np.dot(pts[i], pts[j]))) ** -1
                    for i, j in itertools.permutations(range(3), 2)])
    np.testing.assert_allclose(float(regularizers.MHE(beta=beta)(w)), want, rtol=2e-5)


def test_mini_batch_subsets_are_random_reproducible_and_exact(rng):
    w = rng.standard_normal((4, 6)).astype(np.float32)
    subset_values = {c: np_mhe(w, 2, columns=c) for c in itertools.combinations(range(6), 3)}

    def run(seed, steps=6):
        reg = regularizers.MHE(power=2, num_samples=3, seed=seed)
        var = keras.Variable(w, name="kernel")
        return [float(reg(var)) for _ in range(steps)]

    values = run(seed=5)
    for v in values:  # each value is the exact energy of one 3-subset
        assert min(abs(v - ref) / ref for ref in subset_values.values()) < 2e-5
    assert len({round(v, 6) for v in values}) > 1  # a new subset each step
    assert values == run(seed=5)  # reproducible from the seed
    assert values != run(seed=6)


def test_mini_batch_larger_than_layer_is_plain_mhe(rng):
    w = rng.standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(float(regularizers.MHE(num_samples=8)(w)), np_mhe(w, 2), rtol=2e-5)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"factor": -1.0}, "`factor`"),
        ({"power": -2}, "`power`"),
        ({"distance": "l1"}, "`distance`"),
        ({"role": "input"}, "`role`"),
        ({"log_form": "x"}, "`log_form`"),
        ({"beta": [1.0, -1.0]}, "`beta`"),
        ({"beta": [1.0], "distance": "angular"}, "`beta`"),
        ({"num_samples": 1}, "`num_samples`"),
        ({"epsilon": -1e-4}, "`epsilon`"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        regularizers.MHE(**kwargs)


def test_get_resolver():
    assert regularizers.get(None) is None
    assert isinstance(regularizers.get("mhe"), regularizers.MHE)
    assert regularizers.get("half_space_mhe").half_space
    assert regularizers.get("output_mhe").factor == 10.0
    assert regularizers.get("orthogonal").mode == "orthogonal"
    assert isinstance(regularizers.get("comhe"), regularizers.CoMHE)
    assert isinstance(regularizers.get("l2"), keras.regularizers.L2)
    cfg = keras.saving.serialize_keras_object(regularizers.MHE(power=1, half_space=True))
    assert regularizers.get(cfg).get_config() == regularizers.MHE(power=1, half_space=True).get_config()
    with pytest.raises(ValueError, match="Unknown regularizer"):
        regularizers.get("nope")


def _model(conv_reg, dense_reg, out_reg):
    inputs = keras.Input((8, 8, 2))
    x = keras.layers.Conv2D(4, 3, kernel_regularizer=conv_reg)(inputs)
    x = sphere_layers.SphereConv2D(5, 3, kernel_regularizer=conv_reg)(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(6, activation="relu", kernel_regularizer=dense_reg)(x)
    return keras.Model(inputs, keras.layers.Dense(3, kernel_regularizer=out_reg)(x))


def test_keras_roundtrip_and_losses(tmp_path, rng):
    model = _model(regularizers.MHE(half_space=True), regularizers.MHE(power=0), regularizers.MHE(role="output"))
    x = rng.standard_normal((2, 8, 8, 2)).astype(np.float32)
    reloaded = testing.assert_keras_roundtrip(model, x, tmp_path)
    np.testing.assert_allclose([float(v) for v in reloaded.losses], [float(v) for v in model.losses], rtol=1e-6)
    # Each loss is the reference energy of the layer's kernel.
    kernels = [layer.kernel.numpy() for layer in model.layers if hasattr(layer, "kernel")]
    want = [np_mhe(kernels[0], 2, True), np_mhe(kernels[1], 2, True), np_mhe(kernels[2], 0), 10 * np_mhe(kernels[3], 2)]
    np.testing.assert_allclose([float(v) for v in model.losses], want, rtol=2e-5)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_training_stays_finite(rng, policy):
    keras.mixed_precision.set_global_policy(policy)
    model = _model(regularizers.MHE(power=2, half_space=True), regularizers.CoMHE(projection_dim=10),
                   regularizers.MHE(role="output"))
    model.compile(keras.optimizers.SGD(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = rng.standard_normal((8, 8, 8, 2)).astype(np.float32)
    y = rng.integers(0, 3, 8)
    history = model.fit(x, y, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert all(keras.backend.standardize_dtype(v.dtype) == "float32" for v in model.losses)
    # The MHE terms are the float64 energies of the (float32) trained kernels; CoMHE's depends on the step.
    losses = [float(v) for v in model.losses]
    kernels = [layer.kernel.numpy() for layer in model.layers if hasattr(layer, "kernel")]
    want = [np_mhe(kernels[0], 2, True), np_mhe(kernels[1], 2, True), 10 * np_mhe(kernels[3], 2)]
    np.testing.assert_allclose([losses[0], losses[1], losses[3]], want, rtol=2e-5)


def test_data_dependent_mhe_with_margin_head(rng, tmp_path):
    penalty = regularizers.DataDependentMHE(factor=2.0)
    head = sphere_layers.MarginHead(5, loss_type="asoftmax", label_penalty=penalty)
    features = rng.standard_normal((4, 6)).astype(np.float32)
    labels = np.array([0, 2, 2, 4])
    head(features, labels=labels, training=True)
    w = head.kernel.numpy()
    u = [w[:, j] / math.sqrt(float(np.sum(w[:, j].astype(np.float64) ** 2)) + 1e-4) for j in range(5)]
    want = np.mean([[(2 - 2 * float(np.dot(u[y], u[j]))) ** -1 for j in range(5) if j != y] for y in labels])
    assert len(head.losses) == 1
    np.testing.assert_allclose(float(head.losses[0]), 2.0 * want, rtol=2e-5)
    # Serializes inside the head's config.
    clone = sphere_layers.MarginHead.from_config(head.get_config())
    assert clone.label_penalty.get_config() == penalty.get_config()
    with pytest.raises(ValueError, match="`power`"):
        regularizers.DataDependentMHE(power=-1)


def test_gradient_finite_for_degenerate_kernels():
    w = np.zeros((3, 3, 2, 4), np.float32)
    w[..., 1] = 1.0
    w[..., 2] = 1.0  # duplicate
    w[..., 3] = -1.0  # antipodal
    for reg in (regularizers.MHE(power=0), regularizers.MHE(power=2, half_space=True),
                regularizers.MHE(distance="normalized_angular", power=2), regularizers.MHE(power=12)):
        value, (grad,) = value_and_grads(reg, w)
        assert np.isfinite(float(value)) and np.all(np.isfinite(grad))
        if reg.distance == "euclidean" and reg.power in (0, 2):
            # The duplicate pair sits at z² = 2ε/(18 + ε) ≈ 1.1e-5, where float32 2 − 2C keeps ~2 digits.
            want = np_mhe(w, reg.power, reg.half_space)
            np.testing.assert_allclose(float(value), want, rtol=2e-2 if reg.power else 1e-3)


# -- fidelity to the authors' TF code: wy1iu/MHE `code/architecture.py` ---------------------------


def np_upstream_thomson(kernel, power, model="mhe"):
    """wy1iu/MHE `_add_thomson_constraint` (and `_add_thomson_constraint_final`, model='mhe') in float64 NumPy.

    Transcribed line by line, without the coefficient:

        filt = reshape(filt, [-1, n_filt])
        if model == 'half_mhe': filt = concat([filt, -filt], axis=1); n_filt *= 2
        norm = sqrt(sum(filt * filt, axis=0, keepdims) + 1e-4)
        cos = matmul(filt^T, filt) / matmul(norm^T, norm)
        '0':  final = -log(2 - 2 cos + I)        'a0': final = -log(acos(cos) / pi + 1e-4)
        '1':  final = (2 - 2 cos + I)^-0.5       '2':  final = (2 - 2 cos + I)^-1
        final -= band_part(final, -1, 0)          # strict upper triangle
        loss = sum(final) / (n_filt * (n_filt - 1) / 2)
    """
    filt = np.asarray(kernel, np.float64).reshape(-1, np.shape(kernel)[-1])
    if model == "half_mhe":
        filt = np.concatenate([filt, -filt], axis=1)
    n = filt.shape[1]
    norm = np.sqrt(np.sum(filt * filt, axis=0, keepdims=True) + 1e-4)
    cos = (filt.T @ filt) / (norm.T @ norm)
    eye = np.eye(n)
    if power == "0":
        final = -np.log(2.0 - 2.0 * cos + eye)
    elif power == "a0":
        final = -np.log(np.arccos(cos) / np.pi + 1e-4)
    elif power in ("1", "2"):
        final = (2.0 - 2.0 * cos + eye) ** (-int(power) / 2.0)
    else:
        raise ValueError(power)
    final = final - np.tril(final)  # tf.matrix_band_part(final, -1, 0): lower triangle with the diagonal
    return float(np.sum(final) / (n * (n - 1) / 2))


# (upstream --power_s, sphere_tf MHE power/distance)
UPSTREAM_S0 = [("0", dict(power=0, distance="euclidean")), ("a0", dict(power=0, distance="normalized_angular"))]


def _assert_equals_upstream(reg, w, flag, model, scale):
    """`reg(w)` and its gradient equal `scale` times the upstream term and its finite-difference gradient."""
    value, (grad,) = value_and_grads(reg, w.astype(np.float32))
    np.testing.assert_allclose(float(value), scale * np_upstream_thomson(w, flag, model), rtol=2e-5)
    want = scale * testing.numeric_gradient(lambda v: np_upstream_thomson(v, flag, model), w)
    np.testing.assert_allclose(grad, want, rtol=2e-3, atol=1e-4 * np.max(np.abs(want)))


@pytest.mark.parametrize("flag,kwargs", UPSTREAM_S0, ids=["s0", "a0"])
@pytest.mark.parametrize("role,model", [("hidden", "mhe"), ("hidden", "half_mhe"), ("output", "mhe")])
def test_log_energy_value_and_gradient_equal_upstream(rng, flag, kwargs, role, model):
    """MHE(power=0) with the default log_form='code' is the authors' loss term: value and gradient, every role."""
    w = rng.standard_normal((3, 3, 2, 5))
    reg = regularizers.MHE(role=role, half_space=model == "half_mhe", **kwargs)
    coeff = 10.0 if role == "output" else 1.0  # `_add_thomson_constraint_final`: coeff = 10
    assert reg.factor == coeff and reg.log_form == "code"
    _assert_equals_upstream(reg, w, flag, model, coeff)


@pytest.mark.parametrize("model", ["mhe", "half_mhe"])
def test_log_energy_thesis_form(rng, model):
    """log_form='thesis': log(1/z) [T-5.1], i.e. half the upstream euclidean term and the same angular one."""
    w = rng.standard_normal((6, 4))
    half = model == "half_mhe"
    for flag, kwargs in UPSTREAM_S0:
        thesis = regularizers.MHE(half_space=half, log_form="thesis", **kwargs)
        _assert_equals_upstream(thesis, w, flag, model, 0.5 if flag == "0" else 1.0)


@pytest.mark.parametrize("log_form", ["code", "thesis"])
def test_log_energy_angular_radians_is_minus_log_theta(rng, log_form):
    """distance='angular' (θ in radians [T-5.5]): −log θ_ij in both forms (no factor 2 for angles)."""
    w = rng.standard_normal((6, 4))
    u = w / np.sqrt(np.sum(w**2, axis=0) + 1e-4)
    theta = np.arccos(u.T @ u)
    want = np.mean([-math.log(theta[i, j]) for i, j in itertools.permutations(range(4), 2)])
    value = float(regularizers.MHE(power=0, distance="angular", log_form=log_form)(w.astype(np.float32)))
    np.testing.assert_allclose(value, want, rtol=2e-5)


@pytest.mark.parametrize("flag", ["1", "2"])
@pytest.mark.parametrize("model", ["mhe", "half_mhe"])
def test_riesz_energy_equals_upstream(rng, flag, model):
    w = rng.standard_normal((3, 3, 2, 5))
    _assert_equals_upstream(regularizers.MHE(power=int(flag), half_space=model == "half_mhe"), w, flag, model, 1.0)


@pytest.mark.parametrize("flag,kwargs", UPSTREAM_S0, ids=["s0", "a0"])
def test_data_dependent_log_energy_code_form(rng, flag, kwargs):
    """SphereFace+ [T-5.8] with s = 0: the same per-pair term as upstream MHE ('code'), over (y_i, j ≠ y_i)."""
    w = rng.standard_normal((6, 5))
    labels = np.array([0, 3, 3, 1])
    norm = np.sqrt(np.sum(w**2, axis=0) + 1e-4)
    cos = (w.T @ w) / np.outer(norm, norm)
    if flag == "0":
        term = lambda c: -math.log(2.0 - 2.0 * c)  # noqa: E731
    else:
        term = lambda c: -math.log(math.acos(c) / math.pi + 1e-4)  # noqa: E731
    want = np.mean([[term(cos[y, j]) for j in range(5) if j != y] for y in labels])
    got = float(regularizers.DataDependentMHE(**kwargs)(w.astype(np.float32), labels))
    np.testing.assert_allclose(got, want, rtol=2e-5)
