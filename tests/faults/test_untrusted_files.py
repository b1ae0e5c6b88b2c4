"""Untrusted `.keras` files: loading one runs no code from it, on every backend.

A `.keras` file is a zip of a JSON config and HDF5 weights: the only code it can carry is a Python lambda
(marshalled bytecode, which Keras rebuilds only with `safe_mode=False`) or the name of a class or function to look
up. These tests check, against CPython's audit events (`_untrusted.code_execution_monitor`), that

- a file holding every class the package registers (enumerated from Keras's registry after importing every module
  that registers one) loads with `safe_mode=True`, through `keras.saving.load_model` and `sphere_tf.saving`, without
  unmarshalling, unpickling, compiling or executing anything, and so does every registered callback's config;
- a lambda is refused with Keras's safe-mode `ValueError` wherever it sits: a Lambda layer (of a plain or a
  sphere_tf training model), and every nested-object slot (initializer, regularizer, constraint, activation,
  penalty, inner optimizer) of every registered class; with `safe_mode=False` the same file does load the bytecode
  (the oracle sees it, and calling the model runs it: the payload is live);
- a `sphere_tf>` class the installed release lacks is refused naming the class, the object and the file, and a
  config.json zip bomb is refused before it is read;
- statically, no module of the package or its CLI unpickles, unmarshals, evals or execs anything from a file, and
  no loader turns safe mode off (the runner, export, evaluation and CLI load through `saving.load_model`).
"""

import ast
import copy
import importlib
import inspect
import json
import os
import re
import warnings
import zipfile

import keras
import numpy as np
import pytest

import sphere_tf
from sphere_tf import dependencies
from sphere_tf import layers
from sphere_tf import saving
from sphere_tf import testing
from sphere_tf import training
from tests.faults._untrusted import code_execution_monitor

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SAVED = os.path.join(ROOT, "tests", "saved_files")
with open(os.path.join(SAVED, "manifest.json"), encoding="utf-8") as _f:
    MANIFEST = json.load(_f)
CATEGORY = "untrusted file"
# Keras's safe-mode refusal, whatever object held the lambda.
SAFE_MODE_TEXT = r"deserialization of a .*lambda.*safe_mode=False"
SAFE_MODE_ERROR = "(?s)" + SAFE_MODE_TEXT


def _python_files(*folders):
    for folder in folders:
        for directory, _, files in os.walk(os.path.join(ROOT, folder)):
            for file in sorted(files):
                if file.endswith(".py"):
                    yield os.path.join(directory, file)


def _module_name(path):
    name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def _registering_modules():
    """Every module of the package that registers a class (`saving.register_serializable`), read from the source:
    so the registry below holds the lazily imported subpackages' classes too, not only what tests imported."""
    found = []
    for path in _python_files("sphere_tf"):
        with open(path, encoding="utf-8") as f:
            if "register_serializable(" in f.read() and not path.endswith(os.path.join("sphere_tf", "saving.py")):
                found.append(_module_name(path))
    return found


def _registered():
    """`{registered name: object}` of the package's own registered objects, after importing every module that
    registers one (off TensorFlow, the modules that need TensorFlow are skipped: their classes do not exist here)."""
    for module in _registering_modules():
        try:
            importlib.import_module(module)
        except ImportError:
            if dependencies.installed("tensorflow"):
                raise
    return {name: obj for name, obj in keras.saving.get_custom_objects().items()
            if name.startswith("sphere_tf>") and getattr(obj, "__module__", "").startswith("sphere_tf.")}


def _is_callback(obj):
    return inspect.isclass(obj) and issubclass(obj, keras.callbacks.Callback)


def _family_files(registered):
    """Manifest entries of the small files (one per family of classes) that hold a class registered here."""
    return [entry for entry in MANIFEST["files"]
            if not entry["file"].startswith("model_") and set(entry["classes"]) & set(registered)
            and set(entry["classes"]) <= set(registered)]


def _loaded_names(model):
    serialized = [keras.saving.serialize_keras_object(model)]
    if getattr(model, "compiled", False):
        serialized += [model.get_compile_config(), keras.saving.serialize_keras_object(model.optimizer)]
    return testing.registered_names(serialized)


