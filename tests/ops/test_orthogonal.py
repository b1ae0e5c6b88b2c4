"""Tests for sphere_tf.ops.orthogonal against explicit NumPy references (float64)."""

import hypothesis.extra.numpy as hnp
import keras
import numpy as np
import pytest
import scipy.linalg
from hypothesis import given
from hypothesis import strategies as st
from keras import ops

from sphere_tf import testing
from sphere_tf.ops import orthogonal

# ---------------------------------------------------------------- NumPy references


def np_gram_schmidt_rows(p):
    """Classical Gram-Schmidt over the rows of P, explicit loops (Alg. 1 / upstream opt_gs)."""
    p = np.asarray(p, np.float64)
    basis = []
    for i in range(p.shape[0]):
        t = p[i].copy()
        for e in basis:
            t = t - np.dot(p[i], e) * e
        basis.append(t / np.linalg.norm(t))
    return np.stack(basis)


def np_householder_columns(p):
    """Householder QR of P by explicit reflections (Alg. 3 sign choice); Q with diag(R) > 0."""
    a = np.asarray(p, np.float64).copy()
    n = a.shape[0]
    q = np.eye(n)
    for k in range(n - 1):
        x = a[k:, k]
        sigma = np.dot(x[1:], x[1:])
        v = x.copy()
        if sigma == 0:
            continue
        norm = np.sqrt(x[0] ** 2 + sigma)
        v[0] = x[0] - norm if x[0] <= 0 else -sigma / (x[0] + norm)
        beta = 2 * v[0] ** 2 / (sigma + v[0] ** 2)
        v = v / v[0]
        h = np.eye(n)
        h[k:, k:] -= beta * np.outer(v, v)
        a = h @ a
        q = q @ h
    # Reflections as in Alg. 3 give diag(R) >= 0 except possibly the last entry.
    signs = np.where(np.diag(a) < 0, -1.0, 1.0)
    return q * signs[None, :]


def np_polar(p):
    u, _, vt = np.linalg.svd(np.asarray(p, np.float64))
    return u @ vt


def np_skew(p):
    p = np.asarray(p, np.float64)
    return np.triu(p) - np.triu(p).T


def np_cayley(p):
    s = np_skew(p)
    eye = np.eye(len(s))
    return (eye + s) @ np.linalg.inv(eye - s)


def np_exp(p):
    return scipy.linalg.expm(np_skew(p))


REFERENCES = {
    "gram_schmidt": np_gram_schmidt_rows,
    "householder": np_householder_columns,
    "lowdin": np_polar,
    "cayley": np_cayley,
    "exp": np_exp,
}


def _random(d, seed=0, batch=()):
    return np.random.default_rng(seed).standard_normal(batch + (d, d)).astype(np.float32)


def _orth_error(r):
    r = np.asarray(r, np.float64)
    eye = np.eye(r.shape[-1])
    return np.abs(np.swapaxes(r, -1, -2) @ r - eye).max()


# ---------------------------------------------------------------- tests


def _apply(fn, p, **kwargs):
    """`fn` on `p` as a backend tensor, the result as NumPy."""
    return ops.convert_to_numpy(fn(ops.convert_to_tensor(np.asarray(p, np.float32)), **kwargs))


def test_registry_covers_references():
    assert sorted(orthogonal.ORTHOGONALIZATION_FNS) == sorted(REFERENCES)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_orthogonal_in_float32_at_d576(name):
    """‖RᵀR − I‖_max < 1e-5 in float32 at d = 576 (a 3×3×64 conv neuron), raw P ~ N(0, 1)."""
    r = orthogonal.get_orthogonalization(name)(ops.convert_to_tensor(_random(576, seed=1)))
    assert keras.backend.standardize_dtype(r.dtype) == "float32"
    assert _orth_error(ops.convert_to_numpy(r)) < 1e-5


