"""Export for TensorFlow Serving: versioned folders, named signatures, warmup requests, verification.

`export_model(model, export_base, model_name)` writes

```
<export_base>/models.config                     model_config_list of every model under export_base
<export_base>/<model_name>/<version>/           a SavedModel (tag 'serve')
    saved_model.pb, variables/, fingerprint.pb
    assets.extra/tf_serving_warmup_requests     PredictionLog records, a few batch sizes
```

The version is the next free integer unless given; an existing version is never
overwritten. Everything is written into a hidden temporary folder beside the
versions (TensorFlow Serving only watches integer-named folders), verified, and
renamed into place, so a watching server never sees a half-written model and a
failure leaves nothing behind.

Signatures (named tensors, any batch size, shape and dtype checked by the
signature itself):

* `serving_default`: `images` (uint8, or float32 pixels in 0..255, with the
  model's (height, width, channels)) -> `logits` (float32), `probabilities`
  (softmax of the logits), `classes` (int64 argmax). Clients send raw pixels:
  a model whose first layer is a `sphere_tf.layers.PixelNormalization`
  normalises them itself; for an older model without it, the training
  normalisation of the data pipeline (`sphere_tf.data.preprocessing.NORMALIZATIONS`,
  the `normalization` argument) runs inside the graph before the model.
* `embeddings` (models whose classifier is a `sphere_tf.layers.MarginHead`):
  `images` -> `embeddings` (the unit-norm features the head sees, for
  verification and retrieval), `cosine` (cos θ to every class weight) and
  `logits` (the head's inference logits).

With `class_matrix=False` (a margin-head model only: face recognition serves
embeddings, and a Partial FC head's `(d, C)` class matrix may be gigabytes)
the class weights are left out of the SavedModel: both signatures,
`serving_default` and `embeddings`, return `embeddings` alone, and the graph
holds no variable or constant of the head.

Inference simplifications: OPT layers are folded into plain `Conv2D`/`Dense`
(`fold_opt_model`); a BatchNormalization after a cosine-activation operator is
folded into its normalised kernel (`fold_batch_norm`); a margin head runs its
inference branch (plain logits, no labels input, no margin); every layer is
called with `training=False`, so batch norm and the operators' E{‖x‖} use their
moving averages as constants (the verification rejects a signature that assigns
a variable). The SavedModel holds
TensorFlow ops only: no `sphere_tf` import, custom op or Python object is needed
to load or serve it.

Verification before the rename: a fresh Python process that cannot import
`sphere_tf` loads the SavedModel, runs every signature on sample pixels and every
warmup request; `saved_model_cli run` runs `serving_default`; the outputs of both
must match the Keras model's within `atol` (relative to the logits' scale); the
warmup file and `models.config` are parsed back.

The warmup records are protocol buffers of the `tensorflow-serving-api` package
(`scripts/setup.sh` installs it with `--no-deps`: its protos need only what
`tensorflow-cpu` provides, while its metadata asks for the full `tensorflow`
wheel; README "Serving").
"""

import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid

import keras
import numpy as np
import tensorflow as tf
from google.protobuf import text_format
from tensorflow.python.framework import convert_to_constants  # pylint: disable=g-direct-tensorflow-import

from sphere_tf import validation
from sphere_tf import walk
from sphere_tf.data import preprocessing
from sphere_tf.export import base
from sphere_tf.export import fold
from sphere_tf.export import formats as formats_lib
from sphere_tf.layers import opt as opt_lib
from sphere_tf.layers import pixel_normalization
from sphere_tf.layers.margin_head import MarginHead

# The shared pieces (`sphere_tf.export.base`), public here too.
ExportError = base.ExportError
SERVING_SIGNATURE = base.SERVING_SIGNATURE
EMBEDDINGS_SIGNATURE = base.EMBEDDINGS_SIGNATURE
sample_pixels = base.sample_pixels
save_frozen = base.save_frozen

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
MODELS_CONFIG = "models.config"
INPUT_DTYPES = ("uint8", "float32")
DEFAULT_WARMUP_BATCH_SIZES = (1, 8, 32)
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_ASSIGN_OPS = ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "Assign", "AssignAdd", "AssignSub")

ExportResult = collections.namedtuple(
    "ExportResult",
    ["path", "version", "model_name", "signatures", "models_config", "max_abs_diff", "formats", "normalization"],
    defaults=(None, None),
)
ExportResult.__doc__ = """What `export_model` wrote.

Attributes:
    path: str, the version folder `<export_base>/<model_name>/<version>`.
    version: int.
    model_name: str.
    signatures: dict, signature name -> {'inputs': {name: (dtype, shape)}, 'outputs': [names]}.
    models_config: str, the path of `<export_base>/models.config`.
    max_abs_diff: float or None, the largest |served − Keras| logit difference of the
        verification (None when `verify=False`).
    formats: dict, optional format name ('onnx', 'tflite') -> the file written beside
        the version folder (`sphere_tf.export.formats.format_path`); empty if none.
    normalization: dict, what the served pixels go through: `name` and `channel_mean`
        (a list or None) of the normalisation, and `in_model` (True: the model's own
        `PixelNormalization` layer, read from the model; False: the `normalization`
        argument or `DEFAULT_NORMALIZATION`, run in the serving graph before the model).
"""


