"""Tests for sphere_tf.layers.MarginHead: formulas, annealing state, numerics, inputs, model patterns, export."""

import math
import os
import re
import subprocess
import sys
import textwrap
import warnings

import keras
import numpy as np
import pytest

from sphere_tf import testing
from sphere_tf.layers import MarginHead
from sphere_tf.ops import margin as margin_lib
from sphere_tf.regularizers import DataDependentMHE

from tests.gradient_helpers import value_and_grads

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---------------------------------------------------------------------------------------
# Independent NumPy reference (arccos-based ψ with a loop over k).


def np_psi(theta, m):
    for k in range(m):
        if k * math.pi / m <= theta <= (k + 1) * math.pi / m:
            return (-1) ** k * math.cos(m * theta) - 2 * k
    raise AssertionError(theta)


def np_asoftmax_logits(x, w, y, m, lam=0.0):
    """A-Softmax [T-2.20] with annealing (λ·plain + margin)/(1 + λ), explicit loops, float64."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    out = np.zeros((x.shape[0], w.shape[1]))
    for i in range(x.shape[0]):
        xn = np.linalg.norm(x[i])
        for j in range(w.shape[1]):
            cos = np.clip(x[i] @ w[:, j] / (xn * np.linalg.norm(w[:, j])), -1, 1)
            out[i, j] = xn * cos
            if y is not None and j == y[i]:
                out[i, j] = (lam * xn * cos + xn * np_psi(math.acos(cos), m)) / (1 + lam)
    return out


def np_lambda(t, base, gamma, power, lambda_min):
    return max(lambda_min, base * (1.0 + gamma * t) ** (-power))


def np_xent(logits, y):
    logits = logits.astype(np.float64)
    mx = logits.max(axis=1, keepdims=True)
    lse = mx[:, 0] + np.log(np.exp(logits - mx).sum(axis=1))
    return lse - logits[np.arange(len(y)), y]


ALL_TYPES = margin_lib.LOSS_TYPES


def _features(rng, n=8, d=4):
    return rng.normal(size=(n, d)).astype(np.float32)


# ---------------------------------------------------------------------------------------
# Basic: shapes, weights, configs, .keras round trips.


@pytest.mark.parametrize("loss_type", ALL_TYPES)
def test_basic_shapes_weights_and_config(rng, loss_type):
    head = MarginHead(5, loss_type=loss_type)
    x = _features(rng)
    y = rng.integers(0, 5, size=8)
    out = head(x, labels=y, training=True)
    assert tuple(out.shape) == (8, 5) and keras.backend.standardize_dtype(out.dtype) == "float32"
    assert tuple(head.kernel.shape) == (4, 5)
    assert len(head.trainable_weights) == 1 and len(head.non_trainable_weights) == 1
    # Keras's backend integer (int64 on TensorFlow; JAX without x64 has no int64).
    assert head.iteration.dtype == keras.backend.standardize_dtype("int") and int(head.iteration.numpy()) == 1
    testing.assert_config_roundtrip(head)
    with_bias = MarginHead(5, loss_type=loss_type, use_bias=True)
    with_bias(x)
    assert len(with_bias.trainable_weights) == 2


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(loss_type="lsoftmax", margin=2, annealing="mnist"),
        dict(loss_type="gasoftmax", angular="sigmoid", margin=2.5, k=0.7, annealing="cifar10+"),
        dict(loss_type="combined", margin=(1.2, 0.3, 0.1), scale=16.0, use_bias=True),
        dict(loss_type="asoftmax", annealing={"base": 10.0, "gamma": 0.5, "power": 2.0}),
    ],
)
def test_keras_file_roundtrip_keeps_config_and_iteration(rng, tmp_path, kwargs):
    x = _features(rng)
    y = rng.integers(0, 5, size=8)
    inputs = keras.Input((4,))
    head = MarginHead(5, **kwargs)
    model = keras.Model(inputs, head(inputs))
    for _ in range(3):
        head(x, labels=y, training=True)
    reloaded = testing.assert_keras_roundtrip(model, x, tmp_path)
    new_head = reloaded.layers[-1]
    assert new_head.get_config() == head.get_config()
    assert int(new_head.iteration.numpy()) == 3


def test_sequential_inference_and_keras_roundtrip(rng, tmp_path):
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), MarginHead(5, loss_type="arcface")])
    x = _features(rng)
    assert model(x).shape == (8, 5)
    testing.assert_keras_roundtrip(model, x, tmp_path)


# ---------------------------------------------------------------------------------------
# Bad arguments.


@pytest.mark.parametrize(
    "kwargs,argument",
    [
        (dict(num_classes=0), "num_classes"),
        (dict(num_classes=3.0), "num_classes"),
        (dict(loss_type="focal"), "loss_type"),
        (dict(loss_type="asoftmax", margin=0), "margin"),
        (dict(loss_type="asoftmax", margin=2.5), "margin"),
        (dict(loss_type="asoftmax", margin=100), "margin"),
        (dict(loss_type="asoftmax", margin=5), "margin"),
        (dict(loss_type="lsoftmax", margin=5), "margin"),
        (dict(loss_type="gasoftmax", angular="cosine", margin=5), "margin"),
        (dict(loss_type="gasoftmax", angular="linear", margin=4.5), "margin"),
        (dict(loss_type="ssoftmax", angular="sigmoid", margin=float("nan")), "margin"),
        (dict(loss_type="combined", margin=(5.0, 0.0, 0.0)), "margin"),
        (dict(loss_type="combined", margin=(1.0, 0.0, 2.0)), "margin"),
        (dict(loss_type="lsoftmax", margin=True), "margin"),
        (dict(loss_type="wsoftmax", margin=2), "margin"),
        (dict(loss_type="gasoftmax", angular="linear", margin=0.5), "margin"),
        (dict(loss_type="cosface", margin=-0.1), "margin"),
        (dict(loss_type="arcface", margin=4.0), "margin"),
        (dict(loss_type="combined", margin=(0.5, 0.1, 0.0)), "margin"),
        (dict(loss_type="combined", margin=0.5), "margin"),
        (dict(loss_type="asoftmax", angular="linear"), "angular"),
        (dict(loss_type="gasoftmax", angular="sqcosine"), "angular"),
        (dict(loss_type="gasoftmax", angular="sigmoid", k=0.0), "k"),
        (dict(loss_type="cosface", scale=-1.0), "scale"),
        (dict(loss_type="asoftmax", scale=30.0), "scale"),
        (dict(annealing="imagenet"), "annealing"),
        (dict(annealing={"base": 1000.0, "gamma": 0.1}), "annealing"),
        (dict(annealing={"base": 1000.0, "gamma": -0.1, "power": 1.0}), "annealing"),
        (dict(annealing={"base": 1.0, "gamma": 0.1, "power": 1.0, "lamda_min": 1.0}), "annealing"),
        (dict(epsilon=-1.0), "epsilon"),
        (dict(label_penalty="mhe"), "label_penalty"),
    ],
)
def test_bad_arguments_raise_naming_the_argument(kwargs, argument):
    kwargs = {"num_classes": 3, **kwargs}
    with pytest.raises(ValueError, match=rf"Invalid value for argument `{argument}`.*Received: {argument}="):
        MarginHead(**kwargs)


# ---------------------------------------------------------------------------------------
# Correctness, annealing state.


@pytest.mark.parametrize("m", (1, 2, 3, 4))
def test_training_logits_match_reference_with_annealing(rng, m):
    head = MarginHead(6, loss_type="asoftmax", margin=m, annealing="sphereface")
    x = _features(rng, 10, 3)
    y = rng.integers(0, 6, size=10)
    head.build((None, 3))
    w = rng.normal(size=(3, 6)).astype(np.float32)
    head.kernel.assign(w)
    params = margin_lib.ANNEALING_PRESETS["sphereface"]
    for t in (1, 2, 3):
        got = keras.ops.convert_to_numpy(head(x, labels=y, training=True))
        lam = np_lambda(t, **params)
        assert float(head.current_lambda()) == pytest.approx(lam, rel=1e-6)
        np.testing.assert_allclose(got, np_asoftmax_logits(x, w, y, m, lam), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("loss_type", ALL_TYPES)
def test_inference_logits_ignore_labels_and_equal_plain(rng, loss_type):
    head = MarginHead(5, loss_type=loss_type, annealing="mnist")
    x = _features(rng)
    y = rng.integers(0, 5, size=8)
    plain = keras.ops.convert_to_numpy(head(x))
    for kwargs in (dict(labels=y), dict(labels=y, training=False), dict(training=True)):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(head(x, **kwargs)), plain)
    assert int(head.iteration.numpy()) == 0  # no training step happened
    # Plain logits of the weight-normalised types are ‖x‖·g(θ) / s·g(θ) (W-Softmax): check cosine ones.
    w = keras.ops.convert_to_numpy(head.kernel).astype(np.float64)
    x64 = x.astype(np.float64)
    eps = 1e-4 if loss_type in ("cosface", "arcface", "combined", "ssoftmax") else 1e-12
    wn = w / np.sqrt(np.sum(w**2, axis=0) + eps)
    if loss_type == "lsoftmax":
        expected = x64 @ w
    elif loss_type in ("asoftmax", "wsoftmax"):
        expected = x64 @ wn
    elif loss_type in ("cosface", "arcface", "combined", "ssoftmax"):
        expected = head.scale * (x64 / np.sqrt(np.sum(x64**2, axis=1, keepdims=True) + eps)) @ wn
    else:  # gasoftmax: linear g
        cos = np.clip((x64 / np.linalg.norm(x64, axis=1, keepdims=True)) @ wn, -1, 1)
        expected = np.linalg.norm(x64, axis=1, keepdims=True) * (1 - 2 * np.arccos(cos) / np.pi)
    np.testing.assert_allclose(plain, expected, rtol=1e-4, atol=2e-3 if loss_type == "gasoftmax" else 1e-4)


def test_lambda_schedule_values_at_steps():
    head = MarginHead(3, loss_type="lsoftmax", annealing="cifar10")
    params = margin_lib.ANNEALING_PRESETS["cifar10"]
    for t in (0, 1, 1000, 5000, 20000):
        assert float(head.lambda_at(t)) == pytest.approx(np_lambda(t, **params), rel=1e-5, abs=1e-12)
    assert float(MarginHead(3).lambda_at(100)) == 0.0


def test_label_penalty_added_only_in_training_with_labels(rng):
    @keras.saving.register_keras_serializable(package="sphere_tf_tests")
    class ColumnPenalty:
        """Σ_i ‖W_{y_i}‖² — a label-dependent stand-in for SphereFace+ MHE."""

        def __call__(self, kernel, labels):
            cols = keras.ops.take(keras.ops.transpose(kernel), keras.ops.cast(labels, "int32"), axis=0)
            return keras.ops.sum(keras.ops.square(cols))

        def get_config(self):
            return {}

        @classmethod
        def from_config(cls, config):
            return cls(**config)

    head = MarginHead(4, label_penalty=ColumnPenalty())
    x = _features(rng)
    y = rng.integers(0, 4, size=8)
    head(x)
    assert head.losses == []
    head(x, labels=y, training=True)
    w = keras.ops.convert_to_numpy(head.kernel)
    assert len(head.losses) == 1
    assert float(head.losses[0]) == pytest.approx(float(np.sum(w[:, y] ** 2)), rel=1e-5)
    rebuilt = testing.assert_config_roundtrip(head)
    assert isinstance(rebuilt.label_penalty, ColumnPenalty)


def test_sphereface_plus_data_dependent_mhe_plugs_in(rng):
    """The penalty added is SphereFace+ Eq. 5.8 (s = 2, Euclidean) on the head's kernel, by explicit loops."""
    head = MarginHead(4, label_penalty=DataDependentMHE(factor=0.5))
    y = rng.integers(0, 4, size=8)
    head(_features(rng), labels=y, training=True)
    w = keras.ops.convert_to_numpy(head.kernel).astype(np.float64)
    w_hat = w / np.sqrt(np.sum(w**2, axis=0) + 1e-4)
    total = 0.0
    for label in y:
        for j in range(4):
            if j != label:
                total += 1.0 / np.sum((w_hat[:, label] - w_hat[:, j]) ** 2)
    assert len(head.losses) == 1
    assert float(head.losses[0]) == pytest.approx(0.5 * total / (len(y) * 3), rel=1e-3)


