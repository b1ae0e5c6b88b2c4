"""Tests for sphere_tf.energy against explicit double-loop NumPy references and closed forms."""

import math

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sphere_tf import energy
from sphere_tf import testing
from sphere_tf.ops import autodiff

from tests.gradient_helpers import to_numpy
from tests.gradient_helpers import value_and_grads


def np_energy(w, power, distance="euclidean", half_space=False, beta=None, log_form="thesis", eps=1e-4,
              reduction="mean"):
    """Slow reference: explicit loops over ordered pairs of (possibly virtual) neurons, float64."""
    w2d = np.asarray(w, np.float64).reshape(-1, np.shape(w)[-1])
    n = w2d.shape[1]
    points = [w2d[:, i] / math.sqrt(float(np.sum(w2d[:, i] ** 2)) + eps) for i in range(n)]
    betas = [1.0] * n if beta is None else [float(b) for b in beta]
    if half_space:
        points = points + [-p for p in points]
        betas = betas + betas
    total, count = 0.0, 0
    for i in range(len(points)):
        for j in range(len(points)):
            if i == j:
                continue
            c = float(np.dot(points[i], points[j]))
            if distance == "euclidean":
                z = math.sqrt(max(betas[i] ** 2 + betas[j] ** 2 - 2 * betas[i] * betas[j] * c, 1e-6))
            else:
                z = math.acos(min(max(c, -1 + 1e-6), 1 - 1e-6))
                if distance == "normalized_angular":
                    z = z / math.pi + 1e-4
            if power == 0:
                term = -math.log(z) * (2.0 if log_form == "code" else 1.0)
            else:
                term = z ** (-power)
            total += term
            count += 1
    return total / count if reduction == "mean" else total


KERNEL_SHAPES = [(5, 4), (3, 3, 2, 6), (7, 1, 3)]


@pytest.mark.parametrize("shape", KERNEL_SHAPES)
@pytest.mark.parametrize("power", [0, 1, 2, 0.5, 3.7])
@pytest.mark.parametrize("distance", ["euclidean", "angular", "normalized_angular"])
@pytest.mark.parametrize("half_space", [False, True])
def test_energy_matches_double_loop(rng, shape, power, distance, half_space):
    w = rng.standard_normal(shape).astype(np.float32)
    got = float(energy.hyperspherical_energy(w, power=power, distance=distance, half_space=half_space))
    want = np_energy(w, power, distance, half_space)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("half_space", [False, True])
@pytest.mark.parametrize("power", [0, 1, 2])
def test_weighted_energy_matches_double_loop(rng, power, half_space):
    w = rng.standard_normal((4, 6)).astype(np.float32)
    beta = rng.uniform(0.5, 3.0, 6).astype(np.float32)
    got = float(energy.hyperspherical_energy(w, power=power, half_space=half_space, beta=beta))
    np.testing.assert_allclose(got, np_energy(w, power, half_space=half_space, beta=beta), rtol=2e-5, atol=1e-6)


@pytest.mark.parametrize("half_space", [False, True])
def test_sum_reduction_and_code_log_form(rng, half_space):
    w = rng.standard_normal((6, 5)).astype(np.float32)
    got = float(energy.hyperspherical_energy(w, power=2, half_space=half_space, reduction="sum"))
    np.testing.assert_allclose(got, np_energy(w, 2, half_space=half_space, reduction="sum"), rtol=2e-5)
    got0 = float(energy.hyperspherical_energy(w, power=0, log_form="code", half_space=half_space))
    np.testing.assert_allclose(got0, np_energy(w, 0, half_space=half_space, log_form="code"), rtol=2e-5)


def test_exact_unit_vectors_without_epsilon(rng):
    """With ε = 0, 2 − 2C is exactly ‖ŵ_i − ŵ_j‖² of unit vectors (Eq 5.1 as written)."""
    w = rng.standard_normal((4, 5))
    u = w / np.linalg.norm(w, axis=0)
    want = np.mean([np.linalg.norm(u[:, i] - u[:, j]) ** -1.5 for i in range(5) for j in range(5) if i != j])
    got = float(energy.hyperspherical_energy(w.astype(np.float32), power=1.5, epsilon=0.0))
    np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("name", sorted(energy.ENERGY_FNS))