def _serving_apis():
    try:
        from tensorflow_serving.apis import model_pb2  # noqa: PLC0415 (optional dependency)
        from tensorflow_serving.apis import predict_pb2  # noqa: PLC0415 (optional dependency)
        from tensorflow_serving.apis import prediction_log_pb2  # noqa: PLC0415 (optional dependency)
        from tensorflow_serving.config import model_server_config_pb2  # noqa: PLC0415 (optional dependency)
    except ImportError as error:
        raise ImportError(
            "sphere_tf.export needs the `tensorflow-serving-api` protos for the warmup requests and "
            "models.config: `pip install --no-deps tensorflow-serving-api==2.21.*` (see README, 'Serving'; "
            "--no-deps keeps pip from pulling the full `tensorflow` wheel over tensorflow-cpu)."
        ) from error
    return model_pb2, predict_pb2, prediction_log_pb2, model_server_config_pb2


# -- arguments ------------------------------------------------------------------------------


def _check_model_name(model_name):
    if not isinstance(model_name, str) or not _MODEL_NAME.match(model_name) or model_name.isdigit():
        raise validation.invalid_argument(
            "model_name", "a non-numeric folder name of letters, digits, '_', '-', '.'", model_name
        )
    return model_name


def _check_export_base(export_base):
    if not isinstance(export_base, (str, os.PathLike)) or not str(export_base):
        raise validation.invalid_argument("export_base", "a folder path", export_base)
    export_base = os.path.abspath(os.fspath(export_base))
    if os.path.exists(export_base) and not os.path.isdir(export_base):
        raise ValueError(f"Invalid value for argument `export_base`: {export_base!r} is a file; expected a folder "
                         "(it is created if missing).")
    return export_base


def existing_versions(model_dir):
    """The integer version folders of a TF Serving model folder, sorted (empty if it does not exist).

    Args:
        model_dir: str, `<export_base>/<model_name>`.

    Returns:
        list of int.
    """
    if not os.path.isdir(model_dir):
        return []
    return sorted(int(n) for n in os.listdir(model_dir)
                  if n.isdigit() and os.path.isdir(os.path.join(model_dir, n)))


def _resolve_version(model_dir, version):
    versions = existing_versions(model_dir)
    if version is None:
        return (versions[-1] + 1) if versions else 1
    version = validation.positive_int(version, "version")
    target = os.path.join(model_dir, str(version))
    if os.path.exists(target):
        raise FileExistsError(
            f"Invalid value for argument `version`: {target!r} already exists (existing versions: {versions}); "
            "an exported version is never overwritten. Pass another version or None for the next free one "
            f"({(versions[-1] + 1) if versions else 1})."
        )
    return version


def _normalizer(normalization, channel_mean):
    """The data pipeline's normalisation (`preprocessing.NORMALIZATIONS`) and its checked mean."""
    validation.one_of(normalization, "normalization", tuple(preprocessing.NORMALIZATIONS))
    if preprocessing.uses_channel_mean(normalization):
        if channel_mean is None:
            raise validation.invalid_argument(
                "channel_mean", f"the per-channel training mean for normalization={normalization!r}", channel_mean
            )
    if channel_mean is not None:
        try:
            channel_mean = tuple(validation.real(m, "channel_mean") for m in np.ravel(channel_mean))
        except (TypeError, ValueError) as error:
            raise validation.invalid_argument("channel_mean", "a sequence of finite floats", channel_mean) from error
    return preprocessing.get_normalization(normalization), channel_mean


