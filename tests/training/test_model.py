"""Tests for sphere_tf.training.model: weight projection [D §4.1] and weighted gradients [D-18].

References are independent of the code under test: NumPy norms and explicit-loop
patches (`sphere_tf.testing.numpy_patches`), Eq. 18 written out in NumPy, and
Keras' own default `train_step` (a plain `keras.Model` with the same weights).
"""

import hypothesis
import keras
import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from keras import ops

from sphere_tf import layers
from sphere_tf import testing
from sphere_tf import training
from sphere_tf.training import model as model_lib


# -- NumPy references -----------------------------------------------------------------------------


def np_channel_norms(kernel):
    kernel = np.asarray(kernel, dtype=np.float64)
    return np.sqrt(np.sum(kernel.reshape(-1, kernel.shape[-1]) ** 2, axis=0))


def np_eq18_dense_step(w, x, y, lr, epsilon=0.0):
    """One SGD step of SphereDense (cosine, no bias) under MSE with weighted gradients.

    out_ij = ŵ_jᵀx̂_i with ŵ = w/n, n = sqrt(‖w‖² + ε) and x̂ = x/sqrt(‖x‖² + ε).
    Eq. 18 (ε = 0): n·∂c/∂w_j = x̂ − c·ŵ_j; with ε the same product is
    x̂ − (w_jᵀx̂)·w_j/n² (the 1/n of [D-17] cancels exactly).
    """
    w = np.asarray(w, np.float64)
    x = np.asarray(x, np.float64)
    n = np.sqrt(np.sum(w**2, axis=0) + epsilon)
    w_hat = w / n
    x_hat = x / np.sqrt(np.sum(x**2, axis=1, keepdims=True) + epsilon)
    c = x_hat @ w_hat  # (B, U)
    dl_dc = 2.0 * (c - y) / c.size  # MSE, mean over batch and units
    update = np.zeros_like(w)
    for j in range(w.shape[1]):
        for i in range(x.shape[0]):
            update[:, j] += dl_dc[i, j] * (x_hat[i] - (w[:, j] @ x_hat[i]) * w[:, j] / n[j] ** 2)
    return w - lr * update


# -- model builders -------------------------------------------------------------------------------


class Block(keras.layers.Layer):
    """A custom block holding operators as attributes and in a list (nested discovery)."""

    def __init__(self, filters, **kwargs):
        super().__init__(**kwargs)
        self.conv = layers.SphereConv2D(filters, 3, padding="same", angular="linear")
        self.extra = [layers.DecoupledConv2D(filters, 1, magnitude="ball")]
        self.plain = keras.layers.Conv2D(filters, 1)

    def call(self, x, training=None):
        return self.plain(self.extra[0](self.conv(x), training=training)) + x

    def get_config(self):
        return {**super().get_config(), "filters": self.conv.filters}


def build_functional(cls=keras.Model, epsilon=1e-4, **settings):
    inputs = keras.Input((6, 6, 2))
    x = layers.DecoupledConv2D(4, 3, padding="same", magnitude="tanh", epsilon=epsilon, name="dconv")(inputs)
    x = keras.layers.BatchNormalization(name="bn")(x)
    x = keras.layers.Conv2D(4, 3, name="plain_conv")(x)
    inner = keras.Sequential(
        [keras.Input((4, 4, 4)), layers.SphereConv2D(4, 3, padding="same", epsilon=epsilon, name="inner_sconv")],
        name="inner",
    )
    x = inner(x)
    x = keras.layers.Flatten()(x)
    x = layers.DecoupledDense(5, magnitude="linear", epsilon=epsilon, name="ddense")(x)
    outputs = keras.layers.Dense(3, kernel_regularizer=keras.regularizers.L2(1e-2), name="head")(x)
    return cls(inputs, outputs, name="net", **settings)


def random_data(n=8, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 6, 6, 2)).astype("float32")
    y = rng.integers(0, 3, size=(n,))
    return x, y


OPERATOR_NAMES = ("dconv", "inner_sconv", "ddense")


def operator_kernels(model):
    return {layer.name: layer.kernel for layer in model_lib.find_operator_layers(model)}


# -- discovery ------------------------------------------------------------------------------------


