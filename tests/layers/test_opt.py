"""Tests for sphere_tf.layers.opt (OPTConv2D, OPTDense, PE-OPT, S-OPT, fold) vs NumPy references."""

import inspect

import keras
import numpy as np
import pytest
from keras import ops
import scipy.linalg

from sphere_tf import testing
from sphere_tf import layers as sphere_layers
from sphere_tf.layers import opt as opt_lib
from sphere_tf.optimizers import OPTOptimizer

EXACT = ("gram_schmidt", "householder", "lowdin", "cayley", "exp")
ORTHOGONALIZATIONS_ALL = EXACT + ("ogd", "soft")
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

# ---------------------------------------------------------------- NumPy references


def np_energy(kernel, power=2.0):
    """Mean Riesz s-energy over ordered pairs of the normalised neurons, explicit double loop [T-7.2]."""
    w = np.asarray(kernel, np.float64).reshape(-1, np.shape(kernel)[-1])
    w = w / np.linalg.norm(w, axis=0, keepdims=True)
    n = w.shape[1]
    total = 0.0
    for i in range(n):
        for j in range(n):
            if i != j:
                total += np.linalg.norm(w[:, i] - w[:, j]) ** (-power)
    return total / (n * (n - 1))


def _np_positive_qr(a):
    q, r = np.linalg.qr(a)
    return q * np.where(np.diag(r) < 0, -1.0, 1.0)


def _np_skew(p):
    return np.triu(p) - np.triu(p).T


def _np_polar(p):
    u, _, vt = np.linalg.svd(p)
    return u @ vt


# R(P) of each orthogonalisation from its definition (float64 NumPy/SciPy), for training references.
NP_ROTATIONS = {
    "gram_schmidt": lambda p: _np_positive_qr(p.T).T,
    "householder": _np_positive_qr,
    "lowdin": _np_polar,
    "cayley": lambda p: np.linalg.solve(np.eye(len(p)) - _np_skew(p), np.eye(len(p)) + _np_skew(p)),
    "exp": lambda p: scipy.linalg.expm(_np_skew(p)),
    "soft": lambda p: p,
}


def np_conv2d_valid(x, kernel, stride=1):
    """Explicit-loop VALID convolution (HWIO kernel)."""
    n, h, w, _ = x.shape
    kh, kw, _, cout = kernel.shape
    oh, ow = (h - kh) // stride + 1, (w - kw) // stride + 1
    out = np.zeros((n, oh, ow, cout))
    for b in range(n):
        for i in range(oh):
            for j in range(ow):
                patch = x[b, i * stride : i * stride + kh, j * stride : j * stride + kw, :]
                for o in range(cout):
                    out[b, i, j, o] = np.sum(patch * kernel[..., o])
    return out


def np_block_rotation(blocks, kh, kw, cin, k):
    """Full R for PE-OPT built from its definition: Pᵀ·blockdiag(blocks)·P with an explicit permutation.

    Group g holds input channels [g·cin/k, (g+1)·cin/k) at every (h, w); inside a group the
    sub-neuron is ordered (h, w, c), and the Keras HWIO row of (h, w, c) is (h·kw + w)·cin + c.
    """
    d = kh * kw * cin
    group = cin // k
    order = []
    for g in range(k):
        for h in range(kh):
            for w in range(kw):
                for c in range(g * group, (g + 1) * group):
                    order.append((h * kw + w) * cin + c)
    perm = np.zeros((d, d))
    for new_row, old_row in enumerate(order):
        perm[new_row, old_row] = 1.0
    blocks = np.asarray(blocks, np.float64)
    if blocks.ndim == 2:
        blocks = np.stack([blocks] * k)
    b = d // k
    block_diag = np.zeros((d, d))
    for g in range(k):
        block_diag[g * b : (g + 1) * b, g * b : (g + 1) * b] = blocks[g]
    return perm.T @ block_diag @ perm


def _orth_error(r):
    r = np.asarray(r, np.float64)
    return np.abs(r.T @ r - np.eye(len(r))).max()


def _data(seed=0, n=32, shape=(6, 6, 3), classes=4):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n,) + shape).astype("float32"), rng.integers(0, classes, n).astype("int32")


