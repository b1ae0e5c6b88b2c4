"""Tests for sphere_tf.training.multi_device: JAX `keras.distribution.DataParallel` on 1, 2, 4 devices, the start of
several processes, and the settings. Two processes training together, a kill -9 of one and the resume are tested
through the runner, with its checkpoints (tests/runners/test_runner_multi_device.py).

The device count is fixed when JAX starts, and multi-process JAX joins at start, so every training run is a fresh
child process (`_multi_device_child.py` next to this file) with its own `XLA_FLAGS` and `KERAS_DISTRIBUTION_*`
variables, bounded by `subprocess` timeouts; the children write their final weights to `.npz` files compared here.
Each test starts its own children (no module fixture: under pytest-xdist it would run once per worker).

The model: Conv2D -> BatchNormalization -> ReLU -> DecoupledConv2D (tanh x cosine, batch-mean radius) -> global
pooling -> Dense, SGD with momentum, 4 steps of `model.fit` over fixed NumPy data with global batch 8, whose rows
are shifted by (row mod 8)/2 so that every device's shard has its own statistics.

Tolerance (`RTOL`, `ATOL`): the mesh-sharded step computes the same global sums (loss mean, gradients, the
BatchNormalization mean and variance, the decoupled layers' batch-mean radius) as partial sums per device added by
an all-reduce, so only the float32 summation order differs: measured, every weight of the 2- and 4-device and of
the 2-process run is within 1.2e-7 (absolute; 1 ulp at magnitude 1) of the one-device run. A Grain input is bitwise
equal to NumPy arrays at the same device count (and, measured once, the 2-process run bitwise equal to the
2-device one-process run: the same SPMD program).
"""

import json
import os
import socket
import subprocess
import sys
import time

import keras
import numpy as np
import pytest

from sphere_tf.training import multi_device

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CHILD = os.path.join(HERE, "_multi_device_child.py")
TIMEOUT = 300  # any child, on two busy cores (about 10 s each when the cores are free)
STEPS = 4
RTOL, ATOL = 1e-5, 1e-6  # float32 reduction order, see the module docstring (measured: 1.2e-7 absolute)
JAX = pytest.mark.backend_only("jax")


# ------------------------------------------------------------------ child processes
def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(devices=1, processes=None):
    env = dict(os.environ, KERAS_BACKEND="jax", JAX_PLATFORMS="cpu", TF_CPP_MIN_LOG_LEVEL="3",
               PYTHONPATH=os.pathsep.join(p for p in (REPO, os.environ.get("PYTHONPATH")) if p))
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "xla_force_host_platform_device_count" not in f]
    # Single-threaded Eigen: the children share two cores (the tolerances hold with and without it).
    env["XLA_FLAGS"] = " ".join(flags + [f"--xla_force_host_platform_device_count={devices}",
                                         "--xla_cpu_multi_thread_eigen=false"])
    for name in (multi_device.JOB_ADDRESSES_VARIABLE, multi_device.NUM_PROCESSES_VARIABLE,
                 multi_device.PROCESS_ID_VARIABLE):
        env.pop(name, None)
    if processes is not None:
        address, count, pid = processes
        env.update({multi_device.JOB_ADDRESSES_VARIABLE: address, multi_device.NUM_PROCESSES_VARIABLE: str(count),
                    multi_device.PROCESS_ID_VARIABLE: str(pid)})
    return env


class Child:
    """One child process running `spec`, its output in files (no pipe to fill up while it runs)."""

    def __init__(self, folder, name, spec, devices=1, processes=None):
        self.name, self.path = name, os.path.join(folder, f"{name}.log")
        self.started = time.time()
        with open(self.path, "w") as log:
            self.process = subprocess.Popen([sys.executable, CHILD, json.dumps(spec)], env=_env(devices, processes),
                                            cwd=REPO, stdout=log, stderr=subprocess.STDOUT)

    def wait(self, timeout=TIMEOUT):
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"{self.name}: still running after {timeout} s\n{self.output()[-3000:]}")
        self.seconds = time.time() - self.started
        return code

    def output(self):
        with open(self.path) as log:
            return log.read()

    def ok(self):
        code = self.wait()
        assert code == 0, f"{self.name}: exit status {code}\n{self.output()[-5000:]}"
        return self


def _group(folder, name, spec, processes, port=None):
    """`processes` children of one multi-process run (1 CPU device each)."""
    address = f"127.0.0.1:{port or _free_port()}"
    return [Child(folder, f"{name}_p{p}", spec, 1, (address, processes, p)) for p in range(processes)]


def _load(path):
    with np.load(path) as f:
        return {k: f[k] for k in f.files}


def _weights(result, kind="numpy"):
    return {k.split("/", 1)[1]: v for k, v in result.items() if k.startswith(kind + "/")}


def _assert_close(got, want, what):
    assert got.keys() == want.keys()
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=RTOL, atol=ATOL, err_msg=f"{what}: {name}")


