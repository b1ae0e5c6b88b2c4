"""Tests for sphere_tf.training.pretrain: CNN → DCNet initialisation [D §4.3]."""

import logging

import keras
import numpy as np
import pytest
from keras import ops

from sphere_tf import layers
from sphere_tf import testing
from sphere_tf import training


def np_channel_norms(kernel):
    kernel = np.asarray(kernel, dtype=np.float64)
    return np.sqrt(np.sum(kernel.reshape(-1, kernel.shape[-1]) ** 2, axis=0))


def build_cnn(seed=0):
    """The trained CNN: Conv2D/BN/Conv2D/Dense/Dense, with non-trivial BN statistics."""
    inputs = keras.Input((6, 6, 2))
    x = keras.layers.Conv2D(4, 3, padding="same", name="c1")(inputs)
    x = keras.layers.BatchNormalization(name="bn1")(x)
    x = keras.layers.ReLU()(x)
    x = keras.layers.Conv2D(6, 3, name="c2")(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(8, name="fc")(x)
    outputs = keras.layers.Dense(3, name="head")(x)
    model = keras.Model(inputs, outputs)
    rng = np.random.default_rng(seed)
    model.set_weights([rng.normal(size=w.shape).astype("float32") if w.ndim > 1 or "variance" not in v.path
                       else rng.uniform(0.5, 2.0, size=w.shape).astype("float32")
                       for w, v in zip(model.get_weights(), model.weights)])
    return model


def build_dcnet(c2_filters=6, extra_layer=False, weighted=None, c1_bias=True):
    """The same architecture with decoupled / Sphere operators (plain head kept)."""
    inputs = keras.Input((6, 6, 2))
    x = layers.DecoupledConv2D(4, 3, padding="same", magnitude="linear", use_bias=c1_bias, name="c1",
                               weighted=weighted)(inputs)
    if extra_layer:
        x = keras.layers.Conv2D(4, 1, name="extra")(x)
    x = keras.layers.BatchNormalization(name="bn1")(x)
    x = keras.layers.ReLU()(x)
    x = layers.SphereConv2D(c2_filters, 3, name="c2")(x)
    x = keras.layers.Flatten()(x)
    x = layers.DecoupledDense(8, magnitude="tanh", name="fc")(x)
    outputs = keras.layers.Dense(3, name="head")(x)
    return keras.Model(inputs, outputs)


def by_layer(model, layer_name, var_name):
    layer = model.get_layer(layer_name)
    return ops.convert_to_numpy(next(v for v in layer.weights if v.name == var_name))


COPIED = [
    ("c1", "kernel"), ("c1", "bias"),
    ("bn1", "gamma"), ("bn1", "beta"), ("bn1", "moving_mean"), ("bn1", "moving_variance"),
    ("c2", "kernel"), ("fc", "kernel"), ("head", "kernel"), ("head", "bias"),
]


@pytest.mark.parametrize("match", ["position", "name"])
def test_copies_kernels_biases_and_batchnorm(match):
    source, target = build_cnn(), build_dcnet()
    rho_before = by_layer(target, "fc", "rho")
    report = training.initialize_from_pretrained(target, source, match=match, verbose=False)
    for layer_name, var_name in COPIED:
        np.testing.assert_array_equal(by_layer(target, layer_name, var_name),
                                      by_layer(source, layer_name, var_name), err_msg=f"{layer_name}/{var_name}")
    copied = {(e.target_layer, e.variable) for e in report.copied}
    assert copied == set(COPIED)
    # The CNN's c2 and fc biases have nowhere to go; the operators' own variables stay initial.
    missing_t = {(e.source_layer, e.variable) for e in report.by_status("missing_in_target")}
    assert missing_t == {("c2", "bias"), ("fc", "bias")}
    missing_s = {(e.target_layer, e.variable) for e in report.by_status("missing_in_source")}
    assert missing_s == {("fc", "rho"), ("fc", "norm_mean_biased"), ("fc", "norm_mean_weight"),
                         ("fc", "norm_mean_skipped")}
    np.testing.assert_array_equal(by_layer(target, "fc", "rho"), rho_before)
    assert not report.by_status("shape_mismatch")
    assert not report.by_status("unmatched_source_layer") and not report.by_status("unmatched_target_layer")


def test_copied_first_layer_computes_normalised_convolution():
    """LinearConv+cosine with the CNN's kernel: f = ŵᵀx_p + b with ŵ = w/sqrt(‖w‖² + 1e-4)."""
    source, target = build_cnn(), build_dcnet()
    training.initialize_from_pretrained(target, source, verbose=False)
    x = np.random.default_rng(1).normal(size=(2, 6, 6, 2)).astype("float32")
    first = keras.Model(target.inputs, target.get_layer("c1").output)
    w = by_layer(source, "c1", "kernel").reshape(-1, 4).astype(np.float64)
    w_hat = w / np.sqrt(np.sum(w**2, axis=0) + 1e-4)
    patches = testing.numpy_patches(x, 3, padding="same")
    expected = patches @ w_hat + by_layer(source, "c1", "bias")
    np.testing.assert_allclose(ops.convert_to_numpy(first(x, training=False)), expected, rtol=1e-4, atol=1e-5)


def test_name_matching_survives_an_inserted_layer_position_matching_reports_it():
    source = build_cnn()
    by_name = build_dcnet(extra_layer=True)
    report = training.initialize_from_pretrained(by_name, source, match="name", verbose=False)
    np.testing.assert_array_equal(by_layer(by_name, "head", "kernel"), by_layer(source, "head", "kernel"))
    assert [(e.status, e.target_layer) for e in report.by_status("unmatched_target_layer")] == [
        ("unmatched_target_layer", "extra")]

    by_position = build_dcnet(extra_layer=True)
    report = training.initialize_from_pretrained(by_position, source, match="position", verbose=False)
    # Pairs shift after c1: bn1 -> extra has no variable in common, c2 kernel shape differs, ...
    assert ("bn1", "extra") in {(e.source_layer, e.target_layer) for e in report.by_status("missing_in_target")}
    details = [e.detail for e in report.by_status("missing_in_source") if e.target_layer == "extra"]
    assert details and "no variable in common (BatchNormalization vs Conv2D)" in details[0]
    # 5 parameterised source layers, 6 target layers: the last target layer has no partner.
    assert [e.target_layer for e in report.by_status("unmatched_target_layer")] == ["head"]
    assert not report.by_status("unmatched_source_layer")


def test_shape_mismatch_is_skipped_and_reported():
    source, target = build_cnn(), build_dcnet(c2_filters=5)
    before = by_layer(target, "c2", "kernel")
    report = training.initialize_from_pretrained(target, source, match="name", verbose=False)
    (entry,) = report.by_status("shape_mismatch")[:1]
    assert (entry.target_layer, entry.variable) == ("c2", "kernel")
    assert "(3, 3, 4, 6)" in entry.detail and "(3, 3, 4, 5)" in entry.detail
    np.testing.assert_array_equal(by_layer(target, "c2", "kernel"), before)
    # fc's input width changed too (5·2·2 vs 6·2·2): reported, not copied.
    assert ("fc", "kernel") in {(e.target_layer, e.variable) for e in report.by_status("shape_mismatch")}


@pytest.mark.parametrize("scale", [1.0, 0.5])
def test_projection_of_copied_operator_kernels(scale):
    source, target = build_cnn(), build_dcnet()
    report = training.initialize_from_pretrained(target, source, projection_scale=scale, verbose=False)
    for name in ("c1", "c2", "fc"):
        kernel = by_layer(target, name, "kernel")
        src = by_layer(source, name, "kernel").astype(np.float64)
        np.testing.assert_allclose(np_channel_norms(kernel), scale, atol=1e-6, rtol=0, err_msg=name)
        np.testing.assert_allclose(kernel, scale * src / np_channel_norms(src), rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(by_layer(target, "head", "kernel"), by_layer(source, "head", "kernel"))
    assert sorted(e.target_layer for e in report.by_status("projected")) == ["c1", "c2", "fc"]


def test_projection_skips_weighted_operators():
    source, target = build_cnn(), build_dcnet(weighted="linear")
    report = training.initialize_from_pretrained(target, source, projection_scale=1.0, verbose=False)
    np.testing.assert_array_equal(by_layer(target, "c1", "kernel"), by_layer(source, "c1", "kernel"))
    (entry,) = report.by_status("skipped_projection")
    assert entry.target_layer == "c1" and "weighted='linear'" in entry.detail


def test_calibration_sets_norm_mean_and_restores_everything_else():
    x = np.random.default_rng(2).normal(size=(4, 6, 6, 2)).astype("float32")
    inputs = keras.Input((6, 6, 2))
    t = layers.DecoupledConv2D(4, 3, padding="same", magnitude="tanh", name="c1")(inputs)
    target = keras.Model(inputs, keras.layers.Dense(3, name="head")(keras.layers.Flatten()(t)))
    source = keras.Model(inputs, keras.layers.Dense(3, name="head")(keras.layers.Flatten()(
        keras.layers.Conv2D(4, 3, padding="same", name="c1")(inputs))))
    report = training.initialize_from_pretrained(target, source, calibration_data=x, verbose=False)
    patches = testing.numpy_patches(x, 3, padding="same")
    expected = np.mean(np.sqrt(np.sum(patches**2, axis=-1) + 1e-4))
    layer = target.get_layer("c1")
    np.testing.assert_allclose(float(layer.norm_mean()), expected, rtol=1e-5)
    np.testing.assert_array_equal(layer.kernel.numpy(), source.get_layer("c1").kernel.numpy())
    assert [e.target_layer for e in report.by_status("calibrated")] == ["c1"]


@pytest.mark.parametrize("zero_debias", [True, False])
@pytest.mark.parametrize("groups", [1, 2])
def test_calibration_gives_the_batch_mean_for_either_average_and_per_group(zero_debias, groups):
    x = np.random.default_rng(4).normal(size=(3, 5, 5, 4)).astype("float32")
    inputs = keras.Input((5, 5, 4))
    layer = layers.DecoupledConv2D(4, 3, padding="same", magnitude="tanh", groups=groups,
                                   zero_debias=zero_debias, name="c1")
    target = keras.Model(inputs, layer(inputs))
    source = keras.Model(inputs, keras.layers.Conv2D(4, 3, padding="same", groups=groups, name="c1")(inputs))
    target(x * 3.0, training=True)  # an earlier, different average must not leak into the calibration
    training.initialize_from_pretrained(target, source, calibration_data=x, verbose=False)
    per_group = np.split(x, groups, axis=-1)
    expected = [np.mean(np.sqrt(np.sum(testing.numpy_patches(g, 3, padding="same") ** 2, axis=-1) + 1e-4))
                for g in per_group]
    np.testing.assert_allclose(np.reshape(ops.convert_to_numpy(layer.norm_mean()), -1), expected, rtol=1e-5)


def test_calibration_keeps_copied_batchnorm_statistics():
    source, target = build_cnn(), build_dcnet()
    x = np.random.default_rng(3).normal(size=(4, 6, 6, 2)).astype("float32")
    training.initialize_from_pretrained(target, source, calibration_data=x, verbose=False)
    for var in ("moving_mean", "moving_variance"):
        np.testing.assert_array_equal(by_layer(target, "bn1", var), by_layer(source, "bn1", var))
    assert float(target.get_layer("fc").norm_mean()) != 1.0  # calibrated (1.0 before any update)


def test_dict_matching_and_report_logging(caplog):
    source, target = build_cnn(), build_dcnet()
    with caplog.at_level(logging.INFO, logger="sphere_tf.training"):
        report = training.initialize_from_pretrained(target, source, match={"head": "head", "c1": "c1"})
    assert {e.target_layer for e in report.copied} == {"head", "c1"}
    assert "Pretrained initialisation:" in caplog.text and "copied" in caplog.text
    assert "c1 -> c1/kernel" in report.summary()


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        ({"match": "order"}, r"`match`.*Received: match='order'"),
        ({"match": {"nope": "c1"}}, r"no parameterised target layer named 'nope'"),
        ({"match": {"c1": "nope"}}, r"no parameterised source layer named 'nope'"),
        ({"projection_scale": 0.0}, r"`projection_scale`"),
    ],
)
def test_bad_arguments(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        training.initialize_from_pretrained(build_dcnet(), build_cnn(), verbose=False, **kwargs)


def test_unbuilt_model_is_refused():
    unbuilt = keras.Sequential([layers.DecoupledDense(3)])
    with pytest.raises(ValueError, match="`target`.*built model"):
        training.initialize_from_pretrained(unbuilt, build_cnn(), verbose=False)


def test_nested_models_are_flattened_for_position_matching():
    inner_src = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, name="a")], name="inner")
    inputs = keras.Input((5,))
    source = keras.Model(inputs, keras.layers.Dense(2, name="b")(inner_src(inputs)))
    target = keras.Sequential([keras.Input((5,)), layers.SphereDense(4, name="x"), keras.layers.Dense(2, name="y")])
    report = training.initialize_from_pretrained(target, source, verbose=False)
    np.testing.assert_array_equal(target.get_layer("x").kernel.numpy(), inner_src.get_layer("a").kernel.numpy())
    np.testing.assert_array_equal(target.get_layer("y").kernel.numpy(), source.get_layer("b").kernel.numpy())
    assert [(e.source_layer, e.target_layer, e.variable) for e in report.copied] == [
        ("a", "x", "kernel"), ("b", "y", "kernel"), ("b", "y", "bias")]


