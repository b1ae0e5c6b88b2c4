"""Optional export formats of a served SavedModel: ONNX (tf2onnx) and TFLite (builtin ops only).

Both start from a SavedModel written by `export_model` (or any SavedModel whose
signature takes one `images` tensor) and verify the converted model against the
SavedModel itself on sample pixels before returning:

* `export_onnx(saved_model_dir, path)`: `tf2onnx` converts the signature's graph
  (input `images`, outputs named as the signature's: `logits`, `probabilities`,
  `classes`); `onnxruntime` runs it.
* `export_tflite(saved_model_dir, path)`: `tf.lite.TFLiteConverter` with
  `TFLITE_BUILTINS` only (no Flex/TF Select, no custom ops), so the file runs on
  the plain TFLite runtime; `tf.lite.Interpreter` runs it.

TFLite has no builtin for a few TensorFlow ops that the operators' inference
graph uses. The converter here rewrites them in the frozen graph (the
SavedModel and the Keras layers are unchanged) through equivalent builtin ops:

```
Asin(x)                    -> Atan2(x, Sqrt((1 − x)·(1 + x)))
Acos(x)                    -> Atan2(Sqrt((1 − x)·(1 + x)), x)
ClipByValue(t, lo, hi)     -> Minimum(Maximum(t, lo), hi)
EuclideanNorm(x, axes, k)  -> Sqrt(Sum(Mul(x, x), axes, keep_dims=k))
Square(x)                  -> Mul(x, x)
```

The last one is not about a missing builtin: the converter would otherwise fuse
x / √(Σ Square(x) + ε) (`MarginHead`'s normalisation, ε = 1e-4) into
`L2_NORMALIZATION`, whose own ε (1e-6, a lower bound on the norm) changes the value.

The arcsine/arccosine forms are exact identities on [−1, 1] (θ = atan2(sin θ,
cos θ)); (1 − x)(1 + x) instead of 1 − x² keeps the relative precision of
1 − x² near |x| = 1, where the angular activations clip (|x| ≤ 1 − 1e-6).

Raises `FormatError` (a `sphere_tf.export.ExportError`) when a conversion is
impossible (naming the ops that have no builtin) or when the converted model's
outputs differ from the SavedModel's; nothing is left at `path` on failure.
"""

import contextlib
import logging
import os
import re
import tempfile
import uuid
import warnings

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import convert_to_constants  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.util import deprecation  # pylint: disable=g-direct-tensorflow-import (silence())

from sphere_tf import validation
from sphere_tf.export import base

FORMATS = ("onnx", "tflite")
FORMAT_SUFFIXES = {"onnx": ".onnx", "tflite": ".tflite"}
DEFAULT_ONNX_OPSET = 17
_TFLITE_REWRITES = ("Asin", "Acos", "ClipByValue", "EuclideanNorm", "Square")
# tf2onnx 1.17 has no handler for EuclideanNorm (it leaves the TF op in the ONNX graph).
_ONNX_REWRITES = ("EuclideanNorm",)


class FormatError(base.ExportError):
    """A conversion to ONNX/TFLite is impossible or its outputs differ from the SavedModel's."""


# -- arguments and references -----------------------------------------------------------------


@contextlib.contextmanager
def _quiet_converters():
    """Silences the converters' chatter about conversions that succeed: TensorFlow's deprecation notices of the
    TF1 APIs tf2onnx calls, tf2onnx's warnings with tracebacks when one of its optional graph optimizers
    (`optimize_transpose`) gives up and is skipped, and `tf.lite.Interpreter`'s deprecation warning. tf2onnx's
    errors still print, conversion failures still raise, and every converted model is verified against the
    SavedModel, so a bad conversion is not hidden."""
    tf2onnx_logger = logging.getLogger("tf2onnx")
    level = tf2onnx_logger.level
    tf2onnx_logger.setLevel(logging.ERROR)
    try:
        with deprecation.silence(), warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=r"\s*Warning: tf\.lite\.Interpreter is deprecated")
            yield
    finally:
        tf2onnx_logger.setLevel(level)


