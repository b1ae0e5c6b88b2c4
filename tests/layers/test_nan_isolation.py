"""One non-finite sample does not poison the others through E{‖x‖} (issue 36, item 4).

The operators with a radius r = ρ·E{‖x‖} (ball, tanh, seg; Liu et al., "Decoupled
Networks", CVPR 2018, eqs. 19-21) take E{‖x‖} over the training batch. It is the mean
patch norm over the samples whose patch norms are all finite: a NaN or inf sample's
own outputs stay non-finite, every other output is what the batch without that sample
gives, and the moving average learns from the finite samples only (a batch with none
leaves it unchanged). The reference is NumPy with explicit patch extraction, not the
code under test. Backend-neutral: run also with `KERAS_BACKEND=jax` and `torch`.
"""

import contextlib

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sphere_tf import testing
from sphere_tf.layers import DecoupledConv2D
from sphere_tf.layers import DecoupledDense

EPSILON = 1e-4  # the layers' default ε inside ‖x‖ = sqrt(Σ x² + ε) and ‖w‖
RHO_EPSILON = 1e-4  # ρ = ρ_raw² + 1e-4
BATCH = 8
BAD = 5  # the sample with the NaN pixel
CONV_SHAPE = (6, 6, 2)
DENSE_SHAPE = (5,)
KERNEL = 3
UNITS = 4

# h(‖x‖, r) of DCNet [D-4..10, D-19..21], α = 1, β = 0.5 ('seg'); None: no radius.
MAGNITUDES = {
    "tanh": lambda n, r: np.tanh(n / r),
    "ball": lambda n, r: np.minimum(n / r, 1.0),
    "seg": lambda n, r: np.minimum(n, r) + 0.5 * np.maximum(n - r, 0.0),
    "linear": None,  # the control: h = ‖x‖, no batch statistic
}
RADIUS_MAGNITUDES = [name for name, fn in MAGNITUDES.items() if fn is not None]


def _h(magnitude, norms, radius):
    fn = MAGNITUDES[magnitude]
    return norms if fn is None else fn(norms, radius)


def np_patches(x, k):
    """`(N, out_h, out_w, k·k·C)`: the 'valid' stride-1 k×k windows, flattened in the kernel's (kh, kw, C) order."""
    n, h, w, c = x.shape
    rows = [[x[:, i : i + k, j : j + k, :].reshape(n, -1) for j in range(w - k + 1)] for i in range(h - k + 1)]
    return np.stack([np.stack(row, axis=1) for row in rows], axis=1)


def np_operator(x, kernel, rho_raw, magnitude, groups=1):
    """Training output and E{‖x‖} per group of a decoupled operator with cosine g, float64.

    `x` is the batch the statistic is taken over (every sample of it counts), NHWC for a
    conv kernel `(k, k, C/groups, units)`, `(N, d)` for a dense kernel `(d, units)`.
    """
    x = x.astype(np.float64)
    kernel = kernel.astype(np.float64)
    units = kernel.shape[-1]
    per_in, per_out = x.shape[-1] // groups, units // groups
    rho = rho_raw.astype(np.float64) ** 2 + RHO_EPSILON
    outs, means = [], []
    for g in range(groups):
        xg = x[..., g * per_in : (g + 1) * per_in]
        wg = kernel[..., g * per_out : (g + 1) * per_out].reshape(-1, per_out)
        patches = np_patches(xg, kernel.shape[0]) if x.ndim == 4 else xg
        w_hat = wg / np.sqrt(np.sum(wg**2, axis=0) + EPSILON)
        norms = np.sqrt(np.sum(patches**2, axis=-1, keepdims=True) + EPSILON)
        mean = np.mean(norms)
        radius = rho[g * per_out : (g + 1) * per_out] * mean
        outs.append(_h(magnitude, norms, radius) * (patches @ w_hat) / norms)
        means.append(mean)
    return np.concatenate(outs, axis=-1), np.array(means)


CASES = {
    # name: (layer factory, input shape, groups)
    "conv": (lambda m, **kw: DecoupledConv2D(UNITS, KERNEL, magnitude=m, **kw), CONV_SHAPE, 1),
    "conv_grouped": (lambda m, **kw: DecoupledConv2D(UNITS, KERNEL, magnitude=m, groups=2, **kw), CONV_SHAPE, 2),
    "dense": (lambda m, **kw: DecoupledDense(UNITS, magnitude=m, **kw), DENSE_SHAPE, 1),
}


@pytest.fixture(params=testing.training_paths() + ["default"])
def path(request):
    """Each training-path implementation of this backend, and the default choice (the backend's plug-in)."""
    scope = contextlib.nullcontext() if request.param == "default" else testing.training_path(request.param)
    with scope:
        yield request.param


def _layer(case, magnitude, rng, **kwargs):
    make, shape, groups = CASES[case]
    layer = make(magnitude, **kwargs)
    layer.build((None, *shape))
    if layer.has_radius:  # ρ per filter away from 1, so a wrong radius per filter shows
        layer.rho_raw.assign(rng.uniform(0.5, 1.5, size=(UNITS,)).astype("float32"))
    return layer, shape, groups


def _state(layer):
    if not layer.has_radius:
        return None
    return {name: keras.ops.convert_to_numpy(getattr(layer, name)).copy()
            for name in ("norm_mean_biased", "norm_mean_weight", "norm_mean_skipped")}


def _run(layer, x):
    y = keras.ops.convert_to_numpy(layer(x, training=True)).astype(np.float64)
    norm_mean = None if not layer.has_radius else np.ravel(keras.ops.convert_to_numpy(layer.norm_mean()))
    return y, norm_mean


