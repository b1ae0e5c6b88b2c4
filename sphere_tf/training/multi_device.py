"""Training past one device on JAX: `keras.distribution.DataParallel` over every device of every process.

One process drives all its local devices (GPUs, or CPU devices split by
``XLA_FLAGS=--xla_force_host_platform_device_count=N``); several processes join
through JAX's distributed runtime, each feeding its own rows of every global batch.
A run calls, in this order, before it creates a model, reads data or computes anything
with JAX::

    settings = multi_device.process_settings()         # arguments, else KERAS_DISTRIBUTION_* variables
    multi_device.check_backend_request(keras.backend.backend(), devices_requested)
    multi_device.initialize(settings, timeout_s=60)     # no-op for one process; first JAX work of the program
    keras.utils.set_random_seed(seed)                   # the same seed in every process
    keras.distribution.set_distribution(multi_device.data_parallel())
    batch = multi_device.per_process_batch(global_batch)  # rows this process feeds per step
    model = ...; model.compile(...); model.fit(local_rows, batch_size=batch, shuffle=False)

Process p feeds rows ``[p*b, (p+1)*b)`` of each global batch (``b = per_process_batch``);
Keras's JAX trainer assembles the global batch with
`jax.make_array_from_process_local_data`, shards it over the batch axis of the
device mesh, and the jitted step computes with global semantics: the loss mean and
the statistics of `BatchNormalization` and of the decoupled operators' batch-mean
radius are over the whole global batch (XLA inserts the cross-device reductions), so
the trained weights equal the one-device run's up to float32 reduction order
(tests/training/test_multi_device.py measures it).

Multi-process on CPU uses JAX's Gloo collectives (`jax_cpu_collectives_implementation`,
"gloo" by default in JAX 0.10; `initialize` sets it where it is unset); GPUs and TPUs use
their own.

What a run must keep to (Keras 3.15, JAX 0.10):

* every batch, the last one included, has a row count divisible by the devices it is
  sharded over (per process: the local devices); `fit` and `evaluate` fail otherwise
  (`IndivisibleError`), so drop or pad the remainder;
* in a multi-process run `model.evaluate` works (its metrics are global), `model.predict`
  does not (its outputs span other processes' devices: "Fetching value for `jax.Array`
  that spans non-addressable ... devices is not possible");
* the variables are replicated, so every process holds the whole model:
  `model.save_weights` works in each, and only process 0 (`ProcessSettings.is_chief`)
  should write the run's files.

Keras 3.15 has no PyTorch distribution (`keras.distribution` is JAX and TensorFlow
only), and `tf.distribute` strategies need the TensorFlow backend:
`check_backend_request` turns either request into one line saying what to use.

Nothing here imports JAX at module level: the functions that need it import it on call.
"""

import dataclasses
import os
import random
import re
import sys
import threading

import keras
import numpy as np

from sphere_tf import validation

# Keras's variables (`keras.distribution.initialize`).
JOB_ADDRESSES_VARIABLE = "KERAS_DISTRIBUTION_JOB_ADDRESSES"
NUM_PROCESSES_VARIABLE = "KERAS_DISTRIBUTION_NUM_PROCESSES"
PROCESS_ID_VARIABLE = "KERAS_DISTRIBUTION_PROCESS_ID"

# The tf.distribute strategies of `sphere_tf.training.distribute.STRATEGIES` that need the TensorFlow backend
# (its `LOCAL_STRATEGIES`, 'auto' and 'one_device', run on every backend). Spelled out here: that module imports
# TensorFlow, which the JAX environment does not have.
TF_DISTRIBUTE_STRATEGIES = ("mirrored", "multi_worker", "tpu")

# The exit status of a process whose processes did not all meet within `initialize`'s timeout (the watchdog's
# `os._exit`: JAX itself would abort the process with SIGABRT a few seconds later, see `initialize`).
INITIALIZE_TIMEOUT_EXIT_CODE = 75
# How much longer JAX's own connection timeout is than ours, so that the watchdog's message comes first.
_JAX_TIMEOUT_GRACE_S = 10