def _check_saved_model_dir(saved_model_dir):
    if not isinstance(saved_model_dir, (str, os.PathLike)) or not str(saved_model_dir):
        raise validation.invalid_argument("saved_model_dir", "a SavedModel folder path", saved_model_dir)
    saved_model_dir = os.path.abspath(os.fspath(saved_model_dir))
    if not os.path.isfile(os.path.join(saved_model_dir, "saved_model.pb")):
        raise FileNotFoundError(
            f"Invalid value for argument `saved_model_dir`: {saved_model_dir!r} holds no saved_model.pb; expected "
            "a SavedModel folder such as `<export_base>/<model_name>/<version>` of `export_model`."
        )
    return saved_model_dir


def _check_output_path(path, suffix, overwrite):
    if not isinstance(path, (str, os.PathLike)) or not str(path):
        raise validation.invalid_argument("path", f"a file path ending in {suffix!r}", path)
    path = os.path.abspath(os.fspath(path))
    if not path.endswith(suffix):
        raise validation.invalid_argument("path", f"a file path ending in {suffix!r}", path)
    if os.path.isdir(path):
        raise ValueError(f"Invalid value for argument `path`: {path!r} is a folder; expected a file path.")
    if os.path.exists(path) and not overwrite:
        raise FileExistsError(f"Invalid value for argument `path`: {path!r} exists; pass overwrite=True to replace it.")
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"Invalid value for argument `path`: its folder {parent!r} does not exist.")
    return path


def _signature(loaded, signature, saved_model_dir):
    if signature not in loaded.signatures:
        raise validation.invalid_argument(
            "signature", f"one of the signatures of {saved_model_dir!r}: {sorted(loaded.signatures)}", signature
        )
    fn = loaded.signatures[signature]
    specs = fn.structured_input_signature[1]
    if sorted(specs) != ["images"]:
        raise ValueError(f"Invalid value for argument `signature`: {signature!r} takes {sorted(specs)}; expected "
                         "one input named 'images' (the signatures of `export_model`).")
    return fn, specs["images"]


def _sample_inputs(verify_inputs, spec):
    image_shape = tuple(int(d) for d in spec.shape[1:])
    if verify_inputs is None:
        return base.sample_pixels(4, image_shape, spec.dtype.name, seed=4321)
    verify_inputs = np.asarray(verify_inputs)
    if verify_inputs.ndim != len(spec.shape) or verify_inputs.shape[1:] != image_shape or not len(verify_inputs):
        raise validation.invalid_argument(
            "verify_inputs", f"a non-empty batch of shape (batch, {', '.join(map(str, image_shape))})",
            f"array of shape {verify_inputs.shape}",
        )
    if not np.isfinite(verify_inputs).all() or verify_inputs.min() < 0 or verify_inputs.max() > 255:
        raise validation.invalid_argument("verify_inputs", "pixels in 0..255", "values outside it")
    return verify_inputs.astype(spec.dtype.as_numpy_dtype)


def _compare_outputs(what, got, expected, atol):
    """Checks every expected output (classes: the argmax of the format's own logits); the max logit diff."""
    missing = sorted(set(expected) - set(got))
    if missing:
        raise FormatError(f"{what} has no outputs {missing}; it has {sorted(got)}.")
    max_diff = 0.0
    for key, value in expected.items():
        if key == "classes" and "logits" in got:
            if not np.array_equal(np.asarray(got[key]), np.argmax(got["logits"], axis=-1)):
                raise FormatError(f"{what}: 'classes' is not the argmax of its own 'logits'.")
            continue
        diff = base.compare(f"{what}: output {key!r}", got[key], value, atol,
                            reference="the SavedModel's", error=FormatError)
        max_diff = max(max_diff, diff)
    return max_diff


def _write_atomically(path, write):
    """`write(tmp_path)`, then rename to `path`; removes the temporary file on failure."""
    tmp = f"{path}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


# -- TFLite -------------------------------------------------------------------------------------


def _const_node(graph_def, name, dtype_enum, value):
    node = graph_def.node.add(name=name, op="Const")
    node.attr["dtype"].type = dtype_enum
    node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value, dtype=tf.as_dtype(dtype_enum)))
    return name


