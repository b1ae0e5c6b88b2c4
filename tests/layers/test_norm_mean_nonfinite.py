"""A non-finite training batch is left out of the operators' E{‖x‖} moving average (issue 23, item 8).

One NaN sample made the batch mean ‖x‖ NaN, the moving average kept it, and every
later inference output of TanhConv / BallConv was NaN. Since issue 36 (item 4) the
batch mean leaves out the non-finite samples (tests/layers/test_nan_isolation.py),
so only a batch without one finite sample has a NaN mean: such batches are used
here. The reference is a NumPy
EMA of the clean batches' mean patch norms (the first layer's ‖x‖ depends on the
data only), written out here. Backend-neutral (keras + NumPy): run also with
`KERAS_BACKEND=jax`.
"""

import os
import warnings

import keras
import numpy as np
import pytest

from sphere_tf import callbacks
from sphere_tf.layers import DecoupledConv2D
from sphere_tf.layers import DecoupledDense

MOMENTUM = 0.9
EPSILON = 1e-4  # the layers' default ε inside ‖x‖ = sqrt(Σ x² + ε)
BATCH = 4
DATA = os.path.join(os.path.dirname(__file__), "data", "decoupled_before_skip_counter")


def np_conv_norm_means(x, k, groups):
    """Mean over (batch, rows, cols) of ‖x_patch‖ per channel group, 'valid' k×k windows, stride 1."""
    n, h, w, c = x.shape
    per = c // groups
    means = []
    for g in range(groups):
        xg = x[..., g * per : (g + 1) * per].astype(np.float64)
        norms = [np.sqrt(np.sum(xg[:, i : i + k, j : j + k, :] ** 2, axis=(1, 2, 3)) + EPSILON)
                 for i in range(h - k + 1) for j in range(w - k + 1)]
        means.append(np.mean(norms))
    return np.array(means)


def np_dense_norm_means(x, groups):
    return np.array([np.mean(np.sqrt(np.sum(x.astype(np.float64) ** 2, axis=1) + EPSILON))])


def np_debiased_ema(batch_means):
    """Zero-debiased EMA b_t / (1 − m^t) of the batch means (DecoupledConv2D, Note)."""
    biased, weight = np.zeros_like(batch_means[0]), 0.0
    for mean in batch_means:
        biased = MOMENTUM * biased + (1.0 - MOMENTUM) * mean
        weight = MOMENTUM * weight + (1.0 - MOMENTUM)
    return biased / weight


CASES = {
    "tanh_conv": (lambda: DecoupledConv2D(3, 3, magnitude="tanh", norm_momentum=MOMENTUM, name="op"),
                  (6, 6, 2), lambda x: np_conv_norm_means(x, 3, 1)),
    "ball_conv_grouped": (lambda: DecoupledConv2D(4, 3, magnitude="ball", groups=2, norm_momentum=MOMENTUM,
                                                  name="op"),
                          (6, 6, 2), lambda x: np_conv_norm_means(x, 3, 2)),
    "tanh_dense": (lambda: DecoupledDense(3, magnitude="tanh", norm_momentum=MOMENTUM, name="op"),
                   (5,), lambda x: np_dense_norm_means(x, 1)),
}


def _model(case):
    make_layer, shape, _ = CASES[case]
    inputs = keras.Input(shape)
    model = keras.Model(inputs, keras.layers.Flatten()(make_layer()(inputs)))
    # The loss of the NaN batch is NaN: the loss-scale optimizer skips that update (as under mixed
    # precision), so the weights stay finite and only the moving average is at stake.
    model.compile(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.01)), "mse")
    return model


def _batches(shape, nan_batch, rng, num_batches=4):
    x = rng.normal(size=(num_batches * BATCH, *shape)).astype("float32")
    if nan_batch is not None:
        # Channel 0 of every sample of that batch: no sample has finite patch norms, so no finite mean.
        x[nan_batch * BATCH : (nan_batch + 1) * BATCH, ..., 0] = np.nan
    return x


@pytest.mark.parametrize("case", ["tanh_conv", "ball_conv_grouped", "tanh_dense"])
def test_nan_batch_is_left_out_of_the_moving_average(case, rng):
    _, shape, np_means = CASES[case]
    model = _model(case)
    x = _batches(shape, nan_batch=2, rng=rng)
    y = np.zeros((len(x), *model.output.shape[1:]), "float32")
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)

    layer = model.get_layer("op")
    clean = [np_means(x[i : i + BATCH]) for i in range(0, len(x), BATCH) if i != 2 * BATCH]
    expected = np_debiased_ema(clean)
    np.testing.assert_allclose(np.ravel(keras.ops.convert_to_numpy(layer.norm_mean())), expected, rtol=1e-5)
    assert float(keras.ops.convert_to_numpy(layer.norm_mean_skipped)) == 1.0
    clean_x = rng.normal(size=(BATCH, *shape)).astype("float32")
    assert np.all(np.isfinite(model.predict(clean_x, verbose=0)))


def test_callback_warns_once_per_layer(rng):
    model = _model("ball_conv_grouped")
    x = _batches((6, 6, 2), nan_batch=1, rng=rng)
    y = np.zeros((len(x), *model.output.shape[1:]), "float32")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(x, y, batch_size=BATCH, epochs=2, shuffle=False, verbose=0,
                  callbacks=[callbacks.WarnOnSkippedNormMean()])
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    assert len([m for m in messages if "'op' left" in m]) == 1, messages
    assert "'op' left 1 training batch(es)" in messages[0]  # at the end of the first epoch; silent after
    assert callbacks.norm_mean.skipped_counts(model) == {"op": 2.0}


def test_callback_is_silent_on_clean_data(rng):
    model = _model("ball_conv_grouped")
    x = _batches((6, 6, 2), nan_batch=None, rng=rng)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model.fit(x, np.zeros((len(x), *model.output.shape[1:]), "float32"), batch_size=BATCH, verbose=0,
                  callbacks=[callbacks.WarnOnSkippedNormMean()])
    assert not [w for w in caught if "E{‖x‖}" in str(w.message)]


def test_file_saved_before_the_counter_loads():
    # Written by the code before this change (commit 9c64df5): a TanhConv with a non-trainable ρ,
    # a grouped BallConv and a BallConv dense layer, trained two steps; the inputs, the predictions and
    # each layer's E{‖x‖} are in the .npz.
    model = keras.saving.load_model(DATA + ".keras")
    saved = np.load(DATA + ".npz")
    np.testing.assert_allclose(model.predict(saved["x"], verbose=0), saved["y"], rtol=1e-5, atol=1e-6)
    for name in ("dc", "dc_grouped", "dd"):
        layer = model.get_layer(name)
        np.testing.assert_allclose(keras.ops.convert_to_numpy(layer.norm_mean()), saved[name], rtol=1e-6)
        assert float(keras.ops.convert_to_numpy(layer.norm_mean_skipped)) == 0.0


def test_count_survives_a_keras_round_trip(tmp_path):
    layer = DecoupledConv2D(2, 3, magnitude="tanh", name="op")
    model = keras.Sequential([keras.Input((5, 5, 2)), layer])
    layer.norm_mean_skipped.assign(3.0)
    layer.norm_mean_biased.assign(0.25)
    path = str(tmp_path / "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path).get_layer("op")
    assert float(keras.ops.convert_to_numpy(loaded.norm_mean_skipped)) == 3.0
    assert float(keras.ops.convert_to_numpy(loaded.norm_mean_biased)) == 0.25
