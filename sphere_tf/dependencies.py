"""What the package needs installed, said in one line where it is missing.

Imports nothing heavy (not even Keras): `import sphere_tf` runs `check_keras_backend` before Keras loads, so an
environment whose Keras backend is not installed gets a hint instead of a `ModuleNotFoundError` from inside Keras.

`tensorflow(module)` is how a module that needs TensorFlow whatever the Keras backend (tf.data pipelines,
tf.train checkpoints, tf.distribute, the cleverhans attacks) imports it: where TensorFlow is not installed it
raises one `ImportError` naming the module, what it uses TensorFlow for, what to install and the alternative that
works on every backend (`TENSORFLOW_USES`).
"""

import importlib
import importlib.util
import json
import os
import sys

# Keras backend name -> (the module it imports, the distribution to install).
BACKEND_PACKAGES = {
    "tensorflow": ("tensorflow", "tensorflow-cpu"), "jax": ("jax", "jax[cpu]"), "torch": ("torch", "torch"),
}

INSTALL_TENSORFLOW = "pip install tensorflow-cpu (or pip install -e '.[tensorflow]')"

# Module (or package) -> (what it uses TensorFlow for, the backend-neutral alternative). The longest prefix of a
# module's name picks its entry.
TENSORFLOW_USES = {
    "sphere_tf.data": (
        "builds tf.data input pipelines",
        "on every backend, sphere_tf.data.get_datasets(..., pipeline='grain') (the default off TensorFlow) reads "
        "the same data sets with Grain and NumPy augmentations",
    ),
    "sphere_tf.training.checkpoint": (
        "writes tf.train step checkpoints and positions tf.data streams",
        "on JAX and PyTorch, fit_resumable writes NumPy array checkpoints; pass it a callable step -> dataset "
        "(sphere_tf.data.get_datasets(..., pipeline='grain', initial_step=step))",
    ),
    "sphere_tf.training.distribute": (
        "trains under tf.distribute strategies",
        "strategy='auto' or 'one_device' on JAX and PyTorch; on JAX, keras.distribution.DataParallel (and "
        "ModelParallel) distribute a plain model.fit",
    ),
    "sphere_tf.training.runtime": (
        "configures TensorFlow's CPU allocator and threads",
        "there is nothing to configure off TensorFlow",
    ),
    "sphere_tf.adversarial.attacks": (
        "crafts FGSM/BIM/PGD examples with cleverhans' TensorFlow attacks",
        "on every backend, sphere_tf.adversarial.gradient_attacks crafts the same examples (fgsm, bim, pgd, "
        "make_attack, make_fgsm_sweep, make_predict) in keras.ops",
    ),
}


def installed(module):
    """Whether `module` can be imported here (found on the path; not imported)."""
    return module in sys.modules or importlib.util.find_spec(module) is not None


def configured_backend():
    """(backend, where it comes from) as Keras will read it: `KERAS_BACKEND`, else keras.json, else the default.

    Keras's own reader (`keras.src.backend.config`) cannot be asked: importing it imports the backend, which is
    what fails when the backend is not installed. This follows its rules (`KERAS_HOME`, `~/.keras`, `/tmp/.keras`
    for a home that is not writable).
    """
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"], "KERAS_BACKEND"
    keras_dir = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    if not os.access(keras_dir, os.W_OK):
        keras_dir = os.path.join("/tmp", ".keras")  # Keras's own fallback for a read-only home
    config_file = os.path.join(keras_dir, "keras.json")
    try:
        with open(config_file) as f:
            backend = json.load(f).get("backend")
    except (OSError, ValueError, AttributeError):
        backend = None
    if backend:
        return backend, config_file
    return "tensorflow", "Keras's default"


def missing_backend_message(backend, source):
    """One line for a Keras backend that is not installed ('' when it is, or when Keras does not know it)."""
    if backend not in BACKEND_PACKAGES or installed(BACKEND_PACKAGES[backend][0]):
        return ""
    others = [name for name, (module, _) in BACKEND_PACKAGES.items() if name != backend and installed(module)]
    choice = (f"set KERAS_BACKEND to one that is ({', '.join(others)}), e.g. KERAS_BACKEND={others[0]}"
              if others else "no Keras backend is installed here")
    return (f"Keras's backend is {backend!r} (from {source}) but {BACKEND_PACKAGES[backend][0]} is not installed: "
            f"{choice}, or install it (pip install {BACKEND_PACKAGES[backend][1]}).")


