"""OPTOptimizer (Cayley SGD + SGD) under tf.distribute.MirroredStrategy on 2 logical CPU devices.

Logical devices must be configured before TensorFlow initialises, so the run happens in a
fresh Python subprocess: the same OGD/GS model trains from the same weights on the same
batches once on one device and once mirrored over two replicas.
"""

import json
import os
import subprocess
import sys

import pytest

# tf.distribute.MirroredStrategy is the TensorFlow backend's.
pytestmark = pytest.mark.tensorflow_only

_WORKER = r'''
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
import keras
import numpy as np
from sphere_tf import layers, optimizers

STEPS, BATCH = 4, 8
rng = np.random.default_rng(0)
x = rng.normal(size=(STEPS * BATCH, 6)).astype("float32")
y = rng.integers(0, 3, size=(STEPS * BATCH,))

def build():
    model = keras.Sequential([keras.Input((6,)), layers.OPTDense(5, orthogonalization="ogd", activation="tanh", seed=0),
                              layers.OPTDense(4, orthogonalization="gram_schmidt", seed=1), keras.layers.Dense(3)])
    model.compile(optimizers.OPTOptimizer(keras.optimizers.SGD(0.05, momentum=0.9)),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model

keras.utils.set_random_seed(1)
single = build()
init = [w.copy() for w in single.get_weights()]
single.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    mirrored = build()
mirrored.set_weights(init)
mirrored.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
r = mirrored.layers[0].rotation_param.numpy().astype(np.float64)
print(json.dumps({
    "max_weight_diff": max(float(np.abs(a - b).max()) for a, b in zip(single.get_weights(), mirrored.get_weights())),
    "rotation_moved": float(np.abs(r - np.eye(6)).max()),
    "orth_error": float(np.abs(r.T @ r - np.eye(6)).max()),
}))
'''


def test_mirrored_training_matches_single_device():
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", _WORKER], capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["rotation_moved"] > 1e-3
    assert result["orth_error"] < 1e-5
    assert result["max_weight_diff"] < 1e-5