def _reference(layer, x, magnitude, groups):
    rho_raw = keras.ops.convert_to_numpy(layer.rho_raw) if layer.has_radius else np.ones(UNITS, "float32")
    return np_operator(x, keras.ops.convert_to_numpy(layer.kernel), rho_raw, magnitude, groups)


def _not_finite_per_sample(y):
    return ~np.all(np.isfinite(y.reshape(len(y), -1)), axis=1)


@pytest.mark.parametrize("magnitude", list(MAGNITUDES))
@pytest.mark.parametrize("case", list(CASES))
def test_nan_pixel_is_isolated_to_its_sample(case, magnitude, path, rng):
    layer, shape, groups = _layer(case, magnitude, rng)
    x = rng.normal(size=(BATCH, *shape)).astype("float32")
    x[BAD].flat[0] = np.nan  # one pixel of one channel (group 0) of one image
    y, norm_mean = _run(layer, x)

    clean = np.delete(np.arange(BATCH), BAD)
    expected, expected_mean = _reference(layer, x[clean], magnitude, groups)
    np.testing.assert_allclose(y[clean], expected, rtol=1e-5, atol=1e-5)
    assert list(_not_finite_per_sample(y)) == [i == BAD for i in range(BATCH)]
    if layer.has_radius:
        # One step of the zero-debiased average is the batch statistic itself.
        np.testing.assert_allclose(norm_mean, expected_mean, rtol=1e-5)
        assert float(keras.ops.convert_to_numpy(layer.norm_mean_skipped)) == 0.0


@pytest.mark.parametrize("magnitude", RADIUS_MAGNITUDES)
def test_compiled_train_step_keeps_the_clean_samples(magnitude, rng):
    # The same inside `fit`'s compiled step (graph / XLA / jax.jit / torch): the average after two batches,
    # the second with a NaN sample, is the debiased average of the first batch's and the clean samples' means.
    layer = DecoupledConv2D(UNITS, KERNEL, magnitude=magnitude, norm_momentum=0.9, name="op")
    model = keras.Sequential([keras.Input(CONV_SHAPE), layer, keras.layers.Flatten()])
    # The NaN batch's loss is NaN: the loss-scale optimizer skips its update, so the weights stay finite.
    model.compile(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.0)), "mse")
    x = rng.normal(size=(2 * BATCH, *CONV_SHAPE)).astype("float32")
    x[BATCH + BAD].flat[3] = np.nan
    kernel = keras.ops.convert_to_numpy(layer.kernel)
    rho_raw = keras.ops.convert_to_numpy(layer.rho_raw)
    out = (CONV_SHAPE[0] - KERNEL + 1) * (CONV_SHAPE[1] - KERNEL + 1) * UNITS
    model.fit(x, np.zeros((len(x), out), "float32"), batch_size=BATCH, shuffle=False, verbose=0)

    first = np_operator(x[:BATCH], kernel, rho_raw, magnitude)[1]
    second = np_operator(np.delete(x[BATCH:], BAD, axis=0), kernel, rho_raw, magnitude)[1]
    biased = 0.9 * (0.1 * first) + 0.1 * second
    np.testing.assert_allclose(np.ravel(keras.ops.convert_to_numpy(layer.norm_mean())), biased / (1 - 0.9**2),
                               rtol=1e-5)
    assert float(keras.ops.convert_to_numpy(layer.norm_mean_skipped)) == 0.0


def _degenerate_batch(kind, size, finite_index, bad_value, shape, rng):
    if kind == "all_zero":
        return np.zeros((size, *shape), "float32")
    x = np.full((size, *shape), bad_value, "float32")
    if kind == "one_finite":
        x[finite_index] = rng.normal(size=shape)
    return x


@given(
    case=st.sampled_from(list(CASES)),
    magnitude=st.sampled_from(RADIUS_MAGNITUDES),
    kind=st.sampled_from(["all_bad", "all_zero", "one_finite"]),
    size=st.sampled_from([1, 3, 8]),
    finite_index=st.integers(0, 7),
    bad_value=st.sampled_from([np.nan, np.inf, -np.inf]),
)
def test_degenerate_batches(case, magnitude, kind, size, finite_index, bad_value):
    rng = np.random.default_rng(0)
    layer, shape, groups = _layer(case, magnitude, rng, norm_momentum=0.5)
    layer.norm_mean_biased.assign(np.full(layer.norm_mean_biased.shape, 0.5, "float32"))  # a trained average
    layer.norm_mean_weight.assign(0.25)
    before = _state(layer)
    finite_index %= size
    x = _degenerate_batch(kind, size, finite_index, bad_value, shape, rng)
    y, norm_mean = _run(layer, x)
    after = _state(layer)

    if kind == "all_bad":
        # No finite sample: every output is non-finite, the average keeps its value and counts the batch.
        assert np.all(_not_finite_per_sample(y))
        for name in ("norm_mean_biased", "norm_mean_weight"):
            np.testing.assert_array_equal(after[name], before[name])
        assert after["norm_mean_skipped"] == before["norm_mean_skipped"] + 1
        return
    finite = np.arange(size) if kind == "all_zero" else np.array([finite_index])
    expected, expected_mean = _reference(layer, x[finite], magnitude, groups)
    np.testing.assert_allclose(y[finite], expected, rtol=1e-5, atol=1e-5)
    assert list(_not_finite_per_sample(y)) == [i not in finite for i in range(size)]
    m = layer.norm_momentum
    np.testing.assert_allclose(norm_mean, (m * 0.5 + (1 - m) * expected_mean) / (m * 0.25 + (1 - m)), rtol=1e-5)
    assert after["norm_mean_skipped"] == before["norm_mean_skipped"]
