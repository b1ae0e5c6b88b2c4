"""`tf.distribute` strategies for the runner, and which worker writes checkpoints.

`make_strategy(name)` builds the strategy a run trains under:

* ``"auto"``: `MirroredStrategy` over the visible GPUs when there are more than
  one, otherwise TensorFlow's default strategy (one device, no replication).
* ``"one_device"``: `OneDeviceStrategy` on the first GPU, or on the CPU.
* ``"mirrored"``: `MirroredStrategy` over every local device: the GPUs, or on a
  host without GPUs every logical CPU (`configure_logical_cpus` splits the CPU
  into several, as tests do to replicate on one machine).
* ``"multi_worker"``: `MultiWorkerMirroredStrategy`, the cluster read from the
  ``TF_CONFIG`` environment variable (checked first: `parse_tf_config`).
* ``"tpu"``: `TPUStrategy` on the TPU found by `TPUClusterResolver`.

**Batch size and learning rate.** The batch of a config is the *global* batch:
with R replicas each one computes the gradient on ``batch / R`` examples, and
the replicas' gradients are summed after each has been scaled by 1/R (Keras
losses average over the global batch), so one step under a strategy is one step
of the global batch on one device (`tests/training/test_distribute.py` checks
the weights agree). Keeping the global batch keeps the learning rate. Growing
the global batch by a factor k (e.g. keeping the per-replica batch while adding
replicas) calls for the linear scaling rule with warm-up of Goyal et al.,
"Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour" (2017, §2.1):
learning rate × k; the papers' schedules (SphereNet, DCNet, OPT) are stated for
their own global batches.

**Checkpoints.** Under `MultiWorkerMirroredStrategy` every worker takes part in
a save (the variables are reduced collectively), but only the chief writes to
the real directory; the others write to a temporary folder they delete after
each save, the pattern of TensorFlow's "Multi-worker training with Keras"
tutorial. `checkpoint_directory` gives that folder; every worker restores from
the chief's directory.

**Other Keras backends.** `tf.distribute` replicates TensorFlow programs only.
On JAX and PyTorch `make_strategy` answers ``"auto"`` and ``"one_device"`` with
a `LocalStrategy` (one process, Keras's own device placement: the first GPU or
TPU JAX / PyTorch see, else the CPU) and refuses the replicating strategies,
naming the backend.
"""

import contextlib
import json
import os
import shutil

import keras
import numpy as np

from sphere_tf import dependencies
from sphere_tf import validation
from sphere_tf.training import multi_device



def _tf():
    """TensorFlow: every strategy here but `LocalStrategy` is a tf.distribute one (TensorFlow backend only)."""
    return dependencies.tensorflow(__name__)

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")
# What a run on a backend other than TensorFlow can use (`LocalStrategy`).
LOCAL_STRATEGIES = ("auto", "one_device")
TF_CONFIG = "TF_CONFIG"
WORKER_TEMP_PREFIX = "workertemp_"


def configure_logical_cpus(count):
    """Splits the first physical CPU into `count` logical devices (``/cpu:0`` … ``/cpu:<count-1>``).

    Must run before TensorFlow initialises its devices (before any op runs), so
    tests call it at the start of a fresh process.

    Args:
        count: int > 0, the number of logical CPUs.

    Returns:
        list of the logical CPU device names.

    Raises:
        RuntimeError: TensorFlow's devices are already initialised with another
            configuration.
    """
    tf = _tf()
    count = validation.positive_int(count, "count")
    cpu = tf.config.list_physical_devices("CPU")[0]
    try:
        tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)
    except RuntimeError as error:
        raise RuntimeError(
            f"Cannot split the CPU into {count} logical devices: TensorFlow is already initialised ({error}). "
            "Call configure_logical_cpus at the start of the process, before any TensorFlow op."
        ) from error
    return [device.name for device in tf.config.list_logical_devices("CPU")]


