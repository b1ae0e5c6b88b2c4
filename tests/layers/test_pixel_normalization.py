"""PixelNormalization: each normalisation against its NumPy formula, argument errors, saving, Keras's layer harness,
mixed precision, Sequential/functional models, and `model_normalization` (with, without the layer, dict inputs)."""

import keras
import numpy as np
import pytest

from sphere_tf import testing
from sphere_tf.data import normalization as normalization_lib
from sphere_tf.layers import MarginHead
from sphere_tf.layers import PixelNormalization
from sphere_tf.layers import model_normalization

SHAPE = (4, 5, 3)
MEAN = (125.3, 123.0, 113.9)

# The formulas, written out (docs/data.md "Normalisation"), in float64.
REFERENCES = {
    "none": (None, lambda x: x),
    "centered_128": (None, lambda x: (x - 127.5) / 128.0),
    "mean_subtraction": (MEAN, lambda x: x - np.array(MEAN)),
    "unit_interval": (None, lambda x: x / 255.0),
}


def _pixels(batch=2, seed=0, shape=SHAPE):
    """Raw pixels 0..255 as float32 (what the data pipeline yields after augmentation)."""
    return np.random.default_rng(seed).integers(0, 256, (batch,) + shape).astype(np.float32)


def _numpy(x):
    return np.asarray(keras.ops.convert_to_numpy(x), np.float64)


@pytest.mark.parametrize("name", sorted(REFERENCES))
def test_each_normalization_matches_numpy(name):
    mean, reference = REFERENCES[name]
    x = _pixels()
    y = PixelNormalization(name, channel_mean=mean)(x)
    assert keras.backend.standardize_dtype(y.dtype) == "float32"
    np.testing.assert_allclose(_numpy(y), reference(x.astype(np.float64)), rtol=1e-6, atol=1e-5)


def test_default_is_centered_128_and_one_mean_broadcasts():
    assert normalization_lib.DEFAULT_NORMALIZATION == "centered_128"
    assert PixelNormalization().normalization == "centered_128"
    x = _pixels()
    y = PixelNormalization("mean_subtraction", channel_mean=[100])(x)
    np.testing.assert_allclose(_numpy(y), x - 100.0, atol=1e-5)


def test_integer_pixels_are_cast_to_the_compute_dtype():
    x = _pixels().astype(np.uint8)
    y = PixelNormalization()(x)
    assert keras.backend.standardize_dtype(y.dtype) == "float32"
    np.testing.assert_allclose(_numpy(y), (x.astype(np.float64) - 127.5) / 128.0, atol=1e-6)


@pytest.mark.parametrize("kwargs,argument,message", [
    ({"normalization": "zscore"}, "normalization", "centered_128"),  # the valid names are listed
    ({"normalization": "centred_128"}, "normalization", "Did you mean 'centered_128'"),
    ({"normalization": lambda image, mean: image}, "normalization", "unit_interval"),
    ({"normalization": "mean_subtraction"}, "channel_mean", "mean_subtraction"),
    ({"normalization": "centered_128", "channel_mean": MEAN}, "channel_mean", "ignores it"),
    ({"normalization": "none", "channel_mean": [1.0]}, "channel_mean", "ignores it"),
    ({"normalization": "mean_subtraction", "channel_mean": [1.0, float("nan")]}, "channel_mean", "finite"),
    ({"normalization": "mean_subtraction", "channel_mean": "abc"}, "channel_mean", "finite"),
    ({"normalization": "mean_subtraction", "channel_mean": []}, "channel_mean", "non-empty"),
])
def test_bad_arguments_are_named(kwargs, argument, message):
    with pytest.raises(ValueError, match=f"argument `{argument}`") as error:
        PixelNormalization(**kwargs)
    assert message in str(error.value)


def test_channel_mean_of_the_wrong_length_fails_at_build():
    layer = PixelNormalization("mean_subtraction", channel_mean=(1.0, 2.0))
    with pytest.raises(ValueError, match=r"argument `channel_mean`: expected 1 or 3 values"):
        layer(_pixels())


def test_config_round_trip_stores_the_mean_as_floats():
    layer = PixelNormalization("mean_subtraction", channel_mean=np.array([1, 2, 3], np.int64), name="pixels")
    config = layer.get_config()
    assert config["normalization"] == "mean_subtraction"
    assert config["channel_mean"] == [1.0, 2.0, 3.0] and all(type(m) is float for m in config["channel_mean"])
    rebuilt = testing.assert_config_roundtrip(layer)
    assert rebuilt.channel_mean == (1.0, 2.0, 3.0)
    assert PixelNormalization().get_config()["channel_mean"] is None


def _functional(layer, seed=0):
    images = keras.Input(SHAPE)
    dense = keras.layers.Dense(2)
    model = keras.Model(images, dense(keras.layers.Flatten()(layer(images))))
    rng = np.random.default_rng(seed)
    dense.set_weights([rng.normal(size=(int(np.prod(SHAPE)), 2)).astype(np.float32) * 0.01,
                       rng.normal(size=(2,)).astype(np.float32)])
    return model, dense


def test_keras_file_round_trip(tmp_path):
    model, _ = _functional(PixelNormalization("mean_subtraction", channel_mean=MEAN))
    reloaded = testing.assert_keras_roundtrip(model, _pixels(), tmp_path, rtol=1e-6, atol=1e-5)
    assert model_normalization(reloaded) == ("mean_subtraction", MEAN)