def _cnn(**opt_kwargs):
    return keras.Sequential(
        [
            keras.Input((6, 6, 3)),
            opt_lib.OPTConv2D(8, 3, padding="same", seed=0, name="conv", **opt_kwargs),
            keras.layers.BatchNormalization(),
            keras.layers.ReLU(),
            keras.layers.Flatten(),
            opt_lib.OPTDense(6, activation="relu", seed=1, name="fc", **opt_kwargs),
            keras.layers.Dense(4),
        ]
    )


def _optimizer(orthogonalization):
    sgd = keras.optimizers.SGD(0.05, momentum=0.9)
    return OPTOptimizer(sgd) if orthogonalization == "ogd" else sgd


def _compile(model, orthogonalization):
    model.compile(optimizer=_optimizer(orthogonalization), loss=LOSS)


def _train(model, orthogonalization, steps=3):
    """A few eager training steps (no tracing: the tests stay fast), with the layers' losses, on every backend."""
    model.compile(optimizer=_optimizer(orthogonalization), loss=LOSS, run_eagerly=True)
    x, y = _data(n=8)
    for _ in range(steps):
        model.train_on_batch(x, y)


# ---------------------------------------------------------------- forward correctness


@pytest.mark.parametrize("orthogonalization", opt_lib.ORTHOGONALIZATIONS)
def test_conv_forward_matches_numpy_with_rv(orthogonalization):
    layer = opt_lib.OPTConv2D(4, 3, strides=2, orthogonalization=orthogonalization, seed=3)
    x, _ = _data(shape=(7, 7, 2), n=2)
    y = ops.convert_to_numpy(layer(x))
    v = ops.convert_to_numpy(layer.fixed_kernel).reshape(-1, 4).astype(np.float64)
    r = ops.convert_to_numpy(layer.rotation()).astype(np.float64)
    kernel = (r @ v).reshape(3, 3, 2, 4)
    expected = np_conv2d_valid(x.astype(np.float64), kernel, stride=2) + ops.convert_to_numpy(layer.bias)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)