def input_normalization(model, normalization=None, channel_mean=None):
    """`(name, channel_mean, in_model)`: the normalisation `model` was trained with, and whether it runs inside it.

    A model whose first layer is a `PixelNormalization` carries it (`in_model` True: a reader feeds it raw
    pixels); an explicit `normalization` must then name the layer's, and an explicit `channel_mean` equal the
    layer's when the layer has one (a mean given for a layer without one is ignored, as for a model without the
    layer and a normalisation that ignores it). A model without the layer (saved before it existed) was trained
    on pipeline-normalised images: `normalization`, or `DEFAULT_NORMALIZATION` when None, with `channel_mean`.

    Raises:
        ValueError: an argument that disagrees with the model's layer, an unknown normalisation, or a missing
            mean (naming the argument).
    """
    in_model = pixel_normalization.model_normalization(model)
    if in_model is None:
        name = preprocessing.DEFAULT_NORMALIZATION if normalization is None else normalization
        _, channel_mean = _normalizer(name, channel_mean)
        return name, channel_mean, False
    name, layer_mean = in_model
    if normalization is not None and normalization != name:
        raise validation.invalid_argument(
            "normalization", f"None or {name!r}: the model's first layer (PixelNormalization) normalises its pixels "
            f"with {name!r}", normalization)
    if channel_mean is not None and layer_mean is not None:
        _, given = _normalizer(name, channel_mean)
        if len(given) != len(layer_mean) or not np.allclose(given, layer_mean, rtol=1e-6, atol=1e-6):
            raise validation.invalid_argument(
                "channel_mean", f"None or the model's PixelNormalization channel_mean {list(layer_mean)}",
                channel_mean)
    return name, layer_mean, True


# -- the inference model -------------------------------------------------------------------


def _has_opt_layers(model):
    return bool(opt_lib.opt_layers(model))


def _margin_head(model):
    heads = [layer for layer in model.layers if isinstance(layer, MarginHead)]
    return heads[0] if len(heads) == 1 else None


def _head_call(model):
    """`(head, features, labels)` of the model's MarginHead call that gives its output, or None.

    `labels` is the symbolic tensor passed as the head's labels (None for a call
    without). A head shared by a training and an inference model (docs/losses.md,
    Pattern 1) has one call per model: the one whose output is this model's is chosen.
    """
    head = _margin_head(model)
    if head is None:
        return None
    outputs = {id(t) for t in model.outputs}
    for node in walk.layer_calls(model, head):
        if any(id(t) in outputs for t in node.outputs):
            args, kwargs = node.arguments.args, node.arguments.kwargs
            return head, args[0], kwargs.get("labels", args[1] if len(args) > 1 else None)
    return None


def _labels_input(model):
    """The model input that feeds its MarginHead's labels, or None."""
    call = _head_call(model)
    labels = None if call is None else call[2]
    return next((t for t in model.inputs if t is labels), None)


def _model_inputs(model):
    """The model's symbolic inputs; a clear error for an unbuilt or subclassed model."""
    if not isinstance(model, keras.Model):
        raise validation.invalid_argument("model", "a keras.Model", type(model).__name__)
    try:
        inputs = model.inputs
    except (AttributeError, ValueError):
        inputs = None
    if not model.built or not inputs:
        raise ValueError(
            "Invalid value for argument `model`: expected a built functional or Sequential model with a known "
            f"input shape (give it a `keras.Input`, or call it once on a batch). Received: {model.name!r}, "
            f"built={model.built}."
        )
    return inputs


def inference_model(model):
    """`(features_model, head)`: the images-only inference part of `model`.

    OPT layers are folded (`fold_opt_model`). For a model whose output is a
    `MarginHead`'s logits (images only, or images and the head's labels as a
    list or a dict: docs/losses.md, Pattern 1), `features_model` maps the images
    to the head's input features and `head` is the (shared) head layer, whose
    inference call gives the plain logits; otherwise `features_model` is the
    whole single-input model and `head` is None.

    Args:
        model: a built functional or Sequential `keras.Model`.

    Returns:
        tuple `(keras.Model, MarginHead or None)`.

    Raises:
        ValueError: an unbuilt or subclassed model, or inputs other than one
            image tensor (plus the labels of the model's margin head).
    """
    inputs = _model_inputs(model)
    if _has_opt_layers(model):
        model = fold.fold_opt_model(model)
        inputs = model.inputs
    call = _head_call(model)
    labels = _labels_input(model)
    images = [t for t in inputs if t is not labels]
    if len(images) != 1:
        if labels is not None:
            found = f"{labels.name!r} feeds the MarginHead's labels, which leaves {len(images)} other inputs"
        elif call is not None and call[2] is not None:
            found = "the MarginHead's labels are not one of them"
        else:
            found = "none of them feeds the labels of a MarginHead giving the model's output"
        raise ValueError(
            "Invalid value for argument `model`: expected one image input, or an image input and a labels input "
            "of the MarginHead that gives the model's output (a list or a dict, as in docs/losses.md, Pattern 1). "
            f"Received inputs {[t.name for t in inputs]} of {model.name!r}: {found}."
        )
    if call is not None:
        head, features = call[0], call[1]
        return keras.Model(images[0], features, name=f"{model.name}_features"), head
    inputs = images
    if len(inputs[0].shape) != 4 or None in inputs[0].shape[1:]:
        raise ValueError(
            "Invalid value for argument `model`: expected an image input of shape (batch, height, width, "
            f"channels) with known sizes. Received: {tuple(inputs[0].shape)}."
        )
    return model, None


