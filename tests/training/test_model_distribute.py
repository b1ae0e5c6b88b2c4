"""SphereModel under tf.distribute.MirroredStrategy on 2 logical CPU devices.

Logical devices must be configured before TensorFlow initialises, so the run
happens in a fresh Python subprocess. It trains the same model from the same
weights on the same batches once on a single device and once mirrored over two
replicas, and reports the final weights of both, the per-device copies of every
mirrored variable and the operator kernel norms.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

_WORKER = textwrap.dedent(
    r'''
    import json, os, sys
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
    import keras
    import numpy as np
    from sphere_tf import layers, training

    EVERY, SCALE, STEPS, BATCH = 2, 1.5, 4, 8
    rng = np.random.default_rng(0)
    x = rng.normal(size=(STEPS * BATCH, 6, 6, 2)).astype("float32")
    y = rng.integers(0, 3, size=(STEPS * BATCH,))

    def build():
        # Operators without an operator radius: E{‖x‖} would be a per-replica batch mean
        # (like unsynchronised BatchNorm), which differs from the global one by design.
        inputs = keras.Input((6, 6, 2))
        h = layers.SphereConv2D(4, 3, padding="same", name="sconv")(inputs)
        h = keras.layers.Conv2D(4, 3, name="plain_conv")(h)
        h = keras.layers.Flatten()(h)
        h = layers.DecoupledDense(5, magnitude="linear", name="ddense")(h)
        outputs = keras.layers.Dense(3, kernel_regularizer=keras.regularizers.L2(1e-2), name="head")(h)
        model = training.SphereModel(inputs, outputs, weight_projection_every=EVERY,
                                     projection_scale=SCALE, weighted_gradients=True)
        model.compile(keras.optimizers.SGD(0.05, momentum=0.9),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model

    keras.utils.set_random_seed(1)
    single = build()
    init = [w.copy() for w in single.get_weights()]
    h1 = single.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        mirrored = build()
    mirrored.set_weights(init)
    h2 = mirrored.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)

    copies_equal = True
    for v in mirrored.weights:
        values = [c.numpy() for c in getattr(v.value, "values", [v.value])]
        copies_equal &= len(values) == strategy.num_replicas_in_sync
        copies_equal &= all(np.array_equal(values[0], c) for c in values[1:])

    kernels = {l.name: l.kernel.numpy() for l in mirrored.operator_layers()}
    mirrored_all = [w.tolist() for w in mirrored.get_weights()]
    norms = {k: np.sqrt((w.reshape(-1, w.shape[-1]) ** 2).sum(0)).tolist() for k, w in kernels.items()}
    # project_weights() from the cross-replica context (under the strategy scope).
    for l in mirrored.operator_layers():
        l.kernel.assign(l.kernel * 3.0)
    with strategy.scope():
        mirrored.project_weights()
    norms_after_manual = {l.name: np.sqrt((l.kernel.numpy().reshape(-1, l.kernel.shape[-1]) ** 2).sum(0)).tolist()
                          for l in mirrored.operator_layers()}
    json.dump({
        "replicas": strategy.num_replicas_in_sync,
        "iterations": [int(single.optimizer.iterations), int(mirrored.optimizer.iterations.numpy())],
        "loss": [h1.history["loss"], h2.history["loss"]],
        "single": [w.tolist() for w in single.get_weights()],
        "names": [v.path for v in single.weights],
        "copies_equal": bool(copies_equal),
        "norms": norms,
        "norms_after_manual": norms_after_manual,
        "mirrored_kernels": {k: w.tolist() for k, w in kernels.items()},
        "single_kernels": {l.name: l.kernel.numpy().tolist() for l in single.operator_layers()},
        "mirrored": mirrored_all,
    }, open(sys.argv[1], "w"))
    '''
)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("distribute")
    script, out = tmp / "worker.py", tmp / "result.json"
    script.write_text(_WORKER)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True,
                          timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def test_two_replicas_and_same_step_count(result):
    assert result["replicas"] == 2
    assert result["iterations"] == [4, 4]


def test_mirrored_result_equals_single_device(result):
    np.testing.assert_allclose(result["loss"][1], result["loss"][0], rtol=1e-5)
    assert sorted(result["single_kernels"]) == ["ddense", "sconv"]
    for name in result["single_kernels"]:
        np.testing.assert_allclose(result["mirrored_kernels"][name], result["single_kernels"][name],
                                   rtol=1e-5, atol=1e-6, err_msg=name)
    for name, single, mirrored in zip(result["names"], result["single"], result["mirrored"]):
        np.testing.assert_allclose(mirrored, single, rtol=1e-5, atol=1e-6, err_msg=name)


def test_per_device_copies_identical(result):
    assert result["copies_equal"]


def test_projection_happened_on_mirrored_kernels(result):
    # 4 steps, projection every 2: the last step ended with a projection.
    for name, norms in result["norms"].items():
        np.testing.assert_allclose(norms, 1.5, atol=1e-6, rtol=0, err_msg=name)


def test_project_weights_in_cross_replica_context(result):
    for name, norms in result["norms_after_manual"].items():
        np.testing.assert_allclose(norms, 1.5, atol=1e-6, rtol=0, err_msg=name)
