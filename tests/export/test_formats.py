"""sphere_tf.export.formats: ONNX (tf2onnx + onnxruntime) and TFLite (builtin ops only) beside a served SavedModel.

One `export_model(..., formats=('onnx', 'tflite'))` of a small CNN with every
operator that needs a rewrite (OPT, TanhConv + cosine, SphereConv linear — arcsin
— and a linear-magnitude sigmoid angular layer) is shared by the module. The
references are the SavedModel's own outputs (run by TensorFlow) and, for the
graph rewrite, NumPy's arcsin/arccos/clip/norm in float64.
"""

import json
import os

import hypothesis
import hypothesis.extra.numpy as hnp
import keras
import numpy as np
import onnxruntime
import pytest
import tensorflow as tf
from absl import flags
from tensorflow.lite.python import schema_py_generated  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.framework import convert_to_constants  # pylint: disable=g-direct-tensorflow-import

from sphere_tf import export
from sphere_tf import layers
from sphere_tf.export import formats

SHAPE = (8, 8, 1)
# The converted models against the SavedModel, relative to max(1, |logits|): the
# rewritten arcsin (atan2) and the runtimes' own kernels differ by float32 rounding.
TOLERANCE = 1e-5


def _model():
    images = keras.Input(SHAPE)
    x = layers.OPTConv2D(3, 3, padding="SAME", orthogonalization="exp", seed=0)(images)
    x = layers.DecoupledConv2D(4, 3, magnitude="tanh", angular="cosine")(x)
    x = keras.layers.BatchNormalization()(x)
    x = layers.SphereConv2D(4, 3, angular="linear")(x)
    x = layers.DecoupledConv2D(4, 3, magnitude="linear", angular="sigmoid", padding="same")(x)
    logits = keras.layers.Dense(3)(keras.layers.Flatten()(x))
    model = keras.Model(images, logits)
    model(np.random.default_rng(0).standard_normal((4,) + SHAPE).astype(np.float32), training=True)
    return model


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    base = str(tmp_path_factory.mktemp("formats"))
    result = export.export_model(_model(), base, "m", verify=False, warmup_batch_sizes=(),
                                 formats=("onnx", "tflite"))
    return base, result


def _pixels(batch, seed=7):
    return np.random.default_rng(seed).integers(0, 256, (batch,) + SHAPE).astype(np.uint8)


def _saved_model_outputs(version_dir, pixels):
    loaded = tf.saved_model.load(version_dir)
    return {k: v.numpy() for k, v in loaded.signatures["serving_default"](images=tf.constant(pixels)).items()}


def _assert_close(got, expected):
    scale = max(1.0, float(np.max(np.abs(expected["logits"]))))
    np.testing.assert_allclose(got["logits"], expected["logits"], rtol=0, atol=TOLERANCE * scale)
    np.testing.assert_allclose(got["probabilities"], expected["probabilities"], rtol=0, atol=TOLERANCE)
    np.testing.assert_array_equal(got["classes"], np.argmax(got["logits"], axis=-1))
    assert np.isfinite(got["logits"]).all()


def test_files_beside_the_version_folder(exported):
    base, result = exported
    model_dir = os.path.join(base, "m")
    assert result.formats == {"onnx": os.path.join(model_dir, "1.onnx"), "tflite": os.path.join(model_dir, "1.tflite")}
    assert sorted(os.listdir(model_dir)) == ["1", "1.onnx", "1.tflite"]  # no temporary file left
    assert not any(n.endswith((".onnx", ".tflite")) for n in os.listdir(result.path))  # TF Serving's folder untouched
    assert export.existing_versions(model_dir) == [1]


def test_tflite_matches_the_saved_model(exported):
    _, result = exported
    pixels = _pixels(5)
    runner = tf.lite.Interpreter(model_path=result.formats["tflite"]).get_signature_runner("serving_default")
    got = {k: np.asarray(v) for k, v in runner(images=pixels).items()}
    assert sorted(got) == ["classes", "logits", "probabilities"]
    _assert_close(got, _saved_model_outputs(result.path, pixels))


def test_tflite_has_builtin_ops_only(exported):
    _, result = exported
    ops_ = export.tflite_ops(result.formats["tflite"])
    builtin = {n for n in vars(schema_py_generated.BuiltinOperator) if not n.startswith("_")} - {"CUSTOM"}
    assert set(ops_) <= builtin, set(ops_) - builtin
    assert not [op for op in ops_ if op.startswith("Flex")]
    assert {"ATAN2", "MINIMUM", "MAXIMUM", "SQRT"} <= set(ops_)  # the rewritten arcsin, clip and norms
    assert "CONV_2D" in ops_


