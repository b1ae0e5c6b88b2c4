"""`FGSMAdversarialModel.train_step` on every backend against a NumPy linear softmax model (closed forms).

For logits z = x·W + b and J the softmax cross-entropy, ∂J/∂x = (softmax(z) − e_y)·Wᵀ, so FGSM has the closed form
x̃ = clip(x + ε·sign(∂J/∂x)) (`_linear.fgsm_reference`), and ∂J/∂W = xᵀ(softmax(z) − e_y), ∂J/∂b = softmax(z) − e_y.
One step of FGSM adversarial training with sample weights w_i on a batch of B (Goodfellow et al., ICLR 2015,
eq. 6; Liu et al., Decoupled Networks, CVPR 2018, §6.2) minimises the Keras mean over the 2B batch

    L = (1/2B)·Σ_i [2(1 − mix)·w_i·J(x_i) + 2·mix·w_i·J(x̃_i)],   x̃ crafted from the weights before the step,

and logs the metrics of the clean half only (`weighted_metrics` weighted by w_i). Plain SGD makes the update
W ← W − lr·∂L/∂W. The references below are NumPy in float64; a `fit` over two batches checks that the second batch's examples come from
the weights after the first step (on JAX, from the trainer's state rather than the variables). Where TensorFlow is
installed beside JAX or PyTorch, a decoupled CNN trained the same way on TensorFlow (whose examples are cleverhans'
to the last bit) is the reference for the other backend's weights.
"""

import importlib.util
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from keras import ops

from sphere_tf.adversarial import adversarial_wrap
from sphere_tf.adversarial import pixel_space
from tests.adversarial import _linear

SPACE = pixel_space("centered_128", 1)
LO, HI = SPACE.lower[0], SPACE.upper[0]
EPS = 8 / 128
LR = 0.1
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cross_entropy(x, y, w, b):
    z = x.reshape(len(x), -1).astype(np.float64) @ w + b
    z = z - z.max(axis=1, keepdims=True)
    return np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(y)), y]


def _weighted_gradient(x, y, w, b, c):
    """∂/∂(W, b) of (1/n)·Σ_i c_i·J(x_i): the weighted sum of per-example gradients over the batch size n."""
    flat, err = _linear.logit_error(x, y, w, b)
    err = err * c[:, None]
    return flat.T @ err / len(y), err.sum(axis=0) / len(y)


def _reference_step(x, y, sw, w, b, mix):
    """(new W, new b, loss, clean-half correct) of one adversarial SGD step, in NumPy."""
    x_adv = _linear.fgsm_reference(x, y, w, b, EPS, LO, HI)
    inputs, targets = np.concatenate([x, x_adv]), np.concatenate([y, y])
    c = np.concatenate([2 * (1 - mix) * sw, 2 * mix * sw])
    gw, gb = _weighted_gradient(inputs, targets, w, b, c)
    loss = np.mean(c * _cross_entropy(inputs, targets, w, b))
    correct = np.argmax(x.reshape(len(x), -1) @ w + b, axis=1) == y
    return w - LR * gw, b - LR * gb, loss, correct


def _data(n, seed):
    rng = np.random.default_rng(seed)
    x = SPACE.from_pixels(rng.uniform(0, 255, size=(n, 4, 4, 1)))
    return x, rng.integers(0, 3, n).astype(np.int32), rng.uniform(0.2, 2.0, n).astype(np.float32)


def _compiled(model, mix):
    wrapped = adversarial_wrap(model, SPACE, epsilon=8, mix=mix)
    wrapped.compile(optimizer=keras.optimizers.SGD(LR),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"],
                    weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="weighted_accuracy")])
    return wrapped


@pytest.mark.parametrize("mix", [0.0, 0.3, 1.0])
def test_one_step_with_sample_weights_matches_the_closed_form(mix):
    model, w, b = _linear.linear_model(seed=5, scale=0.4)
    x, y, sw = _data(8, seed=6)
    wrapped = _compiled(model, mix)
    logs = wrapped.train_on_batch(x, y, sample_weight=sw, return_dict=True)
    new_w, new_b, loss, correct = _reference_step(x, y, sw.astype(np.float64), w, b, mix)
    got_w, got_b = model.layers[-1].get_weights()
    np.testing.assert_allclose(got_w, new_w, atol=2e-5)
    np.testing.assert_allclose(got_b, new_b, atol=2e-5)
    assert logs["loss"] == pytest.approx(loss, rel=1e-5)
    # The metrics are the clean half's (the adversarial half is not counted); the weighted ones by its weights.
    assert logs["accuracy"] == pytest.approx(np.mean(correct), rel=1e-6)
    assert logs["weighted_accuracy"] == pytest.approx(np.sum(sw * correct) / np.sum(sw), rel=1e-5)


def test_fit_crafts_each_batch_from_the_weights_after_the_previous_step():
    model, w, b = _linear.linear_model(seed=7, scale=0.4)
    x, y, sw = _data(12, seed=8)
    wrapped = _compiled(model, 0.5)
    history = wrapped.fit(x, y, sample_weight=sw, batch_size=6, epochs=1, shuffle=False, verbose=0).history
    losses, weights, hits = [], [], []
    for lo in (0, 6):  # two steps, the second from the first's weights
        part = slice(lo, lo + 6)
        w, b, loss, correct = _reference_step(x[part], y[part], sw[part].astype(np.float64), w, b, 0.5)
        losses.append(loss)
        weights.append(sw[part])
        hits.append(correct)
    got_w, got_b = model.layers[-1].get_weights()
    np.testing.assert_allclose(got_w, w, atol=5e-5)
    np.testing.assert_allclose(got_b, b, atol=5e-5)
    assert history["loss"][0] == pytest.approx(np.mean(losses), rel=1e-5)  # equal batches: the plain mean
    weights, hits = np.concatenate(weights), np.concatenate(hits)
    assert history["accuracy"][0] == pytest.approx(np.mean(hits), rel=1e-6)
    assert history["weighted_accuracy"][0] == pytest.approx(np.sum(weights * hits) / np.sum(weights), rel=1e-5)


