"""`models.with_pixel_normalization` (the runner's raw-pixel models) and `models.model_options` (a model spec checked
without building it), on every backend. References: the normalisation formulas in NumPy, the base model called on
NumPy-normalised pixels, and the builders' own signatures read here."""

import inspect
import os

import keras
import numpy as np
import pytest

from sphere_tf import layers
from sphere_tf import models
from sphere_tf.models import plain_cnn
from sphere_tf.models import sphereface

SHAPE = (8, 8, 3)
MEAN = (120.0, 110.0, 100.0)


def _pixels(n=3, seed=0):
    return np.random.default_rng(seed).uniform(0.0, 255.0, (n,) + SHAPE).astype("float32")


def _small(**kwargs):
    return models.create_model("small_cnn", input_shape=SHAPE, num_classes=4, widths=(4,), convs_per_stage=1,
                               dense_units=8, **kwargs)


@pytest.mark.parametrize("normalization,channel_mean,reference", [
    ("centered_128", None, lambda x: (x - 127.5) / 128.0),
    ("mean_subtraction", MEAN, lambda x: x - np.asarray(MEAN, np.float32)),
    ("unit_interval", None, lambda x: x / 255.0),
])
def test_functional_model_takes_raw_pixels_with_the_same_layers(normalization, channel_mean, reference):
    base = _small()
    model = models.with_pixel_normalization(base, normalization, channel_mean)
    x = _pixels()
    np.testing.assert_allclose(model.predict(x, verbose=0), base.predict(reference(x), verbose=0),
                               rtol=1e-5, atol=1e-5)
    assert [layer.name for layer in model.layers[2:]] == [layer.name for layer in base.layers[1:]]
    assert all(a is b for a, b in zip(model.layers[2:], base.layers[1:]))  # the weights are base's own
    assert layers.model_normalization(model) == (normalization, channel_mean)


