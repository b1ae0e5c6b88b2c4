"""The face runner with a Partial FC head (`model.head.sample_rate`, `model.head.shard_classes`), TensorFlow.

On a synthetic identity folder (`bench.synthetic_identities.write_identity_folder`: 300 identities of tiny
PNG faces): at r = 1 with two class blocks the runner's Partial FC path (the head's own loss, `loss=None`,
`PartialFCOptimizer`) trains the weights the dense `MarginHead` path trains; at r = 0.1 the classes no step
sampled keep their initial weights and zero momentum bit for bit; a run killed with SIGKILL after a checkpoint
resumes to the uninterrupted run's weights bit for bit; the default export holds no class matrix and serves the
Keras model's embeddings; bad Partial FC keys fail naming the key before any data is read.
"""

import json
import os
import signal
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

import sphere_tf
from bench import synthetic_identities
from sphere_tf.configs.face import partial_fc_webface
from sphere_tf.runners import face
from sphere_tf.export import serving
from sphere_tf.training import checkpoint
from sphere_tf.runners import classifier

pytestmark = pytest.mark.tensorflow_only

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLASSES, PER_CLASS, SHAPE = 300, 2, (12, 10, 3)


@pytest.fixture(scope="module")
def identities(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("identities"))
    synthetic_identities.write_identity_folder(root, CLASSES, PER_CLASS, SHAPE, seed=0)
    return root


def pfc_config(folder, **head):
    """The quick Partial FC face config, smaller: SphereFace-4 at 1/8 width, no weight decay, 4 steps of 8."""
    config = partial_fc_webface.get_config("quick").to_dict()
    config["data"].update(manual_dir=folder, train_limit=0, test_limit=16, augmentation="none")
    config["model"] = {"name": "sphereface4", "width_multiplier": 0.125, "head": {**config["model"]["head"], **head}}
    config["regularizers"] = []
    config["optimizer"] = {"name": "sgd", "learning_rate": 0.05, "momentum": 0.9}
    config["schedule"] = {"name": "constant"}
    config["train"].update(batch_size=8, steps=4, steps_per_epoch=2, checkpoint_every_steps=2, verbose=0)
    config["export"] = False
    return config


def dense_layout(weight, dense_weight):
    """A Partial FC run's weight in the dense run's layout: its class-major kernel `(C, d)` as `(d, C)`."""
    if weight.ndim == 2 and weight.shape != dense_weight.shape and weight.shape == dense_weight.shape[::-1]:
        return weight.T
    return weight


def spy_runs(monkeypatch):
    """Records each run's model, its weights before training and the head's sampled mask after every step."""
    runs = []
    original = checkpoint.fit_resumable

    class Masks(keras.callbacks.Callback):
        def __init__(self, run):
            super().__init__()
            self.run = run

        def on_train_batch_end(self, batch, logs=None):
            head = self.model.get_layer("logits")
            if isinstance(head, sphere_tf.layers.PartialFCHead):
                self.run["masks"].append(keras.ops.convert_to_numpy(head.sampled_mask()).copy())

    def spy(model, *args, **kwargs):
        run = {"model": model, "initial": [np.array(w) for w in model.get_weights()], "masks": []}
        runs.append(run)
        kwargs["callbacks"] = list(kwargs.get("callbacks") or []) + [Masks(run)]
        return original(model, *args, **kwargs)

    monkeypatch.setattr(classifier.checkpoint_lib, "fit_resumable", spy)
    return runs


