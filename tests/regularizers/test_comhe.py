"""Tests for sphere_tf.regularizers.CoMHE: NumPy references for every projection type."""

import itertools
import math

import keras
import numpy as np
import pytest

from sphere_tf import energy
from sphere_tf import regularizers
from sphere_tf.regularizers import comhe
from sphere_tf import testing
from sphere_tf.ops import autodiff

from tests.gradient_helpers import to_numpy
from tests.gradient_helpers import value_and_grads


def np_hs_energy(w2d, power=2, eps=1e-4, half_space=True):
    """Half-space energy (code form) by explicit loops over the 2N points; float64."""
    w2d = np.asarray(w2d, np.float64)
    pts = [w2d[:, i] / math.sqrt(np.sum(w2d[:, i] ** 2) + eps) for i in range(w2d.shape[1])]
    if half_space:
        pts = pts + [-p for p in pts]
    vals = [max(2 - 2 * float(np.dot(pts[i], pts[j])), 1e-6) ** (-power / 2)
            for i, j in itertools.permutations(range(len(pts)), 2)]
    return float(np.mean(vals))


def np_unit_columns(w2d, eps=1e-4):
    w2d = np.asarray(w2d, np.float64)
    return w2d / np.sqrt(np.sum(w2d**2, axis=0, keepdims=True) + eps)


def test_low_dimensional_layer_is_plain_half_space_mhe(rng):
    w = rng.standard_normal((3, 3, 3, 8)).astype(np.float32)  # d = 27 <= 30
    reg = regularizers.CoMHE()
    np.testing.assert_allclose(float(reg(w)), np_hs_energy(w.reshape(-1, 8)), rtol=2e-5)
    mhe = regularizers.MHE(half_space=True)
    np.testing.assert_allclose(float(reg(w)), float(mhe(w)), rtol=1e-6)


@pytest.mark.parametrize("k", [12, 20])
def test_orthogonal_projection_equals_mhe(rng, k):
    """P with orthonormal rows spanning the neurons' space preserves all angles."""
    d, n = 12, 5
    w = rng.standard_normal((d, n)).astype(np.float32)
    q, _ = np.linalg.qr(rng.standard_normal((k, k)))
    p = q[:, :d]  # (k, d) with orthonormal columns: ‖Px‖ = ‖x‖
    reg = regularizers.CoMHE(projection_dim=k - 1)  # d > projection_dim is irrelevant here
    got = float(reg.projected_energy(w, np.stack([p, p]).astype(np.float32)))
    # The raw kernel is projected (rmlin/CoMHE), so ‖Pw‖ = ‖w‖ and the same ε give MHE itself.
    np.testing.assert_allclose(got, float(regularizers.MHE(half_space=True)(w)), rtol=1e-5)
    np.testing.assert_allclose(got, np_hs_energy(w), rtol=2e-5)


def test_random_projection_value_matches_reference(rng):
    w = rng.standard_normal((3, 3, 8, 6)).astype(np.float32)  # d = 72
    for aggregation in ("mean", "max"):
        reg = regularizers.CoMHE(projection_dim=10, num_projections=3, aggregation=aggregation, seed=7)
        got = float(reg(w))  # plain tensor: step stays 0
        p = to_numpy(reg.random_projections(72, 0))
        assert p.shape == (3, 10, 72)
        # Upstream order (rmlin/CoMHE `random_projection/architecture.py`): project the raw kernel, then normalise.
        per = [np_hs_energy(p[c] @ w.reshape(-1, 6)) for c in range(3)]
        want = max(per) if aggregation == "max" else np.mean(per)
        np.testing.assert_allclose(got, want, rtol=1e-4)
    # Entries are N(0, 1).
    big = to_numpy(regularizers.CoMHE(projection_dim=30, num_projections=5).random_projections(400, 3))
    assert abs(big.mean()) < 0.02 and abs(big.std() - 1) < 0.02


