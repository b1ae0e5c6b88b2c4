"""`.keras` files written by an earlier sphere_tf still load, on every backend, and compute what they computed then.

tests/saved_files/ holds one small model per family of serializable objects (every public layer class, the
regularizers, losses, metrics, initializers, optimizers, training models and every registered model builder),
saved on TensorFlow by the commits that manifest.json names, with a fixed input and the predictions the saving
model made on it. A refactor that renames a registered class, drops a config key or changes a weight's layout
fails here. A new public class or model fails the coverage tests until the files are regenerated:

    KERAS_BACKEND=tensorflow python scripts/make_saved_files.py
"""

import importlib
import inspect
import json
import os

import keras
import numpy as np
import pytest

import sphere_tf
from sphere_tf import layers
from sphere_tf import models
from sphere_tf import regularizers
from sphere_tf import testing

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "saved_files")
with open(os.path.join(HERE, "manifest.json"), encoding="utf-8") as _f:
    MANIFEST = json.load(_f)
ENTRIES = {entry["file"][: -len(".keras")]: entry for entry in MANIFEST["files"]}
REGENERATE = "run `KERAS_BACKEND=tensorflow python scripts/make_saved_files.py` and commit tests/saved_files"

# Float32 forward passes of a few small layers, recomputed by another backend's kernels (or TensorFlow's, on
# another CPU): differences are a few ulps of the outputs, far below 1e-5 of values of order 1.
RTOL = ATOL = 1e-5

# Public layer classes of `sphere_tf.layers` without a file of their own, with the reason.
LAYERS_NOT_SAVED = {
    "OPTLayer": "the abstract base of OPTConv2D and OPTDense (it builds no kernel); saved through both",
}


def _params():
    for name, entry in sorted(ENTRIES.items()):
        # A file only TensorFlow can read (the manifest says why, e.g. a class registered by sphere_tf.export):
        # deselected on JAX and PyTorch by tests/conftest.py, like the TensorFlow-only tests.
        marks = [pytest.mark.tensorflow_only] if entry.get("tensorflow_only") else []
        yield pytest.param(entry, id=name, marks=marks)


def _unflatten(data, prefix, kind):
    if kind == "array":
        return data[prefix]
    items = {key[len(prefix) + 1:]: data[key] for key in data.files if key.startswith(prefix + ".")}
    if kind == "list":
        return [items[str(i)] for i in range(len(items))]
    return items


