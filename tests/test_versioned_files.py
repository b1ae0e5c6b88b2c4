"""`.keras` files and step checkpoints record the sphere_tf version that wrote them; one from a newer major or minor
release is refused with `sphere_tf.saving.NewerFileError` (its message names the object or file, both versions and
the release to upgrade to), one from a newer patch release, an older one or one that recorded no version (0.1.0)
loads silently. On every backend.

The files are written here, then their recorded version is raised by editing them: the `.keras` zip's config.json,
the checkpoints' JSON metadata. The expected versions are spelled from the literal `sphere_tf.__version__` string
(split on dots here), not from the package's own version parsing.
"""

import ast
import json
import os
import re
import warnings
import zipfile

import keras
import numpy as np
import pytest

import sphere_tf
from sphere_tf import callbacks
from sphere_tf import initializers
from sphere_tf import layers
from sphere_tf import losses
from sphere_tf import metrics
from sphere_tf import optimizers
from sphere_tf import regularizers
from sphere_tf import saving
from sphere_tf import version
from sphere_tf.adversarial import training as adversarial_training
from sphere_tf.training import array_checkpoint
from sphere_tf.training import checkpoint
from sphere_tf.training import model as training_model
from sphere_tf.training import progress

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEY = "sphere_tf_version"  # the config key, spelled out: a file format is what other readers see
INSTALLED = sphere_tf.__version__
MAJOR, MINOR, PATCH = (int(part) for part in INSTALLED.split("."))
NEWER_PATCH = f"{MAJOR}.{MINOR}.{PATCH + 1}"
# (recorded version, the release the message tells the user to upgrade to)
NEWER_FORMATS = [(f"{MAJOR}.{MINOR + 1}.0", f"{MAJOR}.{MINOR + 1}"), (f"{MAJOR + 1}.0.0", f"{MAJOR + 1}.0")]
OLDER = "0.1.0"  # the first release (it recorded no version; a file saying so is read too)


# ------------------------------------------------------------------ the version itself

def test_the_version_is_written_once_as_a_literal():
    assert re.fullmatch(r"\d+\.\d+\.\d+", INSTALLED)
    assert sphere_tf.__version__ is version.__version__
    # A plain string assignment: packaging reads it statically (pyproject's `attr = "sphere_tf.version.__version__"`).
    with open(os.path.join(ROOT, "sphere_tf", "version.py"), encoding="utf-8") as f:
        tree = ast.parse(f.read())
    literals = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
                and [getattr(t, "id", None) for t in node.targets] == ["__version__"]
                and isinstance(node.value, ast.Constant)]
    assert literals == [INSTALLED]
    elsewhere = []
    for folder, _, files in os.walk(os.path.join(ROOT, "sphere_tf")):
        for name in files:
            path = os.path.join(folder, name)
            if name.endswith(".py") and not path.endswith(os.path.join("sphere_tf", "version.py")):
                with open(path, encoding="utf-8") as f:
                    if re.search(r"^__version__\s*=\s*[\"']", f.read(), re.M):  # another literal
                        elsewhere.append(path)
    assert elsewhere == []


@pytest.mark.parametrize("recorded, installed, newer", [
    ("0.3.0", "0.2.0", True), ("1.0.0", "0.2.0", True), ("0.10.0", "0.9.3", True), ("0.3.0rc1", "0.2.0", True),
    ("0.3", "0.2.7", True), ("0.2.1", "0.2.0", False), ("0.2.9", "0.2.0", False), ("0.2.0", "0.2.0", False),
    ("0.1.0", "0.2.0", False), ("0.1.9", "0.2.0", False), ("0.9.0", "1.0.0", False),
])
def test_newer_format_is_a_newer_major_or_minor(recorded, installed, newer):
    assert version.newer_format(recorded, installed) is newer


@pytest.mark.parametrize("text", ["", "1", "x.y.z", "v0.2.0", None, 2])
def test_parse_refuses_what_is_not_a_version(text):
    with pytest.raises(ValueError, match="not a sphere_tf version"):
        version.parse(text)


def test_parse_and_format():
    assert version.parse("0.2.0") == (0, 2, 0) and version.parse("1.12") == (1, 12, 0)
    assert version.parse("0.3.0.dev4") == (0, 3, 0)
    assert version.format_version("1.12.3") == "1.12"


