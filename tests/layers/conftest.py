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


@pytest.fixture(params=["graph", "xla"])
def keras_harness(request, monkeypatch):
    """Keras's own layer harness, its training check compiled as a graph and with XLA.

    The harness compiles its training check with `jit_compile="auto"`, which Keras resolves to
    XLA on a GPU host and to a plain graph on a CPU-only one; the 'xla' case makes "auto" pick
    XLA as on a GPU, so the layer's jit-compiled training is tested here too (on PyTorch: `torch.compile`).
    The harness's `xla` attribute says which case runs.
    """
    harness = _KerasHarness()
    harness.xla = request.param == "xla"
    if harness.xla:
        monkeypatch.setattr(keras.Model, "_resolve_auto_jit_compile", lambda self: True)
        if keras.backend.backend() == "torch":
            import torch  # noqa: PLC0415

            # On PyTorch the compiled step is `torch.compile` of Keras's one train-step function: every harness
            # run's new model class recompiles it, and past dynamo's recompile limit (8) it would silently run
            # eagerly. A reset gives each case a fresh compile, as in its own process.
            torch._dynamo.reset()
    return harness
