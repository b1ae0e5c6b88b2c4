"""DecoupledConv2D under tf.distribute.MirroredStrategy on 2 logical CPU devices.

Logical devices can only be configured before TensorFlow initialises, so the check runs in a fresh
Python subprocess.
"""

import pytest


import subprocess
import sys
import textwrap

pytestmark = pytest.mark.tensorflow_only  # tf.distribute.MirroredStrategy

_SNIPPET = textwrap.dedent(
    """
    import os
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
    import numpy as np
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
    )
    import keras
    from sphere_tf import testing
    from sphere_tf.layers import DecoupledConv2D, DecoupledDense

    keras.utils.set_random_seed(0)
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    momentum = 0.5
    with strategy.scope():
        model = keras.Sequential([
            keras.Input((5, 5, 2)),
            DecoupledConv2D(3, 3, padding="same", magnitude="tanh", norm_momentum=momentum),
            keras.layers.Flatten(),
            DecoupledDense(2, magnitude="ball", angular="linear"),
        ])
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    rng = np.random.default_rng(0)
    # Per-sample scales differ a lot, so the per-replica batch means differ too.
    x = (rng.normal(size=(8, 5, 5, 2)) * np.array([0.2, 1, 3, 7, 0.5, 2, 9, 1])[:, None, None, None])
    x = x.astype("float32")
    y = rng.normal(size=(8, 2)).astype("float32")
    # One step with the global batch of 8 (4 per replica).
    history = model.fit(x, y, batch_size=8, epochs=1, verbose=0, shuffle=False)
    assert np.isfinite(history.history["loss"][0])
    conv = model.layers[0]
    # Mean aggregation of the per-replica updates: with equal replica batches the debiased
    # average after one step is the global mean patch norm.
    patches = testing.numpy_patches(x, 3, 1, "same", 1)
    expected = np.mean(np.sqrt(np.sum(patches ** 2, -1) + 1e-4))
    got = float(conv.norm_mean())
    # Summed (not averaged) updates would give 2x the weight and a different biased value.
    np.testing.assert_allclose(float(conv.norm_mean_weight.numpy()), 1.0 - momentum, rtol=1e-6)
    np.testing.assert_allclose(got, expected, rtol=1e-5)
    print("OK", got, expected)
    """
)


def test_mirrored_strategy_fit_and_moving_average_aggregation():
    result = subprocess.run(
        [sys.executable, "-c", _SNIPPET], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert "OK" in result.stdout