def test_dense_forward_matches_numpy():
    layer = opt_lib.OPTDense(3, activation="relu", seed=4)
    x = np.random.default_rng(1).standard_normal((5, 7)).astype("float32")
    layer.build((None, 7))
    layer.bias.assign(np.array([0.1, -0.2, 0.3], "float32"))
    y = ops.convert_to_numpy(layer(x))
    w = ops.convert_to_numpy(layer.rotation()) @ ops.convert_to_numpy(layer.fixed_kernel)
    np.testing.assert_allclose(y, np.maximum(x @ w + ops.convert_to_numpy(layer.bias), 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("orthogonalization", EXACT)
def test_rotation_orthogonal_at_d576(orthogonalization):
    layer = opt_lib.OPTConv2D(4, 3, orthogonalization=orthogonalization, seed=5)
    layer.build((None, 5, 5, 64))
    assert layer.rotation_param.shape == (576, 576)
    assert _orth_error(ops.convert_to_numpy(layer.rotation_blocks())) < 1e-5


def test_weights_and_initialisation():
    layer = opt_lib.OPTConv2D(64, 3, seed=0)
    layer.build((None, 8, 8, 64))
    assert [w.name for w in layer.trainable_weights] == ["rotation", "bias"]
    assert [w.name for w in layer.non_trainable_weights] == ["fixed_kernel"]
    v = ops.convert_to_numpy(layer.fixed_kernel)
    assert v.shape == (3, 3, 64, 64)
    # Upstream: V ~ N(0, 2/fan_in) untruncated; raw R ~ N(0, 1).
    assert np.std(v) == pytest.approx(np.sqrt(2 / 576), rel=0.02)
    assert np.abs(v).max() > 2.5 * np.sqrt(2 / 576)  # not truncated at 2σ
    assert np.std(ops.convert_to_numpy(layer.rotation_param)) == pytest.approx(1.0, rel=0.02)
    ogd = opt_lib.OPTDense(3, orthogonalization="ogd")
    ogd.build((None, 5))
    assert ogd.rotation_param.name == "ogd_rotation"
    np.testing.assert_array_equal(ops.convert_to_numpy(ogd.rotation_param), np.eye(5))


# ---------------------------------------------------------------- training: V fixed, energy invariant


@pytest.mark.parametrize("orthogonalization", EXACT + ("ogd", "soft"))
def test_training_keeps_v_and_energy(orthogonalization):
    """V never changes; for the exact variants E(W) = E(V) after training steps [T-7.2]."""
    model = _cnn(orthogonalization=orthogonalization)
    layers = opt_lib.opt_layers(model)
    v_before = [ops.convert_to_numpy(layer.fixed_kernel).copy() for layer in layers]
    r_before = [ops.convert_to_numpy(layer.rotation_param).copy() for layer in layers]
    _train(model, orthogonalization)
    for layer, v0, r0 in zip(layers, v_before, r_before):
        np.testing.assert_array_equal(ops.convert_to_numpy(layer.fixed_kernel), v0)
        assert np.abs(ops.convert_to_numpy(layer.rotation_param) - r0).max() > 1e-6  # R did train
        if orthogonalization != "soft":
            assert _orth_error(ops.convert_to_numpy(layer.rotation())) < 1e-5
            for power in (1.0, 2.0):
                assert np_energy(ops.convert_to_numpy(layer.effective_kernel()), power) == pytest.approx(
                    np_energy(v0, power), abs=1e-5
                )


def test_learnable_fixed_kernel_trains_v_and_the_rotation():
    """Table 7.1's "FN = N" rows: V is a trainable weight too (and by default it is not)."""
    model = _cnn(orthogonalization="gram_schmidt", learnable_fixed_kernel=True)
    layers = opt_lib.opt_layers(model)
    assert all(any(v is layer.fixed_kernel for v in layer.trainable_variables) for layer in layers)
    v_before = [ops.convert_to_numpy(layer.fixed_kernel).copy() for layer in layers]
    _train(model, "gram_schmidt")
    for layer, v0 in zip(layers, v_before):
        assert np.abs(ops.convert_to_numpy(layer.fixed_kernel) - v0).max() > 1e-6  # V trained
        assert _orth_error(ops.convert_to_numpy(layer.rotation())) < 1e-5  # R stays orthogonal
    testing.assert_config_roundtrip(opt_lib.OPTConv2D(3, 2, learnable_fixed_kernel=True))
    default = opt_lib.OPTDense(2)
    default.build((None, 3))
    assert not any(v is default.fixed_kernel for v in default.trainable_variables)


def test_mean_shifted_v_raises_the_initial_energy():
    """Table 7.2 of Liu's thesis: shifting the mean of V's He-normal draw raises its hyperspherical energy."""
    from sphere_tf.initializers import MeanShifted  # noqa: PLC0415

    energies = []
    for mean in (0.0, 0.02, 0.05):
        layer = opt_lib.OPTConv2D(32, 3, fixed_kernel_initializer=MeanShifted(mean, seed=0))
        layer.build((None, 8, 8, 16))
        energies.append(np_energy(ops.convert_to_numpy(layer.fixed_kernel), 2.0))
    assert energies[0] < energies[1] < energies[2]


def test_soft_penalty_is_added_to_losses():
    for squared in (False, True):
        layer = opt_lib.OPTDense(3, orthogonalization="soft", soft_penalty=0.1, soft_squared=squared, seed=0)
        layer.build((None, 4))
        p = ops.convert_to_numpy(layer.rotation_param).astype(np.float64)
        norm = np.sqrt(np.sum((p.T @ p - np.eye(4)) ** 2))
        expected = 0.1 * (norm**2 if squared else norm)
        assert float(sum(layer.losses)) == pytest.approx(expected, rel=1e-5)
    gs = opt_lib.OPTDense(3)
    gs.build((None, 4))
    assert gs.losses == []


# ---------------------------------------------------------------- PE-OPT


@pytest.mark.parametrize("share_blocks", [False, True])
def test_pe_opt_block_structure_matches_numpy_construction(share_blocks):
    kh, kw, cin, k = 2, 3, 4, 2
    layer = opt_lib.OPTConv2D(5, (kh, kw), num_blocks=k, share_blocks=share_blocks, seed=6)
    layer.build((None, 6, 6, cin))
    b = kh * kw * cin // k
    assert layer.rotation_param.shape == ((b, b) if share_blocks else (k, b, b))
    expected_r = np_block_rotation(ops.convert_to_numpy(layer.rotation_blocks()), kh, kw, cin, k)
    np.testing.assert_allclose(ops.convert_to_numpy(layer.rotation()), expected_r, atol=1e-6)
    v = ops.convert_to_numpy(layer.fixed_kernel).reshape(-1, 5).astype(np.float64)
    np.testing.assert_allclose(ops.convert_to_numpy(layer.effective_kernel()).reshape(-1, 5), expected_r @ v, atol=1e-5)
    assert _orth_error(expected_r) < 1e-5
    # Contiguous row blocks are NOT channel groups: the naive block-diagonal differs.
    naive = np.zeros_like(expected_r)
    blocks = np.asarray(ops.convert_to_numpy(layer.rotation_blocks()))
    for g in range(k):
        naive[g * b : (g + 1) * b, g * b : (g + 1) * b] = blocks if share_blocks else blocks[g]
    assert np.abs(naive - expected_r).max() > 1e-2


@pytest.mark.parametrize("share_blocks", [False, True])
@pytest.mark.parametrize("orthogonalization", ["cayley", "gram_schmidt"])
def test_pe_opt_kernel_from_the_raw_blocks(orthogonalization, share_blocks):
    """W from the raw trainable blocks alone: NumPy's R(P) per block, placed by channel group, times V (Cayley takes
    its direct product, Gram-Schmidt the matmul)."""
    kh, kw, cin, k = 3, 3, 4, 2
    layer = opt_lib.OPTConv2D(5, (kh, kw), num_blocks=k, share_blocks=share_blocks,
                              orthogonalization=orthogonalization, seed=9)
    layer.build((None, 6, 6, cin))
    raw = ops.convert_to_numpy(layer.rotation_param).astype(np.float64)
    rotate = NP_ROTATIONS[orthogonalization]
    blocks = rotate(raw) if share_blocks else np.stack([rotate(block) for block in raw])
    expected_r = np_block_rotation(blocks, kh, kw, cin, k)
    v = ops.convert_to_numpy(layer.fixed_kernel).reshape(-1, 5).astype(np.float64)
    np.testing.assert_allclose(ops.convert_to_numpy(layer.effective_kernel()).reshape(-1, 5), expected_r @ v, atol=1e-4)
    np.testing.assert_allclose(ops.convert_to_numpy(layer.rotation()), expected_r, atol=1e-4)


def test_pe_opt_dense_uses_contiguous_blocks():
    layer = opt_lib.OPTDense(3, num_blocks=3, seed=7)
    layer.build((None, 6))
    np.testing.assert_allclose(
        ops.convert_to_numpy(layer.rotation()),
        np_block_rotation(ops.convert_to_numpy(layer.rotation_blocks()), 1, 1, 6, 3),
        atol=1e-6,
    )


@pytest.mark.parametrize(
    "k, shared, independent",
    [(1, 331776, 331776), (2, 82944, 165888), (4, 20736, 82944), (8, 5184, 41472), (16, 1296, 20736),
     (32, 324, 10368), (64, 81, 5184)],
)
def test_pe_opt_parameter_counts_match_thesis_tables(k, shared, independent):
    """Tables F.4 / F.5: d = 3·3·64 = 576, R_s has d²/k² and R_u d²/k parameters."""
    counts = []
    for share in (True, False):
        layer = opt_lib.OPTConv2D(2, 3, num_blocks=k, share_blocks=share, orthogonalization="ogd")
        layer.build((None, 4, 4, 64))
        counts.append(int(np.prod(layer.rotation_param.shape)))
    assert counts == [shared, independent]


# ---------------------------------------------------------------- S-OPT


def test_sopt_rotates_only_sampled_rows_and_merges():
    layer = opt_lib.OPTConv2D(5, 3, stochastic_dims=7, seed=8)
    layer.build((None, 6, 6, 2))
    idx = ops.convert_to_numpy(layer.stochastic_indices)
    assert len(set(idx.tolist())) == 7
    layer.rotation_param.assign(np.random.default_rng(0).standard_normal((7, 7)).astype("float32"))
    q = ops.convert_to_numpy(layer.rotation_blocks())
    r = ops.convert_to_numpy(layer.rotation())
    expected = np.eye(18)
    expected[np.ix_(idx, idx)] = q
    np.testing.assert_allclose(r, expected, atol=1e-6)
    v = ops.convert_to_numpy(layer.fixed_kernel).reshape(18, 5)
    w = ops.convert_to_numpy(layer.effective_kernel()).reshape(18, 5)
    rest = np.setdiff1d(np.arange(18), idx)
    np.testing.assert_array_equal(w[rest], v[rest])
    np.testing.assert_allclose(w[idx], q @ v[idx], atol=1e-5)
    energy = np_energy(v)
    layer.start_episode(np.random.default_rng(1))
    np.testing.assert_allclose(ops.convert_to_numpy(layer.fixed_kernel).reshape(18, 5), w, atol=1e-6)  # merged
    np.testing.assert_array_equal(ops.convert_to_numpy(layer.rotation_param), np.eye(7))  # R̃ = I
    np.testing.assert_allclose(ops.convert_to_numpy(layer.effective_kernel()).reshape(18, 5), w, atol=1e-6)
    assert not np.array_equal(ops.convert_to_numpy(layer.stochastic_indices), idx)
    assert np_energy(ops.convert_to_numpy(layer.fixed_kernel)) == pytest.approx(energy, abs=1e-5)


def test_sopt_cayley_kernel_from_the_raw_rotation():
    layer = opt_lib.OPTConv2D(5, 3, stochastic_dims=7, orthogonalization="cayley", seed=10)
    layer.build((None, 6, 6, 2))
    raw = np.random.default_rng(2).standard_normal((7, 7))
    layer.rotation_param.assign(raw.astype("float32"))
    idx = ops.convert_to_numpy(layer.stochastic_indices)
    v = ops.convert_to_numpy(layer.fixed_kernel).reshape(18, 5).astype(np.float64)
    expected = v.copy()
    expected[idx] = NP_ROTATIONS["cayley"](raw) @ v[idx]
    np.testing.assert_allclose(ops.convert_to_numpy(layer.effective_kernel()).reshape(18, 5), expected, atol=1e-5)


# ---------------------------------------------------------------- refined V


def test_normalize_fixed_kernel_gives_unit_neurons():
    layer = opt_lib.OPTConv2D(6, 3, normalize_fixed_kernel=True, seed=9)
    layer.build((None, 5, 5, 3))
    norms = np.linalg.norm(ops.convert_to_numpy(layer.fixed_kernel).reshape(-1, 6), axis=0)
    np.testing.assert_allclose(norms, 1.0, atol=1e-6)


@pytest.mark.parametrize("energy_init", ["mhe", "half_space_mhe"])
def test_energy_init_lowers_energy_and_keeps_norms(energy_init):
    kwargs = dict(seed=10, energy_init_steps=50)
    plain = opt_lib.OPTDense(12, seed=10)
    plain.build((None, 4))
    refined = opt_lib.OPTDense(12, energy_init=energy_init, **kwargs)
    refined.build((None, 4))
    v0, v1 = ops.convert_to_numpy(plain.fixed_kernel), ops.convert_to_numpy(refined.fixed_kernel)
    np.testing.assert_allclose(np.linalg.norm(v1, axis=0), np.linalg.norm(v0, axis=0), rtol=1e-5)
    assert np_energy(v1) < np_energy(v0) - 1e-3
    if energy_init == "half_space_mhe":
        both = np.concatenate([v1, -v1], axis=1)
        both0 = np.concatenate([v0, -v0], axis=1)
        assert np_energy(both) < np_energy(both0)


# ---------------------------------------------------------------- fold / export


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"orthogonalization": "cayley", "num_blocks": 3}, {"orthogonalization": "ogd", "stochastic_dims": 5}],
)
def test_fold_sequential_reproduces_outputs(kwargs):
    model = _cnn(**kwargs)
    _train(model, kwargs.get("orthogonalization"), steps=2)
    x, _ = _data()
    folded = sphere_layers.fold_opt_model(model)
    assert not opt_lib.opt_layers(folded)
    assert [type(layer).__name__ for layer in folded.layers][:1] == ["Conv2D"]
    np.testing.assert_allclose(ops.convert_to_numpy(folded(x, training=False)),
                               ops.convert_to_numpy(model(x, training=False)), atol=1e-5, rtol=1e-5)


