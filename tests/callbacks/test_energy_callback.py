"""Tests for sphere_tf.callbacks.HypersphericalEnergy."""

import itertools
import math
import pathlib

import keras
import numpy as np
import pytest
from keras import ops

from sphere_tf import callbacks
from sphere_tf import layers as sphere_layers
from sphere_tf import regularizers
from tests.callbacks._events import event_files
from tests.callbacks._events import f32
from tests.callbacks._events import series


def np_energy(kernel, power=1, half_space=True, eps=1e-4):
    """Eq 5.1 with s = `power` (E.2 with the virtual −ŵ when `half_space`), mean over ordered pairs.

    Explicit loops over the neurons; the squared chord distance is 2 − 2·ŵ_iᵀŵ_j with
    ŵ = w/sqrt(‖w‖² + ε) (as upstream), floored at 1e-6.
    """
    w2d = np.asarray(kernel, np.float64).reshape(-1, np.shape(kernel)[-1])
    pts = [w2d[:, i] / math.sqrt(np.sum(w2d[:, i] ** 2) + eps) for i in range(w2d.shape[1])]
    if half_space:
        pts = pts + [-p for p in pts]
    return float(np.mean([max(2 - 2 * float(np.dot(pts[i], pts[j])), 1e-6) ** (-power / 2)
                          for i, j in itertools.permutations(range(len(pts)), 2)]))


def np_hs_s1(kernel):
    return np_energy(kernel, power=1, half_space=True)


def _model():
    return keras.Sequential([
        keras.Input((6, 6, 2)),
        keras.layers.Conv2D(4, 3, name="c1"),
        sphere_layers.SphereConv2D(3, 3, name="s1"),
        keras.layers.Flatten(),
        keras.layers.Dense(5, name="d1"),
    ])


def _fit(model, cbs, epochs=2):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 6, 6, 2)).astype(np.float32), rng.integers(0, 5, 8)
    model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model.fit(x, y, epochs=epochs, batch_size=4, verbose=0, callbacks=cbs)


def test_history_has_per_layer_and_total_energy():
    model = _model()
    history = _fit(model, [callbacks.HypersphericalEnergy()])
    names = ["c1", "s1", "d1"]
    for name in names:
        assert len(history.history[f"energy/{name}"]) == 2
    final = {name: np_hs_s1(ops.convert_to_numpy(model.get_layer(name).kernel)) for name in names}
    for name in names:
        np.testing.assert_allclose(history.history[f"energy/{name}"][-1], final[name], rtol=2e-5)
    np.testing.assert_allclose(history.history["energy/total"][-1], sum(final.values()), rtol=2e-5)


def _assert_layer_selection(log_dir):
    model = _model()
    cb = callbacks.HypersphericalEnergy(power=2, half_space=False, layer_names=["d1"], update_freq="batch",
                                        log_dir=log_dir, prefix="e_")
    history = _fit(model, [cb], epochs=1)
    assert sorted(history.history) == ["e_d1", "e_total", "loss"]
    expected = np_energy(keras.ops.convert_to_numpy(model.get_layer("d1").kernel), power=2, half_space=False)
    np.testing.assert_allclose(history.history["e_d1"], [expected], rtol=2e-5)
    np.testing.assert_allclose(history.history["e_total"], [expected], rtol=2e-5)
    with pytest.raises(ValueError, match="no kernel layer"):
        _fit(_model(), [callbacks.HypersphericalEnergy(layer_names=["nope"])], epochs=1)
    return history.history


def test_layer_selection_options():
    _assert_layer_selection(log_dir=None)


def test_layer_selection_options_and_tensorboard(tmp_path):
    """`update_freq='batch'`: the scalars `<prefix><layer>`, `<prefix>total` at the global batches 1, 2 of the
    epoch, in one event file of `log_dir` (no train/ or validation/ folders), on every backend. The second batch's
    weights are the epoch's last, so its values are the History's (in float32)."""
    log_dir = tmp_path / "tb"
    history = _assert_layer_selection(str(log_dir))
    assert len(event_files(log_dir)) == 1
    written = series(log_dir)
    assert sorted(written) == ["e_d1", "e_total"]
    for key in ("e_d1", "e_total"):
        assert [step for step, _ in written[key]] == [1, 2]
        assert written[key][-1][1] == f32(history[key])[0]
        assert np.isfinite(written[key][0][1])


def test_epoch_scalars_every_frequency_epochs(tmp_path):
    """`update_freq='epoch'`, `frequency=2`: scalars at the epoch indices 1 and 3 (every second epoch) with the
    History's values; the History has all four epochs."""
    history = _fit(_model(), [callbacks.HypersphericalEnergy(frequency=2, log_dir=pathlib.Path(tmp_path))],
                   epochs=4).history
    written = series(tmp_path)
    assert sorted(written) == ["energy/c1", "energy/d1", "energy/s1", "energy/total"]
    for key, points in written.items():
        assert len(history[key]) == 4
        assert points == [(1, f32(history[key])[1]), (3, f32(history[key])[3])], key