def test_every_registered_class_loads_in_safe_mode_without_running_code(tally):
    registered = _registered()
    assert "sphere_tf>MarginHead" in registered and "sphere_tf>CayleySGD" in registered  # the walk found them
    objects = {name for name, obj in registered.items() if not _is_callback(obj)}
    entries = _family_files(registered)
    uncovered = objects - set().union(*(entry["classes"] for entry in entries))
    assert not uncovered, f"registered classes in no saved file (tests/test_saved_files.py regenerates): {uncovered}"
    # `saving.load_model` is `keras.saving.load_model(path, safe_mode=True)` after reading config.json as JSON; the
    # slow test below loads each file through Keras's own call as well.
    for entry in entries:
        _load_without_running_code(entry, saving.load_model)
    tally(CATEGORY, ".keras file of every registered class, loaded with safe_mode=True: no code run",
          tried=len(entries))


def _load_without_running_code(entry, load):
    with code_execution_monitor() as events:
        model = load(os.path.join(SAVED, entry["file"]))
    assert events == [], f"{entry['file']}: loading ran code: {events}"
    missing = set(entry["classes"]) - _loaded_names(model)
    assert not missing, f"{entry['file']}: the loaded model has no {sorted(missing)}"


@pytest.mark.slow
def test_every_saved_file_loads_through_keras_in_safe_mode_without_running_code(tally):
    """The family files through `keras.saving.load_model(path, safe_mode=True)` itself, and the model zoo's files
    (registered model builders, not classes) through both loaders."""
    registered = _registered()
    entries = [entry for entry in MANIFEST["files"] if set(entry["classes"]) <= set(registered)]
    assert len(entries) > 30
    for entry in entries:
        _load_without_running_code(entry, lambda path: keras.saving.load_model(path, safe_mode=True))
        if entry["file"].startswith("model_"):
            _load_without_running_code(entry, saving.load_model)
    tally(CATEGORY, ".keras file of every registered class and zoo model, keras.saving.load_model(safe_mode=True): "
          "no code run", tried=len(entries))


def _callback_arguments(tmp_path):
    """Constructor arguments of each registered callback (callbacks are named in configs, never saved in a
    `.keras` file); a callback missing here fails the test below."""
    return {
        "sphere_tf>BestCheckpoint": {"filepath": str(tmp_path / "best.weights.h5"), "monitor": "val_accuracy"},
        "sphere_tf>EpochLogger": {"precision": 3},
        "sphere_tf>HypersphericalEnergy": {"power": 2},
        "sphere_tf>SOPTEpisodes": {"episode_length": 3},
        "sphere_tf>ScalarTensorBoard": {"log_dir": str(tmp_path / "tb")},
        "sphere_tf>StepCheckpoint": {"directory": str(tmp_path / "ckpt"), "every_steps": 7},
        "sphere_tf>TestErrorLog": {"accuracy_name": "accuracy", "steps_per_epoch": 5},
    }


def test_every_registered_callback_config_loads_in_safe_mode_without_running_code(tmp_path, tally):
    callbacks = {name: obj for name, obj in _registered().items() if _is_callback(obj)}
    arguments = _callback_arguments(tmp_path)
    assert not set(callbacks) - set(arguments), f"add constructor arguments for {set(callbacks) - set(arguments)}"
    for name, cls in callbacks.items():
        text = json.dumps(keras.saving.serialize_keras_object(cls(**arguments[name])))
        with code_execution_monitor() as events:
            rebuilt = keras.saving.deserialize_keras_object(json.loads(text), safe_mode=True)
        assert events == [], f"{name}: deserializing ran code: {events}"
        assert type(rebuilt) is cls and rebuilt.get_config() == cls(**arguments[name]).get_config()
    tally(CATEGORY, "config of every registered callback, deserialized with safe_mode=True: no code run",
          tried=len(callbacks))


# --- lambdas ----------------------------------------------------------------------------------------------------

def _payload(marker):
    """A function that creates the file `marker` when called (the code a hostile lambda would run, `os.system`
    as well): Keras saves it as marshalled bytecode with its closure (the path, a str)."""
    marker = str(marker)
    return lambda x, *_: (__import__("pathlib").Path(marker).touch(), x)[1]