_HOST_PORT = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):([0-9]{1,5})$")


@dataclasses.dataclass(frozen=True)
class ProcessSettings:
    """Where this process stands in a multi-process run (`process_settings`).

    Attributes:
        coordinator_address: str "host:port" of process 0's coordination service, or None (one process).
        num_processes: int >= 1.
        process_id: int in [0, num_processes).
    """

    coordinator_address: object
    num_processes: int
    process_id: int

    @property
    def multi_process(self):
        """True when the run has more than one process."""
        return self.num_processes > 1

    @property
    def is_chief(self):
        """True for process 0, the one that writes the run's files."""
        return self.process_id == 0


def _from_environment(value, argument, variable, environ):
    """`(value, name for messages)`: the argument, else the environment variable (a string), else None."""
    if value is not None:
        return value, argument
    if variable in environ:
        return environ[variable], variable
    return None, argument


def _integer(value, name):
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            raise validation.invalid_argument(name, "an integer", value) from None
    if not validation.is_int(value):
        raise validation.invalid_argument(name, "an integer", value)
    return int(value)


def _check_address(address, name):
    match = _HOST_PORT.match(address)
    if match is None or not 1 <= int(match.group(2)) <= 65535:
        raise validation.invalid_argument(name, 'an address "host:port" with a port in [1, 65535]', address)
    return address


def process_settings(coordinator_address=None, num_processes=None, process_id=None, environ=None):
    """This process's multi-process settings: the arguments, else Keras's environment variables, checked.

    Each argument left None is read from the variable `keras.distribution.initialize` reads:
    `KERAS_DISTRIBUTION_JOB_ADDRESSES` (the coordinator "host:port", or a comma-separated list of every
    process's address whose first is the coordinator, as Keras accepts), `KERAS_DISTRIBUTION_NUM_PROCESSES`
    and `KERAS_DISTRIBUTION_PROCESS_ID`. With neither, the run is one process (1 process, id 0, no address).

    Args:
        coordinator_address: str "host:port" of process 0, or None.
        num_processes: int >= 1, or None.
        process_id: int in [0, num_processes), or None.
        environ: mapping read instead of `os.environ` (tests).

    Returns:
        `ProcessSettings`.

    Raises:
        ValueError: naming the argument or the variable and its value: an address that is not "host:port",
            a process count < 1 or not an integer, an id outside [0, count), a list of addresses whose length
            is not the process count, several processes without an address or without this process's id.
    """
    environ = os.environ if environ is None else environ
    count, count_name = _from_environment(num_processes, "num_processes", NUM_PROCESSES_VARIABLE, environ)
    count = 1 if count is None else _integer(count, count_name)
    if count < 1:
        raise validation.invalid_argument(count_name, "an integer >= 1 (the number of processes)", count)
    pid, pid_name = _from_environment(process_id, "process_id", PROCESS_ID_VARIABLE, environ)
    if pid is None and count > 1:
        raise ValueError(
            f"{count_name}={count} needs this process's id in [0, {count}): pass process_id or set "
            f"{PROCESS_ID_VARIABLE}.")
    pid = 0 if pid is None else _integer(pid, pid_name)
    if not 0 <= pid < count:
        raise validation.invalid_argument(pid_name, f"an integer in [0, {count}) ({count_name}={count})", pid)
    address, address_name = _from_environment(
        coordinator_address, "coordinator_address", JOB_ADDRESSES_VARIABLE, environ)
    if address is not None:
        if not isinstance(address, str):
            raise validation.invalid_argument(address_name, 'a string "host:port"', address)
        addresses = [a.strip() for a in address.split(",")] if address.strip() else []
        if len(addresses) > 1 and len(addresses) != count:
            raise validation.invalid_argument(
                address_name, f"one address, or one per process ({count_name}={count})", address)
        for one in addresses:
            _check_address(one, address_name)
        address = addresses[0] if addresses else None
    if count > 1 and address is None:
        raise ValueError(
            f"{count_name}={count} needs the coordinator's address: pass coordinator_address='host:port' "
            f"(process 0's host and a free port) or set {JOB_ADDRESSES_VARIABLE}.")
    return ProcessSettings(address, count, pid)