def test_no_module_registers_a_class_without_recording_the_version():
    """Every Keras class of the package is registered with `saving.register_serializable()`."""
    direct, decorated = [], 0
    for folder, _, files in os.walk(os.path.join(ROOT, "sphere_tf")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                text = f.read()
            decorated += text.count("@saving.register_serializable(")
            if path.endswith(os.path.join("sphere_tf", "saving.py")):
                continue
            direct += [f"{path}:{i}" for i, line in enumerate(text.splitlines(), 1)
                       if "register_keras_serializable" in line]
    assert direct == []
    assert decorated >= 40


# ------------------------------------------------------------------ every kind of object

def _dense_model():
    inputs = keras.Input((6,))
    x = layers.SphereDense(4)(inputs)
    return inputs, keras.layers.Dense(3)(x)


def _sphere_model():
    return training_model.SphereModel(*_dense_model(), weight_projection_every=5)


def _sphere_sequential():
    return training_model.SphereSequential([keras.Input((6,)), layers.SphereDense(4), keras.layers.Dense(3)],
                                           weight_projection_every=5)


def _functional_sphere_model():
    model = _sphere_model()
    model.compile(optimizer="sgd", loss=losses.SparseHinge())
    return model


# One object of each kind Keras deserializes differently: base classes with `from_config(cls, config)` as
# `cls(**config)` (losses, metrics, regularizers, initializers), Keras models (functional and Sequential routes),
# optimizers (schedules, `custom_objects`), callbacks (Keras gives them no `from_config`), and a subclass of a
# registered class.
OBJECTS = {
    "layer": lambda: layers.SphereDense(4, kernel_initializer=initializers.UnitNormNeurons(),
                                        kernel_regularizer=regularizers.Orthogonality(1e-3)),
    "layer_subclass_of_a_registered_layer": lambda: layers.PartialFCHead(10, sample_rate=0.5),
    "layer_holding_a_plain_registered_class": lambda: layers.MarginHead(
        5, loss_type="cosface", label_penalty=regularizers.DataDependentMHE(0.5)),
    "training_model": _sphere_model,
    "training_sequential": _sphere_sequential,
    "adversarial_training_model": lambda: adversarial_training.FGSMAdversarialModel(
        *_dense_model(), epsilon=0.03, clip_min=0.0, clip_max=1.0),
    "optimizer": lambda: optimizers.CayleySGD(learning_rate=0.05),
    "optimizer_schedule": lambda: optimizers.CayleySGD(
        learning_rate=keras.optimizers.schedules.ExponentialDecay(0.1, 10, 0.5)),
    "wrapping_optimizer": lambda: optimizers.OPTOptimizer(keras.optimizers.SGD(0.1)),
    "wrapping_optimizer_of_a_registered_one": lambda: optimizers.PartialFCOptimizer(optimizers.CayleySGD(0.1)),
    "loss": lambda: losses.CosFaceLoss(scale=30.0, margin=0.2),
    "loss_of_the_keras_base": lambda: losses.SparseHinge(norm="l2"),
    "metric": lambda: metrics.AngularFisherScore(3),
    "regularizer": lambda: regularizers.MHE(1e-2, power=1),
    "initializer": lambda: initializers.UnitNormNeurons(epsilon=1e-3),
    "callback_without_keras_from_config": lambda: callbacks.SOPTEpisodes(episode_length=7, seed=3),
    "callback": lambda: callbacks.TestErrorLog("accuracy", steps_per_epoch=5),
    "step_checkpoint": lambda: checkpoint.StepCheckpoint("some/dir", every_steps=3),
    "epoch_logger": lambda: progress.EpochLogger(precision=3),
}


def _registered_name(obj):
    return keras.saving.get_registered_name(type(obj))


def _json(value):
    return json.loads(json.dumps(value))


def _with_version(serialized, new):
    """A copy of a serialized object whose own config records `new` (None: no record)."""
    serialized = _json(serialized)
    if new is None:
        del serialized["config"][KEY]
    else:
        serialized["config"][KEY] = new
    return serialized


@pytest.mark.parametrize("kind", sorted(OBJECTS))
def test_every_kind_records_the_version_and_round_trips(kind):
    obj = OBJECTS[kind]()
    config = obj.get_config()
    assert config[KEY] == INSTALLED
    serialized = keras.saving.serialize_keras_object(obj)
    assert serialized["registered_name"] == _registered_name(obj) and serialized["config"][KEY] == INSTALLED
    as_json = _json(config)  # tuples as lists, as in a file
    for recorded in (INSTALLED, NEWER_PATCH, OLDER, None):
        revived = keras.saving.deserialize_keras_object(_with_version(serialized, recorded))
        assert type(revived) is type(obj)
        assert _json(revived.get_config()) == as_json, recorded
    assert _json(type(obj).from_config(obj.get_config()).get_config()) == as_json  # the direct route, with the key


@pytest.mark.parametrize("kind", sorted(OBJECTS))
@pytest.mark.parametrize("recorded, upgrade", NEWER_FORMATS)
def test_every_kind_refuses_a_newer_format(kind, recorded, upgrade):
    obj = OBJECTS[kind]()
    serialized = _with_version(keras.saving.serialize_keras_object(obj), recorded)
    # Not the TypeError "could not be deserialized properly" Keras makes of a TypeError raised in from_config.
    with pytest.raises(saving.NewerFileError) as raised:
        keras.saving.deserialize_keras_object(serialized)
    message = str(raised.value)
    assert _registered_name(obj) in message and recorded in message and INSTALLED in message
    assert f">= {upgrade}" in message
    with pytest.raises(saving.NewerFileError):
        type(obj).from_config(serialized["config"])


def test_a_user_subclass_of_a_registered_class_round_trips():
    class Wider(layers.SphereDense):  # not registered: from_config/get_config inherited
        pass

    layer = Wider(5)
    config = layer.get_config()
    assert config[KEY] == INSTALLED
    assert Wider.from_config(config).get_config() == config and type(Wider.from_config(config)) is Wider
    with pytest.raises(saving.NewerFileError, match="SphereDense|Wider"):
        Wider.from_config({**config, KEY: NEWER_FORMATS[0][0]})


def test_a_user_subclass_with_its_own_from_config_gets_the_config_it_always_got():
    class Head(layers.MarginHead):
        @classmethod
        def from_config(cls, config):
            return cls(**config)  # would not expect the version key

    head = Head(4, loss_type="cosface")
    config = head.get_config()
    assert KEY not in config
    assert Head.from_config(config).get_config() == config


def test_keras_auto_config_still_applies_to_a_class_without_get_config():
    """A registered layer that leaves `get_config` to Keras (the arguments `__init__` was called with) keeps
    them: the wrapper keeps Keras's mark of its default method."""

    class Scale(keras.layers.Layer):
        def __init__(self, factor=2.0, **kwargs):
            super().__init__(**kwargs)
            self.factor = factor

        def call(self, x):
            return x * self.factor

    keras.saving.register_keras_serializable(package="sphere_tf_tests")(saving.versioned(Scale))
    config = Scale(factor=3.0, name="s").get_config()
    assert config["factor"] == 3.0 and config[KEY] == INSTALLED
    assert Scale.from_config(config).factor == 3.0
    saving.versioned(Scale)  # a second application wraps nothing again
    assert Scale.from_config(config).get_config() == config


def test_a_version_that_is_no_version_is_named():
    serialized = keras.saving.serialize_keras_object(losses.SparseHinge())
    serialized["config"][KEY] = "latest"
    with pytest.raises(ValueError, match="'latest'.*not a sphere_tf version"):
        keras.saving.deserialize_keras_object(serialized)


# ------------------------------------------------------------------ .keras files

def _model():
    keras.utils.set_random_seed(0)
    inputs = keras.Input((6,))
    x = layers.SphereDense(5, kernel_regularizer=regularizers.MHE(1e-2), name="sphere")(inputs)
    outputs = keras.layers.Dense(3, name="logits")(x)
    model = keras.Model(inputs, outputs)
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss=losses.SparseHinge(norm="l2"))
    return model