def test_r1_partial_fc_path_trains_the_dense_heads_weights(identities, tmp_path, monkeypatch):
    runs = spy_runs(monkeypatch)
    dense = pfc_config(identities, sample_rate=1.0, shard_classes=False)
    blocked = pfc_config(identities, sample_rate=1.0, shard_classes=False, num_shards=2)
    dense_results = face.train_face(dense, str(tmp_path / "dense"))
    blocked_results = face.train_face(blocked, str(tmp_path / "blocked"))
    dense_model, blocked_model = runs[0]["model"], runs[1]["model"]
    assert type(dense_model.get_layer("logits")) is sphere_tf.layers.MarginHead
    assert isinstance(blocked_model.get_layer("logits"), sphere_tf.layers.PartialFCHead)
    assert blocked_model.get_layer("logits").num_shards == 2
    assert isinstance(blocked_model.optimizer, sphere_tf.optimizers.PartialFCOptimizer)
    assert "partial_fc" not in dense_results
    assert blocked_results["partial_fc"] == {"sample_rate": 1.0, "num_shards": 2, "devices": 1, "sharded": False}
    for a, b in zip(runs[0]["initial"], runs[1]["initial"]):
        np.testing.assert_array_equal(a, dense_layout(b, a))  # the same initial model
    for a, b in zip(dense_model.get_weights(), blocked_model.get_weights()):
        # float32: the class-major head sums its matmuls in another order than the dense (d, C) one.
        np.testing.assert_allclose(dense_layout(b, a), a, rtol=1e-5, atol=1e-5)
    assert max(np.abs(w - w0).max() for w0, w in zip(runs[0]["initial"], dense_model.get_weights())) > 1e-3
    # The runner's training loss (the head's) and test loss / accuracy (plain logits) are the dense run's.
    np.testing.assert_allclose(blocked_results["history"]["loss"], dense_results["history"]["loss"], rtol=1e-5)
    assert blocked_results["test_loss"] == pytest.approx(dense_results["test_loss"], rel=1e-5)
    assert blocked_results["test_accuracy"] == dense_results["test_accuracy"]


def test_r01_leaves_never_sampled_classes_and_their_momentum_alone(identities, tmp_path, monkeypatch):
    runs = spy_runs(monkeypatch)
    results = face.train_face(pfc_config(identities, sample_rate=0.1), str(tmp_path / "run"))
    (run,) = runs
    model = run["model"]
    head = model.get_layer("logits")
    assert isinstance(head, sphere_tf.layers.PartialFCHead) and head.sample_rate == 0.1
    assert head.seed == 0  # the run's seed keys the draws
    assert results["partial_fc"] == {"sample_rate": 0.1, "num_shards": 1, "devices": 1, "sharded": False}
    masks = np.stack(run["masks"])
    assert masks.shape == (4, CLASSES) and (masks.sum(axis=1) == 30).all()  # ceil(0.1 · 300) > batch 8
    ever = masks.max(axis=0) > 0
    assert 0 < ever.sum() < CLASSES
    kernel_index = next(i for i, v in enumerate(model.weights) if v is head.kernel)
    # The class-major kernel (C, d) as MarginHead's (d, C): a class is a column below.
    initial, final = run["initial"][kernel_index].T, keras.ops.convert_to_numpy(head.kernel).T
    np.testing.assert_array_equal(final[:, ~ever], initial[:, ~ever])
    # Sampled columns move (a negative far from every feature may get a zero gradient at s = 64: not all of them).
    changed = np.abs(final - initial).max(axis=0) > 0
    assert changed.sum() >= 8 and not (changed & ~ever).any()
    slots = [keras.ops.convert_to_numpy(v).T for v in model.optimizer.variables
             if tuple(v.shape) == tuple(head.kernel.shape)]
    assert len(slots) == 1 and (slots[0][:, ~ever] == 0).all()
    assert not ((np.abs(slots[0]).max(axis=0) > 0) & ~ever).any()
    assert np.isfinite(results["history"]["loss"]).all() and np.isfinite(results["test_loss"])


FACE_CHILD = r"""
import json, os, signal, sys
from sphere_tf.runners import face
from sphere_tf.training import checkpoint
config, workdir, kill_at = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
original = checkpoint.StepCheckpoint.on_train_batch_end
def on_train_batch_end(self, batch, logs=None):
    original(self, batch, logs)
    if self.step == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
checkpoint.StepCheckpoint.on_train_batch_end = on_train_batch_end
face.train_face(config, workdir)
"""


def checkpoint_values(workdir):
    reader = tf.train.load_checkpoint(os.path.join(workdir, "checkpoints", "train"))
    return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
            if name != "_CHECKPOINTABLE_OBJECT_GRAPH"}