def _image_shape(features_model):
    shape = tuple(features_model.inputs[0].shape[1:])
    if len(shape) != 3 or None in shape:
        raise ValueError(f"Invalid value for argument `model`: expected an image input (height, width, channels) "
                         f"of known sizes. Received: {shape}.")
    return tuple(int(d) for d in shape)


def _class_weights(head):
    """The head's `(d, C)` class weights: a `PartialFCHead`'s without its padding columns."""
    return head.real_kernel() if hasattr(head, "real_kernel") else head.kernel


class _ServingModule(tf.Module):
    """The serving functions; tracks the Keras layers' variables for the SavedModel."""

    def __init__(self, features_model, head, normalize, channel_mean, image_shape, input_dtype, class_matrix=True):
        super().__init__(name="sphere_tf_serving")
        self.features_model = features_model
        self.class_matrix = head is None or class_matrix
        # Without the class matrix the head is not tracked: none of its variables reaches the SavedModel.
        head = head if self.class_matrix else None
        self.head = head
        self._normalize = normalize
        self._channel_mean = channel_mean
        # The tf.Variables themselves (not only Keras's wrappers) must be tracked, or a
        # TF1-style loader (TF Serving, saved_model_cli) finds them uninitialised.
        layers_vars = list(features_model.variables) + (list(head.variables) if head is not None else [])
        self.tracked_variables = [getattr(v, "value", v) for v in layers_vars]
        spec = tf.TensorSpec((None,) + image_shape, input_dtype, name="images")
        if not self.class_matrix:
            self.embeddings = tf.function(self._embeddings_only, input_signature=[spec], autograph=False)
            self.serving_default = self.embeddings
            return
        self.serving_default = tf.function(self._serving_default, input_signature=[spec], autograph=False)
        if head is not None:
            self.embeddings = tf.function(self._embeddings, input_signature=[spec], autograph=False)

    def _features(self, images):
        x = self._normalize(tf.cast(images, tf.float32), self._channel_mean)
        return self.features_model(x, training=False)

    def _logits(self, images):
        out = self._features(images)
        if self.head is not None:
            out = self.head(out, training=False)
        return tf.cast(out, tf.float32)

    def _serving_default(self, images):
        logits = self._logits(images)
        return {
            "logits": tf.identity(logits, name="logits"),
            "probabilities": tf.nn.softmax(logits, axis=-1, name="probabilities"),
            "classes": tf.argmax(logits, axis=-1, output_type=tf.int64, name="classes"),
        }

    def _embeddings_only(self, images):
        features = tf.cast(self._features(images), tf.float32)
        return {"embeddings": tf.identity(tf.math.l2_normalize(features, axis=-1), name="embeddings")}

    def _embeddings(self, images):
        features = tf.cast(self._features(images), tf.float32)
        embeddings = tf.math.l2_normalize(features, axis=-1)
        weights = tf.math.l2_normalize(tf.cast(_class_weights(self.head), tf.float32), axis=0)
        return {
            "embeddings": tf.identity(embeddings, name="embeddings"),
            "cosine": tf.matmul(embeddings, weights, name="cosine"),
            "logits": tf.identity(tf.cast(self.head(features, training=False), tf.float32), name="logits"),
        }


def _frozen(concrete):
    """`concrete` with every variable read replaced by a constant, as a named-output `tf.function`.

    The moving averages, kernels and radii become constants, so the serving
    graph's optimiser (Grappler constant folding, run once when TF Serving or
    `tf.saved_model.load` instantiates it) precomputes everything that depends on
    the weights alone: normalised kernels, 1/(ρ·E{‖x‖}), folded batch norm.
    """
    frozen = convert_to_constants.convert_variables_to_constants_v2(concrete)
    keys = sorted(concrete.structured_outputs)  # tf.nest's flattening order of a dict
    spec = concrete.structured_input_signature[0][0]

    def serve(images):
        return {key: tf.identity(value, name=key) for key, value in zip(keys, frozen(images))}

    return tf.function(serve, input_signature=[spec], autograph=False)


class _FrozenModule(tf.Module):
    """Holds the frozen serving functions (no variables)."""

    def __init__(self, functions):
        super().__init__(name="sphere_tf_serving")
        self.functions = dict(functions)
        self.serving_signatures = {name: fn.get_concrete_function() for name, fn in self.functions.items()}


def _signature_summary(functions):
    out = {}
    for name, fn in functions.items():
        concrete = fn.get_concrete_function()
        spec = concrete.structured_input_signature[0][0]
        out[name] = {
            "inputs": {"images": (spec.dtype.name, [None] + [int(d) for d in spec.shape[1:]])},
            "outputs": sorted(concrete.structured_outputs),
        }
    return out