def parse_tf_config(value=None):
    """Reads and checks the ``TF_CONFIG`` cluster description of a multi-worker run.

    Args:
        value: str (JSON) or dict, or None to read the ``TF_CONFIG`` environment variable.

    Returns:
        dict with ``cluster`` (task type -> list of "host:port") and ``task``
        (``{"type": ..., "index": ...}``).

    Raises:
        ValueError: missing, not JSON, or inconsistent (the message says what).
    """
    if value is None:
        value = os.environ.get(TF_CONFIG)
        if not value:
            raise ValueError(
                f"strategy='multi_worker' reads the cluster from the {TF_CONFIG} environment variable, which is not "
                'set. Set it on every worker, e.g. TF_CONFIG=\'{"cluster": {"worker": ["host1:port", "host2:port"]}, '
                '"task": {"type": "worker", "index": 0}}\'.'
            )
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(f"{TF_CONFIG} is not valid JSON ({error}): {value!r}") from error
    if not isinstance(value, dict):
        raise ValueError(f"{TF_CONFIG} must be a JSON object with 'cluster' and 'task'; got {value!r}.")
    cluster, task = value.get("cluster"), value.get("task")
    if not isinstance(cluster, dict) or not cluster:
        raise ValueError(f"{TF_CONFIG} has no 'cluster' (task type -> list of 'host:port'): {value!r}.")
    for task_type, addresses in cluster.items():
        if (not isinstance(addresses, list) or not addresses
                or not all(isinstance(a, str) and ":" in a for a in addresses)):
            raise ValueError(
                f"{TF_CONFIG} cluster[{task_type!r}] must be a non-empty list of 'host:port'; got {addresses!r}."
            )
    if not isinstance(task, dict) or "type" not in task or "index" not in task:
        raise ValueError(f"{TF_CONFIG} has no 'task' with 'type' and 'index': {value!r}.")
    if task["type"] not in cluster:
        raise ValueError(
            f"{TF_CONFIG} task type {task['type']!r} is not in the cluster (task types {sorted(cluster)})."
        )
    index = task["index"]
    if not validation.is_int(index) or not 0 <= index < len(cluster[task["type"]]):
        raise ValueError(
            f"{TF_CONFIG} task index {index!r} is out of range for the {len(cluster[task['type']])} "
            f"{task['type']!r} addresses."
        )
    return value


class LocalStrategy:
    """The "strategy" of a run without `tf.distribute` (the JAX and PyTorch backends).

    It has what the runner asks of a strategy: `scope()` (nothing to enter: Keras places variables on the
    backend's default device, or as the run's `keras.distribution` says), the replica count, and which
    process writes the run's files. On JAX `distribution` is a `keras.distribution.DataParallel` over every
    device of every process where there is more than one (`sphere_tf.training.multi_device`), else None; the
    process index and count are JAX's (several processes after `multi_device.initialize`), and process 0 is
    the chief.

    Args:
        backend: str, the Keras backend the run trains on (for messages).
        distribution: a `keras.distribution.Distribution` the run trains under, or None (one device).
    """

    cluster_resolver = None

    def __init__(self, backend=None, distribution=None):
        self.backend = backend or keras.backend.backend()
        self.distribution = distribution
        self.process_index = multi_device.process_index()
        self.process_count = multi_device.process_count()

    @property
    def num_replicas_in_sync(self):
        """The devices a global batch is split over (1 without a distribution)."""
        if self.distribution is None:
            return 1
        return int(np.prod(self.distribution.device_mesh.shape))

    def scope(self):
        """A context that does nothing (the `tf.distribute` strategies' `scope()` places variables)."""
        return contextlib.nullcontext()

    def __repr__(self):
        return (f"LocalStrategy(backend={self.backend!r}, replicas={self.num_replicas_in_sync}, "
                f"process={self.process_index} of {self.process_count})")


def _local_strategy(name):
    backend = keras.backend.backend()
    if name not in LOCAL_STRATEGIES:
        alternative = ("strategy='auto' trains on every device through keras.distribution.DataParallel"
                       if backend == "jax" else "strategy='auto' or 'one_device' trains on one device")
        raise ValueError(
            f"strategy={name!r} is a tf.distribute strategy and needs the TensorFlow backend; this run's Keras "
            f"backend is {backend!r}. On {backend!r}, {alternative}; or run with KERAS_BACKEND=tensorflow "
            "(trainers: --backend=tensorflow) to use it."
        )
    if backend != "jax":
        return LocalStrategy(backend)
    devices = keras.distribution.list_devices()
    if name == "one_device":
        if multi_device.process_count() > 1:
            raise ValueError(f"strategy='one_device' with {multi_device.process_count()} processes: every process "
                             "trains together on all devices; use strategy='auto'.")
        return LocalStrategy(backend)
    return LocalStrategy(backend, multi_device.data_parallel(devices) if len(devices) > 1 else None)