def _lambda_files(tmp_path, payload):
    """`{what: path}`: `.keras` files that hold `payload` as a lambda: a Lambda layer of a Keras model and of a
    sphere_tf training model, a MarginHead's label penalty and a SphereDense's kernel regularizer."""
    files = {}
    inputs = keras.Input((4,))
    files["Lambda layer of a functional model"] = keras.Model(
        inputs, keras.layers.Lambda(payload, output_shape=(4,))(inputs))
    files["Lambda layer inside SphereSequential"] = training.SphereSequential(
        [keras.Input((4,)), keras.layers.Lambda(payload, output_shape=(4,)), layers.SphereDense(2)])
    features, labels = keras.Input((4,)), keras.Input((), dtype="int32")
    head = layers.MarginHead(3, label_penalty=payload)
    files["MarginHead(label_penalty=lambda)"] = keras.Model([features, labels], head(features, labels=labels))
    inputs = keras.Input((4,))
    files["SphereDense(kernel_regularizer=lambda)"] = keras.Model(
        inputs, layers.SphereDense(2, kernel_regularizer=payload)(inputs))
    paths = {}
    for k, (what, model) in enumerate(files.items()):
        paths[what] = str(tmp_path / f"lambda_{k}.keras")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Keras warns that a lambda is saved: the point here
            model.save(paths[what])
    return paths


def test_a_lambda_in_a_keras_file_is_refused_and_its_bytecode_never_read(tmp_path, tally):
    marker = tmp_path / "payload_ran"
    paths = _lambda_files(tmp_path, _payload(marker))
    if marker.exists():
        marker.unlink()  # building the models called the payload on symbolic inputs
    assert inspect.signature(saving.load_model).parameters["safe_mode"].default is True
    def named_for(path):  # sphere_tf's refusal: the file, the place in its config, then safe mode's words
        return "(?s)" + re.escape(path) + r": config\[.*\]: .*" + SAFE_MODE_TEXT

    for what, path in paths.items():
        named = named_for(path)
        for load, message in ((lambda: keras.saving.load_model(path), SAFE_MODE_ERROR),
                              (lambda: keras.saving.load_model(path, safe_mode=True), SAFE_MODE_ERROR),
                              (lambda: saving.load_model(path), named),
                              (lambda: saving.load_model(path, safe_mode=True), named)):
            with code_execution_monitor() as events:
                with pytest.raises(ValueError, match=message):
                    load()
            assert events == [], f"{what}: {events}"
        assert not marker.exists()
    # A session that once called keras.config.enable_unsafe_deserialization() (a notebook, another library):
    # `saving.load_model` (safe mode by default) still refuses from the config, reading no bytecode. Keras's own
    # (3.15) lets that global flag win over an explicit safe_mode=True and rebuilds the lambda.
    keras.config.enable_unsafe_deserialization()
    try:
        for what, path in paths.items():
            with code_execution_monitor() as events:
                with pytest.raises(ValueError, match=named_for(path)):
                    saving.load_model(path)
            assert events == [], f"{what}, unsafe deserialization enabled globally: {events}"
    finally:
        keras.backend.clear_session(free_memory=False)  # the flag lives in Keras's global state
    assert not marker.exists()
    tally(CATEGORY, ".keras file with a Python lambda (a Lambda layer, in a sphere_tf model or layer's config)",
          tried=len(paths))
    tally(CATEGORY, ".keras file with a Python lambda, after keras.config.enable_unsafe_deserialization()",
          tried=len(paths))
    # The control: the same file with safe_mode=False (passed on by saving.load_model) rebuilds the bytecode, and
    # calling the model runs it. The refusals above are what stood between the file and this.
    with code_execution_monitor() as events:
        model = saving.load_model(paths["Lambda layer of a functional model"], safe_mode=False)
    assert [event for event, _ in events].count("marshal.loads") >= 1
    model.predict(np.ones((1, 4), "float32"), verbose=0)
    assert marker.exists()


def _slots(config):
    """Keys of an object's config that take a nested object (a serialized one, or a name that says so)."""
    suffixes = ("_initializer", "_regularizer", "_constraint", "activation", "_penalty", "optimizer")
    return sorted(key for key, value in config.items() if key != "dtype" and (
        (isinstance(value, dict) and "class_name" in value) or key.endswith(suffixes) or key == "base"))


