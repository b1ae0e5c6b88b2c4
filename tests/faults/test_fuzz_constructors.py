"""Constructor fuzzing: every public layer, loss, regularizer, optimizer, callback, metric, initializer and training
model of the package built with hypothesis-generated bad arguments, and every layer called on bad inputs.

The classes are enumerated from the package (the public classes of `FUZZED_PACKAGES`, and every class decorated
with `register_serializable` anywhere in the source), not listed by hand: a new public class fails
`test_every_public_class_has_a_recipe` until `RECIPES` says how to build and exercise it (or `NOT_FUZZED` why
not). The arguments are each constructor's `inspect.signature` (the sphere_tf classes of its MRO) and one unknown
keyword; the values are picked by the type of the argument's default (`_fuzzing.by_default`), with a small table
(`CHOICES`) only for the arguments whose valid values need knowledge (registry names).

Each example must either work or fail cleanly (`check_example`):

* work: the object is built, records the value it was given (no bool taken for a number, no string for a
  number or a bool, no float cut to an int, nothing non-finite kept: `_fuzzing.check_accepted`), a tiny use gives
  finite output (a layer's inference and training calls, a loss, a regularizer, an optimizer step, a metric
  update, an initializer draw, a callback's hooks through an epoch), and `from_config(get_config())` rebuilds the
  same config;
* or raise one `ValueError` / `TypeError` whose message names the argument, at construction (or when the object
  is built on its input, for values checked against the input's shape).

Never an `AttributeError`, `KeyError`, `IndexError`, `ZeroDivisionError` or a backend's op error from deep inside,
never an error without the argument's name, never a silent wrong result. A layer built on a valid input and called
on a bad one (`input_cases`: rank, channels, a window larger than the input, integer / bool / float16 / float64
dtypes, an empty batch, a NaN sample) gives a finite output of the input's batch (an integer input the output of
the same numbers in float32) or one ValueError / TypeError naming the input's shape or dtype (`check_layer_input`).

The fast subset (CI) fuzzes each class and each layer's input with the hypothesis profile's examples
(`sphere_tf`: 25 on TensorFlow, `backends`: 8 on JAX and PyTorch), the argument or input drawn per example; the
slow tests (the full run, `scripts/test_faults.sh`) fuzz every argument of every class with that many examples
each, and every input case of every layer.
"""

import ast
import contextlib
import dataclasses
import inspect
import os
import re
import tempfile
from typing import Callable

import keras
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import sphere_tf
from sphere_tf import energy as energy_lib
from sphere_tf.data import normalization as normalization_lib
from sphere_tf.layers import opt as opt_lib
from sphere_tf.ops import angular as angular_lib
from sphere_tf.ops import magnitude as magnitude_lib
from sphere_tf.ops import margin as margin_lib
from sphere_tf.ops import operator as operator_lib
from sphere_tf.regularizers import comhe as comhe_lib
from sphere_tf.regularizers import srip as srip_lib
from tests.faults import _fuzzing as fuzz

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The subpackages whose public classes are the package's building blocks (what users construct).
FUZZED_PACKAGES = ("layers", "losses", "regularizers", "optimizers", "callbacks", "metrics", "initializers",
                   "training")
CATEGORY = "constructor fuzzing"
INPUT_CATEGORY = "layer input fuzzing"
UNKNOWN_KEYWORD = "unexpected_fuzz_keyword"
NAN, INF = fuzz.NAN, fuzz.INF


# -- what to fuzz ------------------------------------------------------------------------------------------------

def public_classes():
    """`{name: class}`: the public classes of `FUZZED_PACKAGES` as this backend imports them."""
    found = {}
    for package in FUZZED_PACKAGES:
        module = getattr(sphere_tf, package)
        for name, value in sorted(vars(module).items()):
            if inspect.isclass(value) and not name.startswith("_") and value.__module__.startswith("sphere_tf."):
                found[name] = value
    return found