def _jax():
    if keras.backend.backend() != "jax":
        raise ValueError(
            f"sphere_tf.training.multi_device trains on the JAX backend (keras.distribution); this process's "
            f"Keras backend is {keras.backend.backend()!r}. Run with KERAS_BACKEND=jax.")
    import jax  # the backend's own library, loaded with Keras's JAX backend

    return jax


def initialize(settings, timeout_s=60, heartbeat_timeout_s=30, seed=None):
    """Starts multi-process JAX for `settings` (nothing for one process); the first JAX work of the program.

    `keras.distribution.initialize` (Keras 3.15) passes no timeout to `jax.distributed.initialize`, whose
    default waits 300 s for the other processes and then aborts the process (SIGABRT, a C++ fatal log
    "DEADLINE_EXCEEDED ... RegisterTask"), so this calls JAX directly: it waits `timeout_s` for every process
    to join and, where they do not (a wrong process count, a wrong address, a process that did not start),
    writes one line to stderr saying so and ends the process with status `INITIALIZE_TIMEOUT_EXIT_CODE`.
    A Python exception is not possible there: JAX's connection call blocks in C++ and aborts the process
    itself when its own timeout (`timeout_s` + 10 s here) passes.

    Once joined, a process that dies is noticed by the others: their next collective with it fails at once
    (a `JaxRuntimeError` "Gloo all-reduce failed: ... Connection closed by peer", raised where the step's
    result is next read: `fit` dispatches steps asynchronously), and JAX's coordination service aborts every
    other process (SIGABRT, "Terminating process because the JAX distributed service detected fatal errors")
    within `heartbeat_timeout_s` when the dead process is not process 0, within a second when it is (its
    coordination service went with it); a finished process waits at most `timeout_s` for the others to
    finish too. Nothing waits forever; a supervisor restarts the whole group from its last checkpoint.

    Then, like `keras.distribution.initialize`, it gives every process the same random seed (`seed`, else
    process 0's random one, broadcast): `keras.utils.set_random_seed`, so that the replicated initial weights
    agree. A run that sets its own seed afterwards sets the same one everywhere anyway.

    Args:
        settings: `ProcessSettings` (`process_settings`).
        timeout_s: int > 0, seconds to wait for every process to join (and, at exit, to finish).
        heartbeat_timeout_s: int > 0, seconds after which a silent process counts as dead.
        seed: int or None, see above.

    Returns:
        bool, True where multi-process JAX started (several processes), False for one process.

    Raises:
        ValueError: bad timeouts; a backend other than JAX.
        RuntimeError: JAX already computed something (the backend is initialised), or started before.
    """
    timeout_s = validation.positive_int(timeout_s, "timeout_s")
    heartbeat_timeout_s = validation.positive_int(heartbeat_timeout_s, "heartbeat_timeout_s")
    if not isinstance(settings, ProcessSettings):
        raise validation.invalid_argument("settings", "a ProcessSettings (process_settings())", settings)
    if not settings.multi_process:
        return False
    jax = _jax()
    from jax.experimental import multihost_utils  # noqa: F401 (loaded before the clock starts)

    if jax.distributed.is_initialized():
        raise RuntimeError("multi-process JAX is already started in this process: call initialize once.")
    if jax.config.jax_cpu_collectives_implementation is None:
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    where = (f"process {settings.process_id} of {settings.num_processes} "
             f"(coordinator {settings.coordinator_address})")
    joined = threading.Event()

    def watchdog():
        if not joined.wait(timeout_s):
            sys.stderr.write(
                f"sphere_tf multi_device.initialize: {where}: the {settings.num_processes} processes did not all "
                f"join within {timeout_s} s. Start every process, each with the same num_processes "
                f"({NUM_PROCESSES_VARIABLE}={settings.num_processes}) and coordinator address "
                f"({JOB_ADDRESSES_VARIABLE}={settings.coordinator_address}) and its own process id in "
                f"[0, {settings.num_processes}); process 0 must be able to listen on that port. "
                f"Exiting with status {INITIALIZE_TIMEOUT_EXIT_CODE}.\n")
            sys.stderr.flush()
            os._exit(INITIALIZE_TIMEOUT_EXIT_CODE)

    thread = threading.Thread(target=watchdog, name="sphere_tf-initialize-watchdog", daemon=True)
    thread.start()
    try:
        jax.distributed.initialize(
            coordinator_address=settings.coordinator_address,
            num_processes=settings.num_processes,
            process_id=settings.process_id,
            cluster_detection_method="deactivate",  # the settings are complete: no Slurm/MPI/TPU detection
            initialization_timeout=timeout_s + _JAX_TIMEOUT_GRACE_S,
            heartbeat_timeout_seconds=heartbeat_timeout_s,
            shutdown_timeout_seconds=timeout_s,
        )
    except RuntimeError as error:
        joined.set()
        if "must be called before" in str(error):
            raise RuntimeError(
                f"multi_device.initialize must come before any JAX computation (creating a model, "
                f"keras.distribution.list_devices, jax.devices, reading data onto a device): {error}") from error
        raise
    finally:
        joined.set()
    _share_seed(jax, seed)
    return True