def _unary_node(graph_def, name, op, x, dtype_enum):
    node = graph_def.node.add(name=name, op=op, input=[x])
    node.attr["T"].type = dtype_enum
    return name


def _binary_node(graph_def, name, op, x, y, dtype_enum):
    node = graph_def.node.add(name=name, op=op, input=[x, y])
    node.attr["T"].type = dtype_enum
    return name


def _sqrt_one_minus_square(graph_def, base, x, dtype_enum):
    """√((1 − x)(1 + x)) as new nodes under `base/`; the name of its output."""
    one = _const_node(graph_def, f"{base}/tflite_one", dtype_enum, 1.0)
    minus = _binary_node(graph_def, f"{base}/tflite_one_minus", "Sub", one, x, dtype_enum)
    plus = _binary_node(graph_def, f"{base}/tflite_one_plus", "AddV2", one, x, dtype_enum)
    product = _binary_node(graph_def, f"{base}/tflite_one_minus_square", "Mul", minus, plus, dtype_enum)
    return _unary_node(graph_def, f"{base}/tflite_sqrt", "Sqrt", product, dtype_enum)


def _rewrite_ops(graph_def, rewrite=_TFLITE_REWRITES):
    """Rewrites the ops of `rewrite` (names in `_TFLITE_REWRITES`) in `graph_def` (in place); `{op: count}`.

    Each rewritten node keeps its name (its consumers are unchanged) and becomes
    the last op of its replacement; the helper nodes are added under its name.
    """
    counts = {}
    for node in list(graph_def.node):
        if node.op == "Square" and "Square" in rewrite:
            # x·x: TFLite's converter fuses x / √(Σ Square(x) + ε) into L2_NORMALIZATION, whose own
            # ε (1e-6, as a maximum) replaces ε (MarginHead's 1e-4 inside the root): a changed value.
            node.op = "Mul"
            node.input[:] = [node.input[0], node.input[0]] + list(node.input[1:])
            counts["Square"] = counts.get("Square", 0) + 1
            continue
        if node.op not in rewrite:
            continue
        counts[node.op] = counts.get(node.op, 0) + 1
        data_inputs = [i for i in node.input if not i.startswith("^")]
        controls = [i for i in node.input if i.startswith("^")]
        dtype_enum = node.attr["T"].type
        name, op = node.name, node.op
        if op in ("Asin", "Acos"):
            x = data_inputs[0]
            root = _sqrt_one_minus_square(graph_def, name, x, dtype_enum)
            inputs = [x, root] if op == "Asin" else [root, x]
            new_op, attrs = "Atan2", {"T": node.attr["T"]}
        elif op == "ClipByValue":
            t, low, high = data_inputs
            lower = _binary_node(graph_def, f"{name}/tflite_maximum", "Maximum", t, low, dtype_enum)
            inputs, new_op, attrs = [lower, high], "Minimum", {"T": node.attr["T"]}
        else:  # EuclideanNorm
            x, axes = data_inputs
            square = _binary_node(graph_def, f"{name}/tflite_square", "Mul", x, x, dtype_enum)
            total = graph_def.node.add(name=f"{name}/tflite_sum", op="Sum", input=[square, axes])
            for key in ("T", "Tidx", "keep_dims"):
                total.attr[key].CopyFrom(node.attr[key])
            inputs, new_op, attrs = [total.name], "Sqrt", {"T": node.attr["T"]}
        device = node.device
        node.Clear()
        node.name, node.op, node.device = name, new_op, device
        node.input.extend(inputs + controls)
        for key, value in attrs.items():
            node.attr[key].CopyFrom(value)
    return counts


def _library_ops(graph_def):
    return {n.op for f in graph_def.library.function for n in f.node_def}