def registered_class_names():
    """The names of every class decorated with `register_serializable` in the package's source (the modules
    loaded on first use included), read without importing anything."""
    names = set()
    for folder, _, files in os.walk(os.path.join(ROOT, "sphere_tf")):
        for filename in files:
            if not filename.endswith(".py"):
                continue
            with open(os.path.join(folder, filename), encoding="utf-8") as f:
                tree = ast.parse(f.read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and any(
                        "register_serializable" in ast.unparse(d) for d in node.decorator_list):
                    names.add(node.name)
    return names


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How to build and exercise one class.

    Attributes:
        base: the valid keyword arguments the fuzzed one is added to (required ones, and cheap settings of
            arguments whose defaults are slow to exercise).
        exercise: `(object) -> array or None`: a tiny use of the built object; its output must be finite.
        build: `(**kwargs) -> object` (the class itself unless the constructor needs more, e.g. a model's
            inputs and outputs).
        inputs: for layers, the shape of the valid input (`layer_input_fuzzing` mutates it).
    """

    base: dict
    exercise: Callable
    build: Callable = None
    inputs: tuple = None


def _numpy(x):
    # float32 first: NumPy has no bfloat16 of its own.
    return np.asarray(keras.ops.convert_to_numpy(keras.ops.cast(x, "float32")))


def _float_input(shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).normal(size=shape) * scale).astype("float32")


DENSE_INPUT, CONV_INPUT, LABELS = (4, 5), (2, 6, 6, 3), np.array([0, 1, 2, 3], "int32")


def _call_layer(layer):
    """Inference and training calls on a valid input (the shape of the layer's recipe)."""
    x = _float_input(RECIPES[type(layer).__name__].inputs)
    return [_numpy(layer(x, training=False)), _numpy(layer(x, training=True))]


def _call_head(head):
    """A margin head's inference logits, and its training logits with labels (the margin applied)."""
    x = _float_input(DENSE_INPUT)
    return [_numpy(head(x)), _numpy(head(x, labels=LABELS, training=True))]


def _call_pixels(layer):
    return _numpy(layer(np.random.default_rng(0).uniform(0, 255, CONV_INPUT).astype("float32")))


def _cosines(columns):
    return np.clip(_float_input((4, columns), scale=0.5), -1.0, 1.0)


def _margin_loss(loss):
    """A cosine-margin loss on cosines, with the feature norm as the last column when it takes one (scale=None)."""
    y_pred = _cosines(4)
    if getattr(loss, "scale", 0.0) is None:
        y_pred = np.concatenate([y_pred, np.full((4, 1), 3.0, "float32")], axis=1)
    return _numpy(loss(LABELS, y_pred))


def _logits_loss(loss):
    return _numpy(loss(LABELS, _float_input((4, 4))))


def _regularize(regularizer):
    return _numpy(regularizer(keras.Variable(_float_input((3, 3, 2, 4)))))


def _label_penalty(penalty):
    return _numpy(penalty(keras.Variable(_float_input((5, 4))), LABELS))


def _step(optimizer, square=False):
    """One step of `optimizer` on a variable (an orthogonal 3x3 matrix for Cayley SGD); the updated value."""
    value = np.linalg.qr(_float_input((3, 3)))[0].astype("float32") if square else _float_input((3, 2))
    variable = keras.Variable(value)
    optimizer.apply_gradients([(keras.ops.convert_to_tensor(_float_input((*value.shape,), seed=1)), variable)])
    return _numpy(variable)


def _routed_step(optimizer):
    """One step of an OPT-routing optimizer on a plain variable and an OPT rotation (routed to Cayley SGD)."""
    layer = sphere_tf.layers.OPTDense(2, orthogonalization="ogd")
    layer(_float_input((1, 3)))
    variables = list(layer.trainable_variables)
    optimizer.apply_gradients([(keras.ops.convert_to_tensor(_float_input(tuple(v.shape), seed=i)), v)
                               for i, v in enumerate(variables)])
    return [_numpy(v) for v in variables]


def _metric(metric):
    features = _float_input((6, 5))
    metric.update_state(np.array([0, 1, 2, 0, 1, 2], "int32"), features)
    return _numpy(metric.result())


def _initialize(initializer):
    return _numpy(initializer((6, 4), dtype="float32"))


def _epoch(callback, layer=lambda: sphere_tf.layers.DecoupledDense(2, name="dense")):
    """A callback's hooks through one epoch of two batches on a tiny compiled model (one `layer`), in `fit`'s
    order: what it adds to the epoch's logs (energies, error rates) must be finite."""
    model = keras.Sequential([keras.Input((3,)), layer()])
    model.compile(optimizer="sgd", loss="mse")
    callback.set_model(model)
    logs = {"loss": 0.5, "accuracy": 0.5, "val_loss": 0.7, "val_accuracy": 0.5}
    callback.on_train_begin({})
    callback.on_epoch_begin(0, {})
    for batch in range(2):
        callback.on_train_batch_begin(batch, {})
        callback.on_train_batch_end(batch, {"loss": 0.5})
    callback.on_epoch_end(0, logs)
    callback.on_train_end({})
    return np.array(list(logs.values()), dtype="float64")


def _model(model_class):
    def build(**kwargs):
        if model_class is sphere_tf.training.SphereSequential:
            return model_class([keras.Input((3,)), sphere_tf.layers.DecoupledDense(2)], **kwargs)
        inputs = keras.Input((3,))
        return model_class(inputs, sphere_tf.layers.DecoupledDense(2)(inputs), **kwargs)
    return build


def _predict(model):
    return _numpy(model(_float_input((2, 3))))


# Base arguments: the required ones, and `energy_init_steps` small enough that a fuzzed `energy_init` runs
# its descent in milliseconds (the default is the thesis's 5000 steps).
RECIPES = {
    "ConvNorm2D": Recipe({"filters": 2, "kernel_size": 3}, _call_layer, inputs=CONV_INPUT),
    "DecoupledConv2D": Recipe({"filters": 2, "kernel_size": 3}, _call_layer, inputs=CONV_INPUT),
    "DecoupledDense": Recipe({"units": 3}, _call_layer, inputs=DENSE_INPUT),
    "SphereConv2D": Recipe({"filters": 2, "kernel_size": 3}, _call_layer, inputs=CONV_INPUT),
    "SphereDense": Recipe({"units": 3}, _call_layer, inputs=DENSE_INPUT),
    "OPTConv2D": Recipe({"filters": 2, "kernel_size": 3, "energy_init_steps": 3}, _call_layer, inputs=CONV_INPUT),
    "OPTDense": Recipe({"units": 3, "energy_init_steps": 3}, _call_layer, inputs=DENSE_INPUT),
    "MarginHead": Recipe({"num_classes": 4}, _call_head, inputs=DENSE_INPUT),
    "PartialFCHead": Recipe({"num_classes": 4, "sample_rate": 0.5, "seed": 0}, _call_head, inputs=DENSE_INPUT),
    "PixelNormalization": Recipe({}, _call_pixels, inputs=CONV_INPUT),
    "ArcFaceLoss": Recipe({}, _margin_loss),
    "CombinedMarginLoss": Recipe({}, _margin_loss),
    "CosFaceLoss": Recipe({}, _margin_loss),
    "GASoftmaxLoss": Recipe({}, _margin_loss),
    "SphereFaceLoss": Recipe({}, _margin_loss),
    "SparseCrossentropy": Recipe({}, _logits_loss),
    "SparseHinge": Recipe({}, _logits_loss),
    "MHE": Recipe({}, _regularize),
    "CoMHE": Recipe({}, _regularize),
    "Orthogonality": Recipe({}, _regularize),
    "SRIP": Recipe({}, _regularize),
    "DataDependentMHE": Recipe({}, _label_penalty),
    "SRIPSchedule": Recipe({}, _epoch),
    "CayleySGD": Recipe({}, lambda optimizer: _step(optimizer, square=True)),
    "OPTOptimizer": Recipe({}, _routed_step),
    "PartialFCOptimizer": Recipe({}, _step),
    "BestCheckpoint": Recipe({"filepath": "best.weights.h5", "monitor": "val_accuracy"}, _epoch),
    "HypersphericalEnergy": Recipe({}, _epoch),
    "LabelRangeCheck": Recipe({}, _epoch),
    "SOPTEpisodes": Recipe({}, lambda callback: _epoch(
        callback, lambda: sphere_tf.layers.OPTDense(2, stochastic_dims=2, name="dense"))),
    "ScalarTensorBoard": Recipe({"log_dir": "logs"}, _epoch),
    "ScalarWriter": Recipe({"log_dir": "logs"}, lambda writer: writer.close()),
    "TestErrorLog": Recipe({"accuracy_name": "accuracy", "steps_per_epoch": 10}, _epoch),
    "WarnOnSkippedNormMean": Recipe({}, _epoch),
    "AngularFisherScore": Recipe({"num_classes": 3}, _metric),
    "MinInterclassAngle": Recipe({"num_classes": 3}, _metric),
    "MeanShifted": Recipe({"mean": 0.02}, _initialize),
    "UnitNormNeurons": Recipe({}, _initialize),
    "SphereModel": Recipe({}, _predict, build=_model(sphere_tf.training.SphereModel)),
    "SphereSequential": Recipe({}, _predict, build=_model(sphere_tf.training.SphereSequential)),
}
# Classes the fuzzer leaves out, and why.
NOT_FUZZED = {
    "OPTLayer": "the abstract base of OPTConv2D and OPTDense (no units); its arguments are fuzzed through them",
    "SphereTrainingMixin": "a mixin of SphereModel and SphereSequential, fuzzed through them",
    "TransferReport": "a result record that `initialize_from_pretrained` returns, not built by users",
    "FGSMAdversarialModel": "sphere_tf.adversarial's training model (TensorFlow-only toolkit); its arguments are "
                            "the attack's, checked in tests/adversarial",
    "StepCheckpoint": "the runner's checkpoint callback (training.checkpoint); fault-tested by the checkpoint "
                      "tests of tests/faults",
    "EpochLogger": "the runner's progress printer (training.progress), no arguments of its own",
    "FoldedBatchNormalization": "export-only layer (sphere_tf.export, TensorFlow) built by the BN folding from a "
                                "trained BatchNormalization",
}


def fuzzed_classes():
    """`{name: class}` of the classes with a recipe, as this backend exports them (sorted by name)."""
    classes = public_classes()
    return {name: classes[name] for name in sorted(RECIPES) if name in classes}


# -- the arguments and their values ----------------------------------------------------------------------------

def constructor_arguments(cls):
    """`{name: default}` of the keyword arguments of `cls` (`inspect.Parameter.empty` for required ones), the
    package's own classes of its MRO included (a subclass passing `**kwargs` on to a sphere_tf base takes its
    arguments too); Keras's own base-class arguments (`name`, `dtype`, `trainable`, ...) are Keras's."""
    arguments = {}
    for klass in cls.__mro__:
        if not klass.__module__.startswith("sphere_tf.") or "__init__" not in vars(klass):
            continue
        for name, parameter in inspect.signature(klass.__init__).parameters.items():
            if name == "self" or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                continue
            if name not in arguments or arguments[name] is inspect.Parameter.empty:
                arguments[name] = parameter.default
    if issubclass(cls, keras.Model):
        arguments.pop("args", None)
    return arguments


def argument_default(name, argument):
    """The default of `argument` of class `name`, or for a required one (and the unknown keyword) the recipe's
    base value: the type its values are drawn by."""
    default = constructor_arguments(public_classes()[name]).get(argument, inspect.Parameter.empty)
    return RECIPES[name].base.get(argument) if default is inspect.Parameter.empty else default


_INITIALIZERS = ["zeros", "ones", "glorot_uniform", "orthogonal", {"class_name": "Constant", "config": {"value": 0.5}}]
# Valid values that need knowledge of the package (its registries); each argument also gets the generic
# wrong values of its default's type.
CHOICES = {
    "magnitude": sorted(magnitude_lib.MAGNITUDE_FNS),
    "angular": sorted(angular_lib.ANGULAR_FNS),
    "weighted": list(operator_lib.WEIGHTINGS),
    "loss_type": list(margin_lib.LOSS_TYPES),
    "orthogonalization": list(opt_lib.ORTHOGONALIZATIONS),
    "energy_init": list(opt_lib.ENERGY_INITS),
    "normalization": sorted(normalization_lib.NORMALIZATIONS),
    "distance": list(energy_lib.DISTANCES),
    "log_form": list(energy_lib.LOG_FORMS),
    "projection": list(comhe_lib.PROJECTIONS) if hasattr(comhe_lib, "PROJECTIONS") else ["random", "angle"],
    "gram": list(srip_lib.GRAMS),
    "reduction": ["sum", "mean", "sum_over_batch_size", "none", None],
    "dtype": ["float32", "float16", "bfloat16", "int32", "mixed_float16"],
    "padding": ["same", "valid", "SAME", "causal"],
    "data_format": ["channels_last", "channels_first"],
    "activation": ["relu", "tanh", "softmax", "linear"],
    "annealing": ["mnist", "cifar10", "cifar10+", "sphereface", {"base": 1000.0, "gamma": 0.12, "power": 1.0},
                  {"base": NAN, "gamma": 0.1, "power": 1.0}, {"base": 10.0}],
    "update_freq": ["epoch", "batch", 5, 0],
    "channel_mean": [[125.3, 123.0, 113.9], [127.5], [NAN, 1.0, 2.0], [1.0, 2.0], ["a", "b", "c"]],
    "margin": [0.0, 0.35, 0.5, 1, 2, 3, 4, 1.5, 5, (1.0, 0.5, 0.0), (1.0, 0.0, 0.35), (1.0, 0.5), (NAN, 0.5, 0.0)],
    "optimizer": ["sgd", "adam", {"class_name": "SGD", "config": {"learning_rate": NAN}}],
    "rotation_optimizer": ["sgd", "adam"],
    "layer_names": [["dense"], "dense", [], [3]],
    "schedule": ["authors", {"epochs": [10, 20], "factors": [0.1, 0.01]}],
    "label_penalty": ["mhe"],
}
for _name in ("kernel_initializer", "bias_initializer", "fixed_kernel_initializer", "rotation_initializer",
              "affine_initializer", "affine_bias_initializer", "base"):
    CHOICES[_name] = _INITIALIZERS
for _name in ("kernel_regularizer", "bias_regularizer", "rotation_regularizer", "affine_regularizer"):
    CHOICES[_name] = ["l2", {"class_name": "L1", "config": {"l1": NAN}}, "mhe"]
for _name in ("kernel_constraint", "bias_constraint"):
    CHOICES[_name] = ["unit_norm", "non_neg", "max_norm"]
# Arguments whose int default stands for a real number (an exponent, a margin that may be fractional).
REAL_VALUED_INTS = {"power", "margin", "mean"}
# Int arguments that also take a pair of ints (a 2-D kernel's geometry, as `keras.layers.Conv2D`).
INT_PAIRS = {"kernel_size", "strides", "dilation_rate"}
# Arguments that take an identifier: a name, a serialized object (a dict) or an object, besides a str.
IDENTIFIER = re.compile(r"(initializer|regularizer|constraint|activation|optimizer)$|^(base|update_freq|reduction|"
                        r"dtype|label_penalty|annealing|schedule)$")


def _paths():
    return fuzz.fresh(["logs", "", " ", os.path.join("a", "b"), 3, None, ["logs"], b"logs", NAN])


def value_strategy(argument, default):
    """Values to try for `argument`: the wrong values of its default's type (and of every other type), and the
    valid values `CHOICES` knows."""
    if argument in ("log_dir", "filepath"):
        return _paths()
    strategies = [fuzz.by_default(default, real_valued=argument in REAL_VALUED_INTS)]
    if argument in CHOICES:
        strategies.insert(0, fuzz.fresh(CHOICES[argument]))
    return st.one_of(*strategies)


# -- the rule each example must satisfy --------------------------------------------------------------------------

_MISSING = object()


def _recorded(obj, argument):
    """The value `obj` records for `argument`: its config's, else its attribute's, else `_MISSING`."""
    if hasattr(obj, "get_config"):
        try:
            config = obj.get_config()
        except NotImplementedError:
            config = {}
        if argument in config:
            return config[argument]
    return getattr(obj, argument, _MISSING)


def check_accepted_value(obj, argument, value, default):
    """Raises AssertionError when `obj` took `value` for `argument` but keeps something else (a silent wrong
    result: a truthy string as True, a float cut to an int, NaN kept as a hyperparameter; `fuzz.check_accepted`)."""
    fuzz.check_accepted(argument, value, default, _recorded(obj, argument),
                        real_valued=argument in REAL_VALUED_INTS, pair=argument in INT_PAIRS,
                        identifier=bool(IDENTIFIER.search(argument)))


def _finite(output):
    for array in output if isinstance(output, list) else [output]:
        if array is not None and np.issubdtype(np.asarray(array).dtype, np.number):
            assert np.all(np.isfinite(array)), f"non-finite output: {array}"


def _roundtrip(obj):
    """`from_config(get_config())` rebuilds the same config (classes without a config: nothing to check)."""
    if not hasattr(obj, "get_config") or not hasattr(type(obj), "from_config"):
        return
    if isinstance(obj, keras.Model):
        config = obj.get_config()
        clone = type(obj).from_config(config)
        assert fuzz.same(clone.get_config(), config), f"round trip changed the config: {config}"
        return
    config = obj.get_config()
    clone = type(obj).from_config(config)
    assert fuzz.same(clone.get_config(), config), f"round trip changed the config: {config} -> {clone.get_config()}"


def check_example(name, argument, value):
    """One example: `RECIPES[name]` built with `argument=value` either works or raises one clean error naming
    `argument` (see the module docstring). Raises AssertionError (or the unexpected exception) otherwise."""
    cls = public_classes()[name]
    recipe = RECIPES[name]
    default = argument_default(name, argument)
    kwargs = {**recipe.base, argument: value}
    build = recipe.build or cls
    try:
        obj = build(**kwargs)
    except fuzz.CLEAN_ERRORS as error:
        assert fuzz.names(str(error), argument), (
            f"{name}({argument}={value!r}) raised {type(error).__name__} without naming {argument!r}: {error}")
        return "refused"
    assert argument != UNKNOWN_KEYWORD, f"{name} accepted an unknown keyword argument"
    check_accepted_value(obj, argument, value, default)
    try:
        output = recipe.exercise(obj)
    except fuzz.CLEAN_ERRORS as error:
        # Checked against the input (a size larger than the input's): refused when built, named.
        assert fuzz.names(str(error), argument), (
            f"{name}({argument}={value!r}) built, then its use raised {type(error).__name__} without naming "
            f"{argument!r}: {error}")
        return "refused at build"
    _finite(output)
    _roundtrip(obj)
    return "accepted"


# -- the tests ---------------------------------------------------------------------------------------------------

@contextlib.contextmanager
def _in_temporary_folder():
    """Relative paths (log folders, checkpoint files) land in a fresh folder, and Keras's logs stay quiet."""
    previous = os.getcwd()
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)
        try:
            yield folder
        finally:
            os.chdir(previous)


def test_every_public_class_has_a_recipe():
    """A new public or registered class fails here until the fuzzer knows how to build it (or why not)."""
    known = set(RECIPES) | set(NOT_FUZZED)
    assert set(public_classes()) - known == set()
    assert registered_class_names() - known == set()
    assert set(RECIPES) & set(NOT_FUZZED) == set()
    # No stale entry: each names a class of the package.
    assert known - set(public_classes()) - registered_class_names() == set()


def test_each_recipe_builds_and_works_as_given():
    """The base arguments of every recipe are valid: the fuzzer's examples differ from a working object in the
    one fuzzed argument only."""
    with _in_temporary_folder():
        for name, cls in fuzzed_classes().items():
            recipe = RECIPES[name]
            obj = (recipe.build or cls)(**recipe.base)
            _finite(recipe.exercise(obj))
            _roundtrip(obj)


def _fuzz_arguments(cls):
    return sorted(constructor_arguments(cls)) + [UNKNOWN_KEYWORD]


@pytest.mark.parametrize("name", sorted(fuzzed_classes()))
def test_constructor_fuzzing(name, tally):
    """The profile's examples for the class, each with one argument drawn and fuzzed."""
    arguments = _fuzz_arguments(fuzzed_classes()[name])
    tried = []

    @given(st.data())
    def fuzz_one(data):
        argument = data.draw(st.sampled_from(arguments), label="argument")
        value = data.draw(value_strategy(argument, argument_default(name, argument)), label="value")
        tried.append((argument, check_example(name, argument, value)))

    with _in_temporary_folder():
        fuzz_one()
    tally(CATEGORY, name, tried=len(tried))


def _all_arguments():
    return [(name, argument) for name, cls in fuzzed_classes().items() for argument in _fuzz_arguments(cls)]


@pytest.mark.slow
@pytest.mark.parametrize("name,argument", _all_arguments())
def test_constructor_fuzzing_every_argument(name, argument, tally):
    """The full run: the profile's examples for every argument of every class."""
    tried = []

    @given(value_strategy(argument, argument_default(name, argument)))
    def fuzz_one(value):
        tried.append(check_example(name, argument, value))

    with _in_temporary_folder():
        fuzz_one()
    tally(CATEGORY, name, tried=len(tried))  # summed over the class's arguments in the tables


# -- layer inputs ------------------------------------------------------------------------------------------------

def input_cases(shape):
    """Every `(kind, detail)` bad input for a layer whose valid input has `shape` (a float32 batch)."""
    rank, batch = len(shape), shape[0]
    shapes = [
        shape[1:],  # no batch axis
        (*shape, 2),  # one axis too many
        shape[:-1],  # no channel axis
        (batch,),  # a vector
        (),  # a scalar
        (*shape[:-1], shape[-1] + 2),  # another channel count than the layer was built for
        (*shape[:-1], 0),  # no channels
    ] + ([(batch, 1, 1, shape[-1]), (batch, 0, 0, shape[-1])] if rank == 4 else [])  # smaller than the kernel
    return ([("shape", s) for s in shapes]
            + [("dtype", d) for d in ("int32", "int64", "uint8", "bool", "float16", "float64")]
            + [("empty batch", (0, *shape[1:])), ("batch of one", (1, *shape[1:]))]
            + [("non-finite", NAN), ("non-finite", INF)])


def _names_shape(message, shape):
    """Whether `message` names `shape` (its dims in order, however bracketed) or its rank."""
    dims = r"[,\s]+".join(str(d) for d in shape)
    return bool(shape and re.search(rf"(?<!\d){dims}(?!\d)", message)) or bool(
        re.search(r"\b(ndim|rank|shape)\b", message) and str(len(shape)) in message)


def _layer_call(layer, x, training):
    if isinstance(layer, sphere_tf.layers.MarginHead):
        labels = LABELS[:x.shape[0]] if x.ndim and x.shape[0] <= len(LABELS) else None
        return layer(x, labels=labels if training else None, training=training)
    return layer(x, training=training)


def check_layer_input(name, kind, detail):
    """A built layer called on a bad input either gives a finite output of the input's batch (a finite input's
    rows finite; an integer, bool or other float input the output of the same numbers in float32) or raises one
    ValueError / TypeError naming the input's shape or dtype."""
    recipe = RECIPES[name]
    shape = recipe.inputs
    layer = public_classes()[name](**recipe.base)
    valid = _float_input(shape, scale=50.0 if name == "PixelNormalization" else 1.0)
    _layer_call(layer, valid, training=False)  # built on the valid shape
    if kind == "shape":
        x = _float_input(detail)
    elif kind == "dtype":
        x = np.abs(valid * 3).astype(detail)
    elif kind == "non-finite":
        x = valid.copy()
        x[0] = detail  # one bad sample: the others' outputs must stay finite
    else:
        x = _float_input(detail)
    if kind == "dtype":
        try:
            output = _numpy(_layer_call(layer, x, training=False))
        except fuzz.CLEAN_ERRORS as error:
            assert detail in str(error) or "dtype" in str(error), (
                f"{name} on {detail} input: {type(error).__name__} without the dtype: {error}")
            return "refused"
        # The same numbers as a float32 input (an int kernel would silently round the weights; float16 rounds
        # the input itself).
        expected = _numpy(_layer_call(layer, x.astype("float32"), training=False))
        np.testing.assert_allclose(output, expected, rtol=2e-2, atol=2e-2,
                                   err_msg=f"{name} on a {detail} input: not the float32 input's output")
    for training in (False, True):
        try:
            output = _numpy(_layer_call(layer, x, training))
        except fuzz.CLEAN_ERRORS as error:
            message = str(error)
            named = _names_shape(message, x.shape) if kind != "dtype" else (detail in message or "dtype" in message)
            assert named, f"{name} on {kind} {x.shape} {x.dtype}: {type(error).__name__} without the {kind}: {message}"
            return "refused"
        if x.ndim:  # (a scalar's pixel normalisation is a scalar)
            assert output.shape[:1] == x.shape[:1], f"{name}: batch {x.shape[0]} in, {output.shape} out"
        rows = output[1:] if kind == "non-finite" else output
        if not (kind == "non-finite" and training):  # a training batch's statistics may carry the bad sample
            assert np.all(np.isfinite(rows)), f"{name} on {kind} {x.shape} {x.dtype}: non-finite output {rows}"
    return "accepted"


def _layer_names():
    return [name for name in sorted(fuzzed_classes()) if RECIPES[name].inputs is not None]


@pytest.mark.parametrize("name", _layer_names())
def test_layer_input_fuzzing(name, tally):
    """The profile's examples of bad inputs (rank, channels, dtype, empty batch, NaN) for each layer, drawn from
    `input_cases`."""
    tried = []

    @given(st.sampled_from(input_cases(RECIPES[name].inputs)))
    def fuzz_one(case):
        tried.append(check_layer_input(name, *case))

    fuzz_one()
    tally(INPUT_CATEGORY, name, tried=len(tried))


@pytest.mark.slow
@pytest.mark.parametrize("name,kind,detail", [(name, *case) for name in _layer_names()
                                              for case in input_cases(RECIPES[name].inputs)])
def test_layer_input_fuzzing_every_case(name, kind, detail, tally):
    """The full run: every bad input of `input_cases` for every layer."""
    check_layer_input(name, kind, detail)
    tally(INPUT_CATEGORY, name, tried=1)