def model_strategy(model):
    """The strategy `model` was built under: its `distribute_strategy` on TensorFlow, else a `LocalStrategy`."""
    if keras.backend.backend() != "tensorflow":
        return LocalStrategy(distribution=keras.distribution.distribution() if keras.backend.backend() == "jax"
                             else None)
    return model.distribute_strategy


def _local_devices():
    tf = _tf()
    gpus = tf.config.list_logical_devices("GPU")
    return [d.name for d in gpus] if gpus else [d.name for d in tf.config.list_logical_devices("CPU")]


def make_strategy(name="auto", tpu=None):
    """The `tf.distribute.Strategy` named `name` (see the module docstring).

    Args:
        name: one of `STRATEGIES`.
        tpu: for ``"tpu"``: the TPU name, its ``grpc://`` address, or ``"local"``
            (a TPU VM); None reads ``TPU_NAME``.

    Returns:
        `tf.distribute.Strategy`; on another Keras backend a `LocalStrategy`
        (``"auto"`` and ``"one_device"`` only).

    Raises:
        ValueError: unknown name, ``TF_CONFIG`` missing or malformed, or a
            replicating strategy on a backend other than TensorFlow.
        RuntimeError: no TPU could be reached.
    """
    validation.one_of(name, "name", STRATEGIES)
    if keras.backend.backend() != "tensorflow":
        return _local_strategy(name)
    tf = _tf()
    if name == "auto":
        gpus = tf.config.list_logical_devices("GPU")
        if len(gpus) > 1:
            return tf.distribute.MirroredStrategy([d.name for d in gpus])
        return tf.distribute.get_strategy()
    if name == "one_device":
        return tf.distribute.OneDeviceStrategy(_local_devices()[0])
    if name == "mirrored":
        return tf.distribute.MirroredStrategy(_local_devices())
    if name == "multi_worker":
        parse_tf_config()
        return tf.distribute.MultiWorkerMirroredStrategy()
    tpu = tpu if tpu is not None else os.environ.get("TPU_NAME")
    if not tpu:
        raise ValueError(
            "strategy='tpu' needs the TPU: pass `tpu` (a name, a grpc:// address or 'local') or set TPU_NAME."
        )
    try:
        resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu)
        if tpu != "local":
            tf.config.experimental_connect_to_cluster(resolver)
        tf.tpu.experimental.initialize_tpu_system(resolver)
    except (ValueError, RuntimeError, tf.errors.OpError) as error:
        raise RuntimeError(f"strategy='tpu': no TPU reachable as tpu={tpu!r} ({str(error).strip()[:300]})") from error
    return tf.distribute.TPUStrategy(resolver)


def _current(strategy):
    """`strategy`, or the one in scope (TensorFlow) / a `LocalStrategy` (other backends) when None."""
    if strategy is not None:
        return strategy
    return _tf().distribute.get_strategy() if keras.backend.backend() == "tensorflow" else LocalStrategy()


def _task(strategy):
    """(task_type, task_id) of this process under `strategy` (None, None without a cluster)."""
    if isinstance(strategy, LocalStrategy):
        return ("process", strategy.process_index) if strategy.process_count > 1 else (None, None)
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not getattr(strategy.extended, "_in_multi_worker_mode", lambda: False)():
        return None, None
    return resolver.task_type, resolver.task_id


def is_chief(strategy=None):
    """bool, whether this process writes checkpoints and logs (True outside multi-worker runs).

    The chief is the ``chief`` task, or worker 0 of a cluster without one.
    """
    strategy = _current(strategy)
    task_type, task_id = _task(strategy)
    if task_type is None:
        return True
    if task_type == "process":  # multi-process JAX: process 0
        return task_id == 0
    if task_type == "chief":
        return True
    cluster = strategy.cluster_resolver.cluster_spec().as_dict()
    return task_type == "worker" and task_id == 0 and "chief" not in cluster