def _registered_objects(value):
    """Every `(registered name, serialized dict)` inside a config, outermost first."""
    if isinstance(value, dict):
        name = value.get("registered_name")
        if isinstance(name, str) and name.startswith("sphere_tf>") and isinstance(value.get("config"), dict):
            yield name, value
        for item in value.values():
            yield from _registered_objects(item)
    elif isinstance(value, list):
        for item in value:
            yield from _registered_objects(item)


def test_a_lambda_in_any_nested_slot_of_a_registered_class_is_refused(tmp_path, tally):
    """Each registered class's serialized form (from the saved files) with a lambda put in each slot that takes
    an object, one at a time: deserialized in safe mode it must fail with Keras's safe-mode error, the same
    `ValueError` whether the class or Keras rebuilds the slot, and read no bytecode."""
    registered = _registered()
    with pytest.warns(UserWarning, match="lambda"):
        lambda_config = keras.saving.serialize_keras_object(_payload(tmp_path / "never"))
    assert lambda_config["class_name"] == "__lambda__"
    cases = {}
    for entry in _family_files(registered):
        with zipfile.ZipFile(os.path.join(SAVED, entry["file"])) as archive:
            config = json.loads(archive.read("config.json"))
            compile_config = config.get("compile_config") or {}
        for name, serialized in _registered_objects([config, compile_config]):
            for slot in _slots(serialized["config"]):
                cases.setdefault((name, slot), serialized)
    assert {name for name, _ in cases} >= {"sphere_tf>MarginHead", "sphere_tf>SphereDense", "sphere_tf>OPTOptimizer",
                                           "sphere_tf>UnitNormNeurons"}
    for (name, slot), serialized in sorted(cases.items()):
        hostile = copy.deepcopy(serialized)
        hostile["config"][slot] = copy.deepcopy(lambda_config)
        with code_execution_monitor() as events:
            with pytest.raises(ValueError, match=SAFE_MODE_ERROR):
                keras.saving.deserialize_keras_object(hostile, safe_mode=True)
        assert events == [], f"{name}.{slot}: {events}"
    assert not (tmp_path / "never").exists()
    tally(CATEGORY, "lambda in a nested-object slot of a registered class's config", tried=len(cases))


@pytest.mark.slow
def test_a_lambda_in_any_nested_slot_is_refused_from_a_keras_file(tmp_path, tally):
    """The slots above, each in a copy of the saved `.keras` file that holds the class, loaded by both loaders."""
    registered = _registered()
    with pytest.warns(UserWarning, match="lambda"):
        lambda_config = keras.saving.serialize_keras_object(_payload(tmp_path / "never"))
    tried = 0
    for entry in _family_files(registered):
        source = os.path.join(SAVED, entry["file"])
        with zipfile.ZipFile(source) as archive:
            members = {name: archive.read(name) for name in archive.namelist()}
        config = json.loads(members["config.json"])
        done = set()
        for name, serialized in list(_registered_objects(config)):
            for slot in _slots(serialized["config"]):
                if (name, slot) in done:
                    continue
                done.add((name, slot))
                original = serialized["config"][slot]
                serialized["config"][slot] = lambda_config
                path = str(tmp_path / f"slot_{tried}.keras")
                with zipfile.ZipFile(path, "w") as archive:
                    for member, data in members.items():
                        archive.writestr(member, json.dumps(config) if member == "config.json" else data)
                serialized["config"][slot] = original
                with code_execution_monitor() as events:
                    # sphere_tf's loader refuses from the config, naming the file and the place; Keras's own
                    # refuses while rebuilding, its ValueError wrapped in the TypeErrors of the Keras layers
                    # around a nested object.
                    with pytest.raises(ValueError, match="(?s)" + re.escape(path) + ": config.*" + SAFE_MODE_TEXT):
                        saving.load_model(path)
                    with pytest.raises((ValueError, TypeError), match=SAFE_MODE_ERROR):
                        keras.saving.load_model(path, safe_mode=True)
                assert events == [], f"{entry['file']} {name}.{slot}: {events}"
                tried += 1
    assert tried > 40
    tally(CATEGORY, "lambda in a nested-object slot of a registered class, in a .keras file", tried=tried)


