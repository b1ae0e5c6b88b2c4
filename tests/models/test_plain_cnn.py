"""Model registry and the plain CNNs of SphereNet's App. Table 5."""

import keras
import numpy as np
import pytest
from keras import ops

from sphere_tf import layers
from sphere_tf import models


def _conv_layers(model):
    return [l for l in model.layers if isinstance(l, (keras.layers.Conv2D, layers.DecoupledConv2D))]


@pytest.mark.parametrize("name,convs", [("cnn3", 3), ("cnn9", 9), ("cnn18", 18)])
def test_plain_cnn_depth_and_widths(name, convs):
    model = models.create_model(name, input_shape=(32, 32, 3), num_classes=10)
    conv = _conv_layers(model)
    assert len(conv) == convs
    per_stage = convs // 3
    assert [c.filters for c in conv] == [64] * per_stage + [96] * per_stage + [128] * per_stage
    # Three 2x2 pools: 32 -> 4, so FC-256 sees 4*4*128 = 2048 features (SphereNet App. A).
    assert model.get_layer("fc").kernel.shape == (2048, 256)
    assert model.output_shape == (None, 10)


@pytest.mark.parametrize("operator", [
    {"layer": "conv2d"},
    {"layer": "decoupled", "magnitude": "ball", "angular": "sqcosine"},
    {"layer": "sphere", "angular": "sigmoid", "k": 0.5},
])
def test_operator_is_swapped_in_every_conv(operator):
    model = models.create_model("small_cnn", operator=operator)
    expected = {"conv2d": keras.layers.Conv2D, "decoupled": layers.DecoupledConv2D,
                "sphere": layers.SphereConv2D}[operator["layer"]]
    convs = [l for l in model.layers if l.name.startswith("conv")]
    assert len(convs) == 4 and all(type(c) is expected for c in convs)
    options = {k: v for k, v in operator.items() if k != "layer"}
    for conv in convs:  # the options reach every conv; 'same' padding, no bias before BatchNorm
        config = conv.get_config()
        assert {k: config[k] for k in options} == options, conv.name
        assert (config["padding"], config["use_bias"], conv.kernel.shape[:2]) == ("same", False, (3, 3))
    assert [c.filters for c in convs] == [32, 32, 64, 64]
    assert model.get_layer("fc").kernel.shape == (7 * 7 * 64, 128)  # two 2x2 pools: 28 -> 7
    assert model.output_shape == (None, 10)


def test_registry_rejects_unknown_and_duplicate_names():
    with pytest.raises(ValueError, match="Unknown model 'cnn7'.*cnn9"):
        models.create_model("cnn7")
    with pytest.raises(KeyError, match="already registered"):
        models.register_model(lambda: None, name="cnn9")


def test_bad_operator_fails_before_building():
    with pytest.raises(ValueError, match=r"`operator\['layer'\]`: expected one of \('conv2d', 'conv_norm', "
                                         r"'decoupled', 'opt', 'sphere'\)\. "
                                         r"Received: operator\['layer'\]='sphereconv'"):
        models.operators.validate_operator({"layer": "sphereconv"})
    with pytest.raises(ValueError, match="Unknown magnitude function 'tahn'"):
        models.operators.validate_operator({"layer": "decoupled", "magnitude": "tahn"})


def test_decoupled_model_round_trips_through_keras_file(tmp_path):
    model = models.create_model("small_cnn", operator={"layer": "decoupled", "magnitude": "tanh"})
    x = np.random.default_rng(0).standard_normal((4, 28, 28, 1)).astype(np.float32)
    model(x, training=True)  # move the E{||x||} averages off their initial value
    path = str(tmp_path / "m.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    np.testing.assert_allclose(ops.convert_to_numpy(restored(x)), ops.convert_to_numpy(model(x)), rtol=1e-6,
                               atol=1e-6)