def test_log_dir_on_every_backend(tmp_path):
    cb = callbacks.HypersphericalEnergy(log_dir=pathlib.Path(tmp_path) / "tb")
    assert cb.get_config()["log_dir"] == str(tmp_path / "tb")


@pytest.mark.parametrize(
    "kwargs,match",
    [({"power": -1}, "`power`"), ({"frequency": 0}, "`frequency`"), ({"update_freq": "step"}, "`update_freq`"),
     ({"distance": "x"}, "`distance`"), ({"log_dir": ""}, "`log_dir`"), ({"log_dir": 3}, "`log_dir`")],
)
def test_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        callbacks.HypersphericalEnergy(**kwargs)


def test_config_roundtrip():
    cb = callbacks.HypersphericalEnergy(power=2, layer_names=["a"], frequency=3)
    assert callbacks.HypersphericalEnergy.from_config(cb.get_config()).get_config() == cb.get_config()


def _narrow_cnn(hidden, output):
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(8, 3, padding="same", activation="relu", kernel_regularizer=hidden, name="conv1"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Conv2D(16, 3, padding="same", activation="relu", kernel_regularizer=hidden, name="conv2"),
        keras.layers.MaxPooling2D(2),
        keras.layers.Flatten(),
        keras.layers.Dense(32, activation="relu", kernel_regularizer=hidden, name="fc"),
        keras.layers.Dense(10, kernel_regularizer=output, name="logits"),
    ])