def test_registry_entries_match_reference(rng, name):
    w = rng.standard_normal((3, 3, 2, 4)).astype(np.float32)
    power = int(name[1])
    distance = "euclidean" if name[0] == "s" else "angular"
    got = float(energy.get_energy_fn(name)(w))
    np.testing.assert_allclose(got, np_energy(w, power, distance), rtol=2e-5, atol=1e-6)


def test_orthonormal_set_closed_forms():
    """Orthonormal neurons: per-pair E_2 = 0.5, E_1 = 1/√2, E_0 = −½ ln 2 (code form: −ln 2)."""
    w = np.eye(8, dtype=np.float32) * 100.0  # large norm: the 1e-4 epsilon is negligible
    e = lambda **kw: float(energy.hyperspherical_energy(w, **kw))  # noqa: E731
    np.testing.assert_allclose(e(power=2), 0.5, rtol=1e-6)
    np.testing.assert_allclose(e(power=1), 1 / math.sqrt(2), rtol=1e-6)
    np.testing.assert_allclose(e(power=0), -0.5 * math.log(2), rtol=1e-6)
    np.testing.assert_allclose(e(power=0, log_form="code"), -math.log(2), rtol=1e-6)
    # Half-space: each point has 2(N−1) neighbours at √2 and one antipode at 2.
    n = 8
    np.testing.assert_allclose(e(power=2, half_space=True), (2 * (n - 1) * 0.5 + 0.25) / (2 * n - 1), rtol=1e-6)
    # Angular: every pair at π/2.
    np.testing.assert_allclose(e(power=1, distance="angular"), 2 / math.pi, rtol=1e-5)


def _descend(n, power, half_space=False, beta=None, steps=300, seed=0, lr=0.05, sgd=False):
    """Adam (or plain SGD) on the raw 3-D points; the energy is scale-invariant in each point (ε = 0)."""
    rng = np.random.default_rng(seed)
    points = keras.Variable(rng.standard_normal((3, n)).astype(np.float32))
    start = to_numpy(points).copy()
    opt = keras.optimizers.SGD(lr) if sgd else keras.optimizers.Adam(lr)

    def loss(p):
        return energy.hyperspherical_energy(p, power=power, half_space=half_space, beta=beta, epsilon=0.0)

    gradient = autodiff.compiled(lambda p: autodiff.value_and_grad(loss, p)[1])
    for _ in range(steps):
        opt.apply_gradients([(gradient(points.value), points)])
    return start, to_numpy(points)


@pytest.mark.parametrize("n,minimum", [(2, 0.5), (3, 1.732051), (4, 3.674234), (6, 9.985281)])
def test_thomson_minima(n, minimum):
    _, points = _descend(n, power=1, steps=400)
    mean = float(energy.hyperspherical_energy(points, power=1, epsilon=0.0))
    pair_sum = mean * n * (n - 1) / 2  # sum over i < j of 1/r
    assert abs(pair_sum - minimum) < 1e-3, pair_sum


def test_half_space_spreads_over_hemisphere_without_antipodes():
    """3 neurons + virtual antipodes minimise at the octahedron: mutually orthogonal neurons."""
    _, points = _descend(3, power=1, half_space=True, steps=400)
    u = points / np.linalg.norm(points, axis=0)
    cos = u.T @ u
    off = cos[~np.eye(3, dtype=bool)]
    assert np.all(np.abs(off) < 1e-2), cos  # no antipodal (or collinear) pair
    # The 6 points form the Thomson N=6 minimum.
    mean = float(energy.hyperspherical_energy(points, power=1, half_space=True, epsilon=0.0))
    assert abs(mean * 6 * 5 / 2 - 9.985281) < 1e-3
    # Full-space MHE from the same start does not give orthogonal neurons (it makes a triangle).
    _, full = _descend(3, power=1, steps=400)
    uf = full / np.linalg.norm(full, axis=0)
    np.testing.assert_allclose((uf.T @ uf)[~np.eye(3, dtype=bool)], -0.5, atol=1e-2)