def _assert_bitwise(got, want, what):
    assert got.keys() == want.keys()
    different = [name for name in want if not np.array_equal(got[name], want[name])]
    assert different == [], f"{what}: not bitwise equal: {different}"


def _results(folder, name, children):
    for child in children:
        child.ok()
        print(f"{child.name}: {child.seconds:.1f} s")
    if len(children) == 1:
        return _load(os.path.join(folder, f"{name}.npz"))
    return [_load(os.path.join(folder, f"{name}_p{p}.npz")) for p in range(len(children))]


# ------------------------------------------------------------------ one process, 1 / 2 / 4 devices
@JAX
def test_data_parallel_on_1_2_4_devices(tmp_path):
    """`fit` under DataParallel on 2 and 4 devices equals 1 device; BatchNormalization normalises with the global
    batch's statistics; a Grain MapDataset of batches gives the same weights as NumPy arrays."""
    folder = str(tmp_path)
    specs = {
        1: [dict(name="numpy", steps=STEPS)],
        2: [dict(name="numpy", steps=STEPS), dict(name="grain", input="grain", steps=STEPS)],
        4: [dict(name="numpy", steps=STEPS)],
    }
    children = {n: Child(folder, f"d{n}", dict(out=os.path.join(folder, f"d{n}.npz"), runs=runs, bn_probe=n > 1),
                         devices=n) for n, runs in specs.items()}
    results = {n: _results(folder, f"d{n}", [child]) for n, child in children.items()}
    one = results[1]
    assert int(one["devices"]) == 1 and int(one["numpy_iterations"]) == STEPS
    for devices in (2, 4):
        result = results[devices]
        assert int(result["devices"]) == devices and int(result["per_process"]) == 8
        # The variables are replicated on every device of the mesh, and all the steps ran.
        assert int(result["numpy_kernel_devices"]) == devices and bool(result["numpy_kernel_replicated"])
        assert int(result["numpy_iterations"]) == STEPS
        _assert_close(_weights(result), _weights(one), f"{devices} devices vs 1")
        np.testing.assert_allclose(result["numpy_loss"], one["numpy_loss"], rtol=RTOL)
        # BatchNormalization(training=True) jitted on a batch sharded over the devices (each shard with its own
        # mean) normalises with the global batch's mean and variance; per-device statistics would be off by O(1).
        assert int(result["bn_probe_devices"]) == devices and int(result["bn_probe_shards"]) == devices
        assert float(result["bn_probe_error"]) < 1e-5
        assert float(result["bn_probe_moving_mean_error"]) < 1e-6
        assert float(result["bn_probe_local_stats_gap"]) > 0.5
    assert int(results[2]["grain_iterations"]) == STEPS
    _assert_bitwise(_weights(results[2], "grain"), _weights(results[2]), "grain vs numpy, 2 devices")


# ------------------------------------------------------------------ two processes
@JAX
def test_a_missing_process_fails_within_the_timeout_with_a_clear_message(tmp_path):
    """2 processes expected, only process 0 started: it exits after `timeout_s`, saying what to check."""
    spec = dict(out=str(tmp_path / "x_p{p}.npz"), runs=[dict(name="numpy", steps=1)], timeout_s=3)
    child = Child(str(tmp_path), "alone", spec, 1, (f"127.0.0.1:{_free_port()}", 2, 0))
    code = child.wait(timeout=120)  # bounded: a hang fails here
    text = child.output()
    assert code == multi_device.INITIALIZE_TIMEOUT_EXIT_CODE, text[-3000:]
    assert "process 0 of 2" in text and "did not all join within 3 s" in text, text[-3000:]
    assert "KERAS_DISTRIBUTION_NUM_PROCESSES=2" in text
    assert not (tmp_path / "x_p0.npz").exists()


@JAX
def test_process_settings_from_arguments_and_environment():
    assert multi_device.process_settings(environ={}) == multi_device.ProcessSettings(None, 1, 0)
    settings = multi_device.process_settings("10.0.0.1:1234", 2, 1, environ={})
    assert settings == multi_device.ProcessSettings("10.0.0.1:1234", 2, 1)
    assert settings.multi_process and not settings.is_chief
    env = {"KERAS_DISTRIBUTION_JOB_ADDRESSES": "host-a:99,host-b:98", "KERAS_DISTRIBUTION_NUM_PROCESSES": "2",
           "KERAS_DISTRIBUTION_PROCESS_ID": "0"}
    assert multi_device.process_settings(environ=env) == multi_device.ProcessSettings("host-a:99", 2, 0)
    # Arguments win over the variables.
    assert multi_device.process_settings("[::1]:5000", environ=env).coordinator_address == "[::1]:5000"
    assert multi_device.process_settings(process_id=1, environ=env).process_id == 1