def _assigning_ops(concrete):
    graph_def = concrete.graph.as_graph_def()
    ops_ = [n.op for n in graph_def.node] + [n.op for f in graph_def.library.function for n in f.node_def]
    return sorted({op for op in ops_ if op in _ASSIGN_OPS})


# -- warmup requests and models.config ----------------------------------------------------------


def write_warmup_requests(path, model_name, signatures, image_shape, input_dtype, batch_sizes):
    """Writes TF Serving warmup records (`PredictionLog` with a `PredictRequest`) to `path`.

    One record per signature and batch size, pixels from `sample_pixels`.

    Args:
        path: str, the TFRecord file (`assets.extra/tf_serving_warmup_requests`).
        model_name: str, `model_spec.name` of the requests.
        signatures: iterable of signature names.
        image_shape: (height, width, channels).
        input_dtype: 'uint8' or 'float32'.
        batch_sizes: iterable of positive ints.

    Returns:
        int, the number of records written.
    """
    model_pb2, predict_pb2, prediction_log_pb2, _ = _serving_apis()
    count = 0
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for signature in signatures:
            for i, batch in enumerate(batch_sizes):
                request = predict_pb2.PredictRequest(
                    model_spec=model_pb2.ModelSpec(name=model_name, signature_name=signature)
                )
                request.inputs["images"].CopyFrom(
                    tf.make_tensor_proto(sample_pixels(batch, image_shape, input_dtype, seed=i))
                )
                log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
                writer.write(log.SerializeToString())
                count += 1
    return count


def read_warmup_requests(path):
    """The warmup records of `path` as a list of `(signature_name, images ndarray)`.

    Raises:
        ExportError: a record that is not a `PredictionLog` with a predict request on `images`.
    """
    _, _, prediction_log_pb2, _ = _serving_apis()
    out = []
    for i, record in enumerate(tf.data.TFRecordDataset(path).as_numpy_iterator()):
        log = prediction_log_pb2.PredictionLog()
        log.ParseFromString(record)
        if log.WhichOneof("log_type") != "predict_log" or "images" not in log.predict_log.request.inputs:
            raise ExportError(f"Warmup record {i} of {path!r} is not a PredictLog with an 'images' input.")
        request = log.predict_log.request
        out.append((request.model_spec.signature_name, tf.make_ndarray(request.inputs["images"])))
    return out


def write_models_config(export_base):
    """(Re)writes `<export_base>/models.config`: one `config` entry per model folder with a version.

    The text-format `ModelServerConfig` for `tensorflow_model_server
    --model_config_file=...` (written to a temporary file and renamed).

    Args:
        export_base: str, the folder holding the model folders.

    Returns:
        str, the file's path.
    """
    _, _, _, model_server_config_pb2 = _serving_apis()
    config = model_server_config_pb2.ModelServerConfig()
    for name in sorted(os.listdir(export_base)):
        if existing_versions(os.path.join(export_base, name)):
            entry = config.model_config_list.config.add()
            entry.name = name
            entry.base_path = os.path.join(export_base, name)
            entry.model_platform = "tensorflow"
    path = os.path.join(export_base, MODELS_CONFIG)
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    with open(tmp, "w") as f:
        f.write(text_format.MessageToString(config))
    os.replace(tmp, path)
    return path


def read_models_config(path):
    """The `{name: base_path}` entries of a `models.config` file (parsed with the serving protos)."""
    _, _, _, model_server_config_pb2 = _serving_apis()
    with open(path) as f:
        config = text_format.Parse(f.read(), model_server_config_pb2.ModelServerConfig())
    return {c.name: c.base_path for c in config.model_config_list.config}


# -- verification ---------------------------------------------------------------------------

# Runs in a fresh interpreter (`python -c`), where importing sphere_tf is made to fail:
# loading and serving must need TensorFlow only.
_RELOAD_SCRIPT = r"""
import importlib.abc, json, sys

class _NoSphereTf(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "sphere_tf" or name.startswith("sphere_tf."):
            raise ImportError("the SavedModel must load without sphere_tf")
        return None

sys.meta_path.insert(0, _NoSphereTf())
import numpy as np
import tensorflow as tf

export_dir, work = sys.argv[1], sys.argv[2]
loaded = tf.saved_model.load(export_dir)
images = np.load(work + "/images.npy")
out = {}
for name, fn in loaded.signatures.items():
    for key, value in fn(images=tf.constant(images)).items():
        out[name + "/" + key] = value.numpy()
warmup = 0
# What TF Serving does at load: run every warmup request through its signature.
from tensorflow_serving.apis import prediction_log_pb2
for record in tf.data.TFRecordDataset(export_dir + "/assets.extra/tf_serving_warmup_requests"):
    log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
    request = log.predict_log.request
    fn = loaded.signatures[request.model_spec.signature_name]
    inputs = {k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()}
    outputs = fn(**inputs)
    if any(not np.isfinite(v.numpy()).all() for v in outputs.values()):
        raise ValueError("warmup request %d gives non-finite outputs" % warmup)
    warmup += 1
np.savez(work + "/reloaded.npz", **out)
print(json.dumps({"sphere_tf_imported": any(m.split(".")[0] == "sphere_tf" for m in sys.modules),
                  "signatures": sorted(loaded.signatures), "warmup_records": warmup}))
"""


