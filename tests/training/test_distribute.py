"""Tests for sphere_tf.training.distribute: strategies by name, mirrored and two-worker training with checkpoints.

Logical CPUs and `TF_CONFIG` must be set before TensorFlow initialises, so the
replicated runs happen in fresh Python subprocesses (bounded by timeouts) that
write their results to files the test compares.
"""

import json
import os
import socket
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from sphere_tf.training import distribute

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TIMEOUT = 120


def _env(**extra):
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""), TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


# ------------------------------------------------------------------ names and errors (in process)
def test_strategies_by_name_on_a_cpu_host():
    assert tf.config.list_logical_devices("GPU") == []
    assert distribute.make_strategy("auto") is tf.distribute.get_strategy()  # the default strategy
    one = distribute.make_strategy("one_device")
    assert isinstance(one, tf.distribute.OneDeviceStrategy)
    assert one.extended.worker_devices[0].endswith("CPU:0")
    mirrored = distribute.make_strategy("mirrored")
    assert isinstance(mirrored, tf.distribute.MirroredStrategy)
    assert mirrored.num_replicas_in_sync == len(tf.config.list_logical_devices("CPU"))
    assert distribute.is_chief(one) and distribute.checkpoint_directory("/a/b", one) == "/a/b"
    assert not distribute.in_multi_worker_mode(mirrored)


def test_bad_names_and_missing_tpu():
    with pytest.raises(ValueError, match=r"argument `name`.*one of \('auto', 'one_device', 'mirrored'"):
        distribute.make_strategy("mirorred")
    os.environ.pop("TPU_NAME", None)
    with pytest.raises(ValueError, match="strategy='tpu' needs the TPU: pass `tpu`"):
        distribute.make_strategy("tpu")
    with pytest.raises(RuntimeError, match="strategy='tpu': no TPU reachable as tpu='local'"):
        distribute.make_strategy("tpu", tpu="local")


def test_tf_config_missing_or_malformed(monkeypatch):
    monkeypatch.delenv("TF_CONFIG", raising=False)
    with pytest.raises(ValueError, match="reads the cluster from the TF_CONFIG environment variable, which is not set"):
        distribute.make_strategy("multi_worker")
    monkeypatch.setenv("TF_CONFIG", "{cluster: ")
    with pytest.raises(ValueError, match="TF_CONFIG is not valid JSON"):
        distribute.make_strategy("multi_worker")
    good = {"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": 1}}
    assert distribute.parse_tf_config(json.dumps(good)) == good
    cases = [
        ([1, 2], "must be a JSON object"),
        ({"task": good["task"]}, "has no 'cluster'"),
        ({"cluster": {"worker": "localhost:1"}, "task": good["task"]}, r"cluster\['worker'\] must be a non-empty list"),
        ({"cluster": {"worker": ["localhost"]}, "task": good["task"]}, "list of 'host:port'"),
        ({"cluster": good["cluster"]}, "has no 'task' with 'type' and 'index'"),
        ({"cluster": good["cluster"], "task": {"type": "chief", "index": 0}},
         r"task type 'chief' is not in the cluster"),
        ({"cluster": good["cluster"], "task": {"type": "worker", "index": 2}}, "task index 2 is out of range"),
    ]
    for value, message in cases:
        with pytest.raises(ValueError, match=message):
            distribute.parse_tf_config(value)


def test_logical_cpus_after_initialisation():
    tf.constant(1.0) + 1.0  # TensorFlow is initialised in this process
    with pytest.raises(RuntimeError, match="Cannot split the CPU into 3 logical devices"):
        distribute.configure_logical_cpus(3)
    with pytest.raises(ValueError, match="argument `count`"):
        distribute.configure_logical_cpus(0)