def test_resampling_changes_and_reproduces(rng):
    w = rng.standard_normal((40, 6)).astype(np.float32)

    def run(seed, resample_every=1, steps=6):
        reg = regularizers.CoMHE(projection_dim=5, num_projections=2, seed=seed, resample_every=resample_every)
        var = keras.Variable(w, name="kernel")
        return [float(reg(var)) for _ in range(steps)], reg

    values, reg = run(seed=1)
    assert len(set(values)) == len(values)  # a new P every step
    assert int(reg.step.numpy()) == 6
    assert values == run(seed=1)[0]
    assert values != run(seed=2)[0]
    every3, _ = run(seed=1, resample_every=3)
    assert every3[0] == every3[1] and every3[2] != every3[1] and every3[2] == every3[4]
    p1, p2 = to_numpy(reg.random_projections(40, 1)), to_numpy(reg.random_projections(40, 2))
    assert not np.allclose(p1, p2)


def test_cached_draw_equals_a_fresh_draw_in_every_step(rng):
    # resample_every > 1 keeps a block's P in a cache variable; every step's value must
    # still be the energy under that block's draw (inside a tf.function on TensorFlow), and two layers
    # of equal dimension read the same cached P.
    w1 = rng.standard_normal((40, 6)).astype(np.float32)
    w2 = rng.standard_normal((40, 5)).astype(np.float32)
    reg = regularizers.CoMHE(projection_dim=5, num_projections=2, seed=3, resample_every=3)
    var1, var2 = keras.Variable(w1, name="kernel_a"), keras.Variable(w2, name="kernel_b")
    step_fn = lambda: (reg(var1), reg(var2))  # noqa: E731
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf  # noqa: PLC0415  (graph mode is TensorFlow's own case)

        step_fn = tf.function(step_fn)
    values = []
    for step in range(1, 8):
        got1, got2 = step_fn()
        p = to_numpy(reg.random_projections(40, step))  # the draw of block step // 3
        for got, w in ((got1, w1), (got2, w2)):
            want = np.mean([np_hs_energy(p[c] @ w) for c in range(2)])
            np.testing.assert_allclose(float(got), want, rtol=1e-4)
        values.append(float(got1))
    assert int(reg.step.numpy()) == 7
    # Steps 1–2 share block 0, 3–5 block 1, 6–7 block 2.
    assert values[0] == values[1] and values[2] == values[3] == values[4] and values[5] == values[6]
    assert len({values[0], values[2], values[5]}) == 3


def test_projection_of_normalized_and_raw_kernel_agree(rng):
    """Eq 6.4 normalises ŵ before P; upstream projects raw W. Equal up to where ε sits (here ≪ 1e-5)."""
    w = (3.0 * rng.standard_normal((50, 7))).astype(np.float32)
    p = rng.standard_normal((2, 8, 50)).astype(np.float32)
    reg = regularizers.CoMHE(projection_dim=8, num_projections=2)
    got = float(reg.projected_energy(w, p))
    np.testing.assert_allclose(got, np.mean([np_hs_energy(p[c] @ w) for c in range(2)]), rtol=2e-5)
    np.testing.assert_allclose(got, np.mean([np_hs_energy(p[c] @ np_unit_columns(w)) for c in range(2)]), rtol=1e-4)


def _np_normal_cdf(x):
    return 0.5 * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