def _flatten(prefix, value):
    if isinstance(value, dict):
        return {f"{prefix}.{k}": np.asarray(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return {f"{prefix}.{i}": np.asarray(v) for i, v in enumerate(value)}
    return {prefix: np.asarray(value)}


def _loaded_names(model):
    """The registered names in the loaded model's own configs (model, compile arguments, optimizer)."""
    serialized = [keras.saving.serialize_keras_object(model)]
    if getattr(model, "compiled", False):
        serialized.append(model.get_compile_config())
        serialized.append(keras.saving.serialize_keras_object(model.optimizer))
    return testing.registered_names(serialized)


def _assert_close(actual, expected, what):
    assert sorted(actual) == sorted(expected), f"{what}: outputs {sorted(actual)}, saved {sorted(expected)}"
    for key in expected:
        np.testing.assert_allclose(actual[key], expected[key], rtol=RTOL, atol=ATOL, err_msg=f"{what}: {key}")


@pytest.mark.parametrize("entry", list(_params()))
def test_saved_file_loads_and_computes_the_saved_outputs(entry):
    for module in entry.get("imports", []):  # modules that register the file's classes beyond `import sphere_tf`
        importlib.import_module(module)
    model = keras.saving.load_model(os.path.join(HERE, entry["file"]))
    assert keras.saving.get_registered_name(type(model)) == entry["model_class"]
    missing = set(entry["classes"]) - _loaded_names(model)
    assert not missing, f"{entry['file']}: the loaded model has no {sorted(missing)}"

    data = np.load(os.path.join(HERE, entry["data"]))
    x = _unflatten(data, "x", entry["inputs"])
    if entry["file"].startswith("model_") and keras.backend.backend() == "tensorflow":
        # The model zoo's files on TensorFlow: tracing a deep net's predict function takes seconds (this file took
        # 54 s), and the other files trace its layers already, so called eagerly. JAX's eager op-by-op dispatch is
        # the slow path there (ConvNorm ResNet-18: 9 s eagerly, 4 s through predict).
        predicted = _flatten("y", keras.tree.map_structure(keras.ops.convert_to_numpy, model(x, training=False)))
    else:
        predicted = _flatten("y", model.predict(x, batch_size=len(data[data.files[0]]), verbose=0))
    _assert_close(predicted, {k: data[k] for k in data.files if k.startswith("y")}, f"{entry['file']} predict")
    if "regularization" in data.files:
        regularized = [v for v in model.trainable_weights if getattr(v, "regularizer", None) is not None]
        penalties = np.array([keras.ops.convert_to_numpy(v.regularizer(v)) for v in regularized])
        assert penalties.shape == data["regularization"].shape and np.isfinite(penalties).all()
        # CoMHE's random projections come from `keras.random`, whose streams differ between backends for the
        # same seed: its value is TensorFlow's only on TensorFlow (its config is checked above on every backend).
        same_draws = np.array([keras.backend.backend() == "tensorflow"
                               or not isinstance(v.regularizer, regularizers.CoMHE) for v in regularized])
        np.testing.assert_allclose(penalties[same_draws], data["regularization"][same_draws], rtol=RTOL, atol=ATOL,
                                   err_msg=f"{entry['file']}: weight penalties")
    if "optimizer_iterations" in data.files:
        assert int(keras.ops.convert_to_numpy(model.optimizer.iterations)) == int(data["optimizer_iterations"])
    if "evaluate" in entry:  # the compile config: losses with their hyperparameters, metrics
        targets = _unflatten(data, "t", entry["targets"])
        values = model.evaluate(x, targets, batch_size=len(data[data.files[0]]), verbose=0, return_dict=True)
        _assert_close({f"evaluate.{k}": v for k, v in values.items()},
                      {f"evaluate.{k}": data[f"evaluate.{k}"] for k in entry["evaluate"]}, f"{entry['file']} evaluate")


def _covered():
    return set().union(*(entry["classes"] for entry in ENTRIES.values()))


@pytest.mark.structure_only
def test_every_public_layer_class_has_a_saved_file():
    public = {name: obj for name, obj in vars(layers).items()
              if not name.startswith("_") and inspect.isclass(obj) and issubclass(obj, keras.layers.Layer)}
    # The walk must find the layers the files were made for (an empty walk would pass anything).
    assert {"DecoupledConv2D", "SphereDense", "MarginHead", "PartialFCHead", "OPTConv2D", "ConvNorm2D"} <= set(public)
    assert set(LAYERS_NOT_SAVED) <= set(public), "LAYERS_NOT_SAVED names a class sphere_tf.layers no longer has"
    # An unregistered class has no 'sphere_tf>' name, so it is never covered: register it, then regenerate.
    missing = sorted(name for name, cls in public.items()
                     if name not in LAYERS_NOT_SAVED and keras.saving.get_registered_name(cls) not in _covered())
    assert not missing, f"public layer classes with no saved file: {missing}; {REGENERATE}"


@pytest.mark.structure_only
def test_every_registered_object_has_a_saved_file():
    """Losses, metrics, regularizers, initializers, optimizers and models the package registers (its
    TensorFlow-only subpackages included), whatever other tests have imported or registered in this process."""
    if keras.backend.backend() == "tensorflow":
        importlib.import_module("sphere_tf.export")
        importlib.import_module("sphere_tf.adversarial")
    registered = {name: obj for name, obj in keras.saving.get_custom_objects().items()
                  if name.startswith("sphere_tf>") and getattr(obj, "__module__", "").startswith("sphere_tf.")}
    assert "sphere_tf>CosFaceLoss" in registered and "sphere_tf>CayleySGD" in registered
    # Callbacks are registered (for configs that name them) but a `.keras` file never holds one.
    missing = sorted(name for name, obj in registered.items()
                     if not (inspect.isclass(obj) and issubclass(obj, keras.callbacks.Callback))
                     and name not in _covered())
    assert not missing, f"registered objects with no saved file: {missing}; {REGENERATE}"


@pytest.mark.structure_only
def test_every_registered_model_has_a_saved_file():
    not_saved = MANIFEST["models_not_saved"]
    package = [name for name in models.list_models()  # not the user builders other tests register
               if models.get_model_fn(name).__module__.startswith("sphere_tf.")]
    missing = [name for name in package if f"model_{name}" not in ENTRIES and name not in not_saved]
    assert not missing, f"registered models with no saved file: {missing}; {REGENERATE}"


@pytest.mark.structure_only
def test_manifest_names_the_commit_and_its_files():
    for entry in ENTRIES.values():
        commit = entry["sphere_tf_commit"]
        assert len(commit) == 40 and all(c in "0123456789abcdef" for c in commit), (entry["file"], commit)
    on_disk = {f for f in os.listdir(HERE) if f.endswith((".keras", ".npz"))}
    listed = {entry[key] for entry in ENTRIES.values() for key in ("file", "data")}
    assert on_disk == listed
    assert sphere_tf.__version__