# ------------------------------------------------------------------ mirrored on two logical CPUs
_MIRRORED = textwrap.dedent(
    r'''
    import json, sys
    from sphere_tf.training import distribute
    devices = distribute.configure_logical_cpus(2)
    import keras
    import numpy as np
    import tensorflow as tf
    from sphere_tf.training import fit_resumable

    out = sys.argv[1]
    rng = np.random.default_rng(0)
    x = rng.normal(size=(48, 5)).astype("float32")
    y = rng.integers(0, 3, size=(48,))

    def stream(step):  # a fresh pipeline per call: the shuffle orders depend on the step only
        dataset = tf.data.Dataset.from_tensor_slices((x, y)).shuffle(48, seed=3).batch(8)  # global batch 8
        return dataset.repeat().skip(step)

    def run(name, directory, epochs):
        strategy = distribute.make_strategy(name)
        with strategy.scope():
            model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(6, activation="tanh"),
                                      keras.layers.Dense(3)])
            model.compile(keras.optimizers.SGD(0.1, momentum=0.9),
                          keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        init = np.random.default_rng(2)  # the same starting weights under every strategy
        model.set_weights([init.normal(scale=0.5, size=w.shape).astype("float32") for w in model.get_weights()])
        result = fit_resumable(model, stream, epochs=epochs, directory=directory, steps_per_epoch=6,
                               every_steps=4, verbose=0)
        return strategy.num_replicas_in_sync, model.get_weights(), result

    replicas_one, single, _ = run("one_device", out + "/one", 2)
    replicas, mirrored, _ = run("mirrored", out + "/mirrored", 2)
    run("mirrored", out + "/resumed", 1)
    _, resumed, result = run("mirrored", out + "/resumed", 2)  # continues from step 6 of 12
    np.savez(out + "/weights.npz", *single, *mirrored, *resumed)
    print(json.dumps({"devices": devices, "replicas": [replicas_one, replicas],
                      "resumed_from": result["initial_step"], "step": result["step"]}))
    '''
)


def test_mirrored_on_two_logical_cpus_matches_one_device(tmp_path):
    proc = subprocess.run([sys.executable, "-c", _MIRRORED, str(tmp_path)], env=_env(), capture_output=True,
                          text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["devices"][1].endswith("CPU:1") and report["replicas"] == [1, 2]
    assert (report["resumed_from"], report["step"]) == (6, 12)
    arrays = np.load(tmp_path / "weights.npz")
    weights = [arrays[f"arr_{i}"] for i in range(len(arrays.files))]
    n = len(weights) // 3
    single, mirrored, resumed = weights[:n], weights[n:2 * n], weights[2 * n:]
    # Each replica computes the loss of its 4 examples scaled by 1/8 (the global batch) and the two
    # gradients are summed: the gradient of the 8-example mean, as on one device, up to the order of
    # float32 additions (relative round-off ~1e-7 per step over 12 steps).
    for a, b, c in zip(single, mirrored, resumed):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-5)
        np.testing.assert_allclose(c, b, rtol=0, atol=1e-6)  # resumed = uninterrupted, same strategy
    assert max(np.abs(a - w).max() for a, w in zip(single, mirrored)) < 1e-5
    # checkpoint_versions.json: the sphere_tf release that wrote each checkpoint; partial_epoch.json: the resumed
    # epoch's running means.
    assert sorted(os.listdir(tmp_path / "mirrored")) == [
        "checkpoint", "checkpoint_versions.json", "ckpt-12.data-00000-of-00001", "ckpt-12.index",
        "ckpt-8.data-00000-of-00001", "ckpt-8.index", "history.json", "partial_epoch.json"]


