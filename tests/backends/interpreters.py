"""Which Python runs a Keras backend in the cross-backend tests, and its environment.

TensorFlow: the main venv (`.venv`, the interpreter running the suite). JAX and PyTorch: `.venv-torch`,
which `scripts/setup.sh` makes without TensorFlow. A missing venv is an error that says how to make it.
"""

import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NO_TENSORFLOW_PYTHON = os.path.join(REPO, ".venv-torch", "bin", "python")


def python_for(backend):
    if backend == "tensorflow":
        return sys.executable
    if not os.path.exists(NO_TENSORFLOW_PYTHON):
        raise FileNotFoundError(
            f"{NO_TENSORFLOW_PYTHON} is missing: run `bash scripts/setup.sh` (it makes the venv without "
            "TensorFlow that runs the JAX and PyTorch backends)"
        )
    return NO_TENSORFLOW_PYTHON


def environment(backend):
    env = dict(os.environ, KERAS_BACKEND=backend, PYTHONPATH=REPO, TF_CPP_MIN_LOG_LEVEL="2")
    env.pop("PYTHONSTARTUP", None)
    if backend == "jax" and "xla_backend_optimization_level" not in env.get("XLA_FLAGS", ""):
        # As tests/conftest.py does for the JAX suite: compile fast, the numerics are XLA's either way.
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()
        env.setdefault("JAX_COMPILATION_CACHE_DIR", os.path.join(tempfile.gettempdir(), "sphere_tf_jax_test_cache"))
        env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
        env.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
    return env