def test_kill_after_a_checkpoint_then_resume_matches_uninterrupted_run(identities, tmp_path):
    config = pfc_config(identities, sample_rate=0.1)
    config["train"].update(steps=6, steps_per_epoch=3)  # checkpoints at 2, 4, 6; killed at 5, mid-epoch
    killed, straight = str(tmp_path / "killed"), str(tmp_path / "straight")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow", PYTHONPATH=REPO)
    process = subprocess.run([sys.executable, "-c", FACE_CHILD, json.dumps(config), killed, "5"], cwd=REPO, env=env,
                             capture_output=True, text=True, timeout=300)
    assert process.returncode == -signal.SIGKILL, process.stderr[-2000:]
    assert checkpoint.latest_step(os.path.join(killed, "checkpoints", "train")) == 4
    assert not os.path.exists(os.path.join(killed, "results.json"))
    resumed = face.train_face(config, killed)
    uninterrupted = face.train_face(config, straight)
    got, want = checkpoint_values(killed), checkpoint_values(straight)
    assert sorted(got) == sorted(want)
    assert [int(v) for name, v in want.items() if name.startswith("step/")] == [6]
    for name in want:  # bitwise: the state at step 4, the same batches and class samples 5..6
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert resumed["test_loss"] == uninterrupted["test_loss"]
    # The resumed epoch's mean loss joins the saved partial mean with the rest (float rounding).
    assert resumed["history"]["loss"] == pytest.approx(uninterrupted["history"]["loss"], rel=1e-6)


def graph_constant_shapes(export_dir):
    """The shapes of every constant in the SavedModel's graphs (frozen weights are constants)."""
    saved = saved_model_pb2.SavedModel()
    with open(os.path.join(export_dir, "saved_model.pb"), "rb") as f:
        saved.ParseFromString(f.read())
    shapes = []
    for meta_graph in saved.meta_graphs:
        for nodes in [meta_graph.graph_def.node] + [fn.node_def for fn in meta_graph.graph_def.library.function]:
            for node in nodes:
                if node.op == "Const":
                    shapes.append(tuple(d.size for d in node.attr["value"].tensor.tensor_shape.dim))
    return shapes


def saved_variable_shapes(export_dir):
    """The shapes of the variables a SavedModel stores (none for a frozen one)."""
    prefix = os.path.join(export_dir, "variables", "variables")
    if not os.path.exists(prefix + ".index"):
        return []
    return [tuple(shape) for _, shape in tf.train.list_variables(prefix)]


