"""Fixtures shared by the layer tests: the operators' training paths and Keras's own layer harness."""

import keras
import pytest
from keras.src import testing as keras_testing

from sphere_tf import testing


@pytest.fixture(params=testing.training_paths())
def training_path(request):
    """Runs a test on each implementation of the layers' training path on this backend (`testing.training_paths`)."""
    with testing.training_path(request.param):
        yield request.param


class _KerasHarness(keras_testing.TestCase):
    """`keras.src.testing.TestCase` outside a unittest class, for its `run_layer_test`."""

    def runTest(self):  # unittest needs a test method to instantiate the case
        pass


# The harness's training check per backend. It compiles with `jit_compile="auto"`: on TensorFlow that is a
# plain graph on a CPU-only host and XLA on a GPU one, so both run ('xla' makes "auto" pick XLA); on JAX "auto"
# is always `jax.jit`, one case; on PyTorch "auto" is eager, as Keras's own layer tests run it there. The
# compiled PyTorch step (`torch.compile` of the whole train step, minutes per layer on CPU) is tested where a
# layer has compiled-only behaviour: test_model's projection with `jit_compile=True`, test_label_range's
# compiled fit.
HARNESS_CASES = {"tensorflow": ["graph", "xla"], "jax": ["xla"], "torch": ["graph"]}


@pytest.fixture(params=HARNESS_CASES.get(keras.backend.backend(), ["graph", "xla"]))
def keras_harness(request, monkeypatch):
    """Keras's own layer harness, its training check in each way this backend compiles it (`HARNESS_CASES`).

    The harness's `xla` attribute says whether the check is compiled as a whole (TensorFlow XLA, `jax.jit`).
    """
    harness = _KerasHarness()
    harness.xla = request.param == "xla"
    if harness.xla and keras.backend.backend() == "tensorflow":
        monkeypatch.setattr(keras.Model, "_resolve_auto_jit_compile", lambda self: True)
    return harness