def _tflite_ready_saved_model(fn, spec, work, signature=base.SERVING_SIGNATURE):
    """Freezes the signature `fn`, rewrites it for TFLite and saves it under `work`; the folder."""
    frozen = convert_to_constants.convert_variables_to_constants_v2(fn)
    graph_def = frozen.graph.as_graph_def()
    left = sorted(_library_ops(graph_def) & set(_TFLITE_REWRITES))
    if left:
        raise FormatError(f"The frozen signature keeps ops {left} inside graph functions that the TFLite rewrite "
                          "cannot reach.")
    _rewrite_ops(graph_def)
    keys = sorted(fn.structured_outputs)  # the flattening order of the outputs' dict
    input_name = frozen.inputs[0].name
    output_names = [t.name for t in frozen.outputs]

    def _import():
        tf.compat.v1.import_graph_def(graph_def, name="")

    wrapped = tf.compat.v1.wrap_function(_import, [])
    pruned = wrapped.prune(
        feeds=[wrapped.graph.get_tensor_by_name(input_name)],
        fetches=[wrapped.graph.get_tensor_by_name(n) for n in output_names],
    )

    def serve(images):
        return {key: tf.identity(value, name=key) for key, value in zip(keys, pruned(images))}

    serve_fn = tf.function(serve, input_signature=[tf.TensorSpec(spec.shape, spec.dtype, name="images")],
                           autograph=False)
    module = tf.Module()
    module.serve = serve_fn
    folder = os.path.join(work, "rewritten")
    # The frozen graph keeps the layers' custom-gradient markers; inference needs no gradient.
    base.save_frozen(module, folder, {signature: serve_fn.get_concrete_function()})
    return folder


_NOT_BUILTIN = re.compile(r"'tf\.([A-Za-z0-9_]+)' op is neither a custom op nor a flex op")


@_quiet_converters()
def tflite_ops(model_path):
    """The sorted op names (e.g. 'CONV_2D', 'ATAN2') of a `.tflite` file, from `tf.lite.Interpreter`.

    Args:
        model_path: str, a `.tflite` file.

    Returns:
        list of str; custom ops appear under their custom name.
    """
    interpreter = tf.lite.Interpreter(model_path=os.fspath(model_path))
    return sorted({op["op_name"] for op in interpreter._get_ops_details()})  # pylint: disable=protected-access


@_quiet_converters()
def _run_tflite(model_path, images, signature=base.SERVING_SIGNATURE):
    try:
        interpreter = tf.lite.Interpreter(model_path=model_path)
        runner = interpreter.get_signature_runner(signature)
        return {k: np.asarray(v) for k, v in runner(images=images).items()}
    except (RuntimeError, ValueError) as error:
        raise FormatError(f"The converted TFLite model does not run on {images.dtype} images of shape "
                          f"{images.shape}: {error}") from error


@_quiet_converters()
def export_tflite(saved_model_dir, path, signature=base.SERVING_SIGNATURE, verify_inputs=None, atol=1e-4,
                  overwrite=False):
    """Converts a SavedModel signature to a TFLite file of builtin ops and verifies it.

    The signature's graph is frozen, the ops TFLite lacks are rewritten (module
    docstring), and `tf.lite.TFLiteConverter` converts it with
    `TFLITE_BUILTINS` only. The file's signature (named `signature`) takes
    `images` and returns the SavedModel signature's outputs; `tf.lite.Interpreter`
    runs it on `verify_inputs` and every output must match the SavedModel's
    within `atol` (relative to max(1, |output|); `classes` must be the argmax of
    the file's own logits).

    Args:
        saved_model_dir: str, a SavedModel folder (`export_model`'s version folder).
        path: str, the `.tflite` file to write (its folder must exist).
        signature: str, the SavedModel signature to convert (one `images` input).
        verify_inputs: optional pixels `(batch, height, width, channels)` in
            0..255 (default: 4 images of `sample_pixels`).
        atol: float, the verification's tolerance.
        overwrite: bool, replace an existing `path`.

    Returns:
        str, `path`.

    Raises:
        FileNotFoundError: no SavedModel at `saved_model_dir`, or `path`'s folder missing.
        FileExistsError: `path` exists and `overwrite` is False.
        ValueError: a bad argument (naming it).
        FormatError: an op with no TFLite builtin (named), or outputs that differ.
    """
    saved_model_dir = _check_saved_model_dir(saved_model_dir)
    path = _check_output_path(path, FORMAT_SUFFIXES["tflite"], overwrite)
    atol = validation.positive_float(atol, "atol")
    loaded = tf.saved_model.load(saved_model_dir)
    fn, spec = _signature(loaded, signature, saved_model_dir)
    images = _sample_inputs(verify_inputs, spec)
    expected = {k: v.numpy() for k, v in fn(images=tf.constant(images)).items()}
    with tempfile.TemporaryDirectory(prefix="sphere_tf_tflite_") as work:
        folder = _tflite_ready_saved_model(fn, spec, work, signature)
        converter = tf.lite.TFLiteConverter.from_saved_model(folder, signature_keys=[signature])
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
        try:
            flatbuffer = converter.convert()
        except Exception as error:  # pylint: disable=broad-except  (ConverterError and its kin)
            missing = sorted(set(_NOT_BUILTIN.findall(str(error))))
            if missing:
                raise FormatError(
                    f"Cannot convert signature {signature!r} of {saved_model_dir!r} to TFLite builtin ops: TFLite has "
                    f"no builtin for {missing} (rewritten here: {list(_TFLITE_REWRITES)})."
                ) from error
            raise FormatError(f"TFLite conversion of {saved_model_dir!r} failed: {str(error)[-2000:]}") from error

    def write(tmp):
        with open(tmp, "wb") as f:
            f.write(flatbuffer)
        got = _run_tflite(tmp, images, signature)
        _compare_outputs(f"The TFLite model {path!r}", got, expected, atol)

    _write_atomically(path, write)
    return path


