"""sphere_tf.export.export_model: TF Serving layout, signatures, warmup records, verification, bad input.

One verified export (a margin-head model with an OPT layer, a TanhConv layer and
mean subtraction) is shared by the module; the references are the Keras model
itself and NumPy (softmax, L2 normalisation, cosines, the mean subtraction).
"""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format
from tensorflow.python.framework import op_def_registry  # pylint: disable=g-direct-tensorflow-import
from tensorflow_serving.apis import prediction_log_pb2
from tensorflow_serving.config import model_server_config_pb2

from sphere_tf import export
from sphere_tf import layers
from sphere_tf.export import serving

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

MEAN = (100.0, 20.0)
SHAPE = (6, 6, 2)


def _margin_model():
    images = keras.Input(SHAPE, name="images")
    x = layers.OPTConv2D(3, 3, padding="SAME", orthogonalization="exp", seed=0)(images)
    x = layers.DecoupledConv2D(4, 3, magnitude="tanh", angular="cosine")(x)
    x = keras.layers.BatchNormalization()(x)
    features = keras.layers.Dense(5, name="features")(keras.layers.Flatten()(x))
    labels = keras.Input((), dtype="int32", name="labels")
    logits = layers.MarginHead(3, loss_type="arcface")(features, labels)
    model = keras.Model({"images": images, "labels": labels}, logits)
    rng = np.random.default_rng(0)
    model({"images": rng.standard_normal((4,) + SHAPE).astype(np.float32), "labels": np.array([0, 1, 2, 0])},
          training=True)  # moves BN's and the operator's moving averages off their initial values
    return model


def _plain_model():
    return keras.Sequential([keras.Input(SHAPE), layers.SphereConv2D(3, 3, angular="linear"),
                             keras.layers.Flatten(), keras.layers.Dense(2)])


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    base = str(tmp_path_factory.mktemp("serving"))
    model = _margin_model()
    result = export.export_model(model, base, "face", normalization="mean_subtraction", channel_mean=MEAN,
                                 warmup_batch_sizes=(1, 3))
    return model, base, result


def _pixels(batch, seed=5):
    return np.random.default_rng(seed).integers(0, 256, (batch,) + SHAPE).astype(np.uint8)


def test_layout_and_models_config(exported):
    _, base, result = exported
    assert result.path == os.path.join(base, "face", "1") and result.version == 1
    assert sorted(os.listdir(os.path.join(base, "face"))) == ["1"]  # no temporary folder left
    assert result.max_abs_diff is not None and result.max_abs_diff < 1e-4
    with open(os.path.join(base, "models.config")) as f:
        config = text_format.Parse(f.read(), model_server_config_pb2.ModelServerConfig())
    [entry] = config.model_config_list.config
    assert (entry.name, entry.base_path, entry.model_platform) == ("face", os.path.join(base, "face"), "tensorflow")


def test_signatures_match_the_keras_model_and_numpy(exported):
    model, _, result = exported
    loaded = tf.saved_model.load(result.path)
    assert sorted(loaded.signatures) == ["embeddings", "serving_default"]
    pixels = _pixels(5)
    served = loaded.signatures["serving_default"](images=tf.constant(pixels))
    assert sorted(served) == ["classes", "logits", "probabilities"]
    normalised = pixels.astype(np.float32) - np.array(MEAN, np.float32)  # the pipeline's mean subtraction
    expected = model({"images": normalised, "labels": np.zeros(5, np.int32)}, training=False).numpy()
    np.testing.assert_allclose(served["logits"].numpy(), expected, rtol=1e-4, atol=1e-4)
    shifted = np.exp(expected - expected.max(axis=1, keepdims=True))
    np.testing.assert_allclose(served["probabilities"].numpy(), shifted / shifted.sum(1, keepdims=True), atol=1e-5)
    assert served["classes"].dtype == tf.int64
    np.testing.assert_array_equal(served["classes"].numpy(), np.argmax(served["logits"].numpy(), axis=1))

    emb = loaded.signatures["embeddings"](images=tf.constant(pixels))
    features_model = keras.Model(model.input["images"], model.get_layer("features").output)
    features = features_model(normalised, training=False).numpy().astype(np.float64)
    unit = features / np.sqrt((features**2).sum(axis=1, keepdims=True))
    kernel = [layer for layer in model.layers if isinstance(layer, layers.MarginHead)][0].kernel.numpy()
    cosine = unit @ (kernel / np.sqrt((kernel**2).sum(axis=0, keepdims=True)))
    np.testing.assert_allclose(emb["embeddings"].numpy(), unit, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(emb["embeddings"].numpy(), axis=1), 1.0, atol=1e-6)
    np.testing.assert_allclose(emb["cosine"].numpy(), cosine, atol=1e-5)
    np.testing.assert_allclose(emb["logits"].numpy(), expected, rtol=1e-4, atol=1e-4)