def test_the_clean_half_metrics_do_not_leak_into_evaluate():
    """`evaluate` (no attack) scores every example it is given: the clean-half window is the train step's only."""
    model, w, b = _linear.linear_model(seed=9, scale=0.4)
    x, y, _ = _data(10, seed=10)
    wrapped = _compiled(model, 0.5)
    wrapped.train_on_batch(x[:4], y[:4])
    w, b = model.layers[-1].get_weights()
    logs = wrapped.evaluate(x, y, batch_size=10, verbose=0, return_dict=True)
    correct = np.argmax(x.reshape(len(x), -1) @ w + b, axis=1) == y
    assert logs["accuracy"] == pytest.approx(np.mean(correct), rel=1e-6)
    assert logs["loss"] == pytest.approx(np.mean(_cross_entropy(x, y, w, b)), rel=1e-5)


def test_examples_clip_per_channel():
    mean = (120.0, 60.0, 200.0)
    space = pixel_space("mean_subtraction", 3, channel_mean=mean)
    model, w, b = _linear.linear_model(shape=(2, 2, 3), seed=1, scale=0.002)  # unsaturated on pixel-unit inputs
    rng = np.random.default_rng(1)
    x = space.from_pixels(rng.choice([0.0, 3.0, 128.0, 252.0, 255.0], size=(5, 2, 2, 3)))
    y = np.array([0, 1, 2, 1, 0], np.int32)
    wrapped = adversarial_wrap(model, space, epsilon=8)
    adv = ops.convert_to_numpy(wrapped.adversarial_examples(x, y))
    lower, upper = np.array(space.lower), np.array(space.upper)
    np.testing.assert_allclose(adv, _linear.fgsm_reference(x, y, w, b, 8.0, lower, upper), atol=1e-4)


# -- against TensorFlow's numbers (a child process on the TensorFlow backend, where TensorFlow is installed) -----

TRAIN_CHILD = r"""
import sys
import numpy as np
from tests.adversarial import test_adv_train_step as t
np.savez(sys.argv[2], *t.train_decoupled_cnn(np.load(sys.argv[1])))
"""


def train_decoupled_cnn(arrays):
    """Two FGSM adversarial epochs of a TanhConv + BN CNN from the weights in `arrays` (an npz of `init`, `x`, `y`,
    `sw`), with sample weights and a per-channel range; returns the model's weights after training."""
    model = _decoupled_cnn()
    model.set_weights([arrays[f"init_{i}"] for i in range(len(model.weights))])
    space = pixel_space("mean_subtraction", 3, channel_mean=(120.0, 60.0, 200.0))
    wrapped = adversarial_wrap(model, space, epsilon=8, mix=0.3)
    wrapped.compile(optimizer=keras.optimizers.Adam(1e-2),
                    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    wrapped.fit(arrays["x"], arrays["y"], sample_weight=arrays["sw"], batch_size=16, epochs=2, shuffle=False,
                verbose=0)
    return [ops.convert_to_numpy(v) for v in model.weights]


def _decoupled_cnn():
    from sphere_tf import models  # noqa: PLC0415

    return models.create_model("small_cnn", input_shape=(8, 8, 3), num_classes=4, widths=(4, 8), convs_per_stage=1,
                               dense_units=8, operator={"layer": "decoupled", "magnitude": "tanh",
                                                        "angular": "cosine"})


@pytest.mark.skipif(keras.backend.backend() == "tensorflow"
                    or importlib.util.find_spec("tensorflow") is None,
                    reason="compares another backend with TensorFlow installed beside it (.venv)")
def test_adversarial_training_matches_tensorflow(tmp_path):
    """TensorFlow's step (cleverhans' examples, bitwise) is the reference: the same weights after 6 steps, to float32
    rounding of the decoupled operators and batch norm."""
    keras.utils.set_random_seed(3)
    rng = np.random.default_rng(0)
    space = pixel_space("mean_subtraction", 3, channel_mean=(120.0, 60.0, 200.0))
    arrays = {f"init_{i}": ops.convert_to_numpy(v) for i, v in enumerate(_decoupled_cnn().weights)}
    arrays.update(x=space.from_pixels(rng.uniform(0, 255, size=(40, 8, 8, 3))),
                  y=rng.integers(0, 4, 40).astype(np.int32), sw=rng.uniform(0.5, 1.5, 40).astype(np.float32))
    np.savez(tmp_path / "inputs.npz", **arrays)
    proc = subprocess.run([sys.executable, "-c", TRAIN_CHILD, str(tmp_path / "inputs.npz"), str(tmp_path / "tf.npz")],
                          cwd=REPO, env=dict(os.environ, KERAS_BACKEND="tensorflow", PYTHONPATH=REPO),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reference = np.load(tmp_path / "tf.npz")
    got = train_decoupled_cnn(arrays)
    assert len(got) == len(reference.files)
    moved = 0
    for i, value in enumerate(got):
        want = reference[f"arr_{i}"]
        moved += not np.allclose(want, arrays[f"init_{i}"], atol=1e-3)
        np.testing.assert_allclose(value, want, rtol=1e-4, atol=1e-4, err_msg=f"weight {i}")
    assert moved >= len(got) // 2  # the comparison is of trained weights
