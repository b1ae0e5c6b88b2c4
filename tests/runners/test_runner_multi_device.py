"""The classifier runner past one device on JAX (`keras.distribution.DataParallel`), without TensorFlow.

A tiny run on 1 CPU device is the reference. The same config on 2 and 4 CPU devices of one process
(`XLA_FLAGS=--xla_force_host_platform_device_count=N`) and on 2 processes of one device each (JAX's distributed
runtime on localhost, each process reading its half of every global batch) must end with the same variables up to
float32 reduction order. The two-process run is killed with SIGKILL in one process after its step-6 checkpoint:
the other must fail within a bounded time (not hang), and both started again must resume from step 6 and finish
as the reference did.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from sphere_tf.training import array_checkpoint
from tests.runners._resume import idx_dir  # noqa: F401  (a fixture)
from tests.runners._resume import tiny_config

pytestmark = pytest.mark.backend_only("jax")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# Reduction order differs between device counts (each device sums its shard, then an all-reduce adds the sums):
# float32 rounding, compounded over 10 Adam steps of a tiny network. Adam divides by √v, so a weight whose
# gradients are near zero moves by up to the learning rate's scale on rounding alone: on an AVX-512 host one of
# the FC kernel's 6272 entries ended 2.1e-5 apart (the rest within 1e-5).
RTOL, ATOL = 1e-4, 5e-5

CHILD = r"""
import json, os, signal, sys
from sphere_tf.training import multi_device
settings = multi_device.process_settings()  # KERAS_DISTRIBUTION_* (one process without them)
multi_device.initialize(settings, timeout_s=60, heartbeat_timeout_s=10)
from sphere_tf.runners import classifier
from sphere_tf.training import checkpoint
config, workdir, kill_at = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
if kill_at and settings.process_id == settings.num_processes - 1:
    original = checkpoint.StepCheckpoint.on_train_batch_end
    def on_train_batch_end(self, batch, logs=None):
        original(self, batch, logs)
        if self.step == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    checkpoint.StepCheckpoint.on_train_batch_end = on_train_batch_end
results = classifier.train_and_evaluate(config, workdir)
print("RESULTS", json.dumps({k: results[k] for k in ("devices", "processes", "test_loss", "steps")}))
"""


def _config(idx_dir):  # noqa: F811
    config = tiny_config(idx_dir)  # 60 training images, 20 test images
    config["train"]["batch_size"] = 12  # divisible by 1, 2 and 4 devices: 5 steps an epoch, 10 in all
    config["evaluation"] = {"precise_bn_batches": 2}
    return json.dumps(config)


def _env(devices, process=None, port=None):
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", PYTHONPATH=REPO,
               XLA_FLAGS=f"--xla_force_host_platform_device_count={devices}")
    for key in ("KERAS_DISTRIBUTION_JOB_ADDRESSES", "KERAS_DISTRIBUTION_NUM_PROCESSES",
                "KERAS_DISTRIBUTION_PROCESS_ID"):
        env.pop(key, None)
    if process is not None:
        env.update(KERAS_DISTRIBUTION_JOB_ADDRESSES=f"localhost:{port}", KERAS_DISTRIBUTION_NUM_PROCESSES="2",
                   KERAS_DISTRIBUTION_PROCESS_ID=str(process))
    return env


def _run(config, workdir, devices=1):
    proc = subprocess.run([sys.executable, "-c", CHILD, config, workdir, "0"], cwd=REPO, env=_env(devices),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def _two_processes(config, workdir, kill_at=0):
    with socket.socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, config, workdir, str(kill_at)], cwd=REPO,
                              env=_env(1, p, port), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for p in range(2)]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)  # bounded: a process that hung would fail the test here
        outputs.append((proc.returncode, out, err))
    return outputs


def _final(workdir):
    step, path = array_checkpoint.latest(os.path.join(workdir, "checkpoints", "train"))
    return step, array_checkpoint.read(path)


def _results(stdout):
    return json.loads(stdout.split("RESULTS ", 1)[1].splitlines()[0])


def _assert_same_state(got, want):
    assert sorted(got) == sorted(want)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL, err_msg=name)


@pytest.fixture(scope="module")
def reference(idx_dir, tmp_path_factory):  # noqa: F811
    workdir = str(tmp_path_factory.mktemp("one_device") / "run")
    stdout = _run(_config(idx_dir), workdir)
    assert _results(stdout)["devices"] == 1
    return _final(workdir), _results(stdout)


@pytest.mark.parametrize("devices", [2, 4])
def test_data_parallel_over_several_devices_equals_one_device(idx_dir, tmp_path, reference, devices):  # noqa: F811
    workdir = str(tmp_path / "run")
    stdout = _run(_config(idx_dir), workdir, devices)
    assert f"split over {devices} devices" in stdout
    results = _results(stdout)
    assert (results["devices"], results["processes"], results["steps"]) == (devices, 1, 10)
    (step, state), reference_results = _final(workdir), reference[1]
    assert step == reference[0][0] == 10
    _assert_same_state(state, reference[0][1])
    np.testing.assert_allclose(results["test_loss"], reference_results["test_loss"], rtol=RTOL)


def test_two_processes_killed_in_one_resume_and_equal_one_device(idx_dir, tmp_path, reference):  # noqa: F811
    config, workdir = _config(idx_dir), str(tmp_path / "run")
    started = time.monotonic()
    outputs = _two_processes(config, workdir, kill_at=7)
    assert outputs[1][0] == -signal.SIGKILL, outputs[1][2][-2000:]
    assert outputs[0][0] != 0, "the surviving process must fail, not finish or hang"
    assert time.monotonic() - started < 240
    assert _final(workdir)[0] == 6  # the chief's last checkpoint before the kill
    assert not os.path.exists(os.path.join(workdir, "results.json"))
    outputs = _two_processes(config, workdir)  # both started again
    for code, out, err in outputs:
        assert code == 0, err[-3000:]
        assert "Resumed from step 6 of 10" in out and "split over 2 devices of 2 processes" in out
    results = [_results(out) for _, out, _ in outputs]
    assert results[0] == results[1] and (results[0]["devices"], results[0]["processes"]) == (2, 2)
    step, state = _final(workdir)
    assert step == 10
    _assert_same_state(state, reference[0][1])
    np.testing.assert_allclose(results[0]["test_loss"], reference[1]["test_loss"], rtol=RTOL)
    # Only process 0 writes the run's files (and holds the workdir lock); the other's scratch folder is gone.
    assert sorted(os.listdir(workdir)) == ["checkpoints", "config.json", "results.json", "run.lock", "tensorboard"]