def test_fold_functional_and_subclassed_error(tmp_path):
    inputs = keras.Input((6, 6, 3))
    h = opt_lib.OPTConv2D(4, 3, seed=0)(inputs)
    h = keras.layers.GlobalAveragePooling2D()(h)
    outputs = opt_lib.OPTDense(3, orthogonalization="householder", seed=1)(h)
    model = keras.Model(inputs, outputs)
    x, _ = _data(n=4)
    folded = sphere_layers.fold_opt_model(model)
    np.testing.assert_allclose(ops.convert_to_numpy(folded(x)), ops.convert_to_numpy(model(x)), atol=1e-5, rtol=1e-5)
    if keras.backend.backend() == "tensorflow":  # SavedModel export is the TensorFlow backend's
        testing.assert_saved_model_roundtrip(folded, x, tmp_path / "folded", rtol=1e-5, atol=1e-5)
        testing.assert_saved_model_roundtrip(model, x, tmp_path / "opt", rtol=1e-5, atol=1e-5)  # unfolded too

    class Sub(keras.Model):
        def __init__(self):
            super().__init__()
            self.d = opt_lib.OPTDense(2)

        def call(self, x):
            return self.d(x)

    sub = Sub()
    sub(np.zeros((1, 3), "float32"))
    with pytest.raises(ValueError, match="Sequential or functional"):
        sphere_layers.fold_opt_model(sub)
    plain = sub.d.fold()
    np.testing.assert_allclose(ops.convert_to_numpy(plain(np.ones((1, 3), "float32"))),
                               ops.convert_to_numpy(sub(np.ones((1, 3), "float32"))), atol=1e-6)


