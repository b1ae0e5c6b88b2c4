"""A class-sharded Partial FC run of the face runner on JAX resumes on another device count (subprocesses).

`model.head.shard_classes=True` with `num_shards=2`: on 2 logical CPU devices
(`XLA_FLAGS=--xla_force_host_platform_device_count=2`) the head's kernel, its momentum and its sampled mask are
split over the devices (`keras.distribution.ModelParallel`); on 1 device the same 2 blocks lie on it (a config
without `num_shards` keeps the count its workdir's run started with). The array
checkpoint (`sphere_tf.training.array_checkpoint`) stores full arrays, so a run killed with SIGKILL after a
checkpoint on 2 devices resumes on 1 (and one killed on 1 resumes on 2): loading assigns the full arrays and
the variables' layouts split them again. Each resumed run ends with the uninterrupted runs' weights, and the
uninterrupted 1- and 2-device runs agree with each other (float32 tolerance: the sharded step sums in
another order).
"""

import json
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from bench import synthetic_identities
from sphere_tf.runners import face
from sphere_tf.training import array_checkpoint
from tests.backends import interpreters
from tests.runners.test_partial_fc_runner import graph_constant_shapes
from tests.runners.test_partial_fc_runner import pfc_config

pytestmark = pytest.mark.tensorflow_only  # the main venv: TensorFlow (data) and JAX

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLASSES = 301  # not divisible by 2: one padding column

CHILD = r"""
import json, os, signal, sys
config, workdir, kill_at = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
import keras
from sphere_tf.runners import face
from sphere_tf.runners import classifier
from sphere_tf.training import checkpoint
original = checkpoint.StepCheckpoint.on_train_batch_end
def on_train_batch_end(self, batch, logs=None):
    original(self, batch, logs)
    if kill_at and self.step == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
checkpoint.StepCheckpoint.on_train_batch_end = on_train_batch_end
models = []
fit = classifier.checkpoint_lib.fit_resumable
def spy(model, *args, **kwargs):
    models.append(model)
    return fit(model, *args, **kwargs)
classifier.checkpoint_lib.fit_resumable = spy
results = face.train_face(config, workdir)
head = models[0].get_layer("logits")
print(json.dumps({"devices": len(keras.distribution.list_devices()), "partial_fc": results["partial_fc"],
                  "kernel_shards": [list(s.data.shape) for s in head.kernel.value.addressable_shards],
                  "test_loss": results["test_loss"], "export_dir": results["export_dir"]}))
"""


def run(config, workdir, devices, kill_at=0):
    # The JAX tests' environment (fast code generation, the shared persistent compilation cache), on `devices`
    # logical CPU devices.
    env = interpreters.environment("jax")
    env.update(TF_CPP_MIN_LOG_LEVEL="3",
               XLA_FLAGS=f"{env['XLA_FLAGS']} --xla_force_host_platform_device_count={devices}")
    process = subprocess.run([sys.executable, "-c", CHILD, json.dumps(config), workdir, str(kill_at)], cwd=REPO,
                             env=env, capture_output=True, text=True, timeout=300)
    if kill_at:
        assert process.returncode == -signal.SIGKILL, process.stderr[-3000:]
        return None
    assert process.returncode == 0, process.stderr[-3000:]
    return json.loads(process.stdout.strip().splitlines()[-1])


def final_state(workdir):
    step, path = array_checkpoint.latest(os.path.join(workdir, "checkpoints", "train"))
    return step, array_checkpoint.read(path)