@pytest.mark.parametrize("shape", [(3, 40, 501), (7,)])
def test_standard_normal_sampler_is_iid_gaussian_and_reproducible(shape):
    from sphere_tf.regularizers import comhe

    seed = keras.ops.convert_to_tensor(np.array([5, 9]), "int32")
    z = to_numpy(comhe.standard_normal(shape, seed))
    assert z.shape == shape and z.dtype == np.float32 and np.all(np.isfinite(z))
    np.testing.assert_array_equal(z, to_numpy(comhe.standard_normal(shape, seed)))
    other = keras.ops.convert_to_tensor(np.array([5, 10]), "int32")
    assert not np.allclose(z, to_numpy(comhe.standard_normal(shape, other)))
    if len(shape) > 1:
        flat = np.sort(z.ravel().astype(np.float64))
        m = flat.size
        # Kolmogorov–Smirnov distance to N(0, 1): 1.63/sqrt(m) is the 1% critical value.
        cdf = _np_normal_cdf(flat)
        ks = max(np.max(np.arange(1, m + 1) / m - cdf), np.max(cdf - np.arange(m) / m))
        assert ks < 1.63 / math.sqrt(m), ks
        # The two Box–Muller halves (cos and sin of one pair) are uncorrelated, also in their squares.
        half = m // 2
        a, b = z.ravel()[:half], z.ravel()[half : 2 * half]
        assert abs(np.corrcoef(a, b)[0, 1]) < 4 / math.sqrt(half)
        assert abs(np.corrcoef(a**2, b**2)[0, 1]) < 4 / math.sqrt(half)
        assert abs(np.mean(z**4) - 3.0) < 0.1  # Gaussian kurtosis


@pytest.mark.parametrize("share", [True, False])
def test_layers_of_equal_dimension_share_projections(rng, share):
    w1 = rng.standard_normal((3, 3, 4, 5)).astype(np.float32)
    w2 = rng.standard_normal((3, 3, 4, 7)).astype(np.float32)  # same d = 36, other width
    reg = regularizers.CoMHE(projection_dim=6, num_projections=2, share_projections=share, seed=3)
    v1, v2 = keras.Variable(w1, name="a"), keras.Variable(w2, name="b")
    e1, e2 = float(reg(v1)), float(reg(v2))  # one "step": v1 leads, advances to step 1
    shared = to_numpy(reg.random_projections(36, 1))
    want1 = np.mean([np_hs_energy(shared[c] @ w1.reshape(-1, 5)) for c in range(2)])
    want2 = np.mean([np_hs_energy(shared[c] @ w2.reshape(-1, 7)) for c in range(2)])
    if share:
        np.testing.assert_allclose([e1, e2], [want1, want2], rtol=1e-4)
    else:
        assert abs(e1 - want1) > 1e-4 * want1 and abs(e2 - want2) > 1e-4 * want2


def test_group_comhe_matches_reference(rng):
    w = rng.standard_normal((3, 3, 20, 6)).astype(np.float32)
    reg = regularizers.CoMHE(projection="group", group_size=8)
    groups = [w[:, :, s : s + 8, :].reshape(-1, 6) for s in (0, 8, 16)]
    np.testing.assert_allclose(float(reg(w)), np.mean([np_hs_energy(g) for g in groups]), rtol=2e-5)
    dense = rng.standard_normal((16, 4)).astype(np.float32)
    np.testing.assert_allclose(float(reg(dense)), np.mean([np_hs_energy(dense[s : s + 8]) for s in (0, 8)]),
                               rtol=2e-5)


def _np_angle_loss(p, u):
    def cos_gram(m):
        m = m / np.sqrt(np.sum(m**2, axis=0, keepdims=True) + 1e-4)
        return m.T @ m

    return math.sqrt(np.sum((cos_gram(p @ u) - cos_gram_raw(u)) ** 2) + 1e-12)


def cos_gram_raw(u):
    # u already has columns w/sqrt(|w|^2+eps); the reference cosine of W uses the same normalisation.
    return u.T @ u


def test_angle_preserving_unrolled_value_and_own_step(rng):
    d, n, k, lr = 8, 4, 3, 0.05
    w = rng.standard_normal((d, n)).astype(np.float32)
    reg = regularizers.CoMHE(projection="angle_preserving", projection_dim=k, inner_lr=lr, projection_decay=0.0)
    got = float(reg(w))  # plain array: P is created lazily, keyed by shape
    (p_var,) = reg.projection_variables().values()
    # Recreate the initial P from the seed, then the unrolled step by central finite differences.
    p0 = comhe.initial_projection(f"dim{d}x{n}", 0, k, d)
    p0 = p0.astype(np.float64)
    u = np_unit_columns(w)
    p1 = p0 - lr * testing.numeric_gradient(lambda q: _np_angle_loss(q, u), p0)
    np.testing.assert_allclose(got, np_hs_energy(p1 @ u), rtol=1e-3)
    # P took one own SGD step (same gradient, decay 0) and is not trainable.
    np.testing.assert_allclose(p_var.numpy(), p1, rtol=1e-3, atol=1e-4)
    assert not p_var.trainable


