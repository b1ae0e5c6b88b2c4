"""The floor graphs of `bench/bench_export.py` compute the operators' inference function.

The floor rows of the export benchmark are only a lower bound for the
operators if they compute the same thing; each is written from the papers'
formulas (SphereConv [S-2], TanhConv + cosine [D-8, D-12]) with BN folded by
hand, and compared here with the Keras model's own `training=False` output
after the BN and E{‖x‖} statistics have moved.
"""

import keras
import numpy as np
import pytest

from bench import bench_export
from bench import common


def _tiny(case, seed=0):
    keras.utils.set_random_seed(seed)
    model = common.cnn9(bench_export._CASES[case], input_shape=(8, 8, 3), widths=(4, 6, 8), dense=5)  # pylint: disable=protected-access
    x = np.random.default_rng(seed).uniform(-1, 1, (6, 8, 8, 3)).astype(np.float32)
    for _ in range(2):
        model(x, training=True)
    return model


@pytest.mark.parametrize("case", ["conv2d", "tanh_cosine", "sphere_linear", "sphere_cosine"])
@pytest.mark.parametrize("xla", [False, True])
def test_floor_graph_matches_the_model(case, xla):
    model = _tiny(case)
    images = np.random.default_rng(1).uniform(0, 255, (3, 8, 8, 3)).astype(np.float32)
    fn = bench_export.floor_forward(model, xla=xla)
    want = model(images, training=False).numpy()
    got = fn(images).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4 * np.abs(want).max())
    assert bench_export.foreign_ops(fn) == []


def test_check_floor_rejects_a_different_function():
    model = _tiny("tanh_cosine")
    other = bench_export.floor_forward(_tiny("tanh_cosine", seed=3))
    images = np.random.default_rng(1).uniform(0, 255, (2, 8, 8, 3)).astype(np.float32)
    with pytest.raises(AssertionError, match="floor graph differs"):
        bench_export.check_floor(model, other, images)


def test_floor_refuses_an_operator_it_has_no_graph_for():
    model = _tiny("sphere_sigmoid")
    with pytest.raises(ValueError, match="No floor graph for sphere \\+ sigmoid"):
        bench_export.floor_forward(model)