def test_margin_head_model_keeps_its_images_and_labels_inputs(tmp_path):
    base = _small(head={"layer": "margin", "loss_type": "cosface", "scale": 16.0, "margin": 0.2})
    model = models.with_pixel_normalization(base, "centered_128")
    assert sorted(model.input) == ["images", "labels"] and models.needs_labels(model)
    x, y = _pixels(), np.array([0, 1, 3], np.int32)
    want = base.predict({"images": (x - 127.5) / 128.0, "labels": y}, verbose=0)
    np.testing.assert_allclose(model.predict({"images": x, "labels": y}, verbose=0), want, rtol=1e-5, atol=1e-5)
    path = os.path.join(tmp_path, "m.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert layers.model_normalization(loaded) == ("centered_128", None)
    np.testing.assert_allclose(loaded.predict({"images": x, "labels": y}, verbose=0), want, rtol=1e-5, atol=1e-5)


def test_sequential_and_subclassed_models():
    sequential = keras.Sequential([keras.Input(SHAPE), keras.layers.Flatten(), keras.layers.Dense(2)])
    x = _pixels()
    model = models.with_pixel_normalization(sequential, "unit_interval")
    np.testing.assert_allclose(model.predict(x, verbose=0), sequential.predict(x / 255.0, verbose=0),
                               rtol=1e-5, atol=1e-5)

    class Net(keras.Model):
        def __init__(self):
            super().__init__()
            self.flat, self.dense = keras.layers.Flatten(), keras.layers.Dense(2)

        def call(self, inputs):
            return self.dense(self.flat(inputs))

    net = Net()
    net(x)
    with pytest.raises(ValueError, match="input_shape"):
        models.with_pixel_normalization(net, "centered_128")
    wrapped = models.with_pixel_normalization(net, "centered_128", input_shape=SHAPE)
    np.testing.assert_allclose(wrapped.predict(x, verbose=0), net.predict((x - 127.5) / 128.0, verbose=0),
                               rtol=1e-5, atol=1e-5)
    assert layers.model_normalization(wrapped) == ("centered_128", None)


def test_a_model_is_normalised_once():
    model = models.with_pixel_normalization(_small(), "centered_128")
    with pytest.raises(ValueError, match="model"):
        models.with_pixel_normalization(model, "centered_128")
    with pytest.raises(ValueError, match="channel_mean"):
        models.with_pixel_normalization(_small(), "mean_subtraction")


def _keywords(fn):
    return {k for k, p in inspect.signature(fn).parameters.items()
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}


def test_model_options_follow_the_kwargs_to_the_family_builder():
    # CNN-9: its own (input_shape, num_classes) and build_plain_cnn's keywords.
    assert set(models.model_options("cnn9")) == _keywords(plain_cnn.build_plain_cnn) - {"input_shape", "num_classes"}
    assert set(models.model_options("sphereface20")) == (
        _keywords(sphereface.build_sphereface) - {"input_shape", "num_classes"})
    assert "operator" in models.model_options("small_cnn") and "widths" in models.model_options("small_cnn")
    for name in models.list_models():  # every built-in builder says where its **kwargs go
        assert models.model_options(name) is not None, name


def test_model_options_of_an_untold_kwargs_builder_is_none():
    def passes_on(input_shape, num_classes, **kwargs):
        return _small(**kwargs)

    models.register_model(passes_on, name="test_passes_on")
    try:
        assert models.model_options("test_passes_on") is None
        models.register_model(lambda input_shape, num_classes, depth=1: None, name="test_no_kwargs")
        assert models.model_options("test_no_kwargs") == ["depth"]
    finally:
        models.MODELS.pop("test_passes_on", None)
        models.MODELS.pop("test_no_kwargs", None)


@pytest.mark.parametrize("name", ["small_cnn", "resnet32", "sphereface4", "opt_mlp"])
def test_create_model_puts_the_normalisation_first_in_every_family(name):
    """The builders put it there themselves (`blocks.pixels`): one call per layer, so Keras's sub-model idiom
    (`get_layer(...).output`) works on the built model."""
    kwargs = {"input_shape": (8, 8, 1) if name != "sphereface4" else (16, 16, 3), "num_classes": 3}
    if name == "sphereface4":
        kwargs["width_multiplier"] = 0.125
    if name == "resnet32":
        kwargs["widths"] = (2, 4, 4)  # narrow: the check is the graph's first layer, not the width
    model = models.create_model(name, normalization="centered_128", **kwargs)
    base = models.create_model(name, **kwargs)
    base.set_weights(model.get_weights())  # the same weights, no normalisation layer
    x = np.random.default_rng(1).uniform(0.0, 255.0, (2,) + kwargs["input_shape"]).astype("float32")
    np.testing.assert_allclose(model.predict(x, verbose=0), base.predict((x - 127.5) / 128.0, verbose=0),
                               rtol=1e-4, atol=1e-5)
    assert layers.model_normalization(model) == ("centered_128", None)
    assert all(len(layer._inbound_nodes) == 1 for layer in model.layers)
    features = keras.Model(model.input, model.layers[-2].output)
    assert features.predict(x, verbose=0).shape[0] == 2


def test_create_model_with_a_builder_that_does_not_ask_for_pixels():
    def plain(input_shape, num_classes):
        inputs = keras.Input(input_shape)
        return keras.Model(inputs, keras.layers.Dense(num_classes)(keras.layers.Flatten()(inputs)))

    models.register_model(plain, name="test_plain_builder")
    try:
        model = models.create_model("test_plain_builder", input_shape=SHAPE, num_classes=2,
                                    normalization="mean_subtraction", channel_mean=MEAN)
        assert layers.model_normalization(model) == ("mean_subtraction", MEAN)
        with pytest.raises(ValueError, match="channel_mean"):
            models.create_model("test_plain_builder", input_shape=SHAPE, num_classes=2, channel_mean=MEAN)
        with pytest.raises(ValueError, match="normalization"):
            models.create_model("test_plain_builder", input_shape=SHAPE, num_classes=2, normalization="centred")
    finally:
        models.MODELS.pop("test_plain_builder", None)