# -- ONNX ---------------------------------------------------------------------------------------


def _onnx_packages():
    try:
        import onnxruntime  # noqa: PLC0415 (optional dependency)
        from tf2onnx import convert as tf2onnx_convert  # noqa: PLC0415 (optional dependency)
        from tf2onnx import tf_loader  # noqa: PLC0415 (optional dependency)
    except ImportError as error:
        raise ImportError(
            "export_onnx needs `tf2onnx` and `onnxruntime`: `pip install tf2onnx onnxruntime` (or "
            "`pip install -e .[export]`)."
        ) from error
    return tf2onnx_convert, tf_loader, onnxruntime


def _unknown_onnx_ops(model_path):
    """The op types of an ONNX file that no ONNX schema defines (TF ops tf2onnx left unconverted)."""
    import onnx  # noqa: PLC0415 (optional dependency)

    model = onnx.load(model_path)
    return sorted({n.op_type for n in model.graph.node if not onnx.defs.has(n.op_type, n.domain or "")})


def _run_onnx(model_path, images):
    _, _, onnxruntime = _onnx_packages()
    try:
        session = onnxruntime.InferenceSession(model_path, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(names, {"images": images})))
    except Exception as error:  # pylint: disable=broad-except  (onnxruntime's own exception types)
        raise FormatError(f"onnxruntime cannot run the converted ONNX model on {images.dtype} images of shape "
                          f"{images.shape}: {type(error).__name__}: {error}") from error