def _run(cmd, what, cwd):
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": ""}
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True), what


def _finish(proc_what):
    proc, what = proc_what
    out, err = proc.communicate()
    if proc.returncode:
        raise ExportError(f"{what} failed (exit {proc.returncode}):\n{err[-3000:]}")
    return out


def _verify(export_dir, module, expected, images, warmup_batches, atol):
    """Reload in a fresh process, saved_model_cli, warmup parse-back; raises `ExportError`."""
    with tempfile.TemporaryDirectory(prefix="sphere_tf_verify_") as work:
        np.save(os.path.join(work, "images.npy"), images)
        reload_proc = _run([sys.executable, "-c", _RELOAD_SCRIPT, export_dir, work],
                           "Reloading the SavedModel in a fresh process without sphere_tf", work)
        cli_out = os.path.join(work, "cli")
        cli_proc = _run(
            [sys.executable, "-m", "tensorflow.python.tools.saved_model_cli", "run", "--dir", export_dir,
             "--tag_set", "serve", "--signature_def", SERVING_SIGNATURE,
             "--inputs", f"images={os.path.join(work, 'images.npy')}", "--outdir", cli_out],
            f"saved_model_cli run --signature_def {SERVING_SIGNATURE}", work,
        )
        report = json.loads(_finish(reload_proc).strip().splitlines()[-1])
        _finish(cli_proc)
        if report["sphere_tf_imported"]:
            raise ExportError("Loading the SavedModel imported sphere_tf.")
        expected_signatures = sorted(expected)
        if report["signatures"] != expected_signatures:
            raise ExportError(f"The reloaded SavedModel has signatures {report['signatures']}; "
                              f"expected {expected_signatures}.")
        reloaded = dict(np.load(os.path.join(work, "reloaded.npz")))
        max_diff = 0.0
        for signature, outputs in expected.items():
            for key, value in outputs.items():
                served = reloaded[f"{signature}/{key}"]
                if key == "classes":
                    logits = reloaded[f"{signature}/logits"]
                    if not np.array_equal(served, np.argmax(logits, axis=-1)):
                        raise ExportError(f"{signature}/classes is not the argmax of the served logits.")
                    continue
                diff = base.compare(f"{signature}/{key} (fresh process)", served, value, atol)
                if key == ("logits" if "logits" in outputs else "embeddings"):
                    max_diff = max(max_diff, diff)
        for key in sorted(set(expected[SERVING_SIGNATURE]) & {"logits", "probabilities", "embeddings"}):
            path = os.path.join(cli_out, f"{key}.npy")
            if not os.path.exists(path):
                raise ExportError(f"saved_model_cli wrote no {key!r} output in {cli_out}.")
            base.compare(f"{SERVING_SIGNATURE}/{key} (saved_model_cli)", np.load(path),
                     expected[SERVING_SIGNATURE][key], atol)
        requests = read_warmup_requests(os.path.join(export_dir, WARMUP_FILE))
        wanted = [(name, b) for name in expected_signatures for b in warmup_batches]
        got = sorted((name, len(x)) for name, x in requests)
        if got != sorted(wanted) or report["warmup_records"] != len(wanted):
            raise ExportError(f"Warmup file holds {got}; expected {sorted(wanted)}.")
        spec = module.serving_default.input_signature[0]
        for name, x in requests:
            if x.dtype != spec.dtype.as_numpy_dtype or x.shape[1:] != tuple(spec.shape[1:]):
                raise ExportError(f"Warmup request for {name!r} has {x.dtype} {x.shape}; the signature takes "
                                  f"{spec.dtype.name} {tuple(spec.shape)}.")
    return max_diff


# -- the exporter ---------------------------------------------------------------------------


