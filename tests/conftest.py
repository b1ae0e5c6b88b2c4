"""Shared pytest set-up: quiet TF logs, fixed seeds, no leaked dtype policy, hypothesis profile."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if os.environ.get("KERAS_BACKEND") == "jax" and "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    # JAX compiles each eagerly run op once per shape, and tests run many shapes once each, so LLVM's
    # optimisation passes cost more than they save (the model zoo's ResNet-18 train step: 52 s -> 36 s).
    # Code generation only: the numerics are XLA's either way.
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0").strip()
if os.environ.get("KERAS_BACKEND") == "jax" and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    # JAX's persistent compilation cache, shared by the xdist workers (both compile the same op shapes) and by
    # tests repeating a program: the JAX suite's layer and model tests take 22 % less time (205 s -> 160 s, cold).
    # Keyed by JAX/XLA version, program and flags, so a stale entry is never reused.
    import tempfile

    os.environ["JAX_COMPILATION_CACHE_DIR"] = os.path.join(tempfile.gettempdir(), "sphere_tf_jax_test_cache")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
    os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# Deterministic, deadline-free hypothesis runs (TF eager calls have first-call tracing costs).
_PROFILE = dict(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("sphere_tf", max_examples=25, **_PROFILE)
# CI's second and third backends (scripts/test_backends.sh under .ci/run): the same properties with fewer
# examples, so three backends' core suites fit CI's time (the TensorFlow suite keeps the full profile).
settings.register_profile("backends", max_examples=5, **_PROFILE)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "sphere_tf"))


BACKEND = keras.backend.backend()


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "tensorflow_only: a test of a TensorFlow-only feature (the TensorFlow plug-in, tf.distribute, SavedModel "
        "export); deselected, not skipped, when KERAS_BACKEND is another backend",
    )
    config.addinivalue_line(
        "markers", "backend_only(*names): a test of those backends only (a plug-in, a path of theirs); deselected on the others",
    )
    config.addinivalue_line(
        "markers",
        "structure_only: a test of Python-level structure (which layer sits in which slot, configs, parameter "
        "counts) that computes nothing backend-specific; it runs in the TensorFlow suite and is deselected in the "
        "JAX and PyTorch suites, where the tests that compute with the same models run",
    )
    config.addinivalue_line(
        "markers",
        "slow: a test of the slow tier (listed in tests/slow_tests.txt); CI's fast tier deselects it with "
        "-m 'not slow', scripts/test_all.sh runs it",
    )


TENSORFLOW_ONLY_MODULE = "pytestmark = pytest.mark.tensorflow_only"
SLOW_TESTS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "slow_tests.txt")


def slow_test_ids():
    """The node ids of tests/slow_tests.txt (`path::name[params]`, relative to the repository root)."""
    ids = set()
    with open(SLOW_TESTS_FILE, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#"):  # a comment line; an entry's comment follows two spaces ('docs/x.md#0' is an id)
                continue
            entry = line.split("  #")[0].strip()
            if entry:
                ids.add(entry)
    return ids


def pytest_ignore_collect(collection_path, config):
    """On the JAX and PyTorch backends, skip importing whole TensorFlow-only modules (they import TensorFlow).

    Such a module says so with the line `pytestmark = pytest.mark.tensorflow_only`; the TensorFlow plug-in's
    own tests (tests/backends/tf_plugin) are TensorFlow-only as a folder.
    """
    if BACKEND == "tensorflow":
        return None
    path = str(collection_path)
    if os.sep + os.path.join("backends", "tf_plugin") in path:
        return True
    if path.endswith(".py") and os.path.basename(path).startswith("test_"):
        with open(path, encoding="utf-8") as f:
            if any(line.split("#")[0].strip() == TENSORFLOW_ONLY_MODULE for line in f):
                return True
    return None


def pytest_collection_modifyitems(config, items):
    """Deselect `tensorflow_only` and `structure_only` tests off TensorFlow, `backend_only` tests off their backend."""
    def runs_here(item):
        only = item.get_closest_marker("backend_only")
        if only is not None and BACKEND not in only.args:
            return False
        if BACKEND == "tensorflow":
            return True
        return item.get_closest_marker("tensorflow_only") is None and item.get_closest_marker("structure_only") is None

    slow = slow_test_ids()
    for item in items:
        if item.nodeid in slow:
            item.add_marker(pytest.mark.slow)
    kept = [item for item in items if runs_here(item)]
    if len(kept) != len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


@pytest.fixture(autouse=True)
def _reset_keras_state():
    """Fixed seeds before each test; the global dtype policy is float32 before and after it."""
    keras.mixed_precision.set_global_policy("float32")
    keras.utils.set_random_seed(1234)
    yield
    keras.mixed_precision.set_global_policy("float32")


@pytest.fixture
def rng():
    """A NumPy generator with a fixed seed."""
    return np.random.default_rng(0)