def test_sharded_run_resumes_on_another_device_count(tmp_path):
    folder = str(tmp_path / "identities")
    synthetic_identities.write_identity_folder(folder, CLASSES, 2, (12, 10, 3), seed=1)
    config = pfc_config(folder, sample_rate=0.1, num_shards=2, shard_classes=True)
    # The 2-device run also exports (from its .keras file, under TensorFlow in a child process): no class matrix.
    straight = {n: run(dict(config, export=n == 2), str(tmp_path / f"straight{n}"), n) for n in (1, 2)}
    for n, report in straight.items():
        assert report["devices"] == n
        assert report["partial_fc"] == {"sample_rate": 0.1, "num_shards": 2, "devices": n, "sharded": True}
        dim = report["kernel_shards"][0][1]
        assert report["kernel_shards"] == [[302 // n, dim]] * n  # each device holds its blocks' classes
    exported = tf.saved_model.load(straight[2]["export_dir"])
    assert sorted(exported.signatures) == ["embeddings", "serving_default"]
    pixels = tf.constant(np.zeros((2, 12, 10, 3), np.uint8))
    assert sorted(exported.signatures["embeddings"](images=pixels)) == ["embeddings"]
    assert not {(dim, 301), (dim, 302)} & set(graph_constant_shapes(straight[2]["export_dir"]))
    reference = final_state(str(tmp_path / "straight1"))[1]
    assert final_state(str(tmp_path / "straight2"))[0] == 4
    kernel = next(name for name, value in reference.items() if value.shape == (302, dim))
    for name, value in final_state(str(tmp_path / "straight2"))[1].items():
        np.testing.assert_allclose(value, reference[name], rtol=1e-4, atol=2e-6, err_msg=name)

    # 2 -> 1 without `num_shards` in the config: one block per device at the start (2), recorded in the workdir
    # and kept by the resumed run on 1 device (the array checkpoint holds full arrays whatever the device count,
    # so 1 -> 2 reads the same files the other way round).
    automatic = pfc_config(folder, sample_rate=0.1, shard_classes=True)
    for killed_on, resumed_on, run_config in ((2, 1, automatic),):
        workdir = str(tmp_path / f"killed{killed_on}")
        run(run_config, workdir, killed_on, kill_at=3)  # checkpointed at step 2 on `killed_on` devices
        step, at_kill = final_state(workdir)
        assert step == 2 and not os.path.exists(os.path.join(workdir, "results.json"))
        assert at_kill[kernel].shape == (302, dim)  # full arrays, whatever the device count
        report = run(run_config, workdir, resumed_on)
        assert report["devices"] == resumed_on and len(report["kernel_shards"]) == resumed_on
        assert report["partial_fc"]["num_shards"] == 2
        step, resumed = final_state(workdir)
        assert step == 4 and sorted(resumed) == sorted(reference)
        for name, value in resumed.items():  # the uninterrupted run on the device count it resumed on
            want = final_state(str(tmp_path / f"straight{resumed_on}"))[1][name]
            np.testing.assert_allclose(value, want, rtol=1e-4, atol=2e-6, err_msg=name)
        assert report["test_loss"] == pytest.approx(straight[resumed_on]["test_loss"], rel=1e-5)
        assert not np.array_equal(resumed[kernel], at_kill[kernel])  # it trained after the resume


PLAN_CHILD = r"""
import json, sys
from sphere_tf.runners import classifier
from sphere_tf.training import distribute
cases, out = json.loads(sys.argv[1]), []
for config in cases:
    try:
        checked = classifier.validate(config)
        plan = classifier._partial_fc_plan(checked, distribute.make_strategy("auto"))
        out.append({"num_shards": plan.num_shards, "devices": plan.devices,
                    "mesh": None if plan.distribution is None else list(plan.distribution.device_mesh.shape)})
    except classifier.ConfigError as error:
        out.append({"error": str(error)})
print(json.dumps(out))
"""


def test_sharding_on_jax_checks_devices_blocks_and_batch_before_any_data(tmp_path):
    def case(train=None, **head):
        config = pfc_config(str(tmp_path / "unread"), sample_rate=0.1, **head)
        config, _ = face.split_config(config)  # the classification run inside the face task
        config["train"].update(train or {})
        return config

    cases = [case(shard_classes=True), case(shard_classes=1), case(shard_classes=True, num_shards=6),
             case(shard_classes=3), case(shard_classes=True, num_shards=3),
             case(train={"batch_size": 7}, shard_classes=True), case(shard_classes=False, num_shards=3)]
    env = interpreters.environment("jax")
    env.update(TF_CPP_MIN_LOG_LEVEL="3", XLA_FLAGS=f"{env['XLA_FLAGS']} --xla_force_host_platform_device_count=2")
    process = subprocess.run([sys.executable, "-c", PLAN_CHILD, json.dumps(cases)], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == 0, process.stderr[-3000:]
    plans = json.loads(process.stdout.strip().splitlines()[-1])
    assert plans[0] == {"num_shards": 2, "devices": 2, "mesh": [2]}
    assert plans[1] == {"num_shards": 1, "devices": 1, "mesh": [1]}
    assert plans[2] == {"num_shards": 6, "devices": 2, "mesh": [2]}
    assert "model.head.shard_classes" in plans[3]["error"] and "at most 2" in plans[3]["error"]
    assert "model.head.num_shards" in plans[4]["error"] and "multiple of the 2 devices" in plans[4]["error"]
    assert "train.batch_size" in plans[5]["error"] and "multiple of the 2 devices" in plans[5]["error"]
    assert plans[6] == {"num_shards": 3, "devices": 1, "mesh": None}