# ---------------------------------------------------------------- Keras citizenship


@pytest.mark.parametrize(
    "kwargs",
    [
        {"orthogonalization": "ogd"},
        {"orthogonalization": "lowdin", "newton_schulz_iters": 20, "num_blocks": 3, "share_blocks": True},
        {"orthogonalization": "soft", "soft_squared": True, "stochastic_dims": 4},
    ],
)
def test_keras_roundtrip(kwargs, tmp_path):
    model = _cnn(**kwargs)
    _compile(model, kwargs["orthogonalization"])
    x, y = _data(n=8)
    if kwargs["orthogonalization"] == "ogd":  # with `fit` and the routed optimizer's state
        model.fit(x, y, batch_size=8, epochs=1, verbose=0)
    else:
        _train(model, kwargs["orthogonalization"], steps=1)
    reloaded = testing.assert_keras_roundtrip(model, x, tmp_path, rtol=1e-5, atol=1e-5)
    for a, b in zip(opt_lib.opt_layers(model), opt_lib.opt_layers(reloaded)):
        np.testing.assert_array_equal(ops.convert_to_numpy(a.fixed_kernel), ops.convert_to_numpy(b.fixed_kernel))
    testing.assert_config_roundtrip(opt_lib.OPTConv2D(3, 2, **kwargs))