def _share_seed(jax, seed):
    from jax.experimental import multihost_utils

    local = random.SystemRandom().randrange(2**31) if seed is None else validation.integer(seed, "seed", 0)
    shared = int(multihost_utils.broadcast_one_to_all(np.asarray(local, np.int64)))
    keras.utils.set_random_seed(shared)
    return shared


def data_parallel(devices=None):
    """`keras.distribution.DataParallel` over `devices` (default: every device of every process).

    Variables are replicated, batches sharded over the mesh's "batch" axis. `auto_shard_dataset` is False:
    each process feeds its own rows (NumPy arrays, a Grain dataset, a per-process tf.data pipeline), and
    Keras refuses anything but a `tf.data.Dataset` with auto-sharding in a multi-process run.

    Set it with `keras.distribution.set_distribution` (or enter `.scope()`) before creating the model.
    """
    _jax()
    devices = keras.distribution.list_devices() if devices is None else list(devices)
    return keras.distribution.DataParallel(devices=devices, auto_shard_dataset=False)


def per_process_batch(global_batch, num_devices=None, num_processes=None):
    """The rows one process feeds per step: `global_batch / process count`, checked against the devices.

    Args:
        global_batch: int > 0, the batch of one optimizer step over all processes.
        num_devices: int, the devices the batch is sharded over (default: all, `keras.distribution`).
        num_processes: int, the process count (default: JAX's).

    Raises:
        ValueError: `global_batch` is not a positive integer, or not divisible by the device count (naming
            `batch_size` and the count), or the devices are not spread evenly over the processes.
    """
    global_batch = validation.positive_int(global_batch, "batch_size")
    if num_devices is None or num_processes is None:
        jax = _jax()
        num_devices = jax.device_count() if num_devices is None else num_devices
        num_processes = jax.process_count() if num_processes is None else num_processes
    num_devices = validation.positive_int(num_devices, "num_devices")
    num_processes = validation.positive_int(num_processes, "num_processes")
    if num_devices % num_processes:
        raise ValueError(f"{num_devices} devices are not spread evenly over {num_processes} processes.")
    if global_batch % num_devices:
        raise ValueError(
            f"Invalid value for argument `batch_size`: the global batch is split evenly over {num_devices} "
            f"devices, so it must be a multiple of {num_devices}. Received: batch_size={global_batch}")
    return global_batch // num_processes


