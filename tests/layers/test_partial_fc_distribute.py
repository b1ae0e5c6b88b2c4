"""PartialFCHead and PartialFCOptimizer under tf.distribute.MirroredStrategy on 2 logical CPU devices.

Partial FC under data parallelism samples from the labels of every rank (upstream all-gathers them), with one
key for all ranks, so every replica takes the same columns. Here the same model is trained from the same weights
on the same batches once on one device with the global batch and once mirrored over two replicas (each gets half
of every batch; the last batch of an epoch is partial, 6 = 3 + 3), with sample_rate < 1 and with sample_rate = 1,
SGD with momentum wrapped in PartialFCOptimizer. The worker reports both runs' weights, optimizer slots, logged
losses and per-step samples, and every device copy of every mirrored variable. A third run splits the last batch
unevenly (5 = 3 + 2): its samples must still match (the all-gather takes uneven parts); its weights are not compared,
since Keras then averages the replicas' means (3 and 2 samples), not the 5 samples, for any loss.

Logical devices must be configured before TensorFlow initialises, so the runs happen in a fresh subprocess.
"""

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

pytestmark = pytest.mark.tensorflow_only  # tf.distribute.MirroredStrategy

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
    from sphere_tf.layers import PartialFCHead
    from sphere_tf.ops import acceleration
    from sphere_tf.optimizers import PartialFCOptimizer

    # 4 full batches of 8 and a last batch of 6 (3 per replica), or of 5 (3 and 2).
    BATCH, C, D = 8, 203, 6
    rng = np.random.default_rng(0)
    x = rng.normal(size=(38, D)).astype("float32")
    y = rng.integers(0, C, size=38).astype("int32")
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    out = {"replicas": strategy.num_replicas_in_sync}

    # The hook alone: identity outside a replica context, the replicas' values in replica order inside.
    out["gather_outside"] = acceleration.all_gather_across_replicas(tf.constant([7, 8])).numpy().tolist()

    @tf.function
    def gathered():
        def fn():
            replica = tf.distribute.get_replica_context().replica_id_in_sync_group
            own = tf.fill([replica + 1], replica + 10)  # sizes 1 and 2: uneven on axis 0
            return acceleration.all_gather_across_replicas(own)
        return strategy.run(fn)

    out["gather_inside"] = [t.numpy().tolist() for t in strategy.experimental_local_results(gathered())]

    class Recorder(keras.callbacks.Callback):
        def __init__(self, head):
            super().__init__()
            self.head, self.masks = head, []

        def on_train_batch_end(self, batch, logs=None):
            self.masks.append(np.flatnonzero(keras.ops.convert_to_numpy(self.head.sampled_mask())).tolist())

    def build(rate):
        features = keras.Input((D,))
        labels = keras.Input((), dtype="int32")
        hidden = keras.layers.Dense(5, name="backbone")(features)
        # 204 columns, 2 blocks of 102; k_block = max(ceil(0.1·102), B) = 11 with the global batch of 8.
        head = PartialFCHead(C, loss_type="arcface", scale=16.0, sample_rate=rate, num_shards=2, use_bias=True,
                             seed=3, name="head")
        model = keras.Model([features, labels], head(hidden, labels=labels))
        model.compile(PartialFCOptimizer(keras.optimizers.SGD(0.1, momentum=0.9)), loss=None)
        return model, head

    for rate, n in ((0.1, 38), (1.0, 38), (0.1, 37)):
        keras.utils.set_random_seed(1)
        single, single_head = build(rate)
        init = [w.copy() for w in single.get_weights()]
        recorder = Recorder(single_head)
        h1 = single.fit([x[:n], y[:n]], None, batch_size=BATCH, epochs=2, shuffle=False, verbose=0,
                        callbacks=[recorder])
        with strategy.scope():
            mirrored, mirrored_head = build(rate)
        mirrored.set_weights(init)
        mirrored_recorder = Recorder(mirrored_head)
        h2 = mirrored.fit([x[:n], y[:n]], None, batch_size=BATCH, epochs=2, shuffle=False, verbose=0,
                          callbacks=[mirrored_recorder])
        copies_equal, copies = True, 0
        for v in mirrored.variables + mirrored.optimizer.variables:
            values = [np.asarray(c.numpy()) for c in getattr(v.value, "values", [v.value])]
            copies_equal &= len(values) == strategy.num_replicas_in_sync
            copies_equal &= all(np.array_equal(values[0], c) for c in values[1:])
            copies += len(values)

        def slots(model):
            return {v.path.split("/")[-1]: np.asarray(v.numpy()).tolist()
                    for v in model.optimizer.optimizer.variables if "momentum" in v.path}

        out[f"{rate}/{n}"] = {
            "init": [w.tolist() for w in init],
            "names": [v.path for v in single.weights],
            "single": [w.tolist() for w in single.get_weights()],
            "mirrored": [w.tolist() for w in mirrored.get_weights()],
            "single_slots": slots(single),
            "mirrored_slots": slots(mirrored),
            "loss": [h1.history["loss"], h2.history["loss"]],
            "masks": [recorder.masks, mirrored_recorder.masks],
            "iterations": [int(single_head.iteration.numpy()), int(mirrored_head.iteration.numpy())],
            "copies_equal": bool(copies_equal),
            "copies": copies,
        }
    json.dump(out, open(sys.argv[1], "w"))
    '''
)


@pytest.fixture(scope="module")
def result(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("partial_fc_distribute")
    script, out = tmp / "worker.py", tmp / "result.json"
    script.write_text(_WORKER)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    proc = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=900,
                          env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(out.read_text())


def test_all_gather_hook(result):
    assert result["replicas"] == 2
    assert result["gather_outside"] == [7, 8]
    assert result["gather_inside"] == [[10, 11, 11], [10, 11, 11]]


@pytest.mark.parametrize("rate", ["0.1", "1.0"])
def test_mirrored_steps_equal_single_device_steps_with_the_global_batch(result, rate):
    run = result[f"{rate}/38"]
    assert run["iterations"] == [10, 10]
    # The same sample every step: the global batch's positives plus the same uniform negatives.
    single_masks, mirrored_masks = run["masks"]
    assert single_masks == mirrored_masks and len(single_masks) == 10
    if rate == "0.1":
        # 11 columns per block (the last batch of 6 still samples ceil(0.1·102) = 11 per block)
        assert {len(m) for m in single_masks} == {22}
    else:
        assert {len(m) for m in single_masks} == {203}
    np.testing.assert_allclose(run["loss"][1], run["loss"][0], rtol=1e-5)  # logged loss: not doubled
    for name, single, mirrored in zip(run["names"], run["single"], run["mirrored"]):
        np.testing.assert_allclose(mirrored, single, rtol=1e-5, atol=1e-6, err_msg=name)
    assert sorted(run["single_slots"]) == sorted(run["mirrored_slots"]) and len(run["single_slots"]) == 4
    for name, single in run["single_slots"].items():
        np.testing.assert_allclose(run["mirrored_slots"][name], single, rtol=1e-5, atol=1e-6, err_msg=name)


def test_mirrored_copies_stay_identical(result):
    for run in ("0.1/38", "1.0/38", "0.1/37"):
        assert result[run]["copies_equal"], run
        assert result[run]["copies"] > 20


def test_uneven_last_batch_samples_the_global_batch(result):
    run = result["0.1/37"]
    assert run["iterations"] == [10, 10]
    assert run["masks"][0] == run["masks"][1]
    assert np.all(np.isfinite(run["loss"][1]))
    np.testing.assert_allclose(run["loss"][1][0], run["loss"][0][0], rtol=1e-5)  # before the first uneven step


def test_unsampled_columns_are_restored_on_every_replica(result):
    run = result["0.1/38"]
    kernel = run["names"].index("head/kernel")
    ever = sorted({c for mask in run["masks"][0] for c in mask})
    never = np.setdiff1d(np.arange(203), ever)
    assert len(never) > 50  # the check below means something
    initial, final = np.asarray(run["init"][kernel]), np.asarray(run["mirrored"][kernel])
    np.testing.assert_array_equal(final[never], initial[never])  # class-major kernel: a class is a row
    assert np.all(np.any(final[ever] != initial[ever], axis=1))
