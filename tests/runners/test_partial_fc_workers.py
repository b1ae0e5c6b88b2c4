"""The face runner trains a Partial FC head (r = 0.1) on two workers on localhost (subprocesses, TensorFlow).

`strategy='multi_worker'` (`tf.distribute.MultiWorkerMirroredStrategy`, `TF_CONFIG` with two localhost ports):
each worker's replica holds the whole head, the labels that drive the sample are all-gathered across the workers
(`sphere_tf.ops.acceleration.all_gather_across_replicas`), so both workers draw the same columns, which hold every
positive of the global batch. The two workers end with identical weights, and those equal a single-worker run
of the same config (`one_device`, the same global batches) within float32 tolerance, as do the logged losses
and the test loss.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bench import synthetic_identities
from tests.runners.test_partial_fc_runner import pfc_config
from tests.training.test_distribute import _free_ports

pytestmark = pytest.mark.tensorflow_only

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 300

CHILD = r"""
import json, sys
config, workdir, out = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
import keras
import numpy as np
import sphere_tf
from sphere_tf.runners import face
from sphere_tf.runners import classifier
from sphere_tf.training import distribute
models, masks = [], []
class Masks(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        masks.append(keras.ops.convert_to_numpy(self.model.get_layer("logits").sampled_mask()).copy())
fit = classifier.checkpoint_lib.fit_resumable
def spy(model, *args, **kwargs):
    models.append(model)
    kwargs["callbacks"] = list(kwargs.get("callbacks") or []) + [Masks()]
    return fit(model, *args, **kwargs)
classifier.checkpoint_lib.fit_resumable = spy
results = face.train_face(config, workdir)
model = models[0]
np.savez(out, *model.get_weights(), masks=np.stack(masks))
print(json.dumps({"replicas": model.distribute_strategy.num_replicas_in_sync,
                  "chief": distribute.is_chief(model.distribute_strategy),
                  "head": type(model.get_layer("logits")).__name__,
                  "optimizer": type(model.optimizer).__name__,
                  "partial_fc": results["partial_fc"], "loss": results["history"]["loss"],
                  "test_loss": results["test_loss"], "test_accuracy": results["test_accuracy"]}))
"""


def env(**extra):
    environment = dict(os.environ, KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO)
    environment.pop("TF_CONFIG", None)
    environment.update(extra)
    return environment


def weights(path):
    arrays = np.load(path)
    return [arrays[f"arr_{i}"] for i in range(len(arrays.files) - 1)], arrays["masks"]


def test_two_workers_train_the_sampled_head_as_one_worker(tmp_path):
    folder = str(tmp_path / "identities")
    synthetic_identities.write_identity_folder(folder, 300, 2, (12, 10, 3), seed=2)
    # num_shards fixed: the default follows the replica count (1 here, 2 on two workers).
    config = pfc_config(folder, sample_rate=0.1, num_shards=2, shard_classes=True)
    single = dict(config, strategy="one_device")
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, json.dumps(single), str(tmp_path / "single"),
                               str(tmp_path / "single.npz")], cwd=REPO, env=env(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)]
    cluster = {"worker": [f"localhost:{port}" for port in _free_ports(2)]}
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        procs.append(subprocess.Popen(
            [sys.executable, "-c", CHILD, json.dumps(dict(config, strategy="multi_worker")),
             str(tmp_path / "workers"), str(tmp_path / f"worker{index}.npz")],
            cwd=REPO, env=env(TF_CONFIG=tf_config), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=TIMEOUT))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    for proc, (_, stderr) in zip(procs, outputs):
        assert proc.returncode == 0, stderr[-3000:]
    one, first, second = [json.loads(stdout.strip().splitlines()[-1]) for stdout, _ in outputs]
    assert [one["replicas"], first["replicas"], second["replicas"]] == [1, 2, 2]
    assert [first["chief"], second["chief"]] == [True, False]
    for report in (one, first, second):
        assert report["head"] == "PartialFCHead" and report["optimizer"] == "PartialFCOptimizer"
    assert one["partial_fc"]["devices"] == 1 and first["partial_fc"]["devices"] == 2
    assert one["partial_fc"]["num_shards"] == first["partial_fc"]["num_shards"] == 2
    (w_one, m_one), (w_first, m_first), (w_second, m_second) = (
        weights(tmp_path / name) for name in ("single.npz", "worker0.npz", "worker1.npz"))
    np.testing.assert_array_equal(m_first, m_second)  # both workers sampled the same classes every step
    np.testing.assert_array_equal(m_first, m_one)  # ... the classes the single worker sampled
    assert m_one.shape == (4, 300) and (m_one.sum(axis=1) == 30).all()
    for a, b in zip(w_first, w_second):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(w_one, w_first):
        np.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(first["loss"], one["loss"], rtol=1e-5)
    assert first["test_loss"] == pytest.approx(one["test_loss"], rel=1e-5)
    assert first["test_loss"] == second["test_loss"]