X = np.random.default_rng(0).normal(size=(4, 6)).astype("float32")


@pytest.fixture
def saved(tmp_path):
    model = _model()
    model.fit(X, np.array([0, 1, 2, 0]), epochs=1, verbose=0)
    path = str(tmp_path / "model.keras")
    model.save(path)
    return path, keras.ops.convert_to_numpy(model(X))


def _rewrite(path, out, new, only=None):
    """Copies the `.keras` zip `path` to `out` with the version recorded by the sphere_tf objects (those whose
    registered name is in `only`, or all) set to `new` (None: removed, as files of 0.1.0)."""
    edited = []

    def visit(value):
        if isinstance(value, dict):
            name = value.get("registered_name")
            if isinstance(name, str) and name.startswith("sphere_tf>") and isinstance(value.get("config"), dict):
                if only is None or name in only:
                    edited.append(name)
                    if new is None:
                        value["config"].pop(KEY)
                    else:
                        value["config"][KEY] = new
            for item in value.values():
                visit(item)
        elif isinstance(value, list):
            for item in value:
                visit(item)

    with zipfile.ZipFile(path) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            data = source.read(info.filename)
            if info.filename == "config.json":
                config = json.loads(data)
                visit(config)
                data = json.dumps(config).encode("utf-8")
            target.writestr(info, data)
    assert edited, "no sphere_tf object in the file"
    return sorted(set(edited))