def test_angle_preserving_gradient_of_a_call_that_also_steps_p(rng):
    """One differentiated call both uses P (the unrolled value) and takes P's own step, as in a train step.

    The kernel gradient is that of the P the call started from (float64 finite differences), and P moves
    by its own step. On PyTorch a variable's tensor is its storage: the step's in-place assignment once
    overwrote the P autograd had saved for the backward pass ("modified by an inplace operation").
    """
    d, n, k, lr = 8, 4, 3, 0.05
    w = rng.standard_normal((d, n)).astype(np.float32)
    reg = regularizers.CoMHE(projection="angle_preserving", projection_dim=k, inner_lr=lr, projection_decay=0.0)
    (p_var,) = reg.checkpoint_state([w]).values()  # P at its initial value, keyed by shape
    p0 = comhe.initial_projection(f"dim{d}x{n}", 0, k, d).astype(np.float64)
    np.testing.assert_allclose(to_numpy(p_var), p0, rtol=1e-6)
    value, (grad,), _ = testing.gradients(reg, [w], state=[p_var])
    w64 = w.astype(np.float64)
    np.testing.assert_allclose(value, _np_unrolled_ap_value(w64, p0, lr), rtol=1e-4)
    want = testing.numeric_gradient(lambda v: _np_unrolled_ap_value(v, p0, lr), w64, step=1e-4)
    np.testing.assert_allclose(grad, want, rtol=2e-3, atol=1e-3 * np.max(np.abs(want)))
    # P took its own SGD step (decay 0) on the frozen W.
    p1 = p0 - lr * testing.numeric_gradient(lambda q: _np_angle_loss(q, np_unit_columns(w64)), p0)
    np.testing.assert_allclose(to_numpy(p_var), p1, rtol=1e-3, atol=1e-4)


