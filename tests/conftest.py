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