@pytest.mark.parametrize("kwargs, env, message", [
    (dict(coordinator_address="10.0.0.1", num_processes=2, process_id=0), {}, "coordinator_address='10.0.0.1'"),
    (dict(coordinator_address="host:0", num_processes=2, process_id=0), {}, "coordinator_address='host:0'"),
    (dict(coordinator_address="host:70000", num_processes=2, process_id=0), {}, "host:70000"),
    ({}, {"KERAS_DISTRIBUTION_JOB_ADDRESSES": "nohost", "KERAS_DISTRIBUTION_NUM_PROCESSES": "2",
      "KERAS_DISTRIBUTION_PROCESS_ID": "1"},
     "KERAS_DISTRIBUTION_JOB_ADDRESSES='nohost'"),
    (dict(num_processes=0), {}, "num_processes=0"),
    ({}, {"KERAS_DISTRIBUTION_NUM_PROCESSES": "-1"}, "KERAS_DISTRIBUTION_NUM_PROCESSES=-1"),
    ({}, {"KERAS_DISTRIBUTION_NUM_PROCESSES": "two"}, "KERAS_DISTRIBUTION_NUM_PROCESSES='two'"),
    (dict(coordinator_address="h:1", num_processes=2, process_id=2), {}, "process_id=2"),
    (dict(coordinator_address="h:1", num_processes=2, process_id=-1), {}, "process_id=-1"),
    ({}, {"KERAS_DISTRIBUTION_JOB_ADDRESSES": "h:1", "KERAS_DISTRIBUTION_NUM_PROCESSES": "2",
          "KERAS_DISTRIBUTION_PROCESS_ID": "5"}, "KERAS_DISTRIBUTION_PROCESS_ID=5"),
    (dict(num_processes=3, process_id=0, coordinator_address="a:1,b:2"), {}, "one per process"),
    (dict(num_processes=2, process_id=0), {}, "KERAS_DISTRIBUTION_JOB_ADDRESSES"),
    (dict(num_processes=2, coordinator_address="h:1"), {}, "KERAS_DISTRIBUTION_PROCESS_ID"),
])
def test_process_settings_errors_name_the_argument_or_variable_and_value(kwargs, env, message):
    with pytest.raises(ValueError) as caught:
        multi_device.process_settings(environ=env, **kwargs)
    assert message in str(caught.value)


def test_per_process_batch():
    assert multi_device.per_process_batch(8, num_devices=4, num_processes=2) == 4
    assert multi_device.per_process_batch(8, num_devices=2, num_processes=1) == 8
    with pytest.raises(ValueError, match=r"`batch_size`.*4 devices.*batch_size=6"):
        multi_device.per_process_batch(6, num_devices=4, num_processes=1)
    with pytest.raises(ValueError, match="batch_size=0"):
        multi_device.per_process_batch(0, num_devices=1, num_processes=1)
    with pytest.raises(ValueError, match="evenly over 2 processes"):
        multi_device.per_process_batch(6, num_devices=3, num_processes=2)


def test_check_backend_request():
    for backend in ("jax", "torch", "tensorflow"):
        multi_device.check_backend_request(backend, 1)
    multi_device.check_backend_request("jax", 4)
    multi_device.check_backend_request("tensorflow", 4, strategy="mirrored")
    with pytest.raises(ValueError) as caught:
        multi_device.check_backend_request("torch", 2)
    message = str(caught.value)
    assert "\n" not in message and "PyTorch" in message and "KERAS_BACKEND=jax" in message
    with pytest.raises(ValueError) as caught:
        multi_device.check_backend_request("jax", 1, strategy="mirrored")
    message = str(caught.value)
    assert "\n" not in message and "'mirrored'" in message and "DataParallel" in message
    assert "KERAS_BACKEND=tensorflow" in message
    with pytest.raises(ValueError, match="KERAS_BACKEND=jax"):
        multi_device.check_backend_request("torch", 1, strategy="multi_worker")
    with pytest.raises(ValueError, match="devices_requested=0"):
        multi_device.check_backend_request("jax", 0)


def test_initialize_does_nothing_for_one_process():
    assert multi_device.initialize(multi_device.ProcessSettings(None, 1, 0)) is False
    with pytest.raises(ValueError, match="timeout_s=0"):
        multi_device.initialize(multi_device.ProcessSettings(None, 1, 0), timeout_s=0)


@JAX
def test_initialize_after_a_jax_computation_says_it_must_come_first():
    import jax

    jax.devices()  # the backend is up, as after any computation: JAX refuses before connecting anywhere
    settings = multi_device.ProcessSettings(f"127.0.0.1:{_free_port()}", 2, 0)
    with pytest.raises(RuntimeError, match="before any JAX computation"):
        multi_device.initialize(settings, timeout_s=5)


@pytest.mark.backend_only("tensorflow", "torch")  # on JAX, data_parallel runs in the children above
def test_data_parallel_needs_the_jax_backend():
    with pytest.raises(ValueError, match="KERAS_BACKEND=jax"):
        multi_device.data_parallel()