class ScaledBlock(keras.layers.Layer):
    """A custom block with a variable of its own and sub-layers held in a list."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.fcs = [keras.layers.Dense(4, name="blk_a"), keras.layers.Dense(4, name="blk_b")]

    def build(self, input_shape):
        self.scale = self.add_weight(name="scale", shape=(), initializer="ones")

    def call(self, x):
        return self.scale * self.fcs[1](self.fcs[0](x))


class PassBlock(keras.layers.Layer):
    """A custom block with no variable of its own."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.inner = keras.layers.Dense(4, name="pass_fc")

    def call(self, x):
        return self.inner(x)


def test_parameterised_layers_lists_owners_of_variables_once():
    inputs = keras.Input((4,))
    shared = keras.layers.Dense(4, name="shared")
    x = shared(inputs)
    x = ScaledBlock(name="scaled")(x)
    x = PassBlock(name="pass")(x)
    inner = keras.Sequential([keras.Input((4,)), keras.layers.ReLU(), keras.layers.Dense(4, name="deep")],
                             name="inner")
    outputs = shared(inner(x))
    model = keras.Model(inputs, outputs)
    names = [layer.name for layer in training.parameterised_layers(model)]
    # Parents before children; the block with its own `scale` is listed, the pass-through block,
    # the ReLU and the models are not; the shared layer appears once.
    assert names == ["shared", "scaled", "blk_a", "blk_b", "pass_fc", "deep"]