def export_model(
    model,
    export_base,
    model_name="model",
    version=None,
    normalization=None,
    channel_mean=None,
    input_dtype="uint8",
    verify_inputs=None,
    warmup_batch_sizes=DEFAULT_WARMUP_BATCH_SIZES,
    verify=True,
    atol=1e-4,
    freeze=True,
    formats=(),
    fold_batch_norm=True,
    class_matrix=True,
):
    """Exports `model` for TensorFlow Serving as `<export_base>/<model_name>/<version>/`.

    See the module docstring for the layout, signatures and checks.

    Args:
        model: a built functional or Sequential `keras.Model` returning logits,
            taking images (or images and labels, a list or a dict, with a `MarginHead`
            classifier): raw pixels when its first layer is a `PixelNormalization`,
            else normalised ones.
        export_base: str, the folder of the model folders (created if missing).
        model_name: str, the model's folder and TF Serving name.
        version: positive int, or None for the next free version.
        normalization: None, or the normalisation the model was trained with, a name
            in `sphere_tf.data.preprocessing.NORMALIZATIONS`. A model whose first layer
            is a `PixelNormalization` normalises the served pixels itself: None reads
            the layer, a name must be the layer's (nothing is normalised twice). For
            an older model without the layer the normalisation runs inside the graph
            on the 0..255 pixels before the model; None means `DEFAULT_NORMALIZATION`
            ('centered_128'). `input_normalization` says which applies;
            `ExportResult.normalization` records it.
        channel_mean: per-channel means for 'mean_subtraction' (a model's
            `PixelNormalization` holds its own; a mean given must equal it).
        input_dtype: 'uint8' or 'float32', the dtype of the `images` input.
        verify_inputs: optional array `(batch, height, width, channels)` of pixels
            in 0..255 for the verification (default: `sample_pixels`, batch 4).
        warmup_batch_sizes: batch sizes of the warmup requests (one per signature
            and size; empty for none).
        verify: bool, run the verification (reload without sphere_tf,
            saved_model_cli, parse-back) before the version becomes visible.
        atol: float, tolerance of the verification, relative to max(1, |logits|).
        freeze: bool, store the weights as constants of the serving graph
            (moving averages frozen; the weight-only maths is constant-folded when
            the server loads it) instead of variables.
        formats: optional formats to write beside the version folder, names in
            `sphere_tf.export.formats.FORMATS` ('onnx', 'tflite'; or a
            comma-separated string): `<model_name>/<version>.onnx` / `.tflite`,
            each converted from the SavedModel and verified against it on
            `verify_inputs` (`export_onnx`, `export_tflite`) before the version
            becomes visible; outside the version folder, so TF Serving ignores them.
        fold_batch_norm: bool, serve each operator → BatchNormalization pair as
            one operator whose BN scale rides on its normalised kernel
            (`sphere_tf.export.fold_batch_norm`: cosine angular activations only);
            the verification still compares with the unfolded model.
        class_matrix: bool, for a model with a `MarginHead` classifier: keep the
            head's class weights (`serving_default` gives logits, `embeddings` also
            `cosine` and `logits`). False leaves them out: both signatures return
            `embeddings` only (what verification and retrieval need), and no
            variable or constant of the head is saved. No effect on other models.

    Returns:
        `ExportResult`.

    Raises:
        ValueError: a Keras backend other than TensorFlow (use `export_model_file`), or a bad
            argument (naming it): unbuilt, subclassed or
            multi-input model, `export_base` that is a file, bad name, dtype,
            normalisation (or one disagreeing with the model's `PixelNormalization`)
            or verification inputs.
        FileExistsError: `version` exists already.
        ExportError: the verification failed (the temporary folder is removed);
            `formats.FormatError` for a format's conversion or verification.
    """
    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            f"export_model traces the model into a TensorFlow graph and needs the TensorFlow backend; this model "
            f"runs on Keras backend {keras.backend.backend()!r}. Save it (`model.save('model.keras')`) and call "
            "sphere_tf.export.export_model_file('model.keras', export_base, ...), which exports it under "
            "TensorFlow in a child process."
        )
    model_name = _check_model_name(model_name)
    export_base = _check_export_base(export_base)
    validation.one_of(input_dtype, "input_dtype", INPUT_DTYPES)
    name, channel_mean, in_model = input_normalization(model, normalization, channel_mean)
    recorded = {"name": name, "channel_mean": None if channel_mean is None else list(channel_mean),
                "in_model": in_model}
    # The serving graph normalises only for a model that does not: a PixelNormalization model takes raw pixels.
    normalize, channel_mean = _normalizer("none", None) if in_model else _normalizer(name, channel_mean)
    batch_sizes = tuple(validation.positive_int(b, "warmup_batch_sizes") for b in warmup_batch_sizes)
    atol = validation.positive_float(atol, "atol")
    validation.one_of(class_matrix, "class_matrix", (True, False))
    formats = formats_lib.check_formats(formats)
    model_dir = os.path.join(export_base, model_name)
    version = _resolve_version(model_dir, version)
    features_model, head = inference_model(model)
    image_shape = _image_shape(features_model)
    if verify_inputs is None:
        verify_inputs = sample_pixels(4, image_shape, input_dtype, seed=1234)
    verify_inputs = np.asarray(verify_inputs)
    if verify_inputs.ndim != 4 or verify_inputs.shape[1:] != image_shape or len(verify_inputs) == 0:
        raise validation.invalid_argument(
            "verify_inputs", f"a non-empty batch of images of shape (batch, {', '.join(map(str, image_shape))})",
            f"array of shape {verify_inputs.shape}",
        )
    if not np.isfinite(verify_inputs).all() or verify_inputs.min() < 0 or verify_inputs.max() > 255:
        raise validation.invalid_argument("verify_inputs", "pixels in 0..255", "values outside it")
    verify_inputs = verify_inputs.astype(input_dtype)
    if channel_mean is not None and len(channel_mean) not in (1, image_shape[-1]):
        raise validation.invalid_argument("channel_mean", f"1 or {image_shape[-1]} values", channel_mean)

    served_model = features_model
    if fold_batch_norm:
        served_model = fold.fold_batch_norm(features_model)
    module = _ServingModule(served_model, head, normalize, channel_mean, image_shape, tf.as_dtype(input_dtype),
                            class_matrix=class_matrix)
    functions = {SERVING_SIGNATURE: module.serving_default}
    if head is not None:
        functions[EMBEDDINGS_SIGNATURE] = module.embeddings
    for name, fn in functions.items():
        assigning = _assigning_ops(fn.get_concrete_function())
        if assigning:
            raise ExportError(f"Signature {name!r} assigns variables ({assigning}): inference must not update "
                              "moving averages.")
    # The reference outputs: the original Keras model (unfolded, with its labels input for a head).
    x = normalize(tf.cast(verify_inputs, tf.float32), channel_mean)
    labels_input = _labels_input(model)
    if labels_input is not None:  # the model's own input structure (list or dict); labels unused at inference
        labels = tf.zeros((len(verify_inputs),), tf.int32)
        reference_logits = model(keras.tree.map_structure(lambda t: labels if t is labels_input else x, model.input),
                                 training=False)
    else:
        reference_logits = model(x, training=False)
    reference_logits = np.asarray(tf.cast(reference_logits, tf.float32))
    expected = {SERVING_SIGNATURE: {"logits": reference_logits, "classes": None,
                                    "probabilities": np.asarray(tf.nn.softmax(reference_logits))}}
    if head is not None and not module.class_matrix:
        features = np.asarray(tf.cast(features_model(x, training=False), tf.float32), np.float64)
        unit = {"embeddings": features / np.linalg.norm(features, axis=-1, keepdims=True)}
        expected = {SERVING_SIGNATURE: unit, EMBEDDINGS_SIGNATURE: unit}
    elif head is not None:
        features = np.asarray(tf.cast(features_model(x, training=False), tf.float32), np.float64)
        unit = features / np.linalg.norm(features, axis=-1, keepdims=True)
        weights = np.asarray(_class_weights(head), np.float64)
        expected[EMBEDDINGS_SIGNATURE] = {
            "embeddings": unit, "cosine": unit @ (weights / np.linalg.norm(weights, axis=0, keepdims=True)),
            "logits": reference_logits,
        }

    os.makedirs(model_dir, exist_ok=True)
    tmp_dir = os.path.join(model_dir, f".tmp-{version}-{uuid.uuid4().hex[:8]}")
    format_paths = {}
    try:
        if freeze:
            frozen = _FrozenModule({n: _frozen(f.get_concrete_function()) for n, f in functions.items()})
            save_frozen(frozen, tmp_dir, frozen.serving_signatures)
        else:
            tf.saved_model.save(module, tmp_dir,
                                signatures={n: f.get_concrete_function() for n, f in functions.items()})
        write_warmup_requests(os.path.join(tmp_dir, WARMUP_FILE), model_name, list(functions), image_shape,
                              input_dtype, batch_sizes)
        max_diff = None
        if verify:
            max_diff = _verify(tmp_dir, module, expected, verify_inputs, batch_sizes, atol)
        target = os.path.join(model_dir, str(version))
        if formats:
            # Converted from the verified SavedModel, written beside the version folder.
            format_paths = formats_lib.export_formats(tmp_dir, formats, verify_inputs=verify_inputs, atol=atol,
                                                      destination=target)
        if os.path.exists(target):
            raise FileExistsError(f"{target!r} appeared while exporting; an exported version is never overwritten.")
        os.rename(tmp_dir, target)
    except BaseException:
        shutil.rmtree(tmp_dir, ignore_errors=True)
        for path in format_paths.values():
            if os.path.exists(path):
                os.remove(path)
        if not existing_versions(model_dir) and not os.listdir(model_dir):
            os.rmdir(model_dir)
        raise
    config_path = write_models_config(export_base)
    if verify and read_models_config(config_path).get(model_name) != model_dir:
        raise ExportError(f"{config_path} does not list {model_name!r} at {model_dir!r}.")
    return ExportResult(target, version, model_name, _signature_summary(functions), config_path, max_diff,
                        format_paths, recorded)