def test_a_saved_file_records_the_version_of_each_sphere_tf_object(saved):
    path, _ = saved
    with zipfile.ZipFile(path) as archive:
        config = json.loads(archive.read("config.json"))
    found = {}

    def visit(value):
        if isinstance(value, dict):
            name = value.get("registered_name")
            if isinstance(name, str) and name.startswith("sphere_tf>"):
                found[name] = value["config"].get(KEY)
            for item in value.values():
                visit(item)
        elif isinstance(value, list):
            for item in value:
                visit(item)

    visit(config)
    assert found == {"sphere_tf>SphereDense": INSTALLED, "sphere_tf>MHE": INSTALLED,
                     "sphere_tf>SparseHinge": INSTALLED}


@pytest.mark.parametrize("recorded, upgrade", NEWER_FORMATS)
def test_a_file_of_a_newer_format_is_one_clear_error(saved, tmp_path, recorded, upgrade):
    path, _ = saved
    out = str(tmp_path / "newer.keras")
    _rewrite(path, out, recorded)
    with pytest.raises(saving.NewerFileError) as raised:
        keras.saving.load_model(out)
    message = str(raised.value)
    assert "sphere_tf>SphereDense 'sphere'" in message  # the first sphere_tf object Keras rebuilds
    assert f"sphere_tf {recorded}" in message and f"sphere_tf {INSTALLED}" in message
    assert f"Upgrade sphere_tf to >= {upgrade}" in message
    assert "could not be deserialized" not in message


@pytest.mark.parametrize("only, named", [("sphere_tf>MHE", "sphere_tf>MHE"),
                                         ("sphere_tf>SparseHinge", "sphere_tf>SparseHinge 'sparse_hinge'")])
def test_each_object_checks_its_own_version(saved, tmp_path, only, named):
    path, _ = saved
    out = str(tmp_path / "newer_part.keras")
    _rewrite(path, out, NEWER_FORMATS[0][0], only={only})
    with pytest.raises(saving.NewerFileError, match=re.escape(named)):
        keras.saving.load_model(out)
    if only == "sphere_tf>SparseHinge":  # the loss lives in the compile config, not read without compiling
        keras.saving.load_model(out, compile=False)


@pytest.mark.parametrize("recorded", [NEWER_PATCH, OLDER, None], ids=["newer_patch", "older", "unrecorded"])
def test_a_file_of_the_same_format_loads_silently(saved, tmp_path, recorded):
    path, expected = saved
    out = str(tmp_path / "same_format.keras")
    _rewrite(path, out, recorded)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = keras.saving.load_model(out)
    assert not [w for w in caught if "version" in str(w.message).lower() and "sphere_tf" in str(w.message)]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(X)), expected, rtol=1e-6, atol=1e-6)
    assert isinstance(model.loss, losses.SparseHinge) and model.loss.norm == "l2"
    assert model.get_layer("sphere").get_config()[KEY] == INSTALLED  # saved again, it records this release