def test_angle_preserving_in_a_model_excludes_projection_from_optimizer(rng, tmp_path):
    reg = regularizers.CoMHE(projection="angle_preserving", projection_dim=4)
    model = keras.Sequential([keras.Input((6, 6, 3)), keras.layers.Conv2D(6, 3, kernel_regularizer=reg),
                              keras.layers.Flatten(), keras.layers.Dense(2)])
    regularizers.track_state(model)  # P becomes layer state (JAX's train step must carry it)
    model.compile(keras.optimizers.SGD(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = rng.standard_normal((8, 6, 6, 3)).astype(np.float32), rng.integers(0, 2, 8)
    model.fit(x, y, epochs=1, batch_size=4, verbose=0)
    (p_var,) = reg.projection_variables().values()
    before = p_var.numpy().copy()
    model.fit(x, y, epochs=1, batch_size=4, verbose=0)
    assert not np.allclose(before, p_var.numpy())  # updated by its own step
    assert all(v is not p_var for v in model.trainable_variables + model.weights)  # not the optimizer's
    assert sum(v is p_var for v in model.non_trainable_variables) == 1
    # The learned P survives a .keras round trip through the regularizer config.
    path = str(tmp_path / "ap.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    reg2 = reloaded.layers[0].kernel_regularizer
    key = next(iter(reg.projection_variables()))
    np.testing.assert_allclose(np.array(reg2.get_config()["projection_state"][key]), p_var.numpy(), rtol=1e-6)


def test_unrolled_gradient_has_second_order_term(rng):
    w = rng.standard_normal((10, 5)).astype(np.float32)
    grads = []
    for unroll in (True, False):
        reg = regularizers.CoMHE(projection="angle_preserving", projection_dim=4, unroll=unroll,
                                 projection_steps=0, inner_lr=0.5)
        grads.append(value_and_grads(reg, w)[1][0])
        assert np.all(np.isfinite(grads[-1]))
    assert not np.allclose(grads[0], grads[1], rtol=1e-3)


def test_adversarial_projection_ascends(rng):
    w = rng.standard_normal((12, 5)).astype(np.float32)
    # seed=2: a first P whose projected neurons are well apart, so a step of 0.01 is small
    # against the energy's curvature (near-duplicates, as seeds 0 and 1 draw, overshoot).
    reg = regularizers.CoMHE(projection="adversarial", projection_dim=3, inner_lr=0.01, projection_lr=0.01,
                             half_space=False, seed=2)
    value = float(reg(w))
    (p_var,) = reg.projection_variables().values()
    p0 = comhe.initial_projection("dim12x5", 2, 3, 12)
    u = np_unit_columns(w)
    assert value > np_hs_energy(p0 @ u, half_space=False)  # unrolled ascent step
    assert np_hs_energy(p_var.numpy() @ u, half_space=False) > np_hs_energy(p0 @ u, half_space=False)


@pytest.mark.parametrize(
    "projection,resample_every", [("random", 1), ("random", 2), ("angle_preserving", 1)]
)
@pytest.mark.tensorflow_only
def test_fit_under_mirrored_strategy_and_roundtrip(rng, tmp_path, projection, resample_every):
    import tensorflow as tf  # noqa: PLC0415  (tf.distribute)

    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    with strategy.scope():
        reg = regularizers.CoMHE(projection=projection, projection_dim=8, num_projections=2,
                                 resample_every=resample_every)
        model = keras.Sequential([keras.Input((6, 6, 4)), keras.layers.Conv2D(6, 3, kernel_regularizer=reg),
                                  keras.layers.Conv2D(6, 3, kernel_regularizer=reg),
                                  keras.layers.Flatten(), keras.layers.Dense(2)])
        model.compile(keras.optimizers.SGD(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = rng.standard_normal((8, 6, 6, 4)).astype(np.float32), rng.integers(0, 2, 8)
    history = model.fit(x, y, epochs=2, batch_size=4, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    path = str(tmp_path / "rp.keras")
    model.save(path)
    reloaded = keras.saving.load_model(path)
    config = reloaded.layers[0].kernel_regularizer.get_config()
    if projection == "random":
        step = int(reg.step.numpy())
        assert step >= 4  # advanced once per train step, not once per layer
        assert config["step"] == step
    else:
        learned = reg.projection_variables()
        assert len(learned) == 2  # one P per layer (not shared, as upstream)
        for key, var in learned.items():
            np.testing.assert_allclose(np.array(config["projection_state"][key]), var.numpy(), rtol=1e-6)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"projection": "learned"}, "`projection`"),
        ({"projection_dim": 0}, "`projection_dim`"),
        ({"num_projections": 0}, "`num_projections`"),
        ({"aggregation": "sum"}, "`aggregation`"),
        ({"resample_every": 0}, "`resample_every`"),
        ({"inner_lr": 0.0}, "`inner_lr`"),
        ({"projection_steps": -1}, "`projection_steps`"),
        ({"group_size": 0}, "`group_size`"),
        ({"factor": -1}, "`factor`"),
    ],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        regularizers.CoMHE(**kwargs)


def test_config_roundtrip():
    reg = regularizers.CoMHE(projection="random", projection_dim=20, num_projections=3, aggregation="max",
                             resample_every=5, seed=9)
    clone = regularizers.CoMHE.from_config(reg.get_config())
    assert clone.get_config() == reg.get_config()
    assert regularizers.CoMHE(projection="angle_preserving").num_projections == 1
    assert regularizers.CoMHE(projection="adversarial").projection_steps == 10


def _np_unrolled_ap_value(w, p0, lr):
    """AP-CoMHE unrolled value in float64: P' = P0 − lr ∂L_P/∂P (central differences), E(P'Ŵ)."""
    u = np_unit_columns(w)
    grad = testing.numeric_gradient(lambda q: _np_angle_loss(q, u), p0)
    return np_hs_energy((p0 - lr * grad) @ u)


def test_angle_preserving_unrolled_gradient_matches_nested_finite_differences(rng, monkeypatch):
    """The unrolled step's W-gradient (second-order term through the one-matmul Gram gradient) against
    finite differences of a NumPy reference, and against the generic matmul gradient (float32 rounding)."""
    d, n, k, lr = 6, 4, 3, 0.3
    w = rng.standard_normal((d, n))
    wt = keras.ops.convert_to_tensor(w.astype(np.float32))

    def value_and_grad(graph):
        reg = regularizers.CoMHE(projection="angle_preserving", projection_dim=k, inner_lr=lr, projection_steps=0)

        def fn(v):
            return autodiff.value_and_grad(reg, v)

        value, grad = (autodiff.compiled(fn) if graph else fn)(wt)
        return float(value), to_numpy(grad)

    p0 = comhe.initial_projection(f"dim{d}x{n}", 0, k, d)
    p0 = p0.astype(np.float64)
    value, grad = value_and_grad(graph=False)
    np.testing.assert_allclose(value, _np_unrolled_ap_value(w, p0, lr), rtol=1e-4)
    want = testing.numeric_gradient(lambda v: _np_unrolled_ap_value(v, p0, lr), w, step=1e-4)
    np.testing.assert_allclose(grad, want, rtol=2e-3, atol=1e-3 * np.max(np.abs(want)))
    graph_value, graph_grad = value_and_grad(graph=True)
    # The generic gradient of the same forward product as `energy.gram` (an einsum): this value amplifies
    # float32 rounding about tenfold, and on PyTorch a matmul's rounding already differs from the einsum's.
    monkeypatch.setattr(energy, "gram", lambda x, scale=1.0: keras.ops.einsum("...kn,...km->...nm", scale * x, x))
    for graph in (False, True):
        ref_value, ref_grad = value_and_grad(graph)
        np.testing.assert_allclose(value if not graph else graph_value, ref_value, rtol=1e-6)
        np.testing.assert_allclose(grad if not graph else graph_grad, ref_grad, rtol=1e-5,
                                   atol=1e-6 * np.max(np.abs(ref_grad)))


@pytest.mark.parametrize("aggregation", ["mean", "max"])
def test_random_projection_gradient_matches_finite_differences(rng, aggregation):
    """RP-CoMHE (batched Gram with the one-matmul gradient) against float64 finite differences."""
    d, n = 40, 6
    w = rng.standard_normal((d, n))
    reg = regularizers.CoMHE(projection_dim=10, num_projections=3, aggregation=aggregation, seed=3)
    p = to_numpy(reg.random_projections(d, 0)).astype(np.float64)
    agg = np.max if aggregation == "max" else np.mean

    def np_value(w):
        return float(agg([np_hs_energy(p[c] @ w) for c in range(3)]))

    value, (grad,) = value_and_grads(lambda v: reg.projected_energy(v, p.astype(np.float32)), w.astype(np.float32))
    np.testing.assert_allclose(float(value), np_value(w), rtol=2e-5)
    want = testing.numeric_gradient(np_value, w)
    np.testing.assert_allclose(grad, want, rtol=2e-3, atol=1e-5)


def test_adversarial_unrolled_gradient_matches_nested_finite_differences(rng, monkeypatch):
    """Adv-CoMHE differentiates the energy (and so `energy.gram`'s custom gradient) twice."""
    d, n, k, lr = 6, 4, 3, 0.05
    w = rng.standard_normal((d, n))
    wt = keras.ops.convert_to_tensor(w.astype(np.float32))
    p0 = comhe.initial_projection(f"dim{d}x{n}", 0, k, d)
    p0 = p0.astype(np.float64)

    def np_value(w):
        u = np_unit_columns(w)
        grad = testing.numeric_gradient(lambda q: np_hs_energy(q @ u, half_space=False), p0)
        return np_hs_energy((p0 + lr * grad) @ u)  # ascent on the full-space energy, then half-space E

    def value_and_grad(graph):
        reg = regularizers.CoMHE(projection="adversarial", projection_dim=k, inner_lr=lr, projection_steps=0)

        def fn(v):
            return autodiff.value_and_grad(reg, v)

        value, grad = (autodiff.compiled(fn) if graph else fn)(wt)
        return float(value), to_numpy(grad)

    value, grad = value_and_grad(graph=True)
    np.testing.assert_allclose(value, np_value(w), rtol=1e-4)
    want = testing.numeric_gradient(np_value, w, step=1e-4)
    np.testing.assert_allclose(grad, want, rtol=2e-3, atol=1e-3 * np.max(np.abs(want)))
    monkeypatch.setattr(energy, "gram", lambda x, scale=1.0: keras.ops.matmul(keras.ops.swapaxes(scale * x, -1, -2), x))
    ref_value, ref_grad = value_and_grad(graph=True)
    np.testing.assert_allclose(value, ref_value, rtol=1e-5)  # float32 rounding of a nested step
    np.testing.assert_allclose(grad, ref_grad, rtol=1e-5, atol=1e-6 * np.max(np.abs(ref_grad)))


def np_upstream_half_log_energy(w2d):
    """wy1iu/MHE `_add_thomson_constraint(..., model='half_mhe', power='0')` in float64 (rmlin/CoMHE applies the
    same function to the projected kernel P·W): −log(2 − 2cos + I) over the strict upper triangle of the 2N
    points {w, −w}, divided by 2N(2N − 1)/2."""
    filt = np.asarray(w2d, np.float64)
    filt = np.concatenate([filt, -filt], axis=1)
    n = filt.shape[1]
    norm = np.sqrt(np.sum(filt * filt, axis=0, keepdims=True) + 1e-4)
    final = -np.log(2.0 - 2.0 * (filt.T @ filt) / (norm.T @ norm) + np.eye(n))
    return float(np.sum(np.triu(final, k=1)) / (n * (n - 1) / 2))


@pytest.mark.parametrize("log_form,scale", [("code", 1.0), ("thesis", 0.5)])
def test_log_energy_random_projection_equals_upstream(rng, log_form, scale):
    """CoMHE with s = 0: the upstream −log z² term (code form) on each projection, or half of it (thesis)."""
    d, n = 40, 5
    w = rng.standard_normal((d, n))
    reg = regularizers.CoMHE(power=0, projection_dim=10, num_projections=3, log_form=log_form, seed=2)
    p = to_numpy(reg.random_projections(d, 0)).astype(np.float64)

    def np_value(v):
        return scale * float(np.mean([np_upstream_half_log_energy(p[c] @ v) for c in range(3)]))

    value, (grad,) = value_and_grads(reg, w.astype(np.float32))  # a plain tensor (no Keras path): step 0
    np.testing.assert_allclose(float(value), np_value(w), rtol=2e-5)
    want = testing.numeric_gradient(np_value, w)
    np.testing.assert_allclose(grad, want, rtol=2e-3, atol=1e-4 * np.max(np.abs(want)))


@pytest.mark.parametrize("projection", ["random", "group"])
def test_log_energy_without_projection_equals_upstream(rng, projection):
    """A layer with d <= projection_dim (or one channel group) gets plain half-space MHE, upstream form."""
    w = rng.standard_normal((3, 3, 2, 6))  # d = 18
    reg = regularizers.CoMHE(power=0, projection=projection, projection_dim=30, group_size=8)
    np.testing.assert_allclose(float(reg(w.astype(np.float32))), np_upstream_half_log_energy(w.reshape(-1, 6)),
                               rtol=2e-5)