# ------------------------------------------------------------------ two workers on localhost
_WORKER = textwrap.dedent(
    r'''
    import json, sys
    import keras
    import numpy as np
    import tensorflow as tf
    from sphere_tf.training import distribute, fit_resumable, latest_step

    directory, out = sys.argv[1], sys.argv[2]
    strategy = distribute.make_strategy("multi_worker")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 5)).astype("float32")
    y = rng.integers(0, 3, size=(32,))
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(8).with_options(options)
    with strategy.scope():
        keras.utils.set_random_seed(1)
        model = keras.Sequential([keras.Input((5,)), keras.layers.Dense(4, activation="tanh"), keras.layers.Dense(3)])
        model.compile(keras.optimizers.SGD(0.1, momentum=0.9),
                      keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    initial = [w.copy() for w in model.get_weights()]
    first = fit_resumable(model, dataset, epochs=1, directory=directory, every_steps=2, verbose=0)
    # A second call restores from the chief's directory on every worker and trains epoch 2.
    second = fit_resumable(model, dataset, epochs=2, directory=directory, every_steps=2, verbose=0)
    np.savez(out, *initial, *model.get_weights())
    print(json.dumps({"chief": distribute.is_chief(strategy), "first": [first["initial_step"], first["step"]],
                      "second": [second["initial_step"], second["step"]], "latest": latest_step(directory),
                      "replicas": strategy.num_replicas_in_sync}))
    '''
)


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def test_two_workers_end_with_identical_weights_and_one_checkpoint_directory(tmp_path):
    directory = tmp_path / "checkpoints"
    cluster = {"worker": [f"localhost:{port}" for port in _free_ports(2)]}
    procs = []
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        procs.append(subprocess.Popen(
            [sys.executable, "-c", _WORKER, str(directory), str(tmp_path / f"worker{index}.npz")],
            env=_env(TF_CONFIG=tf_config), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=TIMEOUT))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    for proc, (stdout, stderr) in zip(procs, outputs):
        assert proc.returncode == 0, stderr[-3000:]
    reports = [json.loads(stdout.strip().splitlines()[-1]) for stdout, _ in outputs]
    assert [r["chief"] for r in reports] == [True, False]
    for report in reports:
        assert report["replicas"] == 2
        assert report["first"] == [0, 4] and report["second"] == [4, 8] and report["latest"] == 8
    arrays = [np.load(tmp_path / f"worker{index}.npz") for index in range(2)]
    weights = [[a[f"arr_{i}"] for i in range(len(a.files))] for a in arrays]
    n = len(weights[0]) // 2
    for a, b in zip(weights[0], weights[1]):
        np.testing.assert_array_equal(a, b)  # same initial and final weights on both workers
    assert max(np.abs(w - w0).max() for w0, w in zip(weights[0][:n], weights[0][n:])) > 1e-3  # it trained
    # Only the chief's files remain: the non-chief's temporary folder was removed after every save.
    assert sorted(os.listdir(directory)) == [
        "checkpoint", "checkpoint_versions.json", "ckpt-6.data-00000-of-00001", "ckpt-6.index",
        "ckpt-8.data-00000-of-00001", "ckpt-8.index", "history.json", "partial_epoch.json"]
    with open(directory / "history.json") as f:
        assert json.load(f)["epochs"] == 2


# ------------------------------------------------------------------ the runner under mirrored and two workers
_RUNNER_CONFIG = {
    "seed": 4,
    "data": {"name": "mnist"},
    # Linear magnitude: no batch statistics (TanhConv's E‖x‖, like BN, is a per-replica batch mean under a
    # strategy, so replicated runs differ from one device by design).
    "model": {"name": "small_cnn", "widths": [4], "convs_per_stage": 1, "dense_units": 8, "batch_norm": False,
              "operator": {"layer": "decoupled", "magnitude": "linear", "angular": "cosine"}},
    "optimizer": {"name": "sgd", "learning_rate": 0.05, "momentum": 0.9},
    "train": {"batch_size": 8, "epochs": 2, "steps_per_epoch": 2, "checkpoint_every_steps": 2, "verbose": 0},
}

# Runs `train_and_evaluate` and saves the trained model's weights (a spy on `fit_resumable` keeps the model: a
# non-chief worker deletes its own files at the end).
_RUNNER = textwrap.dedent(
    r'''
    import json, sys
    config, workdir, out, logical_cpus = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    from sphere_tf.training import distribute
    if logical_cpus:
        distribute.configure_logical_cpus(logical_cpus)
    import numpy as np
    from sphere_tf.runners import classifier
    from sphere_tf.training import checkpoint
    models = []
    original = checkpoint.fit_resumable
    def spy(model, *args, **kwargs):
        models.append(model)
        return original(model, *args, **kwargs)
    classifier.checkpoint_lib.fit_resumable = spy
    runs = []
    for strategy in config.pop("strategies"):
        config["strategy"] = strategy
        results = classifier.train_and_evaluate(config, f"{workdir}/{strategy}")
        runs.append({"strategy": strategy, "replicas": models[-1].distribute_strategy.num_replicas_in_sync,
                     "test_accuracy": results["test_accuracy"], "test_loss": results["test_loss"],
                     "test_per_class_error": results["test_per_class_error"],
                     "chief": distribute.is_chief(models[-1].distribute_strategy)})
    np.savez(out, *[w for model in models for w in model.get_weights()])
    print(json.dumps(runs))
    '''
)