# ---------------------------------------------------------------------------------------
# Numerics: finite loss and gradients at θ = 0, π, zero features, huge norms; no 87.3 plateau.


def _loss_and_grads(head, x, y):
    """Loss, its gradients w.r.t. `x` and the head's weights, and the logits (one stateless call each)."""
    non_trainable = [v.value for v in head.non_trainable_variables]

    def logits_of(features, *weights):
        return head.stateless_call(list(weights), non_trainable, features, labels=y, training=True)[0]

    def loss_fn(features, *weights):
        logits = keras.ops.cast(logits_of(features, *weights), "float32")
        return keras.ops.mean(keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))

    weights = [v.value for v in head.trainable_variables]
    loss, grads = value_and_grads(loss_fn, x, *weights)
    logits = keras.ops.convert_to_numpy(logits_of(x, *weights))
    return loss, [g.astype(np.float32) for g in grads], logits


@pytest.mark.parametrize("loss_type", ALL_TYPES)
@pytest.mark.parametrize("policy", ("float32", "mixed_float16", "mixed_bfloat16"))
def test_finite_loss_and_gradients_at_degenerate_features(loss_type, policy):
    keras.mixed_precision.set_global_policy(policy)
    head = MarginHead(3, loss_type=loss_type, use_bias=True)
    head.build((None, 2))
    head.kernel.assign(np.array([[1.0, 0.0, -1.0], [0.0, 1.0, 0.0]], np.float32))
    y = np.array([0, 0, 0, 0, 0, 1], np.int32)
    base = np.array([[1.0, 0.0], [-1.0, 0.0], [0.0, 0.0], [1e-30, 0.0], [0.0, 1.0], [0.0, -1.0]])
    compute_dtype = {"float32": "float32", "mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}[policy]
    for norm in (1.0, 1e-3, 6e4 if compute_dtype == "float16" else 1e15):
        x = keras.ops.cast((base * norm).astype(np.float32), compute_dtype)  # what the previous layer emits
        loss, grads, logits = _loss_and_grads(head, x, y)
        assert np.isfinite(loss), (norm, loss)
        assert logits.dtype == np.float32 and np.all(np.isfinite(logits)), (norm, logits)
        for g in grads:
            assert np.all(np.isfinite(g)), (norm, g)


def test_no_softmax_underflow_plateau():
    """θ = π with m = 4 and ‖x‖ = 100: target logit −700, loss ≈ 800, not capped at −ln(FLT_MIN) = 87.3."""
    head = MarginHead(2, loss_type="asoftmax", margin=4)
    head.build((None, 2))
    w = np.array([[1.0, -1.0], [0.0, 0.0]], np.float32)
    head.kernel.assign(w)
    x = np.array([[-100.0, 0.0]], np.float32)
    y = np.array([0], np.int32)
    loss, grads, logits = _loss_and_grads(head, x, y)
    np.testing.assert_allclose(logits, [[-700.0, 100.0]], rtol=1e-5)
    assert loss == pytest.approx(np_xent(logits, y)[0], rel=1e-6)
    assert loss > 87.4
    assert all(np.all(np.isfinite(g)) for g in grads)


# ---------------------------------------------------------------------------------------
# Model patterns, fit, save/load resume, export.


def _toy_data(rng, n=64, d=6, classes=3):
    centers = rng.normal(size=(classes, d)) * 3.0
    y = rng.integers(0, classes, size=n).astype(np.int32)
    x = (centers[y] + rng.normal(size=(n, d))).astype(np.float32)
    return x, y


def _two_input_model(head, d=6):
    """Functional pattern: labels are a second input during training."""
    features_in = keras.Input((d,), name="features")
    labels_in = keras.Input((), dtype="int32", name="labels")
    hidden = keras.layers.Dense(3, name="embed")(features_in)
    train_model = keras.Model([features_in, labels_in], head(hidden, labels=labels_in))
    inference_model = keras.Model(features_in, head(hidden))  # shares every layer
    return train_model, inference_model


def test_functional_two_input_fit_advances_iteration_only_in_training(rng):
    x, y = _toy_data(rng)
    head = MarginHead(3, loss_type="asoftmax", annealing="sphereface")
    train_model, inference_model = _two_input_model(head)
    train_model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = train_model.fit([x, y], y, batch_size=16, epochs=2, verbose=0)
    assert int(head.iteration.numpy()) == 8
    assert np.all(np.isfinite(history.history["loss"]))
    train_model.evaluate([x, y], y, verbose=0)
    inference_model.predict(x, verbose=0)
    assert int(head.iteration.numpy()) == 8
    # Evaluation of the two-input model uses plain logits: equals the inference model's loss.
    plain_loss = np.mean(np_xent(inference_model.predict(x, verbose=0), y))
    assert train_model.evaluate([x, y], y, verbose=0) == pytest.approx(plain_loss, rel=1e-4)


def test_save_load_resumes_annealing_step(rng, tmp_path):
    x, y = _toy_data(rng)
    head = MarginHead(3, loss_type="lsoftmax", margin=2, annealing="mnist")
    train_model, _ = _two_input_model(head)
    train_model.compile(keras.optimizers.SGD(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    train_model.fit([x, y], y, batch_size=16, epochs=1, verbose=0)
    path = os.path.join(tmp_path, "train.keras")
    train_model.save(path)
    reloaded = keras.saving.load_model(path)
    new_head = [layer for layer in reloaded.layers if isinstance(layer, MarginHead)][0]
    assert int(new_head.iteration.numpy()) == 4
    reloaded.fit([x, y], y, batch_size=16, epochs=1, verbose=0)
    assert int(new_head.iteration.numpy()) == 8
    params = margin_lib.ANNEALING_PRESETS["mnist"]
    assert float(new_head.current_lambda()) == pytest.approx(np_lambda(8, **params), rel=1e-5)


def test_keras_file_saved_before_the_losses_moved_loads_and_computes_the_same(tmp_path):
    """A `.keras` file written before the margin maths was shared with `sphere_tf.losses` (main at e358490,
    tests/layers/data/make_margin_head_before_losses.py): three heads, trained two steps, load with their
    annealing step and give the same plain and training-mode logits."""
    data = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "margin_head_before_losses")
    expected = np.load(data + ".npz")
    model = keras.saving.load_model(data + ".keras")
    heads = [model.get_layer(name) for name in ("sphereface", "cosface", "combined")]
    assert [head.loss_type for head in heads] == ["asoftmax", "cosface", "combined"]
    assert heads[2].margin == (1.0, 0.3, 0.2)
    assert all(int(keras.ops.convert_to_numpy(head.iteration)) == int(expected["iteration"]) for head in heads)
    x, y = expected["x"], expected["y"]
    plain = [keras.ops.convert_to_numpy(o) for o in model.predict([x, y], verbose=0)]
    np.testing.assert_allclose(np.stack(plain), expected["plain_logits"], rtol=1e-5, atol=1e-5)
    train = [keras.ops.convert_to_numpy(head._logits(x, y, head.current_lambda())) for head in heads]
    np.testing.assert_allclose(np.stack(train), expected["train_logits"], rtol=1e-5, atol=1e-5)


@pytest.mark.tensorflow_only
def test_tf_checkpoint_keeps_annealing_step(tmp_path):
    import tensorflow as tf  # noqa: PLC0415  (tf.train.Checkpoint)

    head = MarginHead(3, loss_type="lsoftmax", margin=2, annealing="mnist")
    head.build((None, 6))
    head.iteration.assign(8)
    ckpt = tf.train.Checkpoint(head=head)
    saved = ckpt.save(os.path.join(tmp_path, "ckpt"))
    head.iteration.assign(0)
    ckpt.restore(saved)
    assert int(head.iteration.numpy()) == 8


def _documented_block(marker):
    """The ```python block of docs/losses.md that contains `marker`."""
    with open(os.path.join(REPO, "docs", "losses.md"), encoding="utf-8") as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
    (block,) = [b for b in blocks if marker in b]
    return block


def test_documented_subclassed_model_fits_saves_and_loads(rng, tmp_path, monkeypatch):
    """Runs docs/losses.md's `MarginClassifier` block as written: fit, predict, save, load."""
    x, y = _toy_data(rng, n=64, d=6, classes=10)
    monkeypatch.chdir(tmp_path)
    namespace = {
        "backbone": keras.Sequential([keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)]),
        "x_train": x,
        "y_train": y,
        "x_test": x[:16],
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # e.g. Keras's "cannot be built automatically" on load
        exec(compile(_documented_block("class MarginClassifier"), "docs/losses.md", "exec"), namespace)
    model, restored = namespace["model"], namespace["restored"]
    assert type(restored).__name__ == "MarginClassifier"
    assert int(model.head.iteration.numpy()) == 2  # one epoch of 64 samples, batch 32
    assert int(restored.head.iteration.numpy()) == 2
    assert restored.head.get_config() == model.head.get_config()
    np.testing.assert_allclose(namespace["logits"], model.predict(x[:16], verbose=0), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(restored.predict(x[:16], verbose=0), namespace["logits"], rtol=1e-6, atol=1e-6)
    # The restored model trains on: the margin path and the step counter resume.
    restored.fit((x, y), y, batch_size=32, epochs=1, verbose=0)
    assert int(restored.head.iteration.numpy()) == 4


_LOAD_SCRIPT = textwrap.dedent(
    """
    import sys
    import numpy as np
    import keras
    if sys.argv[1] == "savedmodel":
        import tensorflow as tf
        loaded = tf.saved_model.load(sys.argv[2])  # keep a reference: serve() reads its variables
        out = loaded.serve(tf.constant(np.load(sys.argv[4]))).numpy()
        assert "sphere_tf" not in sys.modules
    else:
        if sys.argv[1] == "import":
            import sphere_tf  # noqa: F401  (the documented requirement)
        out = keras.saving.load_model(sys.argv[2]).predict(np.load(sys.argv[4]), verbose=0)
    np.save(sys.argv[3], out)
    """
)


def _load_in_fresh_process(mode, model_path, tmp_path):
    x_path, out_path = os.path.join(tmp_path, "x.npy"), os.path.join(tmp_path, f"out_{mode}.npy")
    env = {**os.environ, "PYTHONPATH": REPO, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    result = subprocess.run(
        [sys.executable, "-c", _LOAD_SCRIPT, mode, model_path, out_path, x_path],
        capture_output=True, text=True, env=env, cwd=str(tmp_path), timeout=300,
    )
    return result, out_path


@pytest.mark.tensorflow_only  # the SavedModel export half
def test_keras_file_loads_in_a_fresh_process_after_import_sphere_tf(rng, tmp_path):
    """README "Saving and loading": `import sphere_tf` before `load_model` (without it Keras cannot find the
    class); the exported SavedModel serves without sphere_tf."""
    x, y = _toy_data(rng)
    head = MarginHead(3, loss_type="arcface", scale=16.0)
    train_model, inference_model = _two_input_model(head)
    train_model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    train_model.fit([x, y], y, batch_size=16, epochs=1, verbose=0)
    model_path = os.path.join(tmp_path, "inference.keras")
    inference_model.save(model_path)
    np.save(os.path.join(tmp_path, "x.npy"), x)

    result, out_path = _load_in_fresh_process("import", model_path, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_allclose(np.load(out_path), inference_model.predict(x, verbose=0), rtol=1e-6, atol=1e-6)

    result, _ = _load_in_fresh_process("no-import", model_path, tmp_path)
    assert result.returncode != 0
    assert "Could not locate class 'MarginHead'" in result.stderr, result.stderr[-3000:]

    export_path = os.path.join(tmp_path, "export")
    inference_model.export(export_path, verbose=False)
    result, out_path = _load_in_fresh_process("savedmodel", export_path, tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_allclose(np.load(out_path), inference_model.predict(x, verbose=0), rtol=1e-5, atol=1e-5)


def test_label_smoothing_loss_with_fit(rng):
    from sphere_tf import losses

    x, y = _toy_data(rng)
    head = MarginHead(3, loss_type="cosface", scale=16.0)
    train_model, inference_model = _two_input_model(head)
    train_model.compile(keras.optimizers.Adam(1e-2), losses.SparseCrossentropy(label_smoothing=0.1))
    history = train_model.fit([x, y], y, batch_size=16, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    # Evaluation uses plain logits: the smoothed cross-entropy of the inference model's logits, by loops.
    logits = inference_model.predict(x, verbose=0).astype(np.float64)
    expected = []
    for row, label in zip(logits, y):
        log_p = row - (row.max() + np.log(np.sum(np.exp(row - row.max()))))
        q = np.full(3, 0.1 / 3)
        q[label] += 0.9
        expected.append(-np.sum(q * log_p))
    assert train_model.evaluate([x, y], y, verbose=0) == pytest.approx(np.mean(expected), rel=1e-4)


@pytest.mark.tensorflow_only
def test_export_has_features_only_serving_signature(rng, tmp_path):
    import tensorflow as tf  # noqa: PLC0415  (SavedModel signatures)

    x, y = _toy_data(rng)
    head = MarginHead(3, loss_type="asoftmax", annealing="sphereface")
    train_model, inference_model = _two_input_model(head)
    train_model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    train_model.fit([x, y], y, batch_size=32, epochs=1, verbose=0)
    loaded = testing.assert_saved_model_roundtrip(inference_model, x, tmp_path, rtol=1e-5, atol=1e-5)
    signature = loaded.signatures["serving_default"]
    specs = signature.structured_input_signature[1]
    assert len(specs) == 1
    (spec,) = specs.values()
    assert spec.shape.as_list() == [None, 6] and spec.dtype == tf.float32


def test_mixed_precision_fit_is_finite_and_logits_are_float32_maths(rng):
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = _toy_data(rng)
    head = MarginHead(3, loss_type="asoftmax", margin=4)
    train_model, inference_model = _two_input_model(head)
    assert head.kernel.dtype == "float32"
    train_model.compile(keras.optimizers.Adam(1e-2), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    history = train_model.fit([x, y], y, batch_size=16, epochs=2, verbose=0)
    assert np.all(np.isfinite(history.history["loss"]))
    assert inference_model.predict(x, verbose=0).dtype == np.float32
    # float16 features in, float32 maths: equal to the float64 reference on the same (rounded) features.
    features = rng.normal(size=(8, 3)).astype(np.float16) * 40
    w = keras.ops.convert_to_numpy(head.kernel)
    got = keras.ops.convert_to_numpy(head(keras.ops.convert_to_tensor(features), labels=y[:8], training=True))
    expected = np_asoftmax_logits(features.astype(np.float64), w, y[:8], 4)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)


@pytest.mark.tensorflow_only
def test_jit_compiled_matches_eager(rng):
    import tensorflow as tf  # noqa: PLC0415  (tf.function(jit_compile=True))

    x, y = _toy_data(rng, n=16)
    head = MarginHead(3, loss_type="lsoftmax", margin=3, annealing="mnist")
    head.build((None, 6))
    eager = keras.ops.convert_to_numpy(head(x, labels=y, training=True))
    head.iteration.assign(0)
    compiled = tf.function(lambda a, b: head(a, labels=b, training=True), jit_compile=True)(x, y).numpy()
    np.testing.assert_allclose(compiled, eager, rtol=1e-5, atol=1e-5)
    assert int(head.iteration.numpy()) == 1


# ---------------------------------------------------------------------------------------
# Inputs: 2-D features, integer labels in range.


def test_features_must_be_two_dimensional(rng):
    head = MarginHead(3)
    with pytest.raises(ValueError, match=r"expected ndim=2, found ndim=4"):
        head(np.zeros((2, 4, 4, 3), np.float32))
    with pytest.raises(ValueError, match=r"expected ndim=2, found ndim=4"):
        head(keras.Input((4, 4, 3)))
    with pytest.raises(ValueError, match=r"features of shape \(batch, feature_dim\)"):
        MarginHead(3).build((None, 4, 4, 3))
    with pytest.raises(ValueError, match=r"features of shape \(batch, feature_dim\)"):
        MarginHead(3).build((None, None))


@pytest.mark.parametrize("symbolic", (False, True))
def test_labels_must_be_integer_ids_of_shape_batch(rng, symbolic):
    head = MarginHead(3)
    if symbolic:
        x = keras.Input((4,))
        as_labels = lambda shape, dtype: keras.Input(shape[1:], dtype=dtype)  # noqa: E731
    else:
        x = _features(rng, 8, 4)
        as_labels = lambda shape, dtype: np.zeros(shape, dtype)  # noqa: E731
    with pytest.raises(ValueError, match=r"integer class ids in \[0, 3\).*dtype=float32"):
        head(x, labels=as_labels((8,), "float32"), training=True)
    with pytest.raises(ValueError, match=r"shape \(batch,\) or \(batch, 1\).*labels.shape=\((8|None), 2\)"):
        head(x, labels=as_labels((8, 2), "int32"), training=True)
    # Both accepted shapes (and a Python list of ids) give the same logits.
    if not symbolic:
        y = rng.integers(0, 3, size=8)
        first = keras.ops.convert_to_numpy(head(x, labels=y, training=True))
        head.iteration.assign(0)
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(head(x, labels=y[:, None].astype(np.int64), training=True)), first)
        head.iteration.assign(0)
        np.testing.assert_array_equal(
            keras.ops.convert_to_numpy(head(x, labels=[int(v) for v in y], training=True)), first)
        with pytest.raises(ValueError, match=r"labels.shape=\(5,\), features.shape=\(8, 4\)"):
            head(x, labels=y[:5], training=True)


@pytest.mark.parametrize("bad", (-1, 3, 7))
def test_out_of_range_label_names_the_range_eagerly(rng, bad):
    head = MarginHead(3, loss_type="cosface")
    x = _features(rng, 4, 4)
    y = np.array([0, 1, bad, 2], np.int32)
    with pytest.raises(ValueError, match=rf"class id in \[0, 3\).*out of range \[{bad}\]"):
        head(x, labels=y, training=True)


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("bad", (-1, 3, 7))
def test_out_of_range_label_names_the_range_in_tf_function(rng, bad):
    import tensorflow as tf  # noqa: PLC0415  (tf.function, InvalidArgumentError)

    head = MarginHead(3, loss_type="cosface")
    x = _features(rng, 4, 4)
    y = np.array([0, 1, bad, 2], np.int32)
    step = tf.function(lambda a, b: head(a, labels=b, training=True))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"class id in \[0, 3\)"):
        step(x, y)
    # In-range labels still work through the same traced function.
    assert np.all(np.isfinite(step(x, np.array([0, 1, 2, 2], np.int32)).numpy()))


@pytest.mark.tensorflow_only
def test_out_of_range_label_under_xla_gives_nan_logits_for_that_sample(rng):
    """XLA compiles Assert away; the sample's logits are NaN (not a clamped gather), the others are exact."""
    import tensorflow as tf  # noqa: PLC0415  (tf.function(jit_compile=True))

    head = MarginHead(3, loss_type="asoftmax", margin=4)
    x = _features(rng, 4, 4)
    step = tf.function(lambda a, b: head(a, labels=b, training=True), jit_compile=True)
    good = step(x, np.array([0, 1, 2, 2], np.int32)).numpy()
    bad = step(x, np.array([0, 1, 5, 2], np.int32)).numpy()
    assert np.all(np.isnan(bad[2])) and np.all(np.isfinite(good))
    np.testing.assert_allclose(np.delete(bad, 2, axis=0), np.delete(good, 2, axis=0), rtol=1e-6, atol=1e-6)


# ---------------------------------------------------------------------------------------
# Mixed precision: float32 logits, and the declared spec says so.


@pytest.mark.parametrize("loss_type", ALL_TYPES)
@pytest.mark.parametrize("policy", ("mixed_float16", "mixed_bfloat16"))
def test_output_spec_is_float32_under_mixed_policies(rng, loss_type, policy):
    keras.mixed_precision.set_global_policy(policy)
    head = MarginHead(3, loss_type=loss_type)
    features, labels = keras.Input((4,)), keras.Input((), dtype="int32")
    assert head(features, labels=labels).dtype == "float32"  # symbolic, training path
    assert head(features).dtype == "float32"  # symbolic, inference path
    compute_dtype = keras.mixed_precision.global_policy().compute_dtype
    assert head.compute_output_spec(keras.KerasTensor((None, 4), dtype=compute_dtype)).dtype == "float32"
    x = keras.ops.cast(_features(rng, 6, 4), compute_dtype)
    y = rng.integers(0, 3, size=6)
    assert keras.backend.standardize_dtype(head(x, labels=y, training=True).dtype) == "float32"  # eager, margin logits
    assert keras.backend.standardize_dtype(head(x).dtype) == "float32"
    train_model = keras.Model([features, labels], head(features, labels=labels))
    assert train_model.outputs[0].dtype == "float32"
    assert train_model.predict([x, y], verbose=0).dtype == np.float32


# ---------------------------------------------------------------------------------------
# Keras's own layer harness.


def _compiled_by_xla(x):
    """Whether this call is being traced for XLA: TensorFlow's XLA context; on JAX every trace is XLA's; on
    PyTorch, a `torch.compile` trace."""
    if keras.backend.backend() == "tensorflow":
        from sphere_tf.backends.tensorflow import xla_context  # noqa: PLC0415  (the TensorFlow plug-in)

        return xla_context.in_xla_context()
    if keras.backend.backend() == "jax":
        import jax  # noqa: PLC0415

        return isinstance(x, jax.core.Tracer)
    if keras.backend.backend() == "torch":
        import torch  # noqa: PLC0415

        # PyTorch's counterpart of XLA: Keras compiles a `jit_compile=True` step with `torch.compile`.
        return torch.compiler.is_compiling()
    return False


@keras.saving.register_keras_serializable(package="sphere_tf_tests")
class PairInputMarginHead(MarginHead):
    """Minimal wrapper for `run_layer_test`: one input `(features, labels)`.

    The harness's training check calls `layer(x, training=True)` with `x` the
    input data only (its `call_kwargs` are not passed there), so a head fed its
    labels through `call_kwargs` would train on plain logits. This subclass takes
    the pair as its single input, so the harness's fit runs the margin path.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.input_spec = None

    def build(self, input_shape):
        super().build(input_shape[0])
        self.input_spec = None

    traces = []  # (training, traced for XLA) of every call, to check what the harness ran

    def call(self, inputs, training=None):
        features, labels = inputs
        PairInputMarginHead.traces.append((bool(training), _compiled_by_xla(features)))
        return super().call(features, labels=labels, training=training)

    def compute_output_spec(self, inputs, training=None):
        features, labels = inputs
        return super().compute_output_spec(features, labels=labels, training=training)


HARNESS_KWARGS = {
    "lsoftmax": dict(margin=3, annealing="mnist"),
    "asoftmax": dict(annealing="sphereface", use_bias=True),
    "wsoftmax": dict(angular="sigmoid"),
    "gasoftmax": dict(angular="linear", margin=2.5),
    "ssoftmax": dict(angular="cosine", margin=2),
    "cosface": dict(scale=16.0),
    "arcface": dict(),
    "combined": dict(margin=(1.2, 0.3, 0.1)),
}


@pytest.mark.parametrize("loss_type", ALL_TYPES)
def test_keras_run_layer_test_with_labels_as_call_kwargs(rng, keras_harness, loss_type):
    """MarginHead itself: serialization, build, symbolic and eager calls with labels, mixed precision.

    The harness's training check calls the layer without `call_kwargs`, so it fits
    the plain-logit path here (the next test trains the margin path).
    """
    x = _features(rng, 8, 4)
    y = keras.ops.convert_to_tensor(rng.integers(0, 5, size=8), "int32")
    kwargs = {"num_classes": 5, "loss_type": loss_type, **HARNESS_KWARGS[loss_type]}
    keras_harness.run_layer_test(
        MarginHead,
        init_kwargs=kwargs,
        input_data=x,
        call_kwargs={"labels": y, "training": True},
        expected_output_shape=(8, 5),
        expected_output_dtype="float32",
        expected_num_trainable_weights=2 if kwargs.get("use_bias") else 1,
        expected_num_non_trainable_weights=1,
        expected_num_losses=0,
    )


@pytest.mark.parametrize("loss_type", ALL_TYPES)
def test_keras_run_layer_test_training_check_with_labels(rng, keras_harness, loss_type):
    """The harness's training check with the margin path (through `PairInputMarginHead`), graph and XLA."""
    x = _features(rng, 8, 4)
    y = keras.ops.convert_to_tensor(rng.integers(0, 5, size=8), "int32")
    kwargs = {"num_classes": 5, "loss_type": loss_type, **HARNESS_KWARGS[loss_type]}
    PairInputMarginHead.traces.clear()
    keras_harness.run_layer_test(
        PairInputMarginHead,
        init_kwargs=kwargs,
        input_data=(x, y),
        expected_output_shape=(8, 5),
        expected_output_dtype="float32",
        expected_num_non_trainable_weights=1,
    )
    # The harness's fit traced the margin path (labels, training=True), compiled as a whole in the 'xla' case
    # (TensorFlow XLA, `jax.jit`; PyTorch runs the harness eagerly).
    xla = keras_harness.xla
    assert (True, xla) in PairInputMarginHead.traces, PairInputMarginHead.traces