def test_inside_a_keras_layer_the_message_reaches_the_user_and_check_keras_file_raises_it(tmp_path):
    """Keras re-raises any error of a Keras layer's constructor (where it rebuilds the layer's regularizer) as a
    TypeError: the message still ends with the clear one, and `saving.check_keras_file` raises it unwrapped."""
    inputs = keras.Input((6,))
    model = keras.Model(inputs, keras.layers.Dense(3, kernel_regularizer=regularizers.MHE(1e-2))(inputs))
    path, out = str(tmp_path / "keras_dense.keras"), str(tmp_path / "newer.keras")
    model.save(path)
    saving.check_keras_file(path)
    recorded, upgrade = NEWER_FORMATS[0]
    assert _rewrite(path, out, recorded) == ["sphere_tf>MHE"]
    with pytest.raises(TypeError, match=re.escape(f"Upgrade sphere_tf to >= {upgrade}")):
        keras.saving.load_model(out)
    with pytest.raises(saving.NewerFileError, match=re.escape(f"sphere_tf>MHE in {out} was written by sphere_tf "
                                                              f"{recorded}")):
        saving.check_keras_file(out)


def test_a_training_model_checks_before_its_layers(tmp_path):
    model = _functional_sphere_model()
    path, out = str(tmp_path / "sphere_model.keras"), str(tmp_path / "newer.keras")
    model.save(path)
    _rewrite(path, out, NEWER_FORMATS[0][0])
    with pytest.raises(saving.NewerFileError, match=re.escape(f"sphere_tf>SphereModel '{model.name}'")):
        keras.saving.load_model(out)
    _rewrite(path, out, NEWER_PATCH)
    assert keras.saving.load_model(out).weight_projection_every == 5


# ------------------------------------------------------------------ step checkpoints

