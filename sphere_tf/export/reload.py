"""TF Serving export of a model trained on any Keras backend: its `.keras` file reloaded under TensorFlow.

A SavedModel is a TensorFlow graph, so `export_model` needs the model's
variables on the TensorFlow backend. A `.keras` file is backend-neutral:
`export_model_file` exports it in this process when Keras runs on TensorFlow,
and otherwise in a child process started with ``KERAS_BACKEND=tensorflow``
(``python -m sphere_tf.export.reload``), which loads the file, runs
`export_model` with the same arguments and hands back the `ExportResult`.
The child needs TensorFlow installed beside the training backend.

Run as a module (what the parent starts): ``python -m sphere_tf.export.reload
REQUEST.json RESULT.json``.
"""

import ctypes
import json
import os
import signal
import subprocess
import sys
import tempfile

import keras
import numpy as np

from sphere_tf import saving
from sphere_tf.export import serving

# The arguments of `export_model` that travel to the child as JSON (verify_inputs goes as a .npy file).
_JSON_ARGUMENTS = ("model_name", "version", "normalization", "channel_mean", "input_dtype", "warmup_batch_sizes",
                   "verify", "atol", "freeze", "formats", "fold_batch_norm", "class_matrix")
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _plain(value):
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in value.items()}
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def export_model_file(model_path, export_base, verify_inputs=None, timeout=1800, **kwargs):
    """Exports the `.keras` file `model_path` for TensorFlow Serving, whatever the current Keras backend.

    Args:
        model_path: str, a `.keras` file (saved on any backend).
        export_base: str, the folder of the model folders (see `export_model`).
        verify_inputs: optional pixels for the verification (see `export_model`).
        timeout: float, seconds the TensorFlow child process may take.
        **kwargs: the other arguments of `export_model` (`model_name`, `version`,
            `normalization`, `channel_mean`, `input_dtype`, `warmup_batch_sizes`,
            `verify`, `atol`, `freeze`, `formats`, `fold_batch_norm`, `class_matrix`).

    Returns:
        `ExportResult`.

    Raises:
        ValueError: `model_path` is not a file, or an unknown keyword argument.
        ExportError: the export failed in the TensorFlow process (its last output lines in the message).
    """
    if not isinstance(model_path, (str, os.PathLike)) or not os.path.isfile(model_path):
        raise ValueError(f"Invalid value for argument `model_path`: expected a .keras file; received {model_path!r}.")
    unknown = sorted(set(kwargs) - set(_JSON_ARGUMENTS))
    if unknown:
        raise ValueError(f"Unknown argument(s) {unknown} of export_model_file; expected {list(_JSON_ARGUMENTS)}.")
    if keras.backend.backend() == "tensorflow":
        model = saving.load_model(model_path, compile=False)
        return serving.export_model(model, export_base, verify_inputs=verify_inputs, **kwargs)
    with tempfile.TemporaryDirectory(prefix="sphere_tf_export_") as folder:
        request = {"model_path": os.path.abspath(model_path), "export_base": os.path.abspath(export_base),
                   "kwargs": {key: _plain(value) for key, value in kwargs.items()}, "parent_pid": os.getpid()}
        if verify_inputs is not None:
            request["verify_inputs"] = os.path.join(folder, "verify_inputs.npy")
            np.save(request["verify_inputs"], np.asarray(verify_inputs))
        request_path, result_path = os.path.join(folder, "request.json"), os.path.join(folder, "result.json")
        with open(request_path, "w") as f:
            json.dump(request, f)
        env = dict(os.environ, KERAS_BACKEND="tensorflow")
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PACKAGE_ROOT, env.get("PYTHONPATH")) if p)
        process = subprocess.run([sys.executable, "-m", "sphere_tf.export.reload", request_path, result_path],
                                 env=env, capture_output=True, text=True, timeout=timeout)
        if process.returncode != 0 or not os.path.isfile(result_path):
            output = (process.stdout + process.stderr).strip()[-3000:]
            raise serving.ExportError(
                f"Exporting {model_path} under TensorFlow (the model was trained on {keras.backend.backend()!r}) "
                f"failed with status {process.returncode}:\n{output}")
        with open(result_path) as f:
            return serving.ExportResult(**json.load(f))


def _die_with_parent(parent_pid):
    """Ends this child when the process that started it dies (Linux: `prctl(PR_SET_PDEATHSIG, SIGKILL)`).

    A run killed with `kill -9` while its export runs here would otherwise leave this export going on alone,
    renaming its version folder into place beside the export of the resumed run (or into it while the resumed run
    clears what the killed one left). Elsewhere (no prctl) nothing changes.
    """
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return
    prctl(1, int(signal.SIGKILL))  # PR_SET_PDEATHSIG
    if parent_pid is not None and os.getppid() != parent_pid:  # the parent died before the prctl
        os._exit(1)


def _main(request_path, result_path):
    with open(request_path) as f:
        request = json.load(f)
    _die_with_parent(request.get("parent_pid"))  # before anything is written
    # Running as `python -m sphere_tf.export.reload` imported `sphere_tf` first: every sphere_tf class is registered.
    model = saving.load_model(request["model_path"], compile=False)
    verify_inputs = np.load(request["verify_inputs"]) if request.get("verify_inputs") else None
    result = serving.export_model(model, request["export_base"], verify_inputs=verify_inputs, **request["kwargs"])
    with open(result_path, "w") as f:
        json.dump(_plain(result._asdict()), f)


if __name__ == "__main__":
    _main(*sys.argv[1:3])
