"""Fixtures shared by the layer tests: the operators' training paths and Keras's own layer harness."""

import keras
import pytest
from keras.src import testing as keras_testing

from sphere_tf.ops import acceleration

# The TensorFlow plug-in's three training paths, then the keras.ops reference (the only path elsewhere).
TRAINING_PATHS = ["kernels", "xla", "plain", "reference"] if keras.backend.backend() == "tensorflow" else ["reference"]


@pytest.fixture(params=TRAINING_PATHS)
def training_path(request):
    """Runs a test on each implementation of the layers' training path on this backend.

    TensorFlow: 'kernels' the compiled kernels (`sphere_tf.backends.tensorflow.kernels.build`; the test
    fails where they are not built), 'xla' XLA clusters only (`kernel_build.set_enabled(False)`),
    'plain' TensorFlow ops with hand-written gradients (`set_training_fusion(False)`). Every backend:
    'reference', the `keras.ops` reference (`set_acceleration(False)`).
    """
    if request.param == "reference":
        acceleration.set_acceleration(False)
        yield request.param
        acceleration.set_acceleration(True)
        return
    from sphere_tf.backends.tensorflow.kernels import build as kernel_build  # the TensorFlow plug-in

    if request.param == "kernels":
        assert kernel_build.compiled_kernels() is not None, kernel_build.status()
    kernel_build.set_enabled(request.param == "kernels")
    acceleration.set_training_fusion(request.param != "plain")
    yield request.param
    kernel_build.set_enabled(True)
    acceleration.set_training_fusion(True)


class _KerasHarness(keras_testing.TestCase):
    """`keras.src.testing.TestCase` outside a unittest class, for its `run_layer_test`."""

    def runTest(self):  # unittest needs a test method to instantiate the case
        pass


@pytest.fixture(params=["graph", "xla"])
def keras_harness(request, monkeypatch):
    """Keras's own layer harness, its training check compiled as a graph and with XLA.

    The harness compiles its training check with `jit_compile="auto"`, which Keras resolves to
    XLA on a GPU host and to a plain graph on a CPU-only one; the 'xla' case makes "auto" pick
    XLA as on a GPU, so the layer's jit-compiled training is tested here too. The harness's
    `xla` attribute says which case runs.
    """
    harness = _KerasHarness()
    harness.xla = request.param == "xla"
    if harness.xla:
        monkeypatch.setattr(keras.Model, "_resolve_auto_jit_compile", lambda self: True)
    return harness