def test_weighted_mhe_moves_high_beta_neuron_less():
    beta = np.ones(10, np.float32)
    beta[0] = 10.0
    start, end = _descend(10, power=2, beta=keras.ops.convert_to_tensor(beta), steps=30, lr=0.02, seed=3, sgd=True)
    u0 = start / np.linalg.norm(start, axis=0)
    u1 = end / np.linalg.norm(end, axis=0)
    moved = np.arccos(np.clip(np.sum(u0 * u1, axis=0), -1, 1))
    assert moved[0] < 0.2 * np.median(moved[1:]), moved


def _finite_value_and_grad(w, **kwargs):
    value, (grad,) = value_and_grads(lambda v: energy.hyperspherical_energy(v, **kwargs), w)
    return np.isfinite(float(value)) and bool(np.all(np.isfinite(grad)))


@given(
    seed=st.integers(0, 2**16),
    n=st.integers(2, 6),
    power=st.sampled_from([0, 0.5, 1, 2, 6, 13, 50]),
    distance=st.sampled_from(energy.DISTANCES),
    half_space=st.booleans(),
    degeneracy=st.sampled_from(["duplicate", "zero", "antipodal", "all_zero", "tiny", "huge"]),
)
def test_degenerate_neurons_stay_finite(seed, n, power, distance, half_space, degeneracy):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((4, n)).astype(np.float32)
    if degeneracy == "duplicate":
        w[:, 1] = w[:, 0]
    elif degeneracy == "zero":
        w[:, 0] = 0.0
    elif degeneracy == "antipodal":
        w[:, 1] = -w[:, 0]
    elif degeneracy == "all_zero":
        w[:] = 0.0
    elif degeneracy == "tiny":
        w *= 1e-20
    else:
        w *= 1e15
    assert _finite_value_and_grad(w, power=power, distance=distance, half_space=half_space)
    if power > 0:
        assert _finite_value_and_grad(w, power=power, distance=distance, half_space=half_space, log_space=True)


def test_log_space_matches_log_of_energy(rng):
    w = rng.standard_normal((5, 6)).astype(np.float32)
    for half_space in (False, True):
        log_e = float(energy.hyperspherical_energy(w, power=3, half_space=half_space, log_space=True))
        np.testing.assert_allclose(log_e, math.log(np_energy(w, 3, half_space=half_space)), rtol=1e-5)


def test_large_power_duplicates_saturate_finitely():
    """Four identical neurons at s = 200: every term z^{−200} overflows, the mean saturates at exp(50)."""
    w = np.ones((3, 4), np.float32)
    value = float(energy.hyperspherical_energy(w, power=200))
    np.testing.assert_allclose(value, math.exp(50.0), rtol=1e-5)
    np.testing.assert_allclose(float(energy.hyperspherical_energy(w, power=200, log_space=True)),
                               -100.0 * math.log(2e-4 / 3.0001), rtol=1e-3)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_low_precision_inputs_compute_in_float32(rng, dtype):
    w = rng.standard_normal((3, 3, 4, 8)).astype(np.float32)
    low = keras.ops.cast(w, dtype)
    got = energy.hyperspherical_energy(low, power=2, half_space=True)
    assert keras.backend.standardize_dtype(got.dtype) == "float32"
    want = np_energy(to_numpy(keras.ops.cast(low, "float32")), 2, half_space=True)
    np.testing.assert_allclose(float(got), want, rtol=1e-5)


def test_data_dependent_energy_matches_loop(rng):
    w = rng.standard_normal((6, 5)).astype(np.float32)
    labels = np.array([0, 3, 3, 1], np.int32)
    u = [w[:, j] / math.sqrt(float(np.sum(w[:, j] ** 2)) + 1e-4) for j in range(5)]
    want = 0.0
    for y in labels:
        for j in range(5):
            if j != y:
                want += (2 - 2 * float(np.dot(u[y], u[j]))) ** -1.0
    want /= len(labels) * 4
    got = float(energy.data_dependent_energy(w, labels, power=2))
    np.testing.assert_allclose(got, want, rtol=2e-5)
    got0 = float(energy.data_dependent_energy(w, labels, power=0))
    want0 = np.mean([[-0.5 * math.log(2 - 2 * float(np.dot(u[y], u[j]))) for j in range(5) if j != y]
                     for y in labels])
    np.testing.assert_allclose(got0, want0, rtol=2e-5)