# --- unknown classes and hostile configs ------------------------------------------------------------------------

def _rewrite_config(source, target, edit):
    with zipfile.ZipFile(source) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    members["config.json"] = edit(members["config.json"])
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for member, data in members.items():
            archive.writestr(member, data)


def test_an_unknown_sphere_tf_class_is_refused_naming_it(tmp_path, tally):
    path = str(tmp_path / "unknown.keras")
    _rewrite_config(os.path.join(SAVED, "sphere_dense.keras"), path,
                    lambda text: text.replace(b'"sphere_tf>SphereDense"', b'"sphere_tf>Something"'))
    with code_execution_monitor() as events:
        with pytest.raises(saving.UnknownClassError) as raised:
            saving.load_model(path)
    message = str(raised.value)
    assert "'sphere_tf>Something'" in message and path in message and sphere_tf.__version__ in message
    assert re.search(r"sphere_tf>Something '\w+'", message)  # the object, by its name in the model
    assert events == []
    # Keras alone names the class by the object's `class_name` (here still 'SphereDense'), inside a TypeError.
    with pytest.raises(TypeError, match="Could not locate class 'SphereDense'"):
        keras.saving.load_model(path)
    # A class of the user's own under that name loads (custom_objects reach the check too).
    model = saving.load_model(path, custom_objects={"sphere_tf>Something": layers.SphereDense})
    assert any(isinstance(layer, layers.SphereDense) for layer in model.layers)
    tally(CATEGORY, ".keras file naming a sphere_tf> class the release lacks")


def test_a_config_bomb_or_garbage_is_refused_naming_the_file(tmp_path, tally):
    source = os.path.join(SAVED, "sphere_dense.keras")
    bomb = str(tmp_path / "bomb.keras")
    padding = saving.MAX_CONFIG_BYTES + 1
    # Valid JSON (whitespace is allowed) of 64 MiB + 1: about 64 KB deflated. Keras would read and parse it all.
    _rewrite_config(source, bomb, lambda text: text + b" " * padding)
    with zipfile.ZipFile(bomb) as archive:
        assert archive.getinfo("config.json").compress_size < 1 << 20
    with pytest.raises(ValueError, match=re.escape(bomb) + r".*config\.json declares [\d,]+ bytes"):
        saving.load_model(bomb)
    garbage = str(tmp_path / "garbage.keras")
    _rewrite_config(source, garbage, lambda text: b"[" * 100000)  # nested past the parser's depth
    with pytest.raises(ValueError, match=re.escape(garbage) + r": its config\.json is not a model config"):
        saving.load_model(garbage)
    _rewrite_config(source, garbage, lambda text: b"\xff\xfe not json")
    with pytest.raises(ValueError, match=re.escape(garbage) + r": its config\.json is not a model config"):
        saving.load_model(garbage)
    tally(CATEGORY, ".keras file whose config.json is a zip bomb or not JSON", tried=3)


# --- static review ----------------------------------------------------------------------------------------------

# Calls and imports that run code a file supplies: unpickling, unmarshalling, evaluating source, Keras's lambda
# loader, pickled NumPy arrays, torch.load of a whole pickle, unsafe YAML.
_CODE_MODULES = {"pickle", "_pickle", "cPickle", "marshal", "shelve", "dill", "cloudpickle", "joblib", "copyreg"}
_CODE_BUILTINS = {"eval", "exec", "compile", "__import__"}
# What the scan finds on purpose, with the reason: running the user's own config file (a config is Python) and the
# CLI's own subcommands (fixed module names, `sphere_tf_cli.COMMANDS`).
ALLOWED = {
    ("sphere_tf/configs/__init__.py", "exec_module"): "--config FILE runs the user's own Python config, by design",
    ("sphere_tf_cli/__init__.py", "runpy.run_module"): "runs a subcommand module named in COMMANDS",
    ("sphere_tf_cli/__init__.py", "import runpy"): "the same",
    ("sphere_tf/saving.py", "keras.saving.load_model(safe_mode=safe_mode)"): "saving.load_model passes the caller's "
    "choice on; its default is True (test_a_lambda_in_a_keras_file_is_refused_and_its_bytecode_never_read)",
    ("sphere_tf/saving.py", "check_keras_file(safe_mode=safe_mode)"): "the same choice, for the lambda pre-check",
}


