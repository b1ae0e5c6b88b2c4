"""SphereFace-4/10/20/36/64 layouts (thesis Table 2.7) and flip-concatenated embeddings."""

import keras
import numpy as np
import pytest

from sphere_tf import models
from sphere_tf.evaluation import verification

# Thesis Table 2.7: residual units per stage; conv layers = 4 + 2 * units.
TABLE_2_7 = {4: (0, 0, 0, 0), 10: (0, 1, 2, 0), 20: (1, 2, 4, 1), 36: (2, 4, 8, 2), 64: (3, 8, 16, 3)}


@pytest.mark.parametrize("depth", sorted(TABLE_2_7))
def test_layout(depth):
    model = models.create_model(f"sphereface{depth}", input_shape=(112, 96, 3), num_classes=7,
                                width_multiplier=0.125)
    convs = [layer for layer in model.layers if isinstance(layer, keras.layers.Conv2D)]
    assert len(convs) == depth
    adds = [layer for layer in model.layers if isinstance(layer, keras.layers.Add)]
    assert len(adds) == sum(TABLE_2_7[depth])
    for stage, units in enumerate(TABLE_2_7[depth], start=1):
        assert sum(layer.name.startswith(f"res{stage}_") for layer in adds) == units
    assert not any(isinstance(layer, keras.layers.BatchNormalization) for layer in model.layers)
    prelus = [layer for layer in model.layers if isinstance(layer, keras.layers.PReLU)]
    assert len(prelus) == depth
    np.testing.assert_allclose(keras.ops.convert_to_numpy(prelus[0].alpha), 0.25)
    strided = [c for c in convs if c.strides == (2, 2)]
    assert len(strided) == 4 and all(c.use_bias for c in strided)
    assert all(not c.use_bias for c in convs if c.strides == (1, 1))
    # 112x96 -> 56x48 -> 28x24 -> 14x12 -> 7x6, flattened into the 512-d embedding.
    embedding = model.get_layer("embedding")
    assert embedding.units == 512 and embedding.kernel.shape[0] == 7 * 6 * convs[-1].filters
    assert model.output.shape == (None, 7)


def test_sphereface20_full_widths_and_margin_head():
    model = models.create_model("sphereface20", head={"layer": "margin", "loss_type": "asoftmax",
                                                      "annealing": "sphereface"}, num_classes=10)
    widths = [c.filters for c in model.layers if isinstance(c, keras.layers.Conv2D) and c.strides == (2, 2)]
    assert widths == [64, 128, 256, 512]
    assert models.needs_labels(model) and model.get_layer("logits").kernel.shape == (512, 10)
    with pytest.raises(ValueError, match="residual_units"):
        models.create_model("sphereface20", residual_units=(1, 2, 4))


def _small_model(head=None):
    return models.create_model("sphereface4", input_shape=(12, 10, 3), num_classes=4, width_multiplier=0.125,
                               head=head)


@pytest.mark.parametrize("head", [None, {"layer": "margin", "loss_type": "cosface"}])
def test_flip_concatenated_embeddings(head):
    keras.utils.set_random_seed(0)
    model = _small_model(head)
    embedder = verification.embedding_model(model)
    assert embedder.output.shape == (None, 512)
    rng = np.random.default_rng(0)
    images = rng.normal(size=(5, 12, 10, 3)).astype(np.float32)
    embed = verification.flip_embedding_fn(embedder)
    features = keras.ops.convert_to_numpy(embed(images))
    # Reference: each image and its mirror image (NumPy, columns reversed) embedded one at a time.
    for i in range(5):
        plain = keras.ops.convert_to_numpy(embedder(images[i:i + 1]))[0]
        mirrored = keras.ops.convert_to_numpy(embedder(np.ascontiguousarray(images[i:i + 1, :, ::-1])))[0]
        np.testing.assert_allclose(features[i], np.concatenate([plain, mirrored]), rtol=1e-4, atol=1e-5)
    assert not np.allclose(features[:, :512], features[:, 512:])
    # The embedding is the head's input: the dense model's logits are a linear map of it.
    if head is None:
        dense = model.get_layer("logits")
        logits = keras.ops.convert_to_numpy(model(images))
        kernel, bias = (keras.ops.convert_to_numpy(w) for w in dense.weights)
        np.testing.assert_allclose(logits, features[:, :512] @ kernel + bias, rtol=1e-4, atol=1e-4)
    # One traced function for every batch size on TensorFlow (an input signature without the batch size); JAX
    # compiles once per batch shape, PyTorch runs the body eagerly at every call.
    embed(images[:2])
    assert embed.traces == (1 if keras.backend.backend() == "tensorflow" else 2)


def test_embedding_model_of_a_zoo_classifier():
    model = models.create_model("small_cnn", input_shape=(8, 8, 1), num_classes=3)
    embedder = verification.embedding_model(model)
    assert embedder.output.shape[-1] == model.get_layer("logits").kernel.shape[0]


def test_embedding_relu_is_table_a1_row_a_and_round_trips(tmp_path):
    """Thesis Table A.1 row A: a ReLU after the embedding FC ("last ReLU"); off by default (rows B-G)."""
    assert "embedding_relu" not in [layer.name for layer in _small_model().layers]
    keras.utils.set_random_seed(1)
    model = models.create_model("sphereface4", input_shape=(12, 10, 3), num_classes=4, width_multiplier=0.125,
                                embedding_relu=True)
    names = [layer.name for layer in model.layers]
    assert names[names.index("embedding") + 1:] == ["embedding_relu", "logits"]
    images = np.random.default_rng(2).normal(size=(6, 12, 10, 3)).astype(np.float32)
    # NumPy reference: the classifier sees max(0, embedding); so does verification.
    before = keras.ops.convert_to_numpy(keras.Model(model.input, model.get_layer("embedding").output)(images))
    assert (before < 0).any()
    features = keras.ops.convert_to_numpy(verification.embedding_model(model)(images))
    np.testing.assert_allclose(features, np.maximum(before, 0.0), atol=1e-6)
    kernel, bias = (keras.ops.convert_to_numpy(w) for w in model.get_layer("logits").weights)
    logits = keras.ops.convert_to_numpy(model(images))
    np.testing.assert_allclose(logits, np.maximum(before, 0.0) @ kernel + bias, rtol=1e-4, atol=1e-4)
    path = str(tmp_path / "row_a.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    assert "embedding_relu" in [layer.name for layer in restored.layers]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(restored(images)), logits, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match=r"`embedding_relu`: expected one of \(True, False\)"):
        models.create_model("sphereface4", embedding_relu="yes")


def test_table2_11_row_a_variant():
    import importlib  # noqa: PLC0415

    from sphere_tf.runners import face  # noqa: PLC0415
    from sphere_tf.runners import classifier  # noqa: PLC0415

    module = importlib.import_module("sphere_tf.configs.face.table2_11_depth")
    row_a = module.get_config("depth=4,loss=softmax,last_relu=true")
    row_b = module.get_config("depth=4,loss=softmax")
    assert row_a.model.embedding_relu is True and "embedding_relu" not in row_b.model
    assert row_a.model.head is None and row_a.model.name == "sphereface4"
    assert {**row_a.to_dict(), "model": None} == {**row_b.to_dict(), "model": None}
    checked = classifier.validate(face.split_config(module.get_config("quick,depth=4,loss=softmax,last_relu=true"))[0])
    assert checked["model"]["embedding_relu"] is True