def test_graph_is_stock_tensorflow_without_variable_updates(exported):
    _, _, result = exported
    loaded = tf.saved_model.load(result.path)
    for fn in loaded.signatures.values():
        graph_def = fn.graph.as_graph_def()
        functions = {f.signature.name for f in graph_def.library.function}
        op_types = {n.op for n in graph_def.node} | {n.op for f in graph_def.library.function for n in f.node_def}
        op_types -= functions
        assert all(op_def_registry.get(op) is not None and not op.startswith("SphereTf") for op in op_types)
        assert not op_types & {"AssignVariableOp", "AssignAddVariableOp", "OPTConv2D"}


def test_loading_does_not_warn_about_custom_gradients(exported, caplog):
    """The layers' `tf.custom_gradient` markers are not left in the frozen serving graph."""
    _, _, result = exported
    with caplog.at_level("WARNING"):
        loaded = tf.saved_model.load(result.path)
    assert loaded.signatures and "custom gradients" not in caplog.text


def test_warmup_records_parse_back(exported):
    _, _, result = exported
    records = list(tf.data.TFRecordDataset(os.path.join(result.path, "assets.extra", "tf_serving_warmup_requests")))
    seen = []
    for record in records:
        log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        request = log.predict_log.request
        images = tf.make_ndarray(request.inputs["images"])
        assert request.model_spec.name == "face" and images.dtype == np.uint8 and images.shape[1:] == SHAPE
        seen.append((request.model_spec.signature_name, images.shape[0]))
    assert sorted(seen) == [("embeddings", 1), ("embeddings", 3), ("serving_default", 1), ("serving_default", 3)]


def test_signature_checks_dtype_and_shape(exported):
    _, _, result = exported
    fn = tf.saved_model.load(result.path).signatures["serving_default"]
    with pytest.raises((TypeError, ValueError, tf.errors.InvalidArgumentError), match="uint8|dtype|float"):
        fn(images=tf.zeros((1,) + SHAPE, tf.float32))
    with pytest.raises((TypeError, ValueError, tf.errors.InvalidArgumentError), match="shape|Shape|incompatible"):
        fn(images=tf.zeros((1, 7, 6, 2), tf.uint8))


def test_versions_are_never_overwritten(exported, tmp_path):
    model, base, result = exported
    with pytest.raises(FileExistsError, match="version"):
        export.export_model(model, base, "face", version=1, normalization="mean_subtraction", channel_mean=MEAN)
    assert sorted(os.listdir(os.path.join(base, "face"))) == ["1"]
    assert serving._resolve_version(os.path.join(base, "face"), None) == 2  # pylint: disable=protected-access


def test_failed_verification_leaves_nothing(tmp_path, monkeypatch):
    def fail(*args, **kwargs):
        raise export.ExportError("forced")

    monkeypatch.setattr(serving, "_verify", fail)
    with pytest.raises(export.ExportError, match="forced"):
        export.export_model(_plain_model(), str(tmp_path), "m", warmup_batch_sizes=(1,))
    assert os.listdir(tmp_path) == []


def test_unverified_export_then_next_version(tmp_path):
    model = _plain_model()
    first = export.export_model(model, str(tmp_path), "m", verify=False, warmup_batch_sizes=(), input_dtype="float32")
    second = export.export_model(model, str(tmp_path), "m", verify=False, warmup_batch_sizes=())
    assert (first.version, second.version) == (1, 2)
    assert first.signatures["serving_default"]["inputs"]["images"] == ("float32", [None, 6, 6, 2])
    assert second.signatures["serving_default"]["inputs"]["images"] == ("uint8", [None, 6, 6, 2])
    pixels = _pixels(2)
    out = tf.saved_model.load(first.path).signatures["serving_default"](images=tf.constant(pixels, tf.float32))
    centred = (pixels.astype(np.float32) - 127.5) / 128.0  # the default 'centered_128'
    np.testing.assert_allclose(out["logits"].numpy(), model(centred).numpy(), rtol=1e-5, atol=1e-5)
    # A model without a PixelNormalization (saved before the layer existed): the default, run in the graph.
    assert first.normalization == {"name": "centered_128", "channel_mean": None, "in_model": False}