def _training_model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])
    model.compile(optimizer=keras.optimizers.SGD(0.1, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.build((None, 5))
    return model


def _saved_checkpoint(directory):
    """A StepCheckpoint of `directory` saved at step 3 with a recognisable kernel; returns that kernel."""
    model = _training_model()
    kernel = np.arange(15, dtype="float32").reshape(5, 3)
    model.layers[0].kernel.assign(kernel)
    saver = checkpoint.StepCheckpoint(directory, every_steps=100)
    saver.set_model(model)
    saver._step.assign(3)
    saver.save()
    return kernel, saver.latest_checkpoint


def _metadata(directory):
    """The JSON file that records the checkpoints' versions: TensorFlow's beside its `checkpoint` file, the array
    format's index."""
    if keras.backend.backend() == "tensorflow":
        return os.path.join(directory, "checkpoint_versions.json")
    return os.path.join(directory, "checkpoint.json")


def _recorded(directory):
    with open(_metadata(directory)) as f:
        metadata = json.load(f)
    if keras.backend.backend() == "tensorflow":
        return metadata[KEY], metadata["checkpoints"]
    return metadata[KEY], {entry["file"]: entry.get(KEY) for entry in metadata["checkpoints"]}


def _set_recorded(directory, new):
    """Sets the version the checkpoint metadata records (top and every checkpoint) to `new`; None removes it."""
    path = _metadata(directory)
    with open(path) as f:
        metadata = json.load(f)
    if keras.backend.backend() == "tensorflow":  # {"checkpoints": {"ckpt-<step>": version}}
        metadata["checkpoints"] = {} if new is None else {name: new for name in metadata["checkpoints"]}
        entries = [metadata]
    else:  # {"checkpoints": [{"step", "file", KEY}]}
        entries = [metadata, *metadata["checkpoints"]]
    for entry in entries:
        entry.pop(KEY, None)
        if new is not None:
            entry[KEY] = new
    with open(path, "w") as f:
        json.dump(metadata, f)


def _restore(directory):
    model = _training_model()
    saver = checkpoint.StepCheckpoint(directory, every_steps=100)
    saver.set_model(model)
    return saver.restore(), keras.ops.convert_to_numpy(model.layers[0].kernel)


def test_a_checkpoint_records_the_version(tmp_path):
    directory = str(tmp_path / "ckpt")
    _, latest = _saved_checkpoint(directory)
    top, records = _recorded(directory)
    assert top == INSTALLED and records == {os.path.basename(latest): INSTALLED}


@pytest.mark.parametrize("recorded, upgrade", NEWER_FORMATS)
def test_a_checkpoint_of_a_newer_format_is_one_clear_error(tmp_path, recorded, upgrade):
    directory = str(tmp_path / "ckpt")
    _, latest = _saved_checkpoint(directory)
    _set_recorded(directory, recorded)
    with pytest.raises(saving.NewerFileError) as raised:
        _restore(directory)
    message = str(raised.value)
    assert f"checkpoint {latest}" in message
    assert f"sphere_tf {recorded}" in message and f"sphere_tf {INSTALLED}" in message
    assert f"Upgrade sphere_tf to >= {upgrade}" in message
    # The runner's driver restores through the same StepCheckpoint.
    with pytest.raises(saving.NewerFileError):
        checkpoint.fit_resumable(_training_model(), lambda step: iter(()), epochs=1, directory=directory,
                                 steps_per_epoch=1, verbose=0)


@pytest.mark.parametrize("recorded", [NEWER_PATCH, OLDER, None], ids=["newer_patch", "older", "unrecorded"])
def test_a_checkpoint_of_the_same_format_restores(tmp_path, recorded):
    directory = str(tmp_path / "ckpt")
    kernel, _ = _saved_checkpoint(directory)
    _set_recorded(directory, recorded)
    step, restored = _restore(directory)
    assert step == 3
    np.testing.assert_array_equal(restored, kernel)


def test_a_checkpoint_without_version_metadata_restores(tmp_path):
    """TensorFlow checkpoints of 0.1.0 have no checkpoint_versions.json (array indexes of 0.1.0: no version)."""
    directory = str(tmp_path / "ckpt")
    kernel, _ = _saved_checkpoint(directory)
    if keras.backend.backend() == "tensorflow":
        os.remove(_metadata(directory))
    else:
        _set_recorded(directory, None)
    step, restored = _restore(directory)
    assert step == 3
    np.testing.assert_array_equal(restored, kernel)


def test_array_checkpoints_refuse_a_newer_archive_and_a_newer_index_format(tmp_path):
    """The NumPy-archive format on its own (the JAX and PyTorch checkpoints; it runs on TensorFlow too)."""
    directory = str(tmp_path / "arrays")
    written = {"w": keras.Variable(np.ones((2, 2), "float32"), name="w")}
    saver = array_checkpoint.ArrayCheckpoints(written, directory, max_to_keep=2)
    path = saver.save(4)
    index_path = os.path.join(directory, "checkpoint.json")
    with open(index_path) as f:
        index = json.load(f)
    assert index[KEY] == INSTALLED and index["checkpoints"][0][KEY] == INSTALLED
    newer, upgrade = NEWER_FORMATS[0]
    # The newer release that wrote the archive wrote the index too (an entry newer than the index's writer reads
    # as a damaged index: array_checkpoint.version_problem).
    index[KEY] = index["checkpoints"][0][KEY] = newer
    with open(index_path, "w") as f:
        json.dump(index, f)
    with pytest.raises(saving.NewerFileError, match=re.escape(f"checkpoint {path}")):
        array_checkpoint.ArrayCheckpoints(written, directory, max_to_keep=2).restore(path)
    # A newer release's index in a format this one does not know: named as newer, not as "not an index".
    index.update({"format": "sphere_tf.array_checkpoint/2", KEY: newer})
    with open(index_path, "w") as f:
        json.dump(index, f)
    with pytest.raises(saving.NewerFileError, match=re.escape(f">= {upgrade}")):
        array_checkpoint.latest(directory)


def test_load_model_refuses_a_newer_file_before_keras_rebuilds_it(tmp_path):
    """`saving.load_model`: a sphere_tf regularizer inside a Keras layer gives the NewerFileError itself."""
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, kernel_regularizer=regularizers.MHE())])
    path, out = str(tmp_path / "m.keras"), str(tmp_path / "newer.keras")
    model.save(path)
    _rewrite(path, out, f"{MAJOR}.{MINOR + 1}.0")
    with pytest.raises(saving.NewerFileError, match=re.escape(out)):
        saving.load_model(out)
    x = np.ones((2, 4), "float32")
    np.testing.assert_allclose(saving.load_model(path).predict(x, verbose=0), model.predict(x, verbose=0), rtol=1e-6)