@_quiet_converters()
def export_onnx(saved_model_dir, path, signature=base.SERVING_SIGNATURE, opset=DEFAULT_ONNX_OPSET,
                verify_inputs=None, atol=1e-4, overwrite=False):
    """Converts a SavedModel signature to ONNX with `tf2onnx` and verifies it with `onnxruntime`.

    The ONNX graph takes `images` (the signature's dtype, any batch size) and
    returns the signature's outputs under their names; `onnxruntime` runs it on
    `verify_inputs` and every output must match the SavedModel's within `atol`
    (relative to max(1, |output|); `classes` must be the argmax of its own logits).

    Args:
        saved_model_dir: str, a SavedModel folder (`export_model`'s version folder).
        path: str, the `.onnx` file to write (its folder must exist).
        signature: str, the SavedModel signature to convert (one `images` input).
        opset: int, the ONNX opset (>= 13).
        verify_inputs: optional pixels `(batch, height, width, channels)` in 0..255.
        atol: float, the verification's tolerance.
        overwrite: bool, replace an existing `path`.

    Returns:
        str, `path`.

    Raises:
        ImportError: tf2onnx or onnxruntime is not installed.
        FileNotFoundError: no SavedModel at `saved_model_dir`, or `path`'s folder missing.
        FileExistsError: `path` exists and `overwrite` is False.
        ValueError: a bad argument (naming it).
        FormatError: tf2onnx cannot convert an op, or outputs that differ.
    """
    tf2onnx_convert, tf_loader, _ = _onnx_packages()
    saved_model_dir = _check_saved_model_dir(saved_model_dir)
    path = _check_output_path(path, FORMAT_SUFFIXES["onnx"], overwrite)
    opset = validation.positive_int(opset, "opset")
    if opset < 13:
        raise validation.invalid_argument("opset", "an ONNX opset >= 13", opset)
    atol = validation.positive_float(atol, "atol")
    loaded = tf.saved_model.load(saved_model_dir)
    fn, spec = _signature(loaded, signature, saved_model_dir)
    images = _sample_inputs(verify_inputs, spec)
    expected = {k: v.numpy() for k, v in fn(images=tf.constant(images)).items()}
    graph_def, inputs, outputs, renames = tf_loader.from_saved_model(
        saved_model_dir, None, None, tag="serve", signatures=[signature], return_tensors_to_rename=True
    )

    _rewrite_ops(graph_def, _ONNX_REWRITES)

    def write(tmp):
        try:
            tf2onnx_convert.from_graph_def(graph_def, input_names=inputs, output_names=outputs, opset=opset,
                                           tensors_to_rename=renames, output_path=tmp)
        except Exception as error:  # pylint: disable=broad-except  (tf2onnx raises plain exceptions)
            raise FormatError(f"tf2onnx could not convert signature {signature!r} of {saved_model_dir!r} "
                              f"(opset {opset}): {type(error).__name__}: {error}") from error
        unknown = _unknown_onnx_ops(tmp)
        if unknown:
            raise FormatError(f"tf2onnx could not convert signature {signature!r} of {saved_model_dir!r} to ONNX "
                              f"opset {opset}: no ONNX op for the TensorFlow ops {unknown} (rewritten here: "
                              f"{list(_ONNX_REWRITES)}).")
        got = _run_onnx(tmp, images)
        _compare_outputs(f"The ONNX model {path!r}", got, expected, atol)

    _write_atomically(path, write)
    return path


_EXPORTERS = {"onnx": export_onnx, "tflite": export_tflite}


def check_formats(formats):
    """`formats` as a tuple of names in `FORMATS` (no duplicates); ValueError naming `formats` otherwise."""
    if isinstance(formats, str):
        formats = tuple(f.strip() for f in formats.split(",") if f.strip())
    formats = tuple(formats or ())
    for name in formats:
        validation.one_of(name, "formats", FORMATS)
    if len(set(formats)) != len(formats):
        raise validation.invalid_argument("formats", f"distinct names of {FORMATS}", formats)
    return formats


def format_path(version_dir, name):
    """Where `export_model(..., formats=...)` writes format `name`: beside the version folder.

    `<export_base>/<model_name>/<version>.<suffix>` (e.g. `.../fashion/3.tflite`):
    TF Serving only watches integer-named folders, so the files do not affect it.
    """
    return os.path.normpath(version_dir) + FORMAT_SUFFIXES[name]


def export_formats(version_dir, formats, verify_inputs=None, atol=1e-4, destination=None):
    """Writes each of `formats` for the SavedModel `version_dir` at `format_path`; `{name: path}`.

    Args:
        version_dir: str, the SavedModel folder.
        formats: names in `FORMATS` (or a comma-separated string).
        verify_inputs: optional pixels for the verifications.
        atol: float, the verifications' tolerance.
        destination: optional version folder the files are named after (default
            `version_dir`; `export_model` converts its temporary folder before the rename).

    Returns:
        dict, format name -> written path.

    Raises:
        ImportError, FileNotFoundError, FileExistsError, ValueError, FormatError: as `export_onnx` /
            `export_tflite`; files written before a failure are removed.
    """
    written = {}
    try:
        for name in check_formats(formats):
            written[name] = _EXPORTERS[name](version_dir, format_path(destination or version_dir, name),
                                             verify_inputs=verify_inputs, atol=atol)
    except BaseException:
        for path in written.values():
            if os.path.exists(path):
                os.remove(path)
        raise
    return written