class TestDiscovery:
    def test_finds_nested_operators_once(self):
        model = build_functional(training.SphereModel)
        names = [layer.name for layer in model.operator_layers()]
        assert sorted(names) == sorted(OPERATOR_NAMES)

    def test_finds_attributes_and_lists_of_custom_blocks(self):
        inputs = keras.Input((5, 5, 3))
        block = Block(3)
        outputs = block(block(inputs))  # shared block: its layers count once
        model = training.SphereModel(inputs, outputs)
        found = model.operator_layers()
        assert [type(layer) for layer in found] == [layers.SphereConv2D, layers.DecoupledConv2D]


# -- weight projection ----------------------------------------------------------------------------


class TestWeightProjection:
    @pytest.mark.parametrize("scale", [1.0, 2.5])
    def test_train_step_equals_keras_default_plus_projection_at_step_n(self, scale):
        """Steps 1..N-1 equal Keras' default step; after step N kernels are s·ŵ of the default."""
        every = 3
        sphere = build_functional(training.SphereModel, weight_projection_every=every, projection_scale=scale)
        plain = build_functional(keras.Model)
        plain.set_weights(sphere.get_weights())
        for m in (sphere, plain):
            m.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x, y = random_data(4 * every)
        names = [v.path for v in sphere.weights]
        for step in range(1, every + 1):
            batch = slice(4 * (step - 1), 4 * step)
            h_sphere = sphere.fit(x[batch], y[batch], batch_size=4, epochs=1, verbose=0, shuffle=False)
            h_plain = plain.fit(x[batch], y[batch], batch_size=4, epochs=1, verbose=0, shuffle=False)
            np.testing.assert_allclose(h_sphere.history["loss"], h_plain.history["loss"], rtol=1e-6)
            kernels = {id(v) for v in operator_kernels(sphere).values()}
            for name, v_s, v_p in zip(names, sphere.weights, plain.weights):
                expected = np.asarray(v_p.numpy(), np.float64)
                if step == every and id(v_s) in kernels:
                    expected = scale * expected / np_channel_norms(expected)
                np.testing.assert_allclose(v_s.numpy(), expected, rtol=1e-5, atol=1e-6, err_msg=name)
            norms = {n: np_channel_norms(k.numpy()) for n, k in operator_kernels(sphere).items()}
            if step < every:
                assert all(np.abs(v - scale).max() > 1e-3 for v in norms.values())
            else:
                for name, value in norms.items():
                    np.testing.assert_allclose(value, scale, atol=1e-6, rtol=0, err_msg=name)
        assert int(sphere.optimizer.iterations) == every

    def test_projection_keeps_forward_output_exactly_with_zero_epsilon(self):
        model = build_functional(training.SphereModel, epsilon=0.0, projection_scale=1.0)
        for kernel in operator_kernels(model).values():
            kernel.assign(kernel * np.linspace(0.2, 7.0, kernel.shape[-1]).astype("float32"))
        x, _ = random_data()
        before = ops.convert_to_numpy(model(x, training=False))
        others = {v.path: v.numpy() for v in model.weights if id(v) not in
                  {id(k) for k in operator_kernels(model).values()}}
        model.project_weights()
        after = ops.convert_to_numpy(model(x, training=False))
        np.testing.assert_allclose(after, before, rtol=1e-5, atol=1e-6)
        for kernel in operator_kernels(model).values():
            np.testing.assert_allclose(np_channel_norms(kernel.numpy()), 1.0, atol=1e-6, rtol=0)
        for v in model.weights:  # non-decoupled layers (and the operators' other variables) untouched
            if v.path in others:
                np.testing.assert_array_equal(v.numpy(), others[v.path], err_msg=v.path)

    @pytest.mark.parametrize("scale", [1.0, 3.0])
    def test_projection_changes_forward_only_through_epsilon(self, scale):
        """With the upstream ε = 1e-4 the output moves by < ε/(2·min(s, ‖w‖)²) relative."""
        model = build_functional(training.SphereModel, projection_scale=scale)
        x, _ = random_data()
        norms = [np_channel_norms(k.numpy()) for k in operator_kernels(model).values()]
        bound = 1e-4 / (2 * min(scale, min(n.min() for n in norms)) ** 2)
        before = ops.convert_to_numpy(model(x, training=False))
        model.project_weights()
        after = ops.convert_to_numpy(model(x, training=False))
        # The error grows through the layers; allow the bound per operator layer (3) plus rounding.
        np.testing.assert_allclose(after, before, rtol=3 * bound + 1e-5, atol=1e-5)

    def test_callback_sees_projection_exactly_every_n_batches(self):
        every = 2
        model = build_functional(training.SphereModel, weight_projection_every=every)
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        seen = []

        class Record(keras.callbacks.Callback):
            def on_train_batch_end(self, batch, logs=None):
                norms = [np_channel_norms(k.numpy()) for k in operator_kernels(self.model).values()]
                seen.append(max(np.abs(n - 1.0).max() for n in norms))

        x, y = random_data(20)
        model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[Record()])
        assert len(seen) == 5
        for step, err in enumerate(seen, start=1):
            if step % every == 0:
                assert err < 1e-6, (step, err)
            else:
                assert err > 1e-4, (step, err)
        logs = model.evaluate(x, y, verbose=0, return_dict=True)
        assert np.isfinite(logs["loss"])

    @pytest.mark.parametrize("jit_compile", [False, True])
    def test_projection_with_jit_and_steps_per_execution(self, jit_compile):
        model = training.SphereSequential(
            [keras.Input((6,)), layers.DecoupledDense(4, magnitude="ball"), keras.layers.Dense(3),
             layers.SphereDense(2)],
            weight_projection_every=4, weighted_gradients=True,
        )
        # Keras's PyTorch trainer runs one step per execution (it refuses steps_per_execution > 1).
        steps_per_execution = 1 if keras.backend.backend() == "torch" else 2
        model.compile("sgd", "mse", jit_compile=jit_compile, steps_per_execution=steps_per_execution)
        x = np.random.default_rng(0).normal(size=(16, 6)).astype("float32")
        model.fit(x, np.ones((16, 2), "float32"), batch_size=4, epochs=1, verbose=0)
        assert int(model.optimizer.iterations) == 4
        for layer in model.operator_layers():
            np.testing.assert_allclose(np_channel_norms(layer.kernel.numpy()), 1.0, atol=1e-6, rtol=0)

    def test_disabled_projection_leaves_norms(self):
        model = build_functional(training.SphereModel, weight_projection_every=None)
        model.compile(keras.optimizers.SGD(0.5), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x, y = random_data(8)
        model.fit(x, y, batch_size=4, verbose=0)
        for kernel in operator_kernels(model).values():
            assert np.abs(np_channel_norms(kernel.numpy()) - 1.0).max() > 1e-3

    def test_frozen_operator_is_not_projected(self):
        model = build_functional(training.SphereModel, weight_projection_every=1)
        model.get_layer("dconv").trainable = False
        before = model.get_layer("dconv").kernel.numpy()
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x, y = random_data(4)
        model.fit(x, y, batch_size=4, verbose=0)
        np.testing.assert_array_equal(model.get_layer("dconv").kernel.numpy(), before)
        np.testing.assert_allclose(np_channel_norms(model.get_layer("ddense").kernel.numpy()), 1.0, atol=1e-6)


# -- weighted gradients ---------------------------------------------------------------------------


def _dense_model(w, epsilon, weighted_gradients=True, cls=training.SphereModel):
    inputs = keras.Input((w.shape[0],))
    layer = layers.SphereDense(w.shape[1], angular="cosine", epsilon=epsilon, name="sd")
    model = cls(inputs, layer(inputs), weight_projection_every=None, weighted_gradients=weighted_gradients)
    layer.kernel.assign(w)
    return model, layer


class TestWeightedGradients:
    def setup_method(self):
        rng = np.random.default_rng(3)
        self.w = rng.normal(size=(5, 3)).astype("float32")
        self.x = rng.normal(size=(4, 5)).astype("float32")
        self.y = rng.uniform(-1, 1, size=(4, 3)).astype("float32")

    def _step(self, w, epsilon=0.0, weighted=True, lr=0.1):
        model, layer = _dense_model(w, epsilon, weighted)
        model.compile(keras.optimizers.SGD(lr), "mse")
        model.fit(self.x, self.y, batch_size=4, epochs=1, verbose=0, shuffle=False)
        return layer.kernel.numpy()

    def test_update_equals_eq18(self):
        new = self._step(self.w)
        expected = np_eq18_dense_step(self.w, self.x, self.y, lr=0.1)
        np.testing.assert_allclose(new, expected, rtol=1e-5, atol=1e-6)

    def test_update_with_upstream_epsilon(self):
        new = self._step(self.w, epsilon=1e-4)
        expected = np_eq18_dense_step(self.w, self.x, self.y, lr=0.1, epsilon=1e-4)
        np.testing.assert_allclose(new, expected, rtol=1e-5, atol=1e-6)

    @pytest.mark.parametrize("factor", [0.05, 7.0, 300.0])
    def test_update_is_invariant_to_rescaling_w(self, factor):
        base = self._step(self.w) - self.w
        scaled_w = self.w * factor
        scaled = self._step(scaled_w) - scaled_w
        np.testing.assert_allclose(scaled, base, rtol=1e-4, atol=1e-6 * max(1.0, factor))

    def test_unweighted_update_shrinks_as_one_over_norm(self):
        """Control: without Eq. 18 the step is the Eq. 18 step divided by ‖w‖ [D-17]."""
        plain = self._step(self.w, weighted=False) - self.w
        weighted = np_eq18_dense_step(self.w, self.x, self.y, lr=0.1) - self.w
        np.testing.assert_allclose(plain, weighted / np_channel_norms(self.w), rtol=1e-5, atol=1e-7)

    def test_conv_update_equals_eq18_per_output_channel(self):
        """HWIO kernel: the norm runs over (kh, kw, C_in) for each filter."""
        rng = np.random.default_rng(5)
        x = rng.normal(size=(2, 5, 5, 2)).astype("float32")
        g = rng.normal(size=(2, 4, 4, 3)).astype("float32")
        w = (rng.normal(size=(2, 2, 2, 3)) * np.array([0.1, 1.0, 9.0])).astype("float32")
        inputs = keras.Input((5, 5, 2))
        layer = layers.DecoupledConv2D(3, 2, magnitude="linear", epsilon=0.0)
        model = training.SphereModel(inputs, layer(inputs), weight_projection_every=None,
                                     weighted_gradients=True)
        layer.kernel.assign(w)

        def linear_loss(y_true, y_pred):  # per sample Σ G·f; mean over the batch
            return ops.sum(y_true * y_pred, axis=(1, 2, 3))

        model.compile(keras.optimizers.SGD(0.01), linear_loss)
        model.fit(x, g, batch_size=2, verbose=0, shuffle=False)
        # f = ‖x_p‖·cos θ = ŵᵀx_p for LinearConv+cosine; n·∂f/∂w = x_p − (ŵᵀx_p)·ŵ.
        patches = testing.numpy_patches(x, 2)  # (N, 4, 4, 8)
        w2 = w.reshape(-1, 3).astype(np.float64)
        w_hat = w2 / np_channel_norms(w2)
        update = np.zeros_like(w2)
        for j in range(3):
            for p, gv in zip(patches.reshape(-1, 8), g[..., j].reshape(-1)):
                update[:, j] += gv / 2.0 * (p - (w_hat[:, j] @ p) * w_hat[:, j])
        expected = (w2 - 0.01 * update).reshape(w.shape)
        np.testing.assert_allclose(layer.kernel.numpy(), expected, rtol=1e-4, atol=1e-5)

    def test_loss_scale_optimizer_under_mixed_float16(self):
        keras.mixed_precision.set_global_policy("mixed_float16")
        model, layer = _dense_model(self.w, 0.0)
        model.compile(keras.optimizers.SGD(0.1), "mse")
        assert isinstance(model.optimizer, keras.optimizers.LossScaleOptimizer)
        model.fit(self.x, self.y, batch_size=4, verbose=0, shuffle=False)
        assert float(model.optimizer.dynamic_scale) > 1000.0  # the scaled path was exercised
        assert layer.kernel.dtype == "float32"
        expected = np_eq18_dense_step(self.w, self.x, self.y, lr=0.1)
        # float16 activations: compare the update, to float16 accuracy.
        np.testing.assert_allclose(layer.kernel.numpy() - self.w, expected - self.w, rtol=2e-2, atol=2e-4)
        assert int(model.optimizer.iterations) == 1

    def test_mixed_float16_projection_and_regularizers(self):
        keras.mixed_precision.set_global_policy("mixed_float16")
        model = build_functional(training.SphereModel, weight_projection_every=2, weighted_gradients=True)
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x, y = random_data(8)
        history = model.fit(x, y, batch_size=4, verbose=0)
        assert np.isfinite(history.history["loss"]).all()
        for kernel in operator_kernels(model).values():
            np.testing.assert_allclose(np_channel_norms(kernel.numpy()), 1.0, atol=1e-6, rtol=0)


# -- refusal on weighted operators, bad arguments --------------------------------------------------


def _weighted_model(cls=training.SphereModel, **settings):
    inputs = keras.Input((4,))
    x = layers.DecoupledDense(3, magnitude="tanh", weighted="nonlinear", name="weighted_fc")(inputs)
    inner = keras.Sequential([keras.Input((3,)), layers.SphereDense(2)])
    return cls(inputs, inner(x), **settings)


class TestRefusal:
    @pytest.mark.parametrize(
        "settings, trick",
        [({}, "weight_projection_every=100"),
         ({"weight_projection_every": None, "weighted_gradients": True}, "weighted_gradients=True")],
    )
    def test_weighted_operator_is_refused_naming_the_layer(self, settings, trick):
        with pytest.raises(ValueError, match=rf"{trick}.*'weighted_fc' \(DecoupledDense, weighted='nonlinear'\)"):
            _weighted_model(**settings)

    def test_weighted_operator_allowed_without_tricks(self):
        """With both tricks off the step is Keras' default step: same loss, same updated weights."""
        model = _weighted_model(weight_projection_every=None)
        plain = _weighted_model(cls=keras.Model)
        plain.set_weights(model.get_weights())
        rng = np.random.default_rng(4)
        x = rng.normal(size=(8, 4)).astype("float32")
        y = rng.normal(size=(8, 2)).astype("float32")
        histories = []
        for m in (model, plain):
            m.compile(keras.optimizers.SGD(0.5), "mse")
            histories.append(m.fit(x, y, batch_size=4, epochs=2, verbose=0, shuffle=False).history["loss"])
        np.testing.assert_allclose(histories[0], histories[1], rtol=1e-6)
        assert histories[0][1] < histories[0][0]  # it did train
        kernel = model.get_layer("weighted_fc").kernel.numpy()
        assert np.abs(np_channel_norms(kernel) - 1.0).max() > 1e-3  # never projected
        for v_s, v_p in zip(model.weights, plain.weights):
            np.testing.assert_allclose(v_s.numpy(), v_p.numpy(), rtol=1e-6, atol=1e-7, err_msg=v_s.path)

    def test_sequential_refuses_at_first_step(self):
        model = training.SphereSequential(weight_projection_every=5)
        model.add(keras.Input((4,)))
        model.add(layers.DecoupledDense(3, weighted="linear", name="lin_w"))
        model.compile("sgd", "mse")
        before = model.layers[0].kernel.numpy()
        with pytest.raises(ValueError, match="'lin_w'"):
            model.fit(np.ones((2, 4), "float32"), np.ones((2, 3), "float32"), verbose=0)
        np.testing.assert_array_equal(model.layers[0].kernel.numpy(), before)

    def test_subclass_refuses_at_first_step(self):
        class Net(training.SphereTrainingMixin, keras.Model):
            def __init__(self, **kwargs):
                super().__init__(**kwargs)
                self.fc = layers.DecoupledDense(3, weighted="linear", name="sub_w")

            def call(self, x):
                return self.fc(x)

        model = Net(weighted_gradients=True, weight_projection_every=None)
        model.compile("sgd", "mse")
        with pytest.raises(ValueError, match="'sub_w'"):
            model.fit(np.ones((2, 4), "float32"), np.ones((2, 3), "float32"), verbose=0)

    @pytest.mark.parametrize(
        "kwargs, pattern",
        [
            ({"weight_projection_every": 0}, r"`weight_projection_every`.*Received: weight_projection_every=0"),
            ({"weight_projection_every": -3}, r"Received: weight_projection_every=-3"),
            ({"weight_projection_every": 2.5}, r"Received: weight_projection_every=2.5"),
            ({"weight_projection_every": True}, r"Received: weight_projection_every=True"),
            ({"projection_scale": 0.0}, r"`projection_scale`.*Received: projection_scale=0.0"),
            ({"projection_scale": -1}, r"Received: projection_scale=-1"),
            ({"projection_scale": float("nan")}, r"Received: projection_scale=nan"),
            ({"weighted_gradients": "yes"}, r"`weighted_gradients`.*Received: weighted_gradients='yes'"),
        ],
    )
    def test_bad_arguments(self, kwargs, pattern):
        with pytest.raises(ValueError, match=pattern):
            build_functional(training.SphereModel, **kwargs)

    def test_wrap_refuses_subclassed_model(self):
        class Net(keras.Model):
            def call(self, x):
                return x

        with pytest.raises(ValueError, match="`model`.*SphereTrainingMixin"):
            training.wrap(Net())


# -- Sequential, subclass, wrap, serialisation -----------------------------------------------------


@keras.saving.register_keras_serializable(package="sphere_tf_tests")
class SubclassNet(training.SphereTrainingMixin, keras.Model):
    def __init__(self, units=3, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.block = Block(2)
        self.flatten = keras.layers.Flatten()
        self.fc = layers.DecoupledDense(units, magnitude="seg")

    def call(self, x, training=None):
        return self.fc(self.flatten(self.block(x, training=training)), training=training)

    def get_config(self):
        return {**super().get_config(), "units": self.units}


class TestModelsAndSerialisation:
    def test_subclass_trains_with_projection(self, tmp_path):
        model = SubclassNet(weight_projection_every=2, projection_scale=0.5)
        model.compile("sgd", "mse")
        x = np.random.default_rng(0).normal(size=(8, 5, 5, 2)).astype("float32")
        model.fit(x, np.zeros((8, 3), "float32"), batch_size=4, verbose=0)
        found = model.operator_layers()
        assert len(found) == 3
        for layer in found:
            np.testing.assert_allclose(np_channel_norms(layer.kernel.numpy()), 0.5, atol=1e-6, rtol=0)
        reloaded = testing.assert_keras_roundtrip(model, x, tmp_path)
        assert (reloaded.weight_projection_every, reloaded.projection_scale, reloaded.weighted_gradients) == (
            2, 0.5, False)

    def test_sequential_trains_and_round_trips(self, tmp_path):
        model = training.SphereSequential(
            [keras.Input((5,)), layers.SphereDense(4), keras.layers.Dense(2)],
            weight_projection_every=1, projection_scale=2.0, weighted_gradients=True,
        )
        model.compile("adam", "mse")
        x = np.random.default_rng(1).normal(size=(8, 5)).astype("float32")
        model.fit(x, np.ones((8, 2), "float32"), batch_size=4, verbose=0)
        np.testing.assert_allclose(np_channel_norms(model.layers[0].kernel.numpy()), 2.0, atol=1e-6, rtol=0)
        reloaded = testing.assert_keras_roundtrip(model, x, tmp_path)
        assert isinstance(reloaded, training.SphereSequential)
        assert (reloaded.weight_projection_every, reloaded.projection_scale, reloaded.weighted_gradients) == (
            1, 2.0, True)

    def test_functional_config_and_keras_round_trip(self, tmp_path):
        model = build_functional(training.SphereModel, weight_projection_every=7, projection_scale=1.5,
                                 weighted_gradients=True)
        config = model.get_config()
        assert (config["weight_projection_every"], config["projection_scale"], config["weighted_gradients"]) == (
            7, 1.5, True)
        clone = training.SphereModel.from_config(config)
        assert isinstance(clone, training.SphereModel)
        assert (clone.weight_projection_every, clone.projection_scale, clone.weighted_gradients) == (7, 1.5, True)
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x, y = random_data(8)
        model.fit(x, y, batch_size=4, verbose=0)
        reloaded = testing.assert_keras_roundtrip(model, x, tmp_path)
        assert isinstance(reloaded, training.SphereModel)
        assert (reloaded.weight_projection_every, reloaded.projection_scale, reloaded.weighted_gradients) == (
            7, 1.5, True)
        reloaded.fit(x, y, batch_size=4, verbose=0)  # the compiled state came back too

    def test_weighted_model_without_tricks_round_trips(self, tmp_path):
        model = _weighted_model(weight_projection_every=None)
        reloaded = testing.assert_keras_roundtrip(model, np.ones((2, 4), "float32"), tmp_path)
        assert reloaded.weight_projection_every is None
        if keras.backend.backend() == "tensorflow":  # SavedModel export is the TensorFlow backend's
            testing.assert_saved_model_roundtrip(model, np.ones((2, 4), "float32"), tmp_path)

    def test_wrap_shares_layers(self):
        base = build_functional(keras.Model)
        wrapped = training.wrap(base, weight_projection_every=1)
        assert isinstance(wrapped, training.SphereModel)
        wrapped.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        x, y = random_data(4)
        wrapped.fit(x, y, verbose=0)
        for kernel in operator_kernels(base).values():  # the original model's variables moved
            np.testing.assert_allclose(np_channel_norms(kernel.numpy()), 1.0, atol=1e-6, rtol=0)
        np.testing.assert_array_equal(ops.convert_to_numpy(base(x)), ops.convert_to_numpy(wrapped(x)))

    def test_wrap_sequential(self):
        seq = keras.Sequential([keras.Input((5,)), layers.DecoupledDense(3), keras.layers.Dense(2)])
        wrapped = training.wrap(seq, weight_projection_every=1)
        wrapped.compile("sgd", "mse")
        wrapped.fit(np.ones((4, 5), "float32"), np.ones((4, 2), "float32"), verbose=0)
        np.testing.assert_allclose(np_channel_norms(seq.layers[0].kernel.numpy()), 1.0, atol=1e-6, rtol=0)


def test_project_kernel_zero_channel_and_norm():
    kernel = np.zeros((3, 3, 2, 4), "float32")
    kernel[..., 1] = 5.0
    kernel[..., 2] = np.arange(18, dtype="float32").reshape(3, 3, 2)
    kernel[..., 3] = 1e-20
    kernel[0, 0, 0, 3] = 3e20
    out = ops.convert_to_numpy(model_lib.project_kernel(kernel, 2.0))
    np.testing.assert_array_equal(out[..., 0], 0.0)  # no direction: unchanged, no NaN
    np.testing.assert_allclose(np_channel_norms(out)[1:], 2.0, rtol=1e-6)
    np.testing.assert_allclose(out[0, 0, 0, 3], 2.0, rtol=1e-6)  # 3e20 dominates; no overflow
    np.testing.assert_allclose(out[..., 2], 2.0 * kernel[..., 2] / np.linalg.norm(kernel[..., 2]), rtol=1e-6)


@hypothesis.given(
    hnp.arrays(np.float32, hnp.array_shapes(min_dims=2, max_dims=4, min_side=1, max_side=4),
               elements=st.floats(-1.0000000150474662e+30, 1.0000000150474662e+30, width=32, allow_subnormal=False).filter(np.isfinite)),
    st.floats(1e-3, 1e3),
)
def test_project_kernel_degenerate_inputs(kernel, scale):
    """Any finite kernel: finite output, norm s per non-zero channel, zero channels unchanged."""
    out = ops.convert_to_numpy(model_lib.project_kernel(kernel, scale))
    assert np.isfinite(out).all()
    flat_in = kernel.reshape(-1, kernel.shape[-1])
    flat_out = out.reshape(-1, kernel.shape[-1])
    for j in range(kernel.shape[-1]):
        if np.all(flat_in[:, j] == 0):
            np.testing.assert_array_equal(flat_out[:, j], 0.0)
        else:
            np.testing.assert_allclose(np.linalg.norm(flat_out[:, j].astype(np.float64)), scale, rtol=1e-5)
            # same direction: non-negative multiple of the input
            assert np.all(np.sign(flat_out[:, j]) * np.sign(flat_in[:, j]) >= 0)


class _ProtocolDense(keras.layers.Dense):
    """A plain dense layer following the DCNet-trick protocol (ε = 0), so the test needs no operator kernels."""

    supports_weight_projection = True
    epsilon = 0.0


def test_tricks_match_a_numpy_sgd_reference_on_this_backend():
    """Weighted gradients [D-18] then SGD then projection every 2 steps [D §4.1], against NumPy, 3 steps."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    y = rng.standard_normal((3, 4, 2)).astype(np.float32)
    model = training.SphereSequential([keras.Input((5,)), _ProtocolDense(2, use_bias=False)],
                                      weight_projection_every=2, projection_scale=1.5, weighted_gradients=True)
    model.compile(keras.optimizers.SGD(0.1), "mse")
    w = rng.standard_normal((5, 2)).astype(np.float32)
    model.layers[0].kernel.assign(w)
    w = w.astype(np.float64)
    for step in range(3):
        model.train_on_batch(x[step], y[step])
        grad = 2.0 * x[step].T @ (x[step] @ w - y[step]) / y[step].size  # d mean((xw − y)²)/dw
        w = w - 0.1 * grad * np.linalg.norm(w, axis=0)
        if (step + 1) % 2 == 0:
            w = 1.5 * w / np.linalg.norm(w, axis=0)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model.layers[0].kernel), w, rtol=1e-5, atol=1e-6)