def _weights(path, runs):
    arrays = np.load(path)
    weights = [arrays[f"arr_{i}"] for i in range(len(arrays.files))]
    n = len(weights) // runs
    return [weights[i * n:(i + 1) * n] for i in range(runs)]


def _mnist(folder):
    from sphere_tf.data import archive_writers  # noqa: PLC0415

    os.makedirs(folder)
    archive_writers.write_mnist(str(folder), n_train=32, n_test=8, seed=0)
    return str(folder)


def test_runner_mirrored_on_two_logical_cpus_matches_one_device(tmp_path):
    config = {**_RUNNER_CONFIG, "export": False, "strategies": ["one_device", "mirrored"],
              "data": {"name": "mnist", "manual_dir": _mnist(tmp_path / "data")}}
    proc = subprocess.run([sys.executable, "-c", _RUNNER, json.dumps(config), str(tmp_path / "run"),
                           str(tmp_path / "w.npz"), "2"], env=_env(), capture_output=True, text=True, timeout=TIMEOUT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [r["replicas"] for r in runs] == [1, 2]
    single, mirrored = _weights(tmp_path / "w.npz", 2)
    # Same seed, same initial weights, same global batches of 8 (4 per replica): the same 4 steps up to
    # float32 summation order.
    for a, b in zip(single, mirrored):
        np.testing.assert_allclose(b, a, rtol=0, atol=1e-5)
    assert runs[0]["test_loss"] == pytest.approx(runs[1]["test_loss"], abs=1e-5)
    # Every test image counted once under both strategies (error_rates' forward pass on 2 replicas).
    assert runs[0]["test_per_class_error"] == runs[1]["test_per_class_error"]
    for strategy in ("one_device", "mirrored"):
        with open(tmp_path / "run" / strategy / "results.json") as f:
            assert json.load(f)["steps"] == 4


def test_runner_on_two_workers(tmp_path):
    """Two processes on localhost ports run one config; identical weights; only the chief writes the workdir."""
    workdir = tmp_path / "run"
    cluster = {"worker": [f"localhost:{port}" for port in _free_ports(2)]}
    config = {**_RUNNER_CONFIG, "export": True, "strategies": ["multi_worker"],
              "data": {"name": "mnist", "manual_dir": _mnist(tmp_path / "data")}}
    procs = []
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        procs.append(subprocess.Popen(
            [sys.executable, "-c", _RUNNER, json.dumps(config), str(workdir), str(tmp_path / f"w{index}.npz"), "0"],
            env=_env(TF_CONFIG=tf_config), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outputs = []
    try:
        for proc in procs:
            outputs.append(proc.communicate(timeout=2 * TIMEOUT))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    for proc, (_, stderr) in zip(procs, outputs):
        assert proc.returncode == 0, stderr[-3000:]
    runs = [json.loads(stdout.strip().splitlines()[-1])[0] for stdout, _ in outputs]
    assert [r["chief"] for r in runs] == [True, False] and [r["replicas"] for r in runs] == [2, 2]
    assert runs[0]["test_accuracy"] == runs[1]["test_accuracy"] and runs[0]["test_loss"] == runs[1]["test_loss"]
    assert runs[0]["test_per_class_error"] == runs[1]["test_per_class_error"]
    (first,), (second,) = _weights(tmp_path / "w0.npz", 1), _weights(tmp_path / "w1.npz", 1)
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    run = workdir / "multi_worker"
    # run.lock: the chief's workdir lock (the other worker takes none: it writes only its scratch folder).
    assert sorted(os.listdir(run)) == ["checkpoints", "config.json", "export", "results.json", "run.lock",
                                       "tensorboard"]
    with open(run / "results.json") as f:
        assert json.load(f)["test_accuracy"] == runs[0]["test_accuracy"]
    assert checkpoint_steps(run / "checkpoints" / "train") == [2, 4]


def checkpoint_steps(directory):
    return sorted(int(name[len("ckpt-"):-len(".index")]) for name in os.listdir(directory) if name.endswith(".index"))