def test_bad_arguments_have_clear_errors(tmp_path):
    model = _plain_model()
    a_file = tmp_path / "file"
    a_file.write_text("x")
    with pytest.raises(ValueError, match="export_base.*is a file"):
        export.export_model(model, str(a_file), "m")
    with pytest.raises(ValueError, match="model_name"):
        export.export_model(model, str(tmp_path), "12")
    with pytest.raises(ValueError, match="channel_mean"):
        export.export_model(model, str(tmp_path), "m", normalization="mean_subtraction")
    with pytest.raises(ValueError, match="normalization"):
        export.export_model(model, str(tmp_path), "m", normalization="imagenet")
    with pytest.raises(ValueError, match="input_dtype"):
        export.export_model(model, str(tmp_path), "m", input_dtype="int32")
    with pytest.raises(ValueError, match="verify_inputs"):
        export.export_model(model, str(tmp_path), "m", verify_inputs=np.zeros((2, 5, 5, 2)))
    with pytest.raises(ValueError, match="built"):
        export.export_model(keras.Sequential([keras.layers.Dense(2)]), str(tmp_path), "m")
    a, b = keras.Input((3,)), keras.Input((3,))
    with pytest.raises(ValueError, match="one image input"):
        export.export_model(keras.Model([a, b], keras.layers.Add()([a, b])), str(tmp_path), "m")
    assert sorted(os.listdir(tmp_path)) == ["file"]  # nothing half-written


