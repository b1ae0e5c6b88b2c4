"""Fixtures shared by the operator-layer tests."""

import pytest

from sphere_tf.kernels import build as kernel_build
from sphere_tf.ops import fused


@pytest.fixture(params=["kernels", "xla", "plain"])
def training_path(request):
    """Runs a test on each implementation of the layers' training path.

    'kernels': the compiled kernels (`sphere_tf.kernels.build`; the test fails where they are not
    built), 'xla': XLA clusters only (`kernel_build.set_enabled(False)`), 'plain': plain TensorFlow
    ops (`fused.set_training_fusion(False)`).
    """
    if request.param == "kernels":
        assert kernel_build.compiled_kernels() is not None, kernel_build.status()
    kernel_build.set_enabled(request.param == "kernels")
    fused.set_training_fusion(request.param != "plain")
    yield request.param
    kernel_build.set_enabled(True)
    fused.set_training_fusion(True)