def _dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


def _keyword(call, name):
    return next((k.value for k in call.keywords if k.arg == name), None)


def _findings(path):
    """`(what, line)` of every construct of `path` that could run code from a file, or turn safe mode off."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for name in names:
                if name.split(".")[0] in _CODE_MODULES | {"runpy"}:
                    found.append((f"import {name}", node.lineno))
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func)
        last = name.rsplit(".", 1)[-1]
        safe_mode = _keyword(node, "safe_mode")
        if isinstance(node.func, ast.Name) and name in _CODE_BUILTINS:
            found.append((name, node.lineno))
        elif last in ("exec_module", "run_module", "run_path", "func_load", "enable_unsafe_deserialization",
                      "SafeModeScope", "Unpickler"):
            found.append((name if last != "exec_module" else "exec_module", node.lineno))
        elif safe_mode is not None and not (isinstance(safe_mode, ast.Constant) and safe_mode.value is True):
            found.append((f"{name}(safe_mode={ast.unparse(safe_mode)})", node.lineno))
        elif name.endswith(("np.load", "numpy.load")) and _keyword(node, "allow_pickle") is not None:
            value = _keyword(node, "allow_pickle")
            if not (isinstance(value, ast.Constant) and value.value is False):
                found.append((f"{name}(allow_pickle=...)", node.lineno))
        elif name == "torch.load":
            value = _keyword(node, "weights_only")
            if not (isinstance(value, ast.Constant) and value.value is True):
                found.append(("torch.load without weights_only=True", node.lineno))
        elif name.endswith("yaml.load") or name.endswith("yaml.unsafe_load"):
            found.append((name, node.lineno))
    return found


def test_no_module_runs_code_from_a_file_or_turns_safe_mode_off(tally):
    unexpected, allowed = [], set()
    files = list(_python_files("sphere_tf", "sphere_tf_cli"))
    for path in files:
        relative = os.path.relpath(path, ROOT).replace(os.sep, "/")
        for what, line in _findings(path):
            if (relative, what) in ALLOWED:
                allowed.add((relative, what))
            else:
                unexpected.append(f"{relative}:{line}: {what}")
    assert unexpected == [], "code from a file could run here (review it, then list it in ALLOWED with the reason)"
    assert allowed == set(ALLOWED), f"ALLOWED names what the package no longer does: {set(ALLOWED) - allowed}"
    assert len(files) > 100  # the walk found the package
    tally(CATEGORY, "static review of every module: pickle/marshal/eval/exec/safe_mode=False")


def test_the_runner_export_and_evaluation_load_models_through_saving(tally):
    """Every `load_model` call of the package and CLI, found in the source: each goes through `saving.load_model`
    (safe mode, the release and class checks) or is Keras's with safe mode left on; the known sites are found (an
    empty scan would pass anything)."""
    sites = {}
    for path in _python_files("sphere_tf", "sphere_tf_cli"):
        relative = os.path.relpath(path, ROOT).replace(os.sep, "/")
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _dotted(node.func).endswith("load_model"):
                sites[f"{relative}:{node.lineno}"] = _dotted(node.func)
    for file in ("sphere_tf/runners/face.py", "sphere_tf/runners/recipe.py", "sphere_tf/runners/adversarial.py",
                 "sphere_tf/export/reload.py", "sphere_tf_cli/export.py"):
        assert any(site.startswith(file + ":") and name == "saving.load_model" for site, name in sites.items()), file
    # Keras's own loader is called only by `saving.load_model` and by the test helpers (both with safe mode on: the
    # static scan above refuses any safe_mode other than True).
    direct = sorted(site for site, name in sites.items() if name != "saving.load_model")
    assert all(site.startswith(("sphere_tf/saving.py:", "sphere_tf/testing.py:")) for site in direct), direct
    tally(CATEGORY, "static review: every load_model call of the runner, export, evaluation and CLI")