def test_trainer_exports_a_workdir(tmp_path):
    workdir = tmp_path / "run"
    (workdir / "checkpoints").mkdir(parents=True)
    model = _plain_model()
    model.save(str(workdir / "checkpoints" / "model.keras"))
    (workdir / "config.json").write_text(json.dumps({"model": {"name": "sphere"},
                                                     "data": {"normalization": "none"}}))
    base = tmp_path / "models"
    # The absl main in its own process (absl flags are process-global: mains are not imported in tests).
    proc = subprocess.run(
        [sys.executable, "-m", "sphere_tf_cli.export", f"--workdir={workdir}", f"--export_base={base}", "--version=7",
         "--noverify"], cwd=ROOT, capture_output=True, text=True, timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    path = base / "sphere" / "7"
    pixels = _pixels(2)
    out = tf.saved_model.load(str(path)).signatures["serving_default"](images=tf.constant(pixels))
    np.testing.assert_allclose(out["logits"].numpy(), model(pixels.astype(np.float32)).numpy(), rtol=1e-5, atol=1e-4)
    missing = subprocess.run(
        [sys.executable, "-m", "sphere_tf_cli.export", f"--workdir={tmp_path}", f"--export_base={base}"], cwd=ROOT,
        capture_output=True, text=True, timeout=300, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert missing.returncode != 0 and "config.json" in missing.stderr


# -- the functional margin pattern of docs/losses.md (labels as a second, list input) -------------------------


def _docs_pattern_1():
    """docs/losses.md, Pattern 1, as written there (training data: 8 random images)."""
    images = keras.Input((28, 28, 1), name="images")
    labels = keras.Input((), dtype="int32", name="labels")
    h = keras.layers.Conv2D(32, 3, activation="relu")(images)
    h = keras.layers.GlobalAveragePooling2D()(h)
    features = keras.layers.Dense(64)(h)           # SphereFace App. A.1: no ReLU before the head
    head = layers.MarginHead(10, loss_type="asoftmax", margin=4, annealing="sphereface")

    train_model = keras.Model([images, labels], head(features, labels=labels))
    inference_model = keras.Model(images, head(features))   # same weights, plain logits

    rng = np.random.default_rng(3)
    x_train = rng.normal(size=(8, 28, 28, 1)).astype(np.float32)
    y_train = rng.integers(0, 10, size=(8,)).astype(np.int32)
    train_model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    train_model.fit([x_train, y_train], y_train, epochs=1, batch_size=8, verbose=0)
    return train_model, inference_model, keras.Model(images, features), head


@pytest.mark.parametrize("exported_model", ["train_model", "inference_model"])
def test_docs_functional_margin_pattern_exports_with_embeddings(tmp_path, exported_model):
    train_model, inference_model, features_model, head = _docs_pattern_1()
    model = train_model if exported_model == "train_model" else inference_model
    result = export.export_model(model, str(tmp_path), "faces", normalization="centered_128",
                                 warmup_batch_sizes=(1,))
    assert sorted(result.signatures) == ["embeddings", "serving_default"]
    loaded = tf.saved_model.load(result.path)
    pixels = np.random.default_rng(4).integers(0, 256, (5, 28, 28, 1)).astype(np.uint8)
    normalised = (pixels.astype(np.float32) - 127.5) / 128.0  # 'centered_128', written out

    served = loaded.signatures["serving_default"](images=tf.constant(pixels))
    # The Keras models' own outputs: the training model with (ignored) labels, the inference model.
    expected = train_model.predict([normalised, np.zeros(5, np.int32)], verbose=0)
    np.testing.assert_allclose(inference_model.predict(normalised, verbose=0), expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(served["logits"].numpy(), expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(served["classes"].numpy(), np.argmax(expected, axis=1))

    emb = loaded.signatures["embeddings"](images=tf.constant(pixels))
    features = features_model.predict(normalised, verbose=0).astype(np.float64)
    unit = features / np.sqrt((features**2).sum(axis=1, keepdims=True))
    kernel = head.kernel.numpy().astype(np.float64)
    np.testing.assert_allclose(emb["embeddings"].numpy(), unit, atol=1e-5)
    np.testing.assert_allclose(emb["cosine"].numpy(), unit @ (kernel / np.linalg.norm(kernel, axis=0)), atol=1e-5)
    np.testing.assert_allclose(emb["logits"].numpy(), expected, rtol=1e-4, atol=1e-4)


def test_wrong_input_structure_is_named_without_contradiction(tmp_path):
    images, extra = keras.Input(SHAPE, name="images"), keras.Input(SHAPE, name="extra")
    labels = keras.Input((), dtype="int32", name="labels")
    features = keras.layers.Dense(4)(keras.layers.Flatten()(keras.layers.Add()([images, extra])))
    three_inputs = keras.Model([images, extra, labels], layers.MarginHead(3)(features, labels=labels))
    with pytest.raises(ValueError) as error:
        export.export_model(three_inputs, str(tmp_path), "m")
    message = str(error.value)
    assert "Received inputs ['images', 'extra', 'labels']" in message
    assert "'labels' feeds the MarginHead's labels, which leaves 2 other inputs" in message

    a, b = keras.Input(SHAPE, name="a"), keras.Input(SHAPE, name="b")
    with pytest.raises(ValueError, match=r"Received inputs \['a', 'b'\] of .*: none of them feeds the labels"):
        export.export_model(keras.Model([a, b], keras.layers.Add()([a, b])), str(tmp_path), "m")
    assert os.listdir(tmp_path) == []


# -- a model that normalises its own pixels (sphere_tf.layers.PixelNormalization first) -----------------------


def _normalising_model():
    return keras.Sequential([keras.Input(SHAPE), layers.PixelNormalization("mean_subtraction", channel_mean=MEAN),
                             layers.SphereConv2D(3, 3, angular="linear"), keras.layers.Flatten(),
                             keras.layers.Dense(2)])


def test_model_with_pixel_normalization_serves_raw_pixels(tmp_path):
    model = _normalising_model()
    result = export.export_model(model, str(tmp_path), "m", warmup_batch_sizes=(1,))  # normalization read from it
    assert result.normalization == {"name": "mean_subtraction", "channel_mean": list(MEAN), "in_model": True}
    assert result.max_abs_diff is not None and result.max_abs_diff < 1e-4
    pixels = _pixels(3)
    served = tf.saved_model.load(result.path).signatures["serving_default"](images=tf.constant(pixels))
    # The Keras model on the raw pixels (its first layer subtracts the mean): nothing is normalised twice.
    expected = model.predict(pixels.astype(np.float32), verbose=0)
    np.testing.assert_allclose(served["logits"].numpy(), expected, rtol=1e-4, atol=1e-4)
    # The layer's own arguments, given again, agree.
    again = export.export_model(model, str(tmp_path), "m", normalization="mean_subtraction", channel_mean=MEAN,
                                verify=False, warmup_batch_sizes=())
    assert again.version == 2 and again.normalization["in_model"]


def test_normalization_disagreeing_with_the_model_layer_raises(tmp_path):
    model = _normalising_model()
    with pytest.raises(ValueError, match="argument `normalization`.*'mean_subtraction'"):
        export.export_model(model, str(tmp_path), "m", normalization="centered_128")
    with pytest.raises(ValueError, match="argument `normalization`"):
        export.export_model(model, str(tmp_path), "m", normalization="none")
    with pytest.raises(ValueError, match="argument `channel_mean`"):
        export.export_model(model, str(tmp_path), "m", channel_mean=(1.0, 2.0))
    assert os.listdir(tmp_path) == []
    assert export.input_normalization(model) == ("mean_subtraction", MEAN, True)
    assert export.input_normalization(_plain_model()) == ("centered_128", None, False)
    assert export.input_normalization(_plain_model(), "unit_interval") == ("unit_interval", None, False)