@pytest.mark.parametrize("kwargs", [{}, {"normalization": "mean_subtraction", "channel_mean": MEAN}])
def test_keras_layer_harness(kwargs, keras_harness):
    keras_harness.run_layer_test(
        PixelNormalization,
        init_kwargs=kwargs,
        input_shape=(2,) + SHAPE,
        expected_output_shape=(2,) + SHAPE,
        expected_num_trainable_weights=0,
        expected_num_non_trainable_weights=0,
        expected_num_seed_generators=0,
        expected_num_losses=0,
        supports_masking=False,
        run_training_check=False,  # nothing to train
    )


@pytest.mark.parametrize("name", ["centered_128", "mean_subtraction"])
def test_mixed_precision_computes_in_float16(name):
    mean, reference = REFERENCES[name]
    layer = PixelNormalization(name, channel_mean=mean, dtype="mixed_float16")
    x = _pixels()
    y = layer(x)
    assert layer.compute_dtype == "float16" and keras.backend.standardize_dtype(y.dtype) == "float16"
    # float16 holds the pixels exactly; the result is rounded once (relative 2^-11) plus the mean's rounding.
    np.testing.assert_allclose(_numpy(y), reference(x.astype(np.float64)), rtol=2e-3, atol=0.07)


def test_mixed_precision_model_trains_on_raw_pixels():
    keras.mixed_precision.set_global_policy("mixed_float16")
    try:
        model = keras.Sequential([keras.Input(SHAPE), PixelNormalization(), keras.layers.Flatten(),
                                  keras.layers.Dense(2, dtype="float32")])
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        history = model.fit(_pixels(8), np.arange(8) % 2, epochs=1, batch_size=4, verbose=0)
        assert np.isfinite(history.history["loss"][0])
        assert model.layers[0].compute_dtype == "float16"
    finally:
        keras.mixed_precision.set_global_policy("float32")


def test_sequential_and_functional_models_normalise_their_input():
    x = _pixels()
    rng = np.random.default_rng(3)
    w = rng.normal(size=(int(np.prod(SHAPE)), 2)).astype(np.float32)
    b = rng.normal(size=(2,)).astype(np.float32)
    expected = ((x.astype(np.float64) - np.array(MEAN)).reshape(2, -1)) @ w + b
    sequential = keras.Sequential([keras.Input(SHAPE), PixelNormalization("mean_subtraction", channel_mean=MEAN),
                                   keras.layers.Flatten(), keras.layers.Dense(2)])
    sequential.layers[-1].set_weights([w, b])
    functional, dense = _functional(PixelNormalization("mean_subtraction", channel_mean=MEAN))
    dense.set_weights([w, b])
    for model in (sequential, functional):
        np.testing.assert_allclose(_numpy(model(x)), expected, rtol=1e-4, atol=1e-3)
        np.testing.assert_allclose(_numpy(model.predict(x, verbose=0)), expected, rtol=1e-4, atol=1e-3)
        assert model_normalization(model) == ("mean_subtraction", MEAN)


def test_model_normalization_without_the_layer_is_none():
    model = keras.Sequential([keras.Input(SHAPE), keras.layers.Flatten(), keras.layers.Dense(2)])
    assert model_normalization(model) is None
    images = keras.Input(SHAPE)
    assert model_normalization(keras.Model(images, keras.layers.Dense(2)(keras.layers.Flatten()(images)))) is None


def test_model_normalization_of_dict_inputs_reads_the_images():
    images = keras.Input(SHAPE, name="images")
    labels = keras.Input((), dtype="int32", name="labels")
    features = keras.layers.Dense(4)(keras.layers.Flatten()(PixelNormalization("unit_interval")(images)))
    model = keras.Model({"images": images, "labels": labels}, MarginHead(3, loss_type="arcface")(features, labels))
    assert model_normalization(model) == ("unit_interval", None)
    bare = keras.layers.Dense(4)(keras.layers.Flatten()(images))
    assert model_normalization(keras.Model({"images": images, "labels": labels},
                                           MarginHead(3, loss_type="arcface")(bare, labels))) is None


def test_model_normalization_looks_into_a_nested_first_model():
    backbone = keras.Sequential([keras.Input(SHAPE), PixelNormalization(), keras.layers.Flatten()])
    images = keras.Input(SHAPE)
    model = keras.Model(images, keras.layers.Dense(2)(backbone(images)))
    assert model_normalization(model) == ("centered_128", None)
    assert model_normalization(keras.Sequential([backbone, keras.layers.Dense(2)])) == ("centered_128", None)


def test_a_layer_that_is_not_first_is_refused():
    images = keras.Input(SHAPE)
    x = PixelNormalization()(keras.layers.Conv2D(3, 1)(images))
    with pytest.raises(ValueError, match="argument `model`.*first layer"):
        model_normalization(keras.Model(images, x))
    y = keras.layers.Add()([PixelNormalization()(images), keras.layers.Conv2D(3, 1)(images)])
    with pytest.raises(ValueError, match="argument `model`.*unnormalised"):
        model_normalization(keras.Model(images, y))
    with pytest.raises(ValueError, match="argument `model`"):
        model_normalization("not a model")
