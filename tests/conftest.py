"""Shared pytest set-up: quiet TF logs, fixed seeds, no leaked dtype policy, hypothesis profile."""

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

# Deterministic, deadline-free hypothesis runs (TF eager calls have first-call tracing costs).
settings.register_profile(
    "sphere_tf",
    deadline=None,
    derandomize=True,
    max_examples=25,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "sphere_tf"))


BACKEND = keras.backend.backend()


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "tensorflow_only: a test of a TensorFlow-only feature (the TensorFlow plug-in, tf.distribute, SavedModel "
        "export); deselected, not skipped, when KERAS_BACKEND is another backend",
    )


def pytest_collection_modifyitems(config, items):
    """Deselect the `tensorflow_only` tests on the JAX and PyTorch backends (the core suites run on all three)."""
    if BACKEND == "tensorflow":
        return
    kept = [item for item in items if item.get_closest_marker("tensorflow_only") is None]
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