def checkpoint_directory(directory, strategy=None):
    """The folder this process writes to: `directory` on the chief, a temporary one elsewhere.

    A non-chief worker writes to ``<directory>/workertemp_<task type>_<task id>`` and deletes
    it after each save (`remove_worker_directory`).
    """
    strategy = _current(strategy)
    if is_chief(strategy):
        return directory
    task_type, task_id = _task(strategy)
    return os.path.join(directory, f"{WORKER_TEMP_PREFIX}{task_type}_{task_id}")


def remove_worker_directory(directory, strategy=None):
    """Deletes this worker's temporary checkpoint folder (no-op on the chief)."""
    path = checkpoint_directory(directory, strategy)
    if path == directory:
        return
    if isinstance(_current(strategy), LocalStrategy):
        shutil.rmtree(path, ignore_errors=True)
    elif _tf().io.gfile.exists(path):
        _tf().io.gfile.rmtree(path)


def in_multi_worker_mode(strategy=None):
    """bool, whether `strategy` (default: the current one) spans several worker processes."""
    return _task(_current(strategy))[0] is not None


def barrier(strategy=None):
    """Blocks until every replica of every worker reaches this call (one all-reduce of a scalar).

    A worker process that exits while another still runs makes TensorFlow's
    coordination service report it as crashed; the runner ends every
    multi-worker run here, after the chief has written its files. A multi-process JAX run waits at
    `multi_device.barrier`.
    """
    if isinstance(strategy, LocalStrategy):
        multi_device.barrier("sphere_tf.training.distribute.barrier")
        return strategy.process_count
    tf = _tf()
    strategy = strategy or tf.distribute.get_strategy()
    ones = strategy.run(lambda: tf.constant(1.0))
    return int(strategy.reduce("SUM", ones, axis=None).numpy())


@contextlib.contextmanager
def distributed_fit(model):
    """Lets Keras 3's `model.fit` under a strategy read exactly the batches it is given, and run on several workers.

    1. Under a strategy scope, `fit` first builds the model, loss and metrics
       symbolically from one batch it reads from a first iterator over the
       training data, then starts training on a second iterator. A
       `shuffle(..., seed=s, reshuffle_each_iteration=True)` draws a new order
       for every iterator, so the batches a step sees depend on those extra
       reads: a run resumed at step s with `dataset.repeat().skip(s)` would
       not see the batches of the uninterrupted run. The build needs only the
       batch's structure, shapes and dtypes: inside this context it takes them
       from the dataset's `element_spec` and reads nothing.
    2. Under `MultiWorkerMirroredStrategy` Keras 3 fails twice
       (keras-team/keras issue 20585): that build reduces the per-replica batch
       across workers in eager mode ("Attempt to convert a value (PerReplica
       ...) to a Tensor"; avoided by 1.), and each step reduces the logged
       scalar values with `reduce("MEAN", v, axis=0)` ("Invalid reduction
       dimension 0 for input with 0 dimensions"). Inside this context they are
       averaged over the replicas of all workers with `axis=None`, the mean of
       the replicas' scalars that Keras computes on one worker.

    Gradients are all-reduced by the strategy either way. A model built outside
    any strategy scope is left alone.

    Args:
        model: the `keras.Model` about to `fit`.
    """
    if getattr(model, "_distribute_strategy", None) is None:  # also every backend but TensorFlow
        yield model
        return
    tf = _tf()
    strategy = model.distribute_strategy

    def build(iterator=None, data_batch=None):
        if iterator is not None:
            data_batch = iterator.data_adapter.get_tf_dataset().element_spec  # shapes and dtypes; reads nothing
        with strategy.scope():
            model._symbolic_build(data_batch=data_batch)

    from keras.src.backend.tensorflow import trainer as keras_tf_trainer  # noqa: PLC0415 (imports TensorFlow)

    original_reduce = keras_tf_trainer.reduce_per_replica

    def reduce_per_replica(values, strategy, reduction="auto"):
        if reduction in ("auto", "mean") and in_multi_worker_mode(strategy):
            return tf.nest.map_structure(lambda v: strategy.reduce("MEAN", v, axis=None), values)
        return original_reduce(values, strategy, reduction)

    model._maybe_symbolic_build = build
    keras_tf_trainer.reduce_per_replica = reduce_per_replica
    try:
        yield model
    finally:
        keras_tf_trainer.reduce_per_replica = original_reduce
        del model._maybe_symbolic_build