def check_backend_request(backend, devices_requested=1, strategy=None):
    """Fails, in one line, on a multi-device request the backend cannot serve.

    * PyTorch: Keras 3.15 has no PyTorch distribution, so more than one device is refused, naming
      KERAS_BACKEND=jax (keras.distribution) and KERAS_BACKEND=tensorflow (tf.distribute).
    * JAX and PyTorch: a tf.distribute strategy name (`TF_DISTRIBUTE_STRATEGIES`) is refused, naming
      keras.distribution.DataParallel on JAX and KERAS_BACKEND=tensorflow.

    Args:
        backend: str, the Keras backend ("jax", "torch", "tensorflow", ...).
        devices_requested: int >= 1, the devices the run asks to train on.
        strategy: str or None, a `sphere_tf.training.distribute` strategy name.

    Raises:
        ValueError: as above, or a bad `devices_requested`.
    """
    devices_requested = validation.positive_int(devices_requested, "devices_requested")
    if strategy in TF_DISTRIBUTE_STRATEGIES and backend != "tensorflow":
        alternative = ("on JAX, train on several devices with keras.distribution.DataParallel "
                       "(sphere_tf.training.multi_device), or run with KERAS_BACKEND=tensorflow"
                       if backend == "jax" else "run with KERAS_BACKEND=jax (keras.distribution) or "
                       "KERAS_BACKEND=tensorflow (tf.distribute) to train on several devices")
        raise ValueError(
            f"strategy={strategy!r} is a tf.distribute strategy and needs the TensorFlow backend; this run's "
            f"Keras backend is {backend!r}: {alternative}.")
    if backend == "torch" and devices_requested > 1:
        raise ValueError(
            f"{devices_requested} devices requested on the PyTorch backend, but Keras {keras.__version__} has no "
            "PyTorch distribution (keras.distribution supports JAX and TensorFlow): train on one device, or run "
            "with KERAS_BACKEND=jax (keras.distribution.DataParallel) to train on several.")


def process_count():
    """int, the processes training together (1 off JAX, or where multi-process JAX did not start)."""
    if keras.backend.backend() != "jax":
        return 1
    return _jax().process_count()


def process_index():
    """int, this process's index among `process_count()` (0 off JAX)."""
    if keras.backend.backend() != "jax":
        return 0
    return _jax().process_index()


def global_batch(data):
    """This process's rows of a batch (NumPy, any nest) as the global batch under the current distribution.

    What Keras's JAX trainer does to the batches `fit` and `evaluate` read
    (`jax.make_array_from_process_local_data` with the distribution's data layout), for a plain model call
    outside them: precise BN's forward passes, the test predictions. Without a distribution the data are
    returned as they are.
    """
    distribution = keras.distribution.distribution()
    if distribution is None:
        return data
    jax = _jax()

    def one(x):
        x = np.asarray(x)
        layout = distribution.get_data_layout(x.shape)
        return jax.make_array_from_process_local_data(layout.backend_layout, x)

    return keras.tree.map_structure(one, data)


def gather(array):
    """The whole of a global array (sharded over the processes' devices) as NumPy, on every process."""
    jax = _jax()
    from jax.experimental import multihost_utils

    if jax.process_count() == 1 or getattr(array, "is_fully_addressable", True):
        return np.asarray(keras.ops.convert_to_numpy(array))
    return np.asarray(multihost_utils.process_allgather(array, tiled=True))


def barrier(name="sphere_tf"):
    """Blocks until every process reaches this call (nothing to wait for with one process)."""
    if process_count() == 1:
        return
    from jax.experimental import multihost_utils

    _jax()
    multihost_utils.sync_global_devices(name)