def test_single_neuron_has_zero_energy():
    assert float(energy.hyperspherical_energy(np.ones((3, 1), np.float32))) == 0.0
    # Half-space: the neuron and its antipode at distance 2 (up to the epsilon).
    np.testing.assert_allclose(float(energy.hyperspherical_energy(np.ones((3, 1), np.float32) * 10,
                                                                   half_space=True)), 0.25, rtol=1e-5)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"power": -1}, "`power`"),
        ({"power": float("nan")}, "`power`"),
        ({"distance": "cosine"}, "`distance`"),
        ({"log_form": "paper"}, "`log_form`"),
        ({"reduction": "max"}, "`reduction`"),
        ({"beta": np.ones(4), "distance": "angular"}, "`beta`"),
        ({"power": 0, "log_space": True}, "`log_space`"),
        ({"epsilon": -1.0}, "`epsilon`"),
        ({"distance_epsilon": 0.0}, "`distance_epsilon`"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        energy.hyperspherical_energy(np.ones((3, 4), np.float32), **kwargs)


def test_rank1_and_registry_errors():
    with pytest.raises(ValueError, match="`weights`"):
        energy.hyperspherical_energy(np.ones((3,), np.float32))
    with pytest.raises(ValueError, match="Unknown energy"):
        energy.get_energy_fn("s9")
    with pytest.raises(KeyError, match="already registered"):
        energy.register_energy_fn("s2", lambda w: w)


# -- direct s = 1, 2 path (no log/exp) vs the log-space path and the NumPy loops -------------------


def _np_energy_eps(w, power, half_space, distance_epsilon, beta=None, eps=1e-4):
    """np_energy with a configurable floor on the squared distance (float64 loops)."""
    w2d = np.asarray(w, np.float64).reshape(-1, np.shape(w)[-1])
    n = w2d.shape[1]
    pts = [w2d[:, i] / math.sqrt(float(np.sum(w2d[:, i] ** 2)) + eps) for i in range(n)]
    betas = [1.0] * n if beta is None else [float(b) for b in beta]
    if half_space:
        pts, betas = pts + [-p for p in pts], betas + betas
    vals = [max(betas[i] ** 2 + betas[j] ** 2 - 2 * betas[i] * betas[j] * float(np.dot(pts[i], pts[j])),
                distance_epsilon) ** (-power / 2)
            for i in range(len(pts)) for j in range(len(pts)) if i != j]
    return float(np.mean(vals))


def _value_and_grad(w, force_log_space, **kwargs):
    saved = energy._DIRECT_LIMIT
    energy._DIRECT_LIMIT = -1.0 if force_log_space else saved  # -1: every count is over the limit
    try:
        value, (grad,) = value_and_grads(lambda v: energy.hyperspherical_energy(v, **kwargs), w)
    finally:
        energy._DIRECT_LIMIT = saved
    return float(value), grad


def _degenerate_kernel(kind):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((5, 6)).astype(np.float32)
    if kind in ("duplicate", "mixed"):
        w[:, 1] = w[:, 0]
    if kind in ("antipodal", "mixed"):
        w[:, 3] = -w[:, 2]
    if kind in ("zero", "mixed"):
        w[:, 5] = 0.0
    return w


def test_direct_path_is_taken_only_where_it_cannot_overflow():
    assert energy._use_direct(2, "euclidean", False, 1e-6, 2 * 256**2)
    assert energy._use_direct(1.0, "euclidean", False, 1e-6, 2 * 4096**2)
    assert not energy._use_direct(2, "euclidean", True, 1e-6, 8)  # log_space
    assert not energy._use_direct(3, "euclidean", False, 1e-6, 8)
    assert not energy._use_direct(2, "angular", False, 1e-6, 8)
    # z² >= 1e-20 allows terms of 1e20 and derivatives of 1e40 (over float32): log-space path.
    assert not energy._use_direct(2, "euclidean", False, 1e-20, 8)


@pytest.mark.parametrize("kind", ["random", "duplicate", "antipodal", "zero", "mixed"])
@pytest.mark.parametrize("power", [1, 2])
@pytest.mark.parametrize("half_space", [False, True])
@pytest.mark.parametrize("weighted", [False, True])
def test_direct_path_matches_log_space_path_and_loops(kind, power, half_space, weighted):
    w = _degenerate_kernel(kind)
    beta = np.linspace(0.5, 2.0, 6).astype(np.float32) if weighted else None
    kwargs = dict(power=power, half_space=half_space, beta=beta)
    direct, g_direct = _value_and_grad(w, False, **kwargs)
    logspace, g_log = _value_and_grad(w, True, **kwargs)
    want = _np_energy_eps(w, power, half_space, 1e-6, beta=beta)
    # Coincident points (a duplicate, or an antipode's virtual neuron) sit at z² = 2ε/(‖w‖² + ε) ≈ 4e-5,
    # where float32 2 − 2C cancels ~7 digits down to ~3 (both paths alike); elsewhere float32 rounding.
    coincident = kind in ("duplicate", "mixed") or (kind == "antipodal" and half_space)
    np.testing.assert_allclose(direct, want, rtol=1e-2 if coincident else 2e-5)
    np.testing.assert_allclose(direct, logspace, rtol=2e-5)
    assert np.all(np.isfinite(g_direct))
    # Coincident pairs: a 1/z⁴-sized factor times a cancelling ∂C/∂w, float32 noise of a few % on both paths.
    np.testing.assert_allclose(g_direct, g_log, rtol=5e-2 if coincident else 1e-4, atol=1e-5 * np.max(np.abs(g_log)))


def test_direct_path_gradient_matches_finite_differences(rng):
    w = rng.standard_normal((4, 5)).astype(np.float64)
    for half_space in (False, True):
        _, grad = _value_and_grad(w.astype(np.float32), False, power=2, half_space=half_space)
        want = testing.numeric_gradient(lambda v: _np_energy_eps(v, 2, half_space, 1e-6), w)
        np.testing.assert_allclose(grad, want, rtol=2e-3, atol=1e-5)


def test_tiny_distance_epsilon_falls_back_to_log_space_and_stays_finite():
    w = _degenerate_kernel("duplicate")
    value, grad = _value_and_grad(w, False, power=2, distance_epsilon=1e-20)
    assert not energy._use_direct(2, "euclidean", False, 1e-20, 2 * 6 * 6)
    # The duplicate pair dominates (z² ≈ 4e-5, float32 cancellation as above).
    np.testing.assert_allclose(value, _np_energy_eps(w, 2, False, 1e-20), rtol=1e-2)
    assert np.isfinite(value) and np.all(np.isfinite(grad))


def test_single_neuron_half_space_direct_path_is_the_antipode_pair():
    w = np.array([[3.0], [4.0]], np.float32)
    # One point and its antipode: 2 ordered pairs at distance 2 (up to ε): E_2 = 1/4, E_1 = 1/2.
    np.testing.assert_allclose(float(energy.hyperspherical_energy(w, power=2, half_space=True)), 0.25, rtol=1e-5)
    np.testing.assert_allclose(float(energy.hyperspherical_energy(w, power=1, half_space=True)), 0.5, rtol=1e-5)


# -- `gram`: WᵀW with the one-matmul gradient W·(Ḡ + Ḡᵀ) -------------------------------------------


@pytest.mark.parametrize("shape", [(7, 5), (3, 6, 4)])
@pytest.mark.parametrize("scale", [1.0, 2.0])
def test_gram_value_and_gradient_match_closed_form(rng, shape, scale):
    """Any upstream gradient (here a non-symmetric A) gives ∂Σ(A⊙sWᵀW)/∂W = sW(A + Aᵀ)."""
    w = rng.standard_normal(shape)
    a = rng.standard_normal(shape[:-2] + (shape[-1], shape[-1]))
    w32 = w.astype(np.float32)
    a32 = a.astype(np.float32)
    _, (grad,) = value_and_grads(lambda v: keras.ops.sum(keras.ops.multiply(energy.gram(v, scale=scale), a32)), w32)
    w_t = np.swapaxes(w, -1, -2)
    np.testing.assert_allclose(to_numpy(energy.gram(w32, scale=scale)), scale * (w_t @ w), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(grad, scale * (w @ (a + np.swapaxes(a, -1, -2))), rtol=1e-5, atol=1e-5)


def test_gram_second_order_through_nested_tapes(rng):
    """Nested gradients differentiate the custom gradient: for L = Σ A⊙(G⊙G), g = W(Ḡ + Ḡᵀ) with Ḡ = 2A⊙G
    depends on W through Ḡ too; ∂‖g‖²/∂W is checked against float64 finite differences of the closed form."""
    d, n = 4, 3
    w = rng.standard_normal((d, n))
    a = rng.standard_normal((n, n))

    def np_inner_grad(w):
        g_bar = 2.0 * a * (w.T @ w)
        return w @ (g_bar + g_bar.T)

    wt = keras.ops.convert_to_tensor(w.astype(np.float32))

    a32 = a.astype(np.float32)

    def inner_grad(v):
        g_loss = lambda u: keras.ops.sum(keras.ops.multiply(a32, energy.gram(u) * energy.gram(u)))  # noqa: E731
        return autodiff.value_and_grad(g_loss, v)[1]

    def outer_grad(v):
        second = lambda u: keras.ops.sum(keras.ops.square(inner_grad(u)))  # noqa: E731
        return inner_grad(v), autodiff.value_and_grad(second, v)[1]

    for fn in (lambda f: f, autodiff.compiled):
        inner, got = fn(outer_grad)(wt)
        np.testing.assert_allclose(to_numpy(inner), np_inner_grad(w), rtol=1e-4, atol=1e-5)
        want = testing.numeric_gradient(lambda v: np.sum(np_inner_grad(v) ** 2), w)
        np.testing.assert_allclose(to_numpy(got), want, rtol=1e-3, atol=1e-3 * np.max(np.abs(want)))


def test_energy_gradient_of_upper_triangle_sum_matches_finite_differences(rng):
    """A symmetric function written non-symmetrically (pairs i < j only, so Ḡ is upper-triangular):
    the gradient through `cosine_gram` still matches float64 finite differences."""
    w = rng.standard_normal((6, 5))
    iu = np.triu_indices(5, k=1)

    def np_value(w):
        u = w / np.sqrt(np.sum(w**2, axis=0, keepdims=True) + 1e-4)
        c = (u.T @ u)[iu]
        return float(np.sum(1.0 / (2.5 - 2.0 * c) ** 2))

    upper = np.triu(np.ones((5, 5)), k=1).astype(np.float32)

    def value_fn(v):
        return keras.ops.sum(keras.ops.divide(upper, keras.ops.square(2.5 - 2.0 * energy.cosine_gram(v))))

    value, (grad,) = value_and_grads(value_fn, w.astype(np.float32))
    np.testing.assert_allclose(float(value), np_value(w), rtol=1e-5)
    want = testing.numeric_gradient(np_value, w)
    np.testing.assert_allclose(grad, want, rtol=1e-3, atol=1e-4 * np.max(np.abs(want)))


@pytest.mark.parametrize("power, half_space", [(2, False), (2, True), (1, True), (0, False), (3, True)])
def test_energy_value_and_gradient_unchanged_by_custom_gram(rng, monkeypatch, power, half_space):
    """Same values and gradients (float32 rounding) as with the backend's generic two-product matmul gradient."""
    w = rng.standard_normal((20, 9)).astype(np.float32)

    def value_and_grad():
        value, (grad,) = value_and_grads(
            lambda v: energy.hyperspherical_energy(v, power=power, half_space=half_space), w
        )
        return value, grad

    value, grad = value_and_grad()
    monkeypatch.setattr(
        energy, "gram", lambda x, scale=1.0: keras.ops.matmul(keras.ops.swapaxes(scale * x, -1, -2), x)
    )
    ref_value, ref_grad = value_and_grad()
    np.testing.assert_allclose(value, ref_value, rtol=1e-6)
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-5, atol=1e-6 * np.max(np.abs(ref_grad)))


def test_gram_of_higher_rank_batches(rng):
    w = rng.standard_normal((2, 3, 4, 5)).astype(np.float32)
    a = rng.standard_normal((2, 3, 5, 5)).astype(np.float32)
    _, (grad,) = value_and_grads(lambda v: keras.ops.sum(keras.ops.multiply(energy.gram(v), a)), w)
    w64, a64 = w.astype(np.float64), a.astype(np.float64)
    want = w64 @ (a64 + np.swapaxes(a64, -1, -2))
    np.testing.assert_allclose(grad, want, rtol=1e-5, atol=1e-5)