@pytest.mark.tensorflow_only  # sphere_tf.data reads the Fashion-MNIST archive through TensorFlow
def test_fashion_mnist_mhe_and_comhe_lower_tracked_energy():
    """Short real-data run: both regularizers end with a lower tracked energy than no regularizer."""
    from sphere_tf.data import fashion_mnist  # noqa: PLC0415 (sphere_tf.data imports TensorFlow)

    (x_train, y_train), _ = fashion_mnist.load_fashion_mnist()
    x = fashion_mnist.as_float_images(x_train[:1024])
    y = y_train[:1024].astype(np.int32)
    finals = {}
    for name, hidden in [("none", None), ("mhe", regularizers.MHE(power=2, half_space=True)),
                         ("comhe", regularizers.CoMHE(projection_dim=30))]:
        keras.utils.set_random_seed(0)
        model = _narrow_cnn(hidden, regularizers.MHE(role="output") if hidden is not None else None)
        model.compile(keras.optimizers.SGD(0.05, momentum=0.9),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        history = model.fit(x, y, epochs=2, batch_size=64, verbose=0,
                            callbacks=[callbacks.HypersphericalEnergy(layer_names=["conv1", "conv2", "fc"])])
        finals[name] = history.history["energy/total"][-1]
    assert finals["mhe"] < finals["none"], finals
    assert finals["comhe"] < finals["none"], finals


class _Block(keras.layers.Layer):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.convs = [keras.layers.Conv2D(3, 1, name="blk_conv")]
        self.bias_only = keras.layers.BatchNormalization(name="blk_bn")

    def call(self, x):
        return self.bias_only(self.convs[0](x))


class _Wrapper(keras.layers.Layer):
    """Has a kernel of its own and holds a layer with a kernel: counted once, as itself."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = keras.layers.Dense(2, name="wrapped_dense")

    def build(self, input_shape):
        self.kernel = self.add_weight(name="kernel", shape=(input_shape[-1], 2))

    def call(self, x):
        return x @ self.kernel + self.inner(x)


def test_kernel_layers_walks_blocks_but_not_inside_kernel_layers():
    inputs = keras.Input((6, 6, 2))
    x = _Block(name="block")(inputs)
    x = keras.layers.Flatten()(x)
    outputs = _Wrapper(name="wrapper")(x)
    model = keras.Model(inputs, outputs)
    assert [layer.name for layer in callbacks.energy.kernel_layers(model)] == ["blk_conv", "wrapper"]


# -- the runner's tracked layers (`train.energy_layers`) and effective kernels ------------------------------------


def np_row_gram_schmidt(p):
    """Orthonormalises the rows of `p` one by one (OPT's Gram-Schmidt, thesis App. F.1, Alg. 1)."""
    p = np.asarray(p, np.float64)
    rows = []
    for row in p:
        t = row - sum(np.dot(row, e) * e for e in rows)
        rows.append(t / np.linalg.norm(t))
    return np.stack(rows)


def _opt_model(orthogonalization="gram_schmidt"):
    inputs = keras.Input((6, 6, 2))
    x = keras.layers.Conv2D(4, 3, name="conv1")(inputs)
    x = sphere_layers.OPTConv2D(5, 3, orthogonalization=orthogonalization, seed=3, name="opt1")(x)
    x = keras.layers.Flatten()(x)
    outputs = keras.layers.Dense(5, name="logits")(x)
    return keras.Model(inputs, outputs)


def _runner_config(**train):
    from sphere_tf.runners import schema  # noqa: PLC0415

    return schema.merge_config(schema.DEFAULTS, {"train": train})


def _energy_callbacks(run_callbacks):
    return [cb for cb in run_callbacks if isinstance(cb, callbacks.HypersphericalEnergy)]


@pytest.mark.parametrize("orthogonalization,power,half_space",
                         [("gram_schmidt", 1, True), ("gram_schmidt", 2, False), ("soft", 1, True)])
def test_runner_logs_unregularized_conv_and_opt_layers_as_numpy(orthogonalization, power, half_space):
    """`train.energy_layers` tracks layers no regularizer touches; an OPT layer is measured on W = R·V.

    An orthogonal R keeps V's energy [T-7.2], so 'soft' (R = the raw, non-orthogonal P) shows that the product
    is measured, not V.
    """
    from sphere_tf.runners import recipe  # noqa: PLC0415

    keras.utils.set_random_seed(0)
    model = _opt_model(orthogonalization)
    config = _runner_config(energy_layers=["conv*", "opt*"], energy_power=power, energy_half_space=half_space)
    run_callbacks = recipe.training_callbacks(config, model, attached={})
    assert [cb.layer_names for cb in _energy_callbacks(run_callbacks)] == [["conv1", "opt1"]]
    history = _fit(model, _energy_callbacks(run_callbacks), epochs=1)

    opt1 = model.get_layer("opt1")
    raw = ops.convert_to_numpy(opt1.rotation_param)
    rotation = np_row_gram_schmidt(raw) if orthogonalization == "gram_schmidt" else np.asarray(raw, np.float64)
    fixed = np.asarray(ops.convert_to_numpy(opt1.fixed_kernel), np.float64)
    w = (rotation @ fixed.reshape(-1, 5)).reshape(fixed.shape)
    expected = {"conv1": np_energy(ops.convert_to_numpy(model.get_layer("conv1").kernel), power, half_space),
                "opt1": np_energy(w, power, half_space)}
    if orthogonalization == "soft":
        # far outside the tolerance below: the check tells W from V
        assert abs(expected["opt1"] - np_energy(fixed, power, half_space)) > 20 * 1e-4 * expected["opt1"]
    assert sorted(history.history) == ["energy/conv1", "energy/opt1", "energy/total", "loss"]
    for name, value in expected.items():
        np.testing.assert_allclose(history.history[f"energy/{name}"], [value], rtol=1e-4)
    np.testing.assert_allclose(history.history["energy/total"], [sum(expected.values())], rtol=1e-4)


def test_runner_default_tracks_the_regularized_layers_and_empty_tracks_none():
    from sphere_tf.runners import recipe  # noqa: PLC0415

    model = _opt_model()
    default = _energy_callbacks(recipe.training_callbacks(_runner_config(), model, attached={"logits": "mhe"}))
    assert [cb.layer_names for cb in default] == [["logits"]]
    assert not _energy_callbacks(recipe.training_callbacks(_runner_config(), model, attached={}))
    assert not _energy_callbacks(recipe.training_callbacks(_runner_config(energy_layers=[]), model,
                                                           attached={"logits": "mhe"}))
    with pytest.raises(ValueError, match=r"train.energy_layers: the pattern 'fc\*' matches no layer"):
        recipe.training_callbacks(_runner_config(energy_layers=["conv*", "fc*"]), model, attached={})


class _ScaledDense(keras.layers.Layer):
    """Neurons derived from a raw weight: tracked through the `effective_kernel()` protocol."""

    def build(self, input_shape):
        self.raw = self.add_weight(name="raw", shape=(input_shape[-1], 3))

    def effective_kernel(self):
        return 2.0 * ops.flip(self.raw, axis=1)

    def call(self, x):
        return ops.matmul(x, self.effective_kernel())


def test_a_layer_implementing_effective_kernel_is_tracked():
    model = keras.Sequential([keras.Input((4,)), _ScaledDense(name="scaled"), keras.layers.Dense(2, name="d")])
    assert [layer.name for layer in callbacks.energy.kernel_layers(model)] == ["scaled", "d"]
    raw = ops.convert_to_numpy(model.get_layer("scaled").raw)
    energies = callbacks.energy.layer_energies(model, power=1, half_space=True)
    assert energies["scaled"] == pytest.approx(np_hs_s1(2.0 * raw[:, ::-1]), rel=2e-5)
    with pytest.raises(ValueError, match="has no neurons to measure"):
        sphere_layers.effective_kernel(keras.layers.Flatten(name="flat"))