def test_mixed_precision_orthogonalises_in_float32():
    x, _ = _data(n=4)
    ref = _cnn()
    ref_out = ops.convert_to_numpy(ref(x))
    keras.mixed_precision.set_global_policy("mixed_float16")
    model = _cnn()
    model.set_weights(ref.get_weights())
    out = model(x)
    assert keras.backend.standardize_dtype(out.dtype) == "float16"
    layer = opt_lib.opt_layers(model)[0]
    assert layer.rotation_param.dtype == "float32"
    assert keras.backend.standardize_dtype(layer.effective_kernel().dtype) == "float32"
    np.testing.assert_allclose(ops.convert_to_numpy(out).astype(np.float32), ref_out, rtol=2e-2, atol=2e-2)


def test_subclassed_model_and_compiled_predict_parity():
    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.conv = opt_lib.OPTConv2D(4, 3, orthogonalization="cayley", seed=0)
            self.pool = keras.layers.GlobalAveragePooling2D()

        def call(self, x):
            return self.pool(self.conv(x))

    net = Net()
    x, _ = _data(n=3)
    eager = ops.convert_to_numpy(net(x))
    # `predict` runs the backend's compiled function (tf.function, jax.jit; eager on PyTorch).
    np.testing.assert_allclose(net.predict(x, verbose=0), eager, atol=1e-6)
    assert len(opt_lib.opt_layers(net)) == 1


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"orthogonalization": "qr"}, "Invalid value for argument `orthogonalization`"),
        ({"num_blocks": 0}, "Invalid value for argument `num_blocks`"),
        ({"stochastic_dims": -1}, "Invalid value for argument `stochastic_dims`"),
        ({"stochastic_dims": 4, "num_blocks": 2}, "Invalid value for argument `stochastic_dims`"),
        ({"newton_schulz_iters": 5}, "Invalid value for argument `newton_schulz_iters`"),
        ({"soft_penalty": -0.1}, "Invalid value for argument `soft_penalty`"),
        ({"energy_init": "thomson"}, "Invalid value for argument `energy_init`"),
        ({"energy_init_lr": 0.0}, "Invalid value for argument `energy_init_lr`"),
        ({"seed": 1.5}, "Invalid value for argument `seed`"),
        ({"learnable_fixed_kernel": "yes"}, "Invalid value for argument `learnable_fixed_kernel`"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        opt_lib.OPTDense(3, **kwargs)


def test_bad_build_arguments():
    with pytest.raises(ValueError, match="Invalid value for argument `num_blocks`"):
        opt_lib.OPTConv2D(2, 3, num_blocks=3).build((None, 5, 5, 4))
    with pytest.raises(ValueError, match="Invalid value for argument `stochastic_dims`"):
        opt_lib.OPTDense(2, stochastic_dims=9).build((None, 4))
    with pytest.raises(ValueError, match="Invalid value for argument `filters`"):
        opt_lib.OPTConv2D(0, 3)
    with pytest.raises(ValueError, match="Invalid value for argument `padding`"):
        opt_lib.OPTConv2D(2, 3, padding="causal")


@pytest.mark.tensorflow_only  # building inside a trace is TF graph mode's; Keras builds eagerly on JAX and PyTorch
def test_energy_init_when_built_inside_a_trace_matches_eager_build():
    import tensorflow as tf  # noqa: PLC0415

    eager = opt_lib.OPTDense(6, energy_init="mhe", energy_init_steps=20, seed=11)
    eager.build((None, 5))
    traced = opt_lib.OPTDense(6, energy_init="mhe", energy_init_steps=20, seed=11)
    tf.function(traced)(np.ones((2, 5), "float32"))
    np.testing.assert_allclose(
        ops.convert_to_numpy(traced.fixed_kernel), ops.convert_to_numpy(eager.fixed_kernel), atol=1e-6
    )


# ---------------------------------------------------------------- Keras's own layer harness and XLA


HARNESS_CASES = [
    {"orthogonalization": name} for name in ORTHOGONALIZATIONS_ALL
] + [
    {"orthogonalization": "lowdin", "newton_schulz_iters": 10},
    {"orthogonalization": "cayley", "num_blocks": 2},
    {"orthogonalization": "exp", "num_blocks": 2, "share_blocks": True},
    {"orthogonalization": "householder", "stochastic_dims": 5},
    {"orthogonalization": "gram_schmidt", "normalize_fixed_kernel": True},
]


@pytest.mark.parametrize("kwargs", HARNESS_CASES, ids=lambda k: "-".join(f"{v}" for v in k.values()))
def test_keras_layer_harness_conv(kwargs, keras_harness):
    extra = kwargs.get("stochastic_dims") is not None
    keras_harness.run_layer_test(
        opt_lib.OPTConv2D,
        init_kwargs={"filters": 3, "kernel_size": 2, "padding": "same", "seed": 0, **kwargs},
        input_shape=(2, 4, 4, 2),
        expected_output_shape=(2, 4, 4, 3),
        expected_num_trainable_weights=2,
        expected_num_non_trainable_weights=2 if extra else 1,
        expected_num_losses=1 if kwargs["orthogonalization"] == "soft" else 0,
    )


@pytest.mark.parametrize("orthogonalization", ORTHOGONALIZATIONS_ALL)
def test_keras_layer_harness_dense(orthogonalization, keras_harness):
    keras_harness.run_layer_test(
        opt_lib.OPTDense,
        init_kwargs={"units": 3, "orthogonalization": orthogonalization, "activation": "relu", "seed": 0},
        input_shape=(2, 5, 4),
        expected_output_shape=(2, 5, 3),
        expected_num_trainable_weights=2,
        expected_num_non_trainable_weights=1,
        expected_num_losses=1 if orthogonalization == "soft" else 0,
    )


def _np_train_step_reference(layer_cls, kwargs, x, y, lr):
    """One SGD step on W = R(P)·V computed outside the layer: R from NumPy/SciPy maps, dL/dP by finite differences."""
    layer = layer_cls(**kwargs)
    layer.build(x.shape)
    p0 = ops.convert_to_numpy(layer.rotation_param).astype(np.float64)
    v = ops.convert_to_numpy(layer.fixed_kernel).astype(np.float64)
    bias = ops.convert_to_numpy(layer.bias).astype(np.float64)
    rotation = NP_ROTATIONS[kwargs["orthogonalization"]]

    def loss(p):
        w = rotation(p) @ v
        out = x.astype(np.float64) @ w + bias
        return np.mean((out - y) ** 2)

    grad = testing.numeric_gradient(loss, p0, step=1e-6)
    return layer, p0 - lr * grad


@pytest.mark.parametrize("orthogonalization", EXACT + ("soft",))
def test_jit_compiled_fit_matches_a_numpy_sgd_step(orthogonalization):
    """`fit` with jit_compile=True (XLA) trains every orthogonalisation; one step equals a NumPy SGD step."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 4)).astype("float32")
    y = rng.standard_normal((8, 3)).astype("float32")
    kwargs = {"units": 3, "orthogonalization": orthogonalization, "seed": 5, "soft_penalty": 0.0}
    lr = 0.1
    layer, expected_p = _np_train_step_reference(opt_lib.OPTDense, kwargs, x, y, lr)
    model = keras.Sequential([keras.Input((4,)), layer])
    model.compile(optimizer=keras.optimizers.SGD(lr), loss="mse", jit_compile=True)
    model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    np.testing.assert_allclose(ops.convert_to_numpy(layer.rotation_param), expected_p, atol=2e-5)


@pytest.mark.parametrize("orthogonalization", ORTHOGONALIZATIONS_ALL)
def test_jit_compiled_fit_of_a_conv_model(orthogonalization):
    """A conv model with every orthogonalisation fits under jit_compile=True and R stays orthogonal."""
    # Small enough for XLA's CPU SVD ('lowdin'), which is far slower than LAPACK's at d of a few hundred.
    model = keras.Sequential(
        [
            keras.Input((4, 4, 2)),
            opt_lib.OPTConv2D(4, 3, padding="same", seed=0, orthogonalization=orthogonalization),
            keras.layers.BatchNormalization(),
            keras.layers.ReLU(),
            keras.layers.Flatten(),
            opt_lib.OPTDense(6, activation="relu", seed=1, orthogonalization=orthogonalization),
            keras.layers.Dense(4),
        ]
    )
    model.compile(optimizer=_optimizer(orthogonalization), loss=LOSS, jit_compile=True)
    x, y = _data(n=16, shape=(4, 4, 2))
    layers = opt_lib.opt_layers(model)
    before = [ops.convert_to_numpy(layer.rotation_param).copy() for layer in layers]
    history = model.fit(x, y, batch_size=8, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    for layer, p0 in zip(layers, before):
        assert np.abs(ops.convert_to_numpy(layer.rotation_param) - p0).max() > 1e-6
        if orthogonalization != "soft":
            assert _orth_error(ops.convert_to_numpy(layer.rotation())) < 1e-4


# ---------------------------------------------------------------- constructor and geometry


def test_constructors_have_explicit_signatures():
    for cls, first in ((opt_lib.OPTConv2D, "filters"), (opt_lib.OPTDense, "units")):
        params = inspect.signature(cls.__init__).parameters
        assert list(params)[1] == first
        for name in ("orthogonalization", "activation", "num_blocks", "stochastic_dims", "energy_init", "seed"):
            assert name in params, (cls.__name__, name)
        assert "orthogonalization" in cls.__doc__ and "seed" in cls.__doc__


@pytest.mark.parametrize("padding", ["SAME", "Same", "VALID"])
def test_padding_in_any_case_matches_conv2d(padding):
    layer = opt_lib.OPTConv2D(3, 3, strides=2, padding=padding, seed=0)
    x, _ = _data(n=2, shape=(7, 8, 2))
    out = layer(x)
    assert layer.padding == padding.lower()
    plain = keras.layers.Conv2D(3, 3, strides=2, padding=padding.lower())
    plain.build(x.shape)
    plain.kernel.assign(layer.effective_kernel())
    plain.bias.assign(layer.bias)
    np.testing.assert_allclose(ops.convert_to_numpy(out), ops.convert_to_numpy(plain(x)), atol=1e-5)
    assert layer.compute_output_shape((None, 7, 8, 2)) == plain.compute_output_shape((None, 7, 8, 2))


def test_input_smaller_than_the_kernel_raises_the_conv2d_error():
    with pytest.raises(ValueError, match="Computed output size would be zero or negative"):
        opt_lib.OPTConv2D(3, 3)(np.zeros((1, 2, 2, 1), "float32"))
    with pytest.raises(ValueError, match="Computed output size would be zero or negative"):
        keras.Sequential([keras.Input((2, 5, 1)), opt_lib.OPTConv2D(3, 3, dilation_rate=2)])