def test_export_without_and_with_the_class_matrix(identities, tmp_path, monkeypatch):
    runs = spy_runs(monkeypatch)
    config = {**pfc_config(identities, sample_rate=0.1, num_shards=7), "export": True}  # 300 -> 301 padded
    results = face.train_face(config, str(tmp_path / "run"))
    model = runs[0]["model"]
    head = model.get_layer("logits")
    dim = head.kernel.shape[1]
    assert tuple(head.kernel.shape) == (301, dim)  # class-major
    class_shapes = {(dim, CLASSES), (dim, 301), (CLASSES, dim), (301, dim)}
    pixels = serving.sample_pixels(5, SHAPE, seed=3)
    embedder = keras.Model(model.input["images"], model.get_layer("embedding").output)
    features = keras.ops.convert_to_numpy(embedder(pixels.astype("float32"), training=False))  # the model normalises
    unit = features / np.linalg.norm(features, axis=-1, keepdims=True)

    default_dir = results["export_dir"]  # the face runner's default: no class matrix
    loaded = tf.saved_model.load(default_dir)
    assert sorted(loaded.signatures) == ["embeddings", "serving_default"]
    for name in ("embeddings", "serving_default"):
        out = loaded.signatures[name](images=tf.constant(pixels))
        assert sorted(out) == ["embeddings"]
        np.testing.assert_allclose(out["embeddings"].numpy(), unit, rtol=1e-4, atol=1e-5)
    assert not class_shapes & set(graph_constant_shapes(default_dir))
    assert not class_shapes & set(saved_variable_shapes(default_dir))

    unfrozen = serving.export_model(model, str(tmp_path / "unfrozen"), freeze=False, class_matrix=False,
                                    warmup_batch_sizes=(1,)).path
    assert saved_variable_shapes(unfrozen) and not class_shapes & set(saved_variable_shapes(unfrozen))
    out = tf.saved_model.load(unfrozen).signatures["embeddings"](images=tf.constant(pixels))
    np.testing.assert_allclose(out["embeddings"].numpy(), unit, rtol=1e-4, atol=1e-5)

    kept = serving.export_model(model, str(tmp_path / "kept"), class_matrix=True, warmup_batch_sizes=(1,)).path
    assert class_shapes & set(graph_constant_shapes(kept))
    out = tf.saved_model.load(kept).signatures["embeddings"](images=tf.constant(pixels))
    assert sorted(out) == ["cosine", "embeddings", "logits"]
    weights = keras.ops.convert_to_numpy(head.kernel)[:CLASSES].T
    np.testing.assert_allclose(out["cosine"].numpy(), unit @ (weights / np.linalg.norm(weights, axis=0)),
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("head, key", [
    ({"sample_rate": 0.0}, "model.head.sample_rate"),
    ({"sample_rate": 1.5}, "model.head.sample_rate"),
    ({"sample_rate": float("nan")}, "model.head.sample_rate"),
    ({"sample_rate": "0.1"}, "model.head.sample_rate"),
    ({"num_shards": 0}, "model.head.num_shards"),
    ({"seed": -1}, "model.head.seed"),
    ({"shard_classes": 0}, "model.head.shard_classes"),
    ({"shard_classes": "yes"}, "model.head.shard_classes"),
    ({"shard_classes": 2}, "model.head.shard_classes"),  # one replica here
])
def test_bad_partial_fc_keys_fail_before_data_is_read(head, key, tmp_path):
    config = pfc_config(str(tmp_path / "no_such_folder"), **head)
    with pytest.raises(classifier.ConfigError, match=key.replace(".", r"\.")):
        face.train_face(config, str(tmp_path / "run"))
    assert not os.path.exists(tmp_path / "run" / "config.json")


def test_partial_fc_keys_need_a_margin_head_and_exclude_label_smoothing(tmp_path):
    config = pfc_config(str(tmp_path / "none"))
    config["model"]["head"] = {"layer": "dense", "sample_rate": 0.1}
    with pytest.raises(classifier.ConfigError, match=r"model\.head\.sample_rate.*margin head"):
        classifier.validate(face.split_config(config)[0])
    config = pfc_config(str(tmp_path / "none"))
    config["loss"]["label_smoothing"] = 0.1
    with pytest.raises(classifier.ConfigError, match=r"loss\.label_smoothing"):
        classifier.validate(face.split_config(config)[0])
    config = pfc_config(str(tmp_path / "none"))
    config["paradigm"]["opt_optimizer"] = True
    with pytest.raises(classifier.ConfigError, match=r"paradigm\.opt_optimizer"):
        classifier.validate(face.split_config(config)[0])


def test_make_head_gives_the_partial_fc_head_only_when_asked():
    from sphere_tf.models import blocks  # noqa: PLC0415

    margin = {"layer": "margin", "loss_type": "cosface"}
    assert type(blocks.make_head(margin, 10)) is sphere_tf.layers.MarginHead
    assert type(blocks.make_head({**margin, "sample_rate": 1.0, "seed": 3}, 10)) is sphere_tf.layers.MarginHead
    sampled = blocks.make_head({**margin, "sample_rate": 0.5, "seed": 3}, 10)
    assert isinstance(sampled, sphere_tf.layers.PartialFCHead) and (sampled.sample_rate, sampled.seed) == (0.5, 3)
    blocked = blocks.make_head({**margin, "num_shards": 4}, 10)
    assert isinstance(blocked, sphere_tf.layers.PartialFCHead) and blocked.num_padded_classes == 12
    with pytest.raises(ValueError, match="sample_rate"):
        blocks.make_head({**margin, "sample_rate": 0.0}, 10)
    with pytest.raises(ValueError, match="seed"):
        blocks.make_head({**margin, "seed": -2}, 10)