def check_keras_backend():
    """Raises `ImportError` with a hint when Keras is about to load a backend that is not installed."""
    if "keras" in sys.modules:
        return
    message = missing_backend_message(*configured_backend())
    if message:
        raise ImportError(message)


def _uses(module):
    matches = [name for name in TENSORFLOW_USES if module == name or module.startswith(name + ".")]
    if not matches:
        raise KeyError(f"{module} has no entry in sphere_tf.dependencies.TENSORFLOW_USES")
    return TENSORFLOW_USES[max(matches, key=len)]


class TensorFlowMissingError(ImportError):
    """A module that needs TensorFlow was imported where TensorFlow is not installed."""


def tensorflow_message(module, name=None):
    """The one line that says `name` (default: `module`) needs TensorFlow, what to install and the alternative."""
    what, alternative = _uses(module)
    keras_module = sys.modules.get("keras")
    backend = keras_module.backend.backend() if keras_module is not None else configured_backend()[0]
    return (f"{name or module} {what}, so it needs TensorFlow, which is not installed (Keras backend {backend!r}). "
            f"Install it beside your backend: {INSTALL_TENSORFLOW}; or, {alternative}.")


def tensorflow(module):
    """`import tensorflow` for `module` (its `__name__`), or one `TensorFlowMissingError` saying what and why."""
    _uses(module)  # every caller has its entry, TensorFlow installed or not
    if not installed("tensorflow"):
        raise TensorFlowMissingError(tensorflow_message(module))
    return importlib.import_module("tensorflow")


class LazyTensorFlow:
    """TensorFlow as `module` (its `__name__`) uses it, imported on the first attribute read, not at import.

    `tf = dependencies.lazy_tensorflow(__name__)` at the top of a module that builds TensorFlow graphs (tf.data
    pipelines, TensorFlow's allocator settings) keeps the module importable where TensorFlow is not installed:
    its TensorFlow-free names work, and the first `tf.<name>` read raises the module's one-line
    `TensorFlowMissingError` (what it uses TensorFlow for, what to install, the backend-neutral alternative).
    """

    __slots__ = ("_module", "_tensorflow")

    def __init__(self, module):
        _uses(module)  # every caller has its entry, TensorFlow installed or not
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_tensorflow", None)

    def __getattr__(self, name):  # only names that are not slots: TensorFlow's own
        tensorflow_module = self._tensorflow
        if tensorflow_module is None:
            tensorflow_module = tensorflow(self._module)
            object.__setattr__(self, "_tensorflow", tensorflow_module)
        return getattr(tensorflow_module, name)

    def __setattr__(self, name, value):
        raise AttributeError(f"TensorFlow as {self._module} uses it is read-only")

    def __repr__(self):
        state = "imported" if self._tensorflow is not None else "not imported yet"
        return f"<TensorFlow for {self._module} ({state})>"


def lazy_tensorflow(module):
    """A `LazyTensorFlow` for `module` (its `__name__`): TensorFlow imported on first use."""
    return LazyTensorFlow(module)


def require_tensorflow(name, module):
    """Raises `module`'s `TensorFlowMissingError`, reported as `name`'s, where TensorFlow is not installed."""
    _uses(module)
    if not installed("tensorflow"):
        raise TensorFlowMissingError(tensorflow_message(module, name))


def import_for(name, module):
    """`importlib.import_module(module)` for a package's lazy `name`: a missing TensorFlow is reported as `name`'s.

    `from sphere_tf.training import fit_resumable` then says that `sphere_tf.training.fit_resumable` needs
    TensorFlow, not whichever module on its import path asked for TensorFlow first.
    """
    try:
        return importlib.import_module(module)
    except TensorFlowMissingError:
        raise TensorFlowMissingError(tensorflow_message(module, name)) from None