def test_onnx_matches_the_saved_model(exported):
    _, result = exported
    pixels = _pixels(6, seed=8)
    session = onnxruntime.InferenceSession(result.formats["onnx"], providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["images"]
    names = [o.name for o in session.get_outputs()]
    got = dict(zip(names, session.run(names, {"images": pixels})))
    _assert_close(got, _saved_model_outputs(result.path, pixels))


def test_margin_head_keeps_its_epsilon(tmp_path):
    """MarginHead's x/√(Σx² + 1e-4) must not become TFLite's L2_NORMALIZATION (ε = 1e-6): logits off by ~4e-4·s."""
    images = keras.Input((6, 6, 2), name="images")
    x = layers.DecoupledConv2D(4, 3, magnitude="tanh", angular="cosine")(images)
    features = keras.layers.Dense(5)(keras.layers.Flatten()(x))
    labels = keras.Input((), dtype="int32", name="labels")
    model = keras.Model({"images": images, "labels": labels},
                        layers.MarginHead(3, loss_type="arcface")(features, labels))
    result = export.export_model(model, str(tmp_path), "face", normalization="mean_subtraction",
                                 channel_mean=(100.0, 20.0), verify=False, warmup_batch_sizes=(), formats="tflite")
    assert "L2_NORMALIZATION" not in export.tflite_ops(result.formats["tflite"])
    pixels = np.random.default_rng(3).integers(0, 256, (5, 6, 6, 2)).astype(np.uint8)
    runner = tf.lite.Interpreter(model_path=result.formats["tflite"]).get_signature_runner("serving_default")
    got = {k: np.asarray(v) for k, v in runner(images=pixels).items()}
    _assert_close(got, _saved_model_outputs(result.path, pixels))


# -- the graph rewrite against NumPy --------------------------------------------------------


@pytest.fixture(scope="module")
def rewritten():
    """`f(x)`: asin, acos, clip and the row norm of `x` through the TFLite rewrite of their graph."""
    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def fn(x):
        return (tf.asin(x), tf.acos(x), tf.raw_ops.ClipByValue(t=x, clip_value_min=-0.25, clip_value_max=0.5),
                tf.raw_ops.EuclideanNorm(input=x, axis=[-1], keep_dims=True))

    frozen = convert_to_constants.convert_variables_to_constants_v2(fn.get_concrete_function())
    graph_def = frozen.graph.as_graph_def()
    before = sorted({n.op for n in graph_def.node} & {"Asin", "Acos", "ClipByValue", "EuclideanNorm"})
    counts = formats._rewrite_ops(graph_def)  # pylint: disable=protected-access
    assert before == ["Acos", "Asin", "ClipByValue", "EuclideanNorm"]
    assert counts == {"Asin": 1, "Acos": 1, "ClipByValue": 1, "EuclideanNorm": 1}
    assert not {n.op for n in graph_def.node} & {"Asin", "Acos", "ClipByValue", "EuclideanNorm"}
    wrapped = tf.compat.v1.wrap_function(lambda: tf.compat.v1.import_graph_def(graph_def, name=""), [])
    return wrapped.prune(feeds=[wrapped.graph.get_tensor_by_name(frozen.inputs[0].name)],
                         fetches=[wrapped.graph.get_tensor_by_name(t.name) for t in frozen.outputs])


@hypothesis.settings(max_examples=25, deadline=None)
@hypothesis.given(hnp.arrays(np.float32, (4, 3),  # TF's CPU kernels flush subnormals to zero
                             elements=hypothesis.strategies.floats(-1, 1, width=32, allow_subnormal=False)))
def test_rewrite_matches_numpy(rewritten, x):
    x = np.concatenate([x, np.float32([[1.0, -1.0, 0.0], [1 - 1e-6, -(1 - 1e-6), 0.5]])])
    asin, acos, clip, norm = (np.asarray(v, np.float64) for v in rewritten(tf.constant(x)))
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(asin, np.arcsin(x64), rtol=0, atol=1e-6)
    np.testing.assert_allclose(acos, np.arccos(x64), rtol=0, atol=1e-6)
    np.testing.assert_array_equal(clip, np.minimum(np.maximum(x64, -0.25), 0.5))
    loops = np.array([[np.sqrt(sum(v * v for v in row))] for row in x64])
    np.testing.assert_allclose(norm, loops, rtol=1e-6, atol=0)


# -- bad input -----------------------------------------------------------------------------


def _saved_model_with(op, folder):
    spec = tf.TensorSpec([None] + list(SHAPE), tf.uint8, name="images")

    @tf.function(input_signature=[spec])
    def serve(images):
        x = tf.reshape(tf.cast(images, tf.float32) / 255.0, [-1, int(np.prod(SHAPE))])
        return {"logits": op(x)[:, :3]}

    module = tf.Module()
    module.serve = serve
    tf.saved_model.save(module, folder, signatures={"serving_default": serve.get_concrete_function()})
    return folder


def test_unsupported_op_is_named(tmp_path):
    folder = _saved_model_with(tf.math.bessel_i0e, str(tmp_path / "sm"))
    with pytest.raises(export.FormatError, match=r"no builtin for \['BesselI0e'\]"):
        export.export_tflite(folder, str(tmp_path / "m.tflite"))
    with pytest.raises(export.FormatError, match=r"no ONNX op for the TensorFlow ops \['BesselI0e'\]"):
        export.export_onnx(folder, str(tmp_path / "m.onnx"))
    assert sorted(os.listdir(tmp_path)) == ["sm"]  # nothing half-written


def test_mismatch_raises_and_leaves_nothing(exported, tmp_path, monkeypatch):
    _, result = exported
    real = formats._run_tflite  # pylint: disable=protected-access

    def perturbed(path, images, signature):
        out = real(path, images, signature)
        out["logits"] = out["logits"] + 1e-2
        return out

    monkeypatch.setattr(formats, "_run_tflite", perturbed)
    with pytest.raises(export.FormatError, match="'logits' differs from the SavedModel's"):
        export.export_tflite(result.path, str(tmp_path / "m.tflite"))
    assert not os.listdir(tmp_path)


def test_bad_arguments(exported, tmp_path):
    _, result = exported
    with pytest.raises(FileNotFoundError, match="saved_model_dir"):
        export.export_tflite(str(tmp_path / "missing"), str(tmp_path / "m.tflite"))
    with pytest.raises(ValueError, match="`path`.*'.tflite'"):
        export.export_tflite(result.path, str(tmp_path / "m.onnx"))
    with pytest.raises(FileNotFoundError, match="`path`"):
        export.export_onnx(result.path, str(tmp_path / "no" / "m.onnx"))
    with pytest.raises(FileExistsError, match="overwrite=True"):
        export.export_tflite(result.path, result.formats["tflite"])
    with pytest.raises(ValueError, match="signature"):
        export.export_tflite(result.path, str(tmp_path / "m.tflite"), signature="embeddings")
    with pytest.raises(ValueError, match="opset"):
        export.export_onnx(result.path, str(tmp_path / "m.onnx"), opset=9)
    with pytest.raises(ValueError, match="verify_inputs"):
        export.export_onnx(result.path, str(tmp_path / "m.onnx"), verify_inputs=np.zeros((2, 5, 5, 1)))
    with pytest.raises(ValueError, match="formats"):
        export.export_model(_model(), str(tmp_path / "base"), "m", formats=("onnx", "coreml"))
    assert not os.path.exists(tmp_path / "base")
    assert not os.listdir(tmp_path)


def test_failing_format_leaves_nothing(tmp_path, monkeypatch):
    def failing(*args, **kwargs):
        raise export.FormatError("simulated TFLite failure")

    monkeypatch.setitem(formats._EXPORTERS, "tflite", failing)  # pylint: disable=protected-access
    with pytest.raises(export.FormatError, match="simulated"):
        export.export_model(_model(), str(tmp_path), "m", verify=False, warmup_batch_sizes=(),
                            formats="onnx,tflite")
    assert not os.path.exists(tmp_path / "m")  # neither the version nor the ONNX file written before


def test_trainer_formats_flag(tmp_path, capsys):
    from sphere_tf_cli import export as trainer  # pylint: disable=import-outside-toplevel

    workdir = tmp_path / "run"
    (workdir / "checkpoints").mkdir(parents=True)
    model = keras.Sequential([keras.Input(SHAPE), layers.SphereConv2D(3, 3, angular="linear"),
                              keras.layers.Flatten(), keras.layers.Dense(2)])
    model.save(str(workdir / "checkpoints" / "model.keras"))
    (workdir / "config.json").write_text(json.dumps({"model": {"name": "sphere"}, "data": {"normalization": "none"}}))
    try:
        flags.FLAGS(["export", f"--workdir={workdir}", f"--export_base={tmp_path / 'models'}", "--noverify",
                     "--formats=tflite"])
        trainer.main(["export"])
    finally:
        flags.FLAGS.unparse_flags()
    path = tmp_path / "models" / "sphere" / "1.tflite"
    assert f"tflite: {path}" in capsys.readouterr().out
    pixels = _pixels(3)
    runner = tf.lite.Interpreter(model_path=str(path)).get_signature_runner("serving_default")
    np.testing.assert_allclose(runner(images=pixels)["logits"], model(pixels.astype(np.float32)).numpy(),
                               rtol=0, atol=1e-5)  # normalization 'none': the Keras model sees the raw pixels
    assert "ATAN2" in export.tflite_ops(str(path))


def test_cli_export_to_onnx_and_tflite_is_quiet(tmp_path):
    """A successful `--formats=onnx,tflite` export prints its summary only: no converter deprecation notices,
    tf2onnx optimizer tracebacks or TFLite interpreter notices on stderr."""
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    workdir = tmp_path / "run"
    (workdir / "checkpoints").mkdir(parents=True)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Conv2D(4, 3, padding="same"),
                              keras.layers.BatchNormalization(),
                              layers.DecoupledConv2D(4, 3, magnitude="tanh", angular="cosine"),
                              keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(3)])
    model.save(str(workdir / "checkpoints" / "model.keras"))
    (workdir / "config.json").write_text(json.dumps({"model": {"name": "small"}, "data": {"normalization": "none"}}))
    base = tmp_path / "models"
    proc = subprocess.run(
        [sys.executable, "-m", "sphere_tf_cli.export", f"--workdir={workdir}", f"--export_base={base}",
         "--formats=onnx,tflite"], cwd=root, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (base / "small" / "1.onnx").exists() and (base / "small" / "1.tflite").exists()
    assert proc.stderr.strip() == "", proc.stderr[-3000:]