def test_newton_schulz_lowdin_orthogonal_at_d576_and_equals_polar():
    p = _random(576, seed=2)
    r = _apply(orthogonal.lowdin, p, newton_schulz_iters=orthogonal.DEFAULT_NEWTON_SCHULZ_ITERS)
    assert _orth_error(r) < 1e-5
    np.testing.assert_allclose(r, np_polar(p), atol=1e-4)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_matches_numpy_reference(name):
    p = _random(12, seed=3)
    got = _apply(orthogonal.get_orthogonalization(name), p)
    np.testing.assert_allclose(got, REFERENCES[name](p), atol=2e-5)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_batched_blocks_match_per_block(name):
    p = _random(6, seed=4, batch=(3,))
    got = _apply(orthogonal.get_orthogonalization(name), p)
    for i in range(3):
        np.testing.assert_allclose(got[i], REFERENCES[name](p[i]), atol=2e-5)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_gradient_matches_finite_differences(name):
    """Gradients flow through the map (unrolling) and equal central differences of the NumPy reference."""
    rng = np.random.default_rng(5)
    d = 5
    p = rng.standard_normal((d, d))
    weights = rng.standard_normal((d, d))
    fn = orthogonal.get_orthogonalization(name)
    _, grad = testing.value_and_grad(lambda q: ops.sum(ops.multiply(fn(q), weights.astype(np.float32))), p)
    numeric = testing.numeric_gradient(lambda q: np.sum(REFERENCES[name](q) * weights), p)
    np.testing.assert_allclose(grad, numeric, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("name", ["gram_schmidt", "householder"])
def test_qr_gradient_of_a_block_stack_matches_finite_differences_per_block(name):
    """The closed-form QR gradient (`_positive_diagonal_q`) on a (blocks, d, d) stack, as PE-OPT uses it, with
    negative and positive diagonals of R among the blocks."""
    rng = np.random.default_rng(7)
    p = rng.standard_normal((3, 6, 6))
    weights = rng.standard_normal((3, 6, 6))
    fn = orthogonal.get_orthogonalization(name)
    _, grad = testing.value_and_grad(lambda q: ops.sum(ops.multiply(fn(q), weights.astype(np.float32))), p)
    for i in range(3):
        numeric = testing.numeric_gradient(lambda q: np.sum(REFERENCES[name](q) * weights[i]), p[i])
        np.testing.assert_allclose(grad[i], numeric, atol=2e-3, rtol=2e-3)


@pytest.mark.parametrize("batch", [(), (3,)])
def test_cayley_product_is_the_rotation_times_v(batch):
    """`cayley_product(P, V)` = (I + S)(I − S)⁻¹·V (NumPy's explicit inverse), one matrix and a stack of blocks."""
    rng = np.random.default_rng(8)
    p = _random(10, seed=9, batch=batch)
    v = rng.standard_normal(batch + (10, 4)).astype(np.float32)
    got = ops.convert_to_numpy(orthogonal.cayley_product(ops.convert_to_tensor(p), ops.convert_to_tensor(v)))
    assert got.shape == batch + (10, 4) and got.dtype == np.float32
    expected = np.stack([np_cayley(b) @ vb for b, vb in zip(p.reshape(-1, 10, 10), v.reshape(-1, 10, 4))])
    np.testing.assert_allclose(got, expected.reshape(got.shape), atol=3e-5)


@pytest.mark.parametrize("batch", [(), (2,)])
def test_cayley_product_gradient_matches_finite_differences_in_p_and_v(batch):
    """The product's gradient (through one solve of I − S) equals central differences of (I + S)(I − S)⁻¹·V."""
    rng = np.random.default_rng(12)
    p = rng.standard_normal(batch + (6, 6))
    v = rng.standard_normal(batch + (6, 3))
    weights = rng.standard_normal(batch + (6, 3))

    def reference(q, vv):
        q, vv = q.reshape((-1, 6, 6)), vv.reshape((-1, 6, 3))
        return np.stack([np_cayley(qb) @ vb for qb, vb in zip(q, vv)]).reshape(batch + (6, 3))

    w = weights.astype(np.float32)
    _, grad_p = testing.value_and_grad(
        lambda q: ops.sum(ops.multiply(orthogonal.cayley_product(q, v.astype(np.float32)), w)), p)
    _, grad_v = testing.value_and_grad(
        lambda vv: ops.sum(ops.multiply(orthogonal.cayley_product(p.astype(np.float32), vv), w)), v)
    np.testing.assert_allclose(grad_p, testing.numeric_gradient(lambda q: np.sum(reference(q, v) * weights), p),
                               atol=2e-3, rtol=2e-3)
    np.testing.assert_allclose(grad_v, testing.numeric_gradient(lambda vv: np.sum(reference(p, vv) * weights), v),
                               atol=2e-3, rtol=2e-3)


def test_gram_schmidt_is_row_orientation_and_householder_column_orientation():
    p = _random(8, seed=6)
    gs = _apply(orthogonal.gram_schmidt, p)
    hr = _apply(orthogonal.householder, p)
    # GS: first row ∝ first row of P; HR: first column ∝ first column of P.
    np.testing.assert_allclose(gs[0], p[0] / np.linalg.norm(p[0]), atol=1e-6)
    np.testing.assert_allclose(hr[:, 0], p[:, 0] / np.linalg.norm(p[:, 0]), atol=1e-6)
    assert np.abs(gs - hr).max() > 1e-2


def test_classical_gram_schmidt_loop_matches_reference_and_qr_route():
    p = _random(16, seed=7)
    loop = _apply(orthogonal.classical_gram_schmidt, p)
    np.testing.assert_allclose(loop, np_gram_schmidt_rows(p), atol=1e-4)
    np.testing.assert_allclose(_apply(orthogonal.gram_schmidt, p), loop, atol=1e-4)


def test_lowdin_is_closest_orthogonal_matrix():
    p = _random(10, seed=8)
    r = _apply(orthogonal.lowdin, p)
    best = np.linalg.norm(r - p)
    for name in ("gram_schmidt", "householder", "cayley", "exp"):
        other = _apply(orthogonal.get_orthogonalization(name), p)
        assert best <= np.linalg.norm(other - p) + 1e-5


def test_cayley_and_exp_special_orthogonal_and_identity_at_zero():
    p = _random(9, seed=9)
    for fn in (orthogonal.cayley, orthogonal.exp):
        assert np.linalg.det(_apply(fn, p)) == pytest.approx(1.0, abs=1e-4)
        np.testing.assert_allclose(_apply(fn, np.zeros((9, 9))), np.eye(9), atol=1e-7)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_identity_raw_gives_identity(name):
    """merge_rotation relies on every map sending P = I to R = I."""
    np.testing.assert_allclose(_apply(orthogonal.get_orthogonalization(name), np.eye(7)), np.eye(7), atol=1e-6)


def test_orthogonality_penalty_matches_formula():
    r = _random(6, seed=10)
    gram = r.astype(np.float64).T @ r - np.eye(6)
    expected = np.sqrt(np.sum(gram**2))
    assert float(orthogonal.orthogonality_penalty(ops.convert_to_tensor(r))) == pytest.approx(expected, rel=1e-5)
    assert float(orthogonal.orthogonality_penalty(ops.convert_to_tensor(r), squared=True)) == pytest.approx(expected**2, rel=1e-5)
    # RᵀR and RRᵀ are equally far from I (the upstream code penalises RRᵀ).
    gram_t = r.astype(np.float64) @ r.T - np.eye(6)
    assert np.sqrt(np.sum(gram_t**2)) == pytest.approx(expected, rel=1e-6)


def test_orthogonality_penalty_finite_gradient_at_orthogonal_matrix():
    loss, grad = testing.value_and_grad(orthogonal.orthogonality_penalty, np.eye(5))
    assert np.all(np.isfinite(grad))
    assert loss < 1e-5


@given(
    hnp.arrays(
        np.float32,
        (4, 4),
        elements=st.sampled_from([0.0, 1.0, -1.0, 2.0, 1e-3, -1e3]),
    )
)
def test_degenerate_inputs_give_finite_orthogonal_outputs(p):
    """Rank-deficient, repeated or zero P: the QR/solve/expm/SVD routes stay finite and orthogonal."""
    for name in ("gram_schmidt", "householder", "cayley", "exp", "lowdin"):
        fn = orthogonal.get_orthogonalization(name)
        r = _apply(fn, p)
        assert np.all(np.isfinite(r)), name
        if name in ("cayley", "lowdin", "householder", "gram_schmidt"):
            assert _orth_error(r) < 1e-4, name
        if name == "lowdin":
            weights = np.arange(16, dtype=np.float32).reshape(4, 4)
            _, grad = testing.value_and_grad(lambda q: ops.sum(ops.multiply(fn(q), weights)), p)
            assert np.all(np.isfinite(grad))


@given(
    hnp.arrays(
        np.float32,
        (4, 4),
        elements=st.sampled_from([0.0, 1.0, -1.0, 2.0, 1e-3, -1e3]),
    )
)
def test_degenerate_inputs_give_a_finite_cayley_product_and_gradient(p):
    """Zero, repeated or huge P: W = R·V stays finite, keeps V's column norms (R is orthogonal), and so does the
    gradient to P."""
    v = np.arange(8, dtype=np.float32).reshape(4, 2) - 3.5
    w = _apply(lambda q: orthogonal.cayley_product(q, v), p)
    assert np.all(np.isfinite(w))
    np.testing.assert_allclose(np.linalg.norm(w, axis=0), np.linalg.norm(v, axis=0), rtol=1e-3)
    weights = np.arange(8, dtype=np.float32).reshape(4, 2)
    _, grad = testing.value_and_grad(lambda q: ops.sum(ops.multiply(orthogonal.cayley_product(q, v), weights)), p)
    assert np.all(np.isfinite(grad))


def test_registry_errors():
    with pytest.raises(ValueError, match="Unknown orthogonalization 'nope'"):
        orthogonal.get_orthogonalization("nope")
    with pytest.raises(KeyError, match="already registered"):
        orthogonal.register_orthogonalization("cayley", orthogonal.cayley)
    assert orthogonal.get_orthogonalization(orthogonal.cayley) is orthogonal.cayley


# ---------------------------------------------------------------- matrix exponential (XLA-compatible)


@pytest.mark.parametrize("d,scale", [(3, 0.1), (8, 1.0), (27, 1.0), (64, 30.0), (144, 1.0)])
def test_expm_matches_scipy(d, scale):
    """Padé-7 scaling and squaring against SciPy's float64 expm, general and skew-symmetric inputs."""
    rng = np.random.default_rng(d)
    a = scale * rng.standard_normal((d, d))
    for m in (a / max(d, 1) ** 0.5, np_skew(a)):
        ref = scipy.linalg.expm(m)
        got = _apply(orthogonal.expm, m.astype(np.float32))
        np.testing.assert_allclose(got, ref, atol=2e-5 * max(1.0, np.abs(ref).max()), rtol=1e-4)


def test_expm_of_a_block_stack_matches_per_block():
    rng = np.random.default_rng(3)
    s = np.stack([np_skew(rng.standard_normal((6, 6)) * k) for k in (0.1, 1.0, 5.0)])
    got = _apply(orthogonal.expm, s.astype(np.float32))
    for i in range(3):
        np.testing.assert_allclose(got[i], scipy.linalg.expm(s[i]), atol=2e-5)


def test_exp_gradient_matches_the_reference_after_several_squarings():
    """The squaring loop differentiates on every backend (a fixed-length loop, not a `lax.while_loop`)."""
    rng = np.random.default_rng(4)
    p = rng.standard_normal((12, 12)) * 3.0  # ‖S‖₁ well above θ₇: several squarings
    weights = rng.standard_normal((12, 12))
    loss, grad = testing.value_and_grad(lambda q: ops.sum(ops.multiply(orthogonal.exp(q), weights.astype(np.float32))), p)
    reference = lambda q: np.sum(scipy.linalg.expm(np_skew(q)) * weights)
    assert loss == pytest.approx(reference(p), rel=1e-4, abs=1e-4)
    np.testing.assert_allclose(grad, testing.numeric_gradient(reference, p), atol=1e-3, rtol=1e-3)


@pytest.mark.tensorflow_only
def test_exp_trains_under_xla_with_the_gradient_of_the_reference():
    """jit_compile=True compiles the forward and backward pass (the squaring loop has a fixed length)."""
    import tensorflow as tf  # noqa: PLC0415 (TensorFlow-only test)

    rng = np.random.default_rng(4)
    p = rng.standard_normal((12, 12)) * 3.0  # ‖S‖₁ well above θ₇: several squarings
    weights = rng.standard_normal((12, 12))

    @tf.function(jit_compile=True)
    def value_and_grad(q):
        with tf.GradientTape() as tape:
            tape.watch(q)
            loss = tf.reduce_sum(orthogonal.exp(q) * weights.astype(np.float32))
        return loss, tape.gradient(loss, q)

    loss, grad = value_and_grad(tf.constant(p.astype(np.float32)))
    reference = lambda q: np.sum(scipy.linalg.expm(np_skew(q)) * weights)
    assert float(loss) == pytest.approx(reference(p), rel=1e-4, abs=1e-4)
    np.testing.assert_allclose(grad.numpy(), testing.numeric_gradient(reference, p), atol=1e-3, rtol=1e-3)


def test_expm_squarings_are_capped():
    """Beyond 2^MAX_SQUARINGS·θ₇ the loop stops at its maximum: finite, and as orthogonal as 20 squarings allow.

    Uncapped, 25 squarings would amplify float32 rounding 32 times more (‖RᵀR − I‖ of order 1).
    """
    skew = np_skew(np.random.default_rng(5).standard_normal((4, 4)))
    l1 = np.abs(skew).sum(axis=0).max()
    huge = skew / l1 * orthogonal.PADE7_THETA * 2.0 ** (orthogonal.MAX_SQUARINGS + 5.5)  # s = MAX + 5
    got = _apply(orthogonal.expm, huge.astype(np.float32))
    assert np.all(np.isfinite(got))
    assert np.abs(got.T @ got - np.eye(4)).max() < 0.1


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_keras_variable_input_is_read(name):
    """OPT layers pass their `keras.Variable` P directly (the custom-gradient SVD must see a tensor)."""
    p = _random(5, seed=11)
    got = ops.convert_to_numpy(orthogonal.get_orthogonalization(name)(keras.Variable(p)))
    np.testing.assert_allclose(got, REFERENCES[name](p), atol=2e-5)
