"""Tests for sphere_tf.layers.PartialFCHead and sphere_tf.optimizers.PartialFCOptimizer (Partial FC).

References are NumPy: the sampling rule from the paper/upstream text (block sizes, positives, uniform
negatives), the margin logits and cross-entropy over the reported sampled classes, finite-difference
gradients and the Keras SGD/Adam update formulas applied to the sampled columns only. The full-rate
head is compared with the dense `MarginHead` (another code path: no sampling, Keras's cross-entropy).
"""

import math
from fractions import Fraction

import keras
import numpy as np
import pytest
from keras import ops

from sphere_tf import testing
from sphere_tf.layers import MarginHead
from sphere_tf.layers import PartialFCHead
from sphere_tf.ops import margin as margin_lib
from sphere_tf.ops import sampling
from sphere_tf.optimizers import PartialFCOptimizer
from sphere_tf.optimizers import is_partial_fc_variable

ALL_TYPES = margin_lib.LOSS_TYPES
BACKEND = keras.backend.backend()
# Per-type arguments: the annealed types anneal (λ must follow the same step count), some use a bias.
TYPE_KWARGS = {
    "lsoftmax": dict(margin=2, annealing="mnist", use_bias=True),
    "asoftmax": dict(annealing="sphereface"),
    "wsoftmax": dict(angular="sigmoid"),
    "gasoftmax": dict(angular="linear", margin=2.5),
    "ssoftmax": dict(angular="cosine", margin=2, scale=8.0),
    "cosface": dict(scale=16.0, use_bias=True),
    "arcface": dict(scale=16.0),
    "combined": dict(margin=(1.2, 0.3, 0.1), scale=16.0),
}


def to_numpy(x):
    return np.asarray(ops.convert_to_numpy(x))


# ---------------------------------------------------------------------------------------
# Independent NumPy references.


def np_block_sample_size(block_size, rate, batch):
    """k_block = min(C_block, max(ceil(r·C_block), B)) with exact decimal arithmetic."""
    return min(block_size, max(math.ceil(Fraction(str(rate)) * block_size), batch))


def np_psi(phi):
    """(−1)^κ cos φ − 2κ, κ = ⌊φ/π⌋ (the continued cos of the margin forms)."""
    kappa = np.floor(phi / np.pi)
    return (-1.0) ** kappa * np.cos(phi) - 2.0 * kappa


def np_margin_logits(x, w, b, y, loss_type, margin, scale=None, lam=0.0):
    """float64 logits of the margin family over the columns of `w`, margin on column y[i] (loops over i)."""
    x, w = x.astype(np.float64), w.astype(np.float64)
    eps = 1e-4 if loss_type in ("cosface", "arcface", "combined", "ssoftmax") else 1e-12
    xn = np.sqrt(np.sum(x**2, axis=1, keepdims=True) + eps)
    wn = np.sqrt(np.sum(w**2, axis=0, keepdims=True) + eps)
    theta = np.arccos(np.clip((x / xn) @ (w / wn), -1.0, 1.0))
    if loss_type == "lsoftmax":
        radius, plain = xn * wn, x @ w
    elif loss_type in ("cosface", "arcface", "combined"):
        radius = np.full_like(theta, scale)
        plain = radius * np.cos(theta)
    elif loss_type == "asoftmax":
        radius = np.broadcast_to(xn, theta.shape)
        plain = radius * np.cos(theta)
    else:
        raise NotImplementedError(loss_type)
    if b is not None:
        plain = plain + b
    out = plain.copy()
    for i, j in enumerate(y):
        t = theta[i, j]
        if loss_type in ("lsoftmax", "asoftmax"):
            psi = np_psi(margin * t)  # = (−1)^k cos(mθ) − 2k
        elif loss_type == "cosface":
            psi = np.cos(t) - margin
        elif loss_type == "arcface":
            psi = np_psi(t + margin)
        else:
            m1, m2, m3 = margin
            psi = np_psi(m1 * t + m2) - m3
        target = radius[i, j] * psi + (0.0 if b is None else b[j])
        out[i, j] = (lam * plain[i, j] + target) / (1.0 + lam)
    return out


def np_xent(logits, y):
    logits = logits.astype(np.float64)
    top = logits.max(axis=1, keepdims=True)
    lse = top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))
    return lse - logits[np.arange(len(y)), y]


def np_lambda(t, base, gamma, power, lambda_min):
    return max(lambda_min, base * (1.0 + gamma * t) ** (-power))


def class_last(array):
    """A head variable, gradient or slot with the classes on its last axis: the class-major `(C_padded, d)`
    kernel as `MarginHead`'s `(d, C_padded)`; a `(C_padded,)` bias as it is."""
    return np.transpose(to_numpy(array))


def _head_with_kernel(rng, num_classes, d=4, **kwargs):
    """A built head whose real classes' weights are N(0, 1) and whose bias (if any) is N(0, 0.5); returns (head,
    W, b) with W in `MarginHead`'s `(d, C)` layout (the head stores it class-major)."""
    head = PartialFCHead(num_classes, **kwargs)
    head.build((None, d))
    padded = head.num_padded_classes
    w = rng.normal(size=(d, num_classes)).astype(np.float32)
    head.kernel.assign(np.concatenate([w, np.zeros((d, padded - num_classes), np.float32)], axis=1).T)
    b = None
    if head.use_bias:
        b = (0.5 * rng.normal(size=num_classes)).astype(np.float32)
        head.bias.assign(np.concatenate([b, np.zeros(padded - num_classes, np.float32)]))
    return head, w, b


def _stateless_loss_and_grads(layer, x, y, loss_of=None):
    """The training loss of one call and its gradients w.r.t. the features and every trainable weight.

    A stateless call, so the layer's state (seed, counter, mask) is read, not advanced: call it before an
    eager training call with the same inputs and both see the same sample and λ. `loss_of(outputs, losses)`
    gives the scalar (default: the head's own `add_loss` term).
    """
    weights = [to_numpy(v.value) for v in layer.trainable_variables]
    non_trainable = [v.value for v in layer.non_trainable_variables]
    loss_of = loss_of or (lambda outputs, losses: losses[-1])

    def fn(features, *values):
        outputs, _, losses = layer.stateless_call(
            list(values), non_trainable, features, labels=y, training=True, return_losses=True
        )
        return loss_of(outputs, losses)

    value, grads, _ = testing.gradients(fn, [x, *weights])
    return float(value), grads


# ---------------------------------------------------------------------------------------
# sample_rate = 1: the dense MarginHead.


@pytest.mark.parametrize("num_classes,num_shards", [(10, 1), (10, 2), (10, 4)])
@pytest.mark.parametrize("loss_type", ALL_TYPES)
def test_full_rate_equals_dense_margin_head(rng, loss_type, num_classes, num_shards):
    kwargs = {"loss_type": loss_type, **TYPE_KWARGS[loss_type]}
    head, w, b = _head_with_kernel(rng, num_classes, sample_rate=1.0, num_shards=num_shards, seed=0, **kwargs)
    dense = MarginHead(num_classes, **kwargs)
    dense.build((None, 4))
    dense.kernel.assign(w)
    if b is not None:
        dense.bias.assign(b)
    x = rng.normal(size=(6, 4)).astype(np.float32)
    y = rng.integers(0, num_classes, size=6).astype(np.int32)
    for _ in range(3):  # the same number of annealing steps
        head(x, labels=y, training=True)
        dense(x, labels=y, training=True)
    assert int(to_numpy(head.iteration)) == int(to_numpy(dense.iteration)) == 3
    assert float(head.current_lambda()) == float(dense.current_lambda())

    loss, grads = _stateless_loss_and_grads(head, x, y)

    def dense_loss(outputs, losses):
        return ops.mean(keras.losses.sparse_categorical_crossentropy(y, outputs, from_logits=True))

    dense_value, dense_grads = _stateless_loss_and_grads(dense, x, y, dense_loss)
    assert loss == pytest.approx(dense_value, rel=1e-5, abs=1e-5)
    np.testing.assert_allclose(grads[0], dense_grads[0], rtol=1e-4, atol=1e-5)  # features
    np.testing.assert_allclose(grads[1][:num_classes].T, dense_grads[1], rtol=1e-4, atol=1e-5)  # kernel
    np.testing.assert_array_equal(grads[1][num_classes:], 0.0)  # padding: no gradient
    if b is not None:
        np.testing.assert_allclose(grads[2][:num_classes], dense_grads[2], rtol=1e-4, atol=1e-5)
        np.testing.assert_array_equal(grads[2][num_classes:], 0.0)
    # The returned logits are the dense ones, padding columns masked; the mask is every real class.
    out = to_numpy(head(x, labels=y, training=True))
    dense_out = to_numpy(dense(x, labels=y, training=True))
    assert out.shape == (6, head.num_padded_classes)
    np.testing.assert_allclose(out[:, :num_classes], dense_out, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(out[:, num_classes:], np.float32(sampling.MASKED_LOGIT))
    np.testing.assert_array_equal(head.sampled_classes(), np.arange(num_classes))
    # Inference: (B, num_classes) plain logits, padding sliced off, exactly MarginHead's.
    np.testing.assert_allclose(to_numpy(head(x)), to_numpy(dense(x)), rtol=1e-6, atol=1e-6)
    assert tuple(head(x).shape) == (6, num_classes)


# ---------------------------------------------------------------------------------------
# r < 1: the sample.


@pytest.mark.parametrize(
    "num_classes,num_shards,rate,batch",
    [(40, 1, 0.1, 3), (40, 2, 0.25, 4), (37, 4, 0.3, 2), (37, 4, 0.1, 6), (12, 3, 0.5, 8), (30, 1, 0.1, 2)],
)
def test_sample_holds_every_positive_and_the_stated_size(rng, num_classes, num_shards, rate, batch):
    padded = num_shards * -(-num_classes // num_shards)
    block = padded // num_shards
    k = np_block_sample_size(block, rate, batch)
    assert sampling.block_sample_size(block, rate, batch) == k
    seed = keras.random.SeedGenerator(3)
    for _ in range(5):
        y = rng.integers(0, num_classes, size=batch).astype(np.int32)
        drawn = sampling.sample_classes(y, num_classes, num_shards, k, seed)
        index, remapped, mask, real = (to_numpy(t) for t in drawn)
        assert index.shape == (num_shards * k,)
        assert np.all(np.diff(index) > 0)  # sorted, distinct
        for s in range(num_shards):  # k_block columns of each block, from that block
            part = index[s * k:(s + 1) * k]
            assert np.all((part >= s * block) & (part < (s + 1) * block))
        assert set(y.tolist()) <= set(index.tolist())
        np.testing.assert_array_equal(index[remapped], y)  # labels remapped to their column
        expected_mask = np.zeros(padded)
        expected_mask[index[index < num_classes]] = 1.0
        np.testing.assert_array_equal(mask, expected_mask)
        np.testing.assert_array_equal(real, index < num_classes)
        # A padding column is taken only when its block has fewer real classes than k_block.
        for s in range(num_shards):
            real_in_block = max(0, min(block, num_classes - s * block))
            taken = np.sum((index >= max(num_classes, s * block)) & (index < (s + 1) * block))
            assert taken == max(0, k - real_in_block)


def test_negatives_are_drawn_uniformly():
    """Counts of each negative over 600 draws stay within 6 binomial standard deviations of their mean."""
    num_classes, num_shards, k, draws = 19, 2, 4, 600  # blocks of 10; class 19 is padding
    y = np.array([0, 1, 12], np.int32)
    seed = keras.random.SeedGenerator(11)
    counts = np.zeros(20)
    for _ in range(draws):
        counts += to_numpy(sampling.sample_classes(y, num_classes, num_shards, k, seed)[2])
    np.testing.assert_array_equal(counts[[0, 1, 12]], draws)  # positives: always
    assert counts[19] == 0  # padding: never (9 real classes in its block > k)
    for negatives, slots in ((np.arange(2, 10), 2), (np.setdiff1d(np.arange(10, 19), [12]), 3)):
        p = slots / len(negatives)
        mean, sd = draws * p, math.sqrt(draws * p * (1 - p))
        assert np.all(np.abs(counts[negatives] - mean) < 6 * sd), (counts[negatives], mean, sd)
        assert counts[negatives].sum() == draws * slots


def test_seeded_heads_draw_the_same_samples(rng):
    x = rng.normal(size=(4, 3)).astype(np.float32)
    y = np.array([0, 5, 9, 30], np.int32)
    samples = []
    for _ in range(2):
        head = PartialFCHead(40, loss_type="cosface", sample_rate=0.2, num_shards=2, seed=5)
        draws = []
        for _ in range(3):
            head(x, labels=y, training=True)
            draws.append(head.sampled_classes())
        samples.append(draws)
    for a, b in zip(*samples):
        np.testing.assert_array_equal(a, b)
    assert any(len(np.setdiff1d(samples[0][0], s)) for s in samples[0][1:])  # the draws change per step


def test_step_seed_draws_are_a_function_of_seed_and_step():
    def draw(seed, step):
        return to_numpy(keras.random.uniform((50,), seed=sampling.step_seed(seed, ops.convert_to_tensor(step))))

    first = draw(3, 1)
    assert np.all((first >= 0) & (first < 1))
    np.testing.assert_array_equal(draw(3, 1), first)  # no hidden state
    assert not np.array_equal(draw(3, 2), first)
    assert not np.array_equal(draw(4, 1), first)


def test_the_sample_follows_the_positives_of_every_replica():
    """`positives=` (the all-gathered labels) drive the sample; a replica's own labels are remapped into it."""
    everyone = np.array([0, 5, 9, 30, 31, 17], np.int32)
    k = sampling.block_sample_size(20, 0.2, len(everyone))  # max(4, 6) = 6 per block
    seed = sampling.step_seed(5, 3)
    whole = [to_numpy(t) for t in sampling.sample_classes(everyone, 40, 2, k, seed)]
    for own in (everyone[:2], everyone[2:5], everyone[5:]):
        index, remapped, mask, real = (to_numpy(t) for t in sampling.sample_classes(own, 40, 2, k, seed,
                                                                                  positives=everyone))
        np.testing.assert_array_equal(index, whole[0])  # the same columns on every replica
        np.testing.assert_array_equal(mask, whole[2])
        assert set(everyone.tolist()) <= set(index.tolist())
        np.testing.assert_array_equal(index[remapped], own)


def test_unseeded_heads_follow_keras_set_random_seed(rng):
    x = rng.normal(size=(4, 3)).astype(np.float32)
    y = np.array([0, 5, 9, 30], np.int32)
    samples = []
    for _ in range(2):
        keras.utils.set_random_seed(7)
        head = PartialFCHead(40, loss_type="cosface", sample_rate=0.2, seed=None)
        head(x, labels=y, training=True)
        samples.append(head.sampled_classes())
    np.testing.assert_array_equal(samples[0], samples[1])


@pytest.mark.parametrize(
    "loss_type,kwargs",
    [
        ("asoftmax", dict(annealing="sphereface")),
        ("lsoftmax", dict(margin=2, use_bias=True)),
        ("cosface", dict(scale=16.0, margin=0.35, use_bias=True)),
        ("arcface", dict(scale=16.0, margin=0.5)),
        ("combined", dict(scale=16.0, margin=(1.2, 0.3, 0.1))),
    ],
)
def test_sampled_logits_and_loss_match_numpy(rng, loss_type, kwargs):
    num_classes, num_shards, rate = 16, 3, 0.3  # 18 columns, blocks of 6, k_block = max(2, 5) = 5: the last
    # block has 4 real classes, so one padding column is sampled too
    head, w, b = _head_with_kernel(rng, num_classes, loss_type=loss_type, sample_rate=rate, num_shards=num_shards,
                                   seed=2, **kwargs)
    margin = head.margin
    x = rng.normal(size=(5, 4)).astype(np.float32)
    for step in (1, 2, 3):
        y = rng.integers(0, num_classes, size=5).astype(np.int32)
        out = to_numpy(head(x, labels=y, training=True))
        classes = head.sampled_classes()  # the reported sample
        n = len(classes)
        assert out.shape == (5, 3 * 5) and out.dtype == np.float32
        assert set(y.tolist()) <= set(classes.tolist())
        remapped = np.searchsorted(classes, y)
        lam = np_lambda(step, **margin_lib.ANNEALING_PRESETS["sphereface"]) if "annealing" in kwargs else 0.0
        expected = np_margin_logits(x, w[:, classes], None if b is None else b[classes], remapped, loss_type,
                                    margin, head.scale, lam)
        np.testing.assert_allclose(out[:, :n], expected, rtol=2e-4, atol=2e-4)
        # The padding column, after the classes.
        np.testing.assert_array_equal(out[:, n:], np.float32(sampling.MASKED_LOGIT))
        (loss,) = head.losses
        assert float(to_numpy(loss)) == pytest.approx(np.mean(np_xent(expected, remapped)), rel=1e-4, abs=1e-4)


def test_gradients_vanish_on_unsampled_columns(rng):
    head, _, _ = _head_with_kernel(rng, 30, loss_type="arcface", scale=8.0, sample_rate=0.2, num_shards=2,
                                   use_bias=True, seed=4)
    x = rng.normal(size=(3, 4)).astype(np.float32)
    y = np.array([1, 17, 17], np.int32)
    _, grads = _stateless_loss_and_grads(head, x, y)  # reads the state the next call starts from
    head(x, labels=y, training=True)  # same sample: same seed state
    mask = to_numpy(head.sampled_mask())
    assert mask.sum() == 2 * sampling.block_sample_size(15, 0.2, 3) and mask[[1, 17]].tolist() == [1.0, 1.0]
    kernel_grad, bias_grad = class_last(grads[1]), grads[2]
    np.testing.assert_array_equal(kernel_grad[:, mask == 0], 0.0)
    np.testing.assert_array_equal(bias_grad[mask == 0], 0.0)
    assert np.all(np.any(kernel_grad[:, mask == 1] != 0, axis=0))  # every sampled column takes gradient


# ---------------------------------------------------------------------------------------
# Models: fit, evaluate, the optimizer wrapper.


def _two_input_model(head, d=4, backbone=None):
    features_in = keras.Input((d,), name="features")
    labels_in = keras.Input((), dtype="int32", name="labels")
    hidden = features_in if backbone is None else backbone(features_in)
    return keras.Model([features_in, labels_in], head(hidden, labels=labels_in)), keras.Model(features_in, head(hidden))


class _Recorder(keras.callbacks.Callback):
    """Records the head's kernel, bias, their slots and the sampled mask after every training batch."""

    def __init__(self, head, slots):
        super().__init__()
        self.head, self.slots, self.states = head, slots, []

    def snapshot(self):
        variables = [self.head.kernel] + ([self.head.bias] if self.head.use_bias else [])
        return {
            "weights": [class_last(v).copy() for v in variables],
            "slots": [class_last(s).copy() for s in self.slots()],
            "mask": to_numpy(self.head.sampled_mask()).copy(),
        }

    def on_train_begin(self, logs=None):
        self.model  # noqa: B018  (on JAX, reading `model` syncs the variables)
        self.states.append(self.snapshot())

    def on_train_batch_end(self, batch, logs=None):
        self.model  # noqa: B018
        self.states.append(self.snapshot())


def _slots_of(optimizer, variables):
    """The inner optimizer's slots for `variables` (SGD momentum; Adam m and v), in that order (zeros before the
    optimizer is built: Keras builds it in the first step)."""
    inner = optimizer.optimizer
    adam = isinstance(inner, keras.optimizers.Adam)
    if not inner.built:
        return [np.zeros(v.shape, np.float32) for _ in range(2 if adam else 1) for v in variables]
    if adam:
        return [s[inner._get_variable_index(v)] for s in (inner._momentums, inner._velocities) for v in variables]
    return [inner.momentums[inner._get_variable_index(v)] for v in variables]


def _cosface_loss(x, y, w, b, classes, scale, margin):
    """NumPy loss over the sampled `classes` as a function of their weights (the gradient reference)."""
    remapped = np.searchsorted(classes, y)
    logits = np_margin_logits(x, w, b, remapped, "cosface", margin, scale)
    return np.mean(np_xent(logits, remapped))


@pytest.mark.parametrize(
    "name,num_classes,use_bias", [("sgd", 24, False), ("adam", 23, True)]
)
def test_wrapper_fit_updates_sampled_columns_as_numpy_and_freezes_the_rest(rng, name, num_classes, use_bias):
    scale, margin, batch, steps = 4.0, 0.35, 4, 4
    head, _, _ = _head_with_kernel(rng, num_classes, loss_type="cosface", scale=scale, margin=margin,
                                   sample_rate=0.25, num_shards=2, use_bias=use_bias, seed=9)
    if name == "sgd":
        inner = keras.optimizers.SGD(0.1, momentum=0.9)
    else:
        inner = keras.optimizers.Adam(0.01)
    optimizer = PartialFCOptimizer(inner)
    train_model, _ = _two_input_model(head)
    train_model.compile(optimizer=optimizer, loss=None)
    x = rng.normal(size=(batch * steps, 4)).astype(np.float32)
    y = rng.integers(0, num_classes, size=batch * steps).astype(np.int32)
    variables = [head.kernel] + ([head.bias] if use_bias else [])
    recorder = _Recorder(head, lambda: _slots_of(optimizer, variables))
    train_model.fit([x, y], None, batch_size=batch, epochs=1, shuffle=False, verbose=0, callbacks=[recorder])
    assert int(to_numpy(optimizer.iterations)) == steps == len(recorder.states) - 1

    weights = [w.astype(np.float64) for w in recorder.states[0]["weights"]]
    slots = [np.zeros_like(w) for _ in range(2 if name == "adam" else 1) for w in weights]  # [m...] (+ [v...])
    padded = head.num_padded_classes
    for t in range(1, steps + 1):
        before, after = recorder.states[t - 1], recorder.states[t]
        sampled = after["mask"] == 1
        classes = np.flatnonzero(sampled)
        assert len(classes) <= 2 * sampling.block_sample_size(padded // 2, 0.25, batch)
        xb, yb = x[(t - 1) * batch:t * batch], y[(t - 1) * batch:t * batch]
        assert set(yb.tolist()) <= set(classes.tolist())
        # Unsampled columns and their slots: exactly as before the step.
        for got, old in zip(after["weights"] + after["slots"], before["weights"] + before["slots"]):
            np.testing.assert_array_equal(got[..., ~sampled], old[..., ~sampled])
        # Sampled columns: the optimizer's update with the NumPy gradient of the sampled loss.
        w_sub = weights[0][:, classes]
        b_sub = weights[1][classes] if use_bias else None
        grad_w = testing.numeric_gradient(
            lambda v: _cosface_loss(xb, yb, v, b_sub, classes, scale, margin), w_sub)
        grads = [grad_w]
        if use_bias:
            grads.append(testing.numeric_gradient(
                lambda v: _cosface_loss(xb, yb, w_sub, v, classes, scale, margin), b_sub))
        for i, g in enumerate(grads):
            sub = weights[i][..., classes]
            if name == "sgd":
                m = slots[i][..., classes] * 0.9 - 0.1 * g
                slots[i][..., classes] = m
                weights[i][..., classes] = sub + m
            else:
                n = len(grads)
                m, v = slots[i][..., classes], slots[n + i][..., classes]
                m = m + (g - m) * 0.1
                v = v + (g**2 - v) * 0.001
                alpha = 0.01 * math.sqrt(1 - 0.999**t) / (1 - 0.9**t)
                slots[i][..., classes], slots[n + i][..., classes] = m, v
                weights[i][..., classes] = sub - alpha * m / (np.sqrt(v) + 1e-7)
        for got, expected in zip(after["weights"] + after["slots"], weights + slots):
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=2e-5)
        np.testing.assert_array_equal(after["weights"][0][:, num_classes:], 0.0)  # padding stays zero


def test_plain_optimizer_moves_unsampled_columns_the_wrapper_does_not(rng):
    """What the wrapper is for: SGD momentum keeps moving columns that were sampled once and not since."""
    results = {}
    for wrapped in (False, True):
        head, _, _ = _head_with_kernel(np.random.default_rng(1), 40, loss_type="cosface", scale=4.0,
                                       sample_rate=0.1, seed=1)
        inner = keras.optimizers.SGD(0.1, momentum=0.9)
        train_model, _ = _two_input_model(head)
        train_model.compile(optimizer=PartialFCOptimizer(inner) if wrapped else inner, loss=None)
        recorder = _Recorder(head, lambda: [])
        x = rng.normal(size=(8, 4)).astype(np.float32)
        y = np.array([0, 1, 2, 3, 20, 21, 22, 23], np.int32)
        train_model.fit([x, y], None, batch_size=4, epochs=1, shuffle=False, verbose=0, callbacks=[recorder])
        first, second = recorder.states[1], recorder.states[2]
        left = (first["mask"] == 1) & (second["mask"] == 0)  # sampled in step 1, not in step 2
        assert left.any()
        results[wrapped] = np.abs(second["weights"][0][:, left] - first["weights"][0][:, left]).max()
    assert results[False] > 1e-4  # momentum moved them on zero gradient (insightface v2 with torch SGD)
    assert results[True] == 0.0  # frozen (v1)


# The optimizer's update paths: the masked rule (SGD, Adam, AdamW) and copy and restore (everything else), each
# against a NumPy loop that applies the Keras update formulas to the sampled columns only.

# name -> (inner optimizer factory, expected path). Gradients are random on every column (unsampled and padding
# included), so an update that leaked outside the sample would show.
UPDATE_CASES = {
    "sgd": (lambda: keras.optimizers.SGD(0.1), "masked"),
    "sgd_momentum": (lambda: keras.optimizers.SGD(0.1, momentum=0.9), "masked"),
    "sgd_nesterov": (lambda: keras.optimizers.SGD(0.1, momentum=0.9, nesterov=True), "masked"),
    "sgd_weight_decay": (lambda: keras.optimizers.SGD(0.1, momentum=0.9, weight_decay=0.05), "masked"),
    "adam": (lambda: keras.optimizers.Adam(0.01), "masked"),
    "adam_amsgrad": (lambda: keras.optimizers.Adam(0.01, amsgrad=True), "masked"),
    "adamw": (lambda: keras.optimizers.AdamW(0.01, weight_decay=0.1), "masked"),
    "sgd_clipnorm": (lambda: keras.optimizers.SGD(0.1, momentum=0.9, clipnorm=0.5), "copy and restore"),
}


def np_update(name, w, g, slots, lr, t, cfg):
    """One Keras update of `w` (float64) with gradient `g` (the formulas of keras/src/optimizers/sgd.py,
    adam.py and BaseOptimizer's weight decay, applied first); returns (w, slots)."""
    if cfg.get("weight_decay"):
        w = w - w * cfg["weight_decay"] * lr
    if name.startswith("sgd"):
        if not cfg.get("momentum"):
            return w - lr * g, []
        (m,) = slots
        m = m * cfg["momentum"] - g * lr
        step = m * cfg["momentum"] - g * lr if cfg.get("nesterov") else m
        return w + step, [m]
    m, v = slots[0], slots[1]
    m = m + (g - m) * (1 - 0.9)
    v = v + (g**2 - v) * (1 - 0.999)
    alpha = lr * math.sqrt(1 - 0.999**t) / (1 - 0.9**t)
    if cfg.get("amsgrad"):
        v_hat = np.maximum(slots[2], v)
        return w - m * alpha / (np.sqrt(v_hat) + 1e-7), [m, v, v_hat]
    return w - m * alpha / (np.sqrt(v) + 1e-7), [m, v]


def _inner_slots(inner, variable):
    """The inner optimizer's slots of `variable`, as the rules order them (m; m, v[, v̂])."""
    index = inner._get_variable_index(variable)
    if isinstance(inner, keras.optimizers.Adam):
        lists = [inner._momentums, inner._velocities] + ([inner._velocity_hats] if inner.amsgrad else [])
        return [slots[index] for slots in lists]
    return [inner.momentums[index]] if inner.momentum else []


@pytest.mark.parametrize("name", sorted(UPDATE_CASES))
def test_update_paths_change_sampled_columns_as_numpy_and_nothing_else(rng, name, caplog):
    factory, path = UPDATE_CASES[name]
    inner = factory()
    cfg = {key: getattr(inner, key, None) for key in ("momentum", "nesterov", "amsgrad", "weight_decay", "clipnorm")}
    head, _, _ = _head_with_kernel(rng, 23, loss_type="cosface", scale=4.0, sample_rate=0.2, num_shards=2,
                                   use_bias=True, seed=5)  # 2 blocks of 12: one padding column
    variables = [head.kernel, head.bias]
    optimizer = PartialFCOptimizer(inner)
    with caplog.at_level("INFO", logger="sphere_tf.optimizers.partial_fc"):
        optimizer.build(variables)
    messages = [r.getMessage() for r in caplog.records if r.name == "sphere_tf.optimizers.partial_fc"]
    assert len(messages) == 2  # once per variable
    if path == "masked":
        assert all("by its masked rule" in m for m in messages), messages
    else:
        assert all("copy and restore (SGD has clipnorm=0.5)" in m for m in messages), messages
    weights = [class_last(v).astype(np.float64) for v in variables]
    slots = [[np.zeros_like(w) for _ in _inner_slots(inner, v)] for w, v in zip(weights, variables)]
    for t in range(1, 4):
        x = rng.normal(size=(4, 4)).astype(np.float32)
        head(x, labels=rng.integers(0, 23, size=4).astype(np.int32), training=True)  # draws this step's mask
        sampled = to_numpy(head.update_mask()) == 1
        assert 0 < sampled.sum() < 23 and not sampled[23:].any()
        grads = [rng.normal(size=v.shape).astype(np.float32) for v in variables]
        old = [class_last(v).copy() for v in variables]
        old_slots = [[class_last(s).copy() for s in _inner_slots(inner, v)] for v in variables]
        optimizer.apply([ops.convert_to_tensor(g) for g in grads], variables)
        for i, variable in enumerate(variables):
            g = class_last(grads[i]).astype(np.float64)
            if cfg["clipnorm"]:  # BaseOptimizer: g·c / max(‖g‖, c), the norm of the whole variable's gradient
                g = g * cfg["clipnorm"] / max(np.sqrt(np.sum(g**2)), cfg["clipnorm"])
            new_w, new_slots = np_update(name, weights[i][..., sampled], g[..., sampled],
                                         [s[..., sampled] for s in slots[i]], 0.1 if "sgd" in name else 0.01, t,
                                         cfg)
            weights[i][..., sampled] = new_w
            for slot, value in zip(slots[i], new_slots):
                slot[..., sampled] = value
            got = class_last(variable)
            np.testing.assert_array_equal(got[..., ~sampled], old[i][..., ~sampled])  # bit for bit
            np.testing.assert_allclose(got, weights[i], rtol=2e-5, atol=1e-6)
            for got_slot, old_slot, slot in zip(_inner_slots(inner, variable), old_slots[i], slots[i]):
                got_slot = class_last(got_slot)
                np.testing.assert_array_equal(got_slot[..., ~sampled], old_slot[..., ~sampled])
                np.testing.assert_allclose(got_slot, slot, rtol=2e-5, atol=1e-6)
    assert int(to_numpy(optimizer.iterations)) == 3
    np.testing.assert_array_equal(to_numpy(head.kernel)[23:], 0.0)  # padding never moves


def test_unsupported_optimizer_is_logged_and_restored(rng, caplog):
    head, _, _ = _head_with_kernel(rng, 20, loss_type="cosface", scale=4.0, sample_rate=0.2, seed=1)
    optimizer = PartialFCOptimizer(keras.optimizers.RMSprop(0.01))
    with caplog.at_level("INFO", logger="sphere_tf.optimizers.partial_fc"):
        optimizer.build([head.kernel])
    (record,) = [r for r in caplog.records if r.name == "sphere_tf.optimizers.partial_fc"]
    assert record.levelname == "WARNING" and "no masked rule for RMSprop" in record.getMessage()
    head(rng.normal(size=(4, 4)).astype(np.float32), labels=np.arange(4), training=True)
    sampled = to_numpy(head.update_mask()) == 1
    old = to_numpy(head.kernel).copy()
    optimizer.apply([ops.convert_to_tensor(rng.normal(size=(20, 4)).astype(np.float32))], [head.kernel])
    new = to_numpy(head.kernel)
    np.testing.assert_array_equal(new[~sampled], old[~sampled])
    assert np.all(new[sampled] != old[sampled])


@pytest.mark.parametrize("name", ["sgd_momentum", "sgd_nesterov", "adamw"])
def test_full_rate_steps_equal_dense_head_with_plain_optimizer(rng, name):
    """r = 1 through the masked rule: the same steps as MarginHead with the plain (unwrapped) optimizer."""
    factory, _ = UPDATE_CASES[name]
    head, w, _ = _head_with_kernel(rng, 12, loss_type="cosface", scale=4.0, sample_rate=1.0, seed=0)
    dense = MarginHead(12, loss_type="cosface", scale=4.0)
    dense.build((None, 4))
    dense.kernel.assign(w)
    wrapped, plain = PartialFCOptimizer(factory()), factory()

    def dense_loss(outputs, losses):
        return ops.mean(keras.losses.sparse_categorical_crossentropy(y, outputs, from_logits=True))

    for _ in range(4):
        x = rng.normal(size=(6, 4)).astype(np.float32)
        y = rng.integers(0, 12, size=6).astype(np.int32)
        head(x, labels=y, training=True)  # the mask: every class
        dense(x, labels=y, training=True)
        loss, grads = _stateless_loss_and_grads(head, x, y)
        dense_value, dense_grads = _stateless_loss_and_grads(dense, x, y, dense_loss)
        assert loss == pytest.approx(dense_value, rel=1e-5, abs=1e-6)
        wrapped.apply([ops.convert_to_tensor(grads[1])], [head.kernel])
        plain.apply([ops.convert_to_tensor(dense_grads[1])], [dense.kernel])
        np.testing.assert_allclose(class_last(head.kernel), to_numpy(dense.kernel), rtol=1e-5, atol=1e-6)
    for got, expected in zip(_inner_slots(wrapped.optimizer, head.kernel), _inner_slots(plain, dense.kernel)):
        np.testing.assert_allclose(class_last(got), to_numpy(expected), rtol=1e-5, atol=1e-6)
    assert int(to_numpy(wrapped.iterations)) == int(to_numpy(plain.iterations)) == 4


@keras.saving.register_keras_serializable(package="sphere_tf_tests")
class PartialFCClassifier(keras.Model):
    """The subclassed pattern: `(features, labels)` in training, features alone at inference."""

    def __init__(self, backbone, head, **kwargs):
        super().__init__(**kwargs)
        self.backbone, self.head = backbone, head

    def call(self, inputs, training=None):
        labels = None
        if isinstance(inputs, (tuple, list)):
            inputs, labels = inputs
        return self.head(self.backbone(inputs, training=training), labels=labels, training=training)

    def build(self, input_shape):
        if isinstance(input_shape[0], (tuple, list)):
            input_shape = input_shape[0]
        if not self.backbone.built:
            self.backbone.build(input_shape)
        if not self.head.built:
            self.head.build(self.backbone.compute_output_shape(input_shape))

    def get_config(self):
        return {
            **super().get_config(),
            "backbone": keras.saving.serialize_keras_object(self.backbone),
            "head": keras.saving.serialize_keras_object(self.head),
        }

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        config["backbone"] = keras.saving.deserialize_keras_object(config["backbone"])
        config["head"] = keras.saving.deserialize_keras_object(config["head"])
        return cls(**config)


def _toy_data(rng, n=64, d=6, classes=30):
    centers = rng.normal(size=(classes, d)) * 3.0
    y = rng.integers(0, classes, size=n).astype(np.int32)
    return (centers[y] + rng.normal(size=(n, d))).astype(np.float32), y


def _assert_never_sampled_columns_unchanged(recorder, num_classes):
    ever = np.zeros_like(recorder.states[0]["mask"], dtype=bool)
    for state in recorder.states[1:]:
        ever |= state["mask"] == 1
    first, last = recorder.states[0]["weights"][0], recorder.states[-1]["weights"][0]
    assert (~ever[:num_classes]).any()
    np.testing.assert_array_equal(last[:, ~ever], first[:, ~ever])
    assert np.any(last[:, ever] != first[:, ever])
    np.testing.assert_array_equal(last[:, num_classes:], 0.0)


@pytest.mark.parametrize("pattern", ["functional", "subclassed"])
def test_fit_evaluate_predict_save_load(rng, tmp_path, pattern):
    x, y = _toy_data(rng, classes=203)
    # 204 columns, blocks of 51, k_block = max(6, 16) = 16: 64 columns a step.
    head = PartialFCHead(203, loss_type="arcface", scale=16.0, sample_rate=0.1, num_shards=4, seed=0)
    backbone = keras.Sequential([keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
    if pattern == "functional":
        train_model, inference_model = _two_input_model(head, d=6, backbone=backbone)
        train_inputs = [x, y]
    else:
        train_model = inference_model = PartialFCClassifier(backbone, head)
        train_model.build((None, 6))
        train_inputs = (x, y)  # (y is also passed as the targets: Keras would split a lone (x, y) tuple)
    optimizer = PartialFCOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))
    train_model.compile(optimizer=optimizer, loss=None)
    recorder = _Recorder(head, lambda: [])
    history = train_model.fit(train_inputs, y, batch_size=16, epochs=2, verbose=0, callbacks=[recorder])
    assert np.all(np.isfinite(history.history["loss"]))
    assert int(to_numpy(head.iteration)) == 8
    _assert_never_sampled_columns_unchanged(recorder, 203)
    # Inference: plain logits (B, 203); evaluating the training model reports their mean cross-entropy.
    logits = inference_model.predict(x, verbose=0)
    assert logits.shape == (64, 203) and logits.dtype == np.float32
    assert train_model.evaluate(train_inputs, y, verbose=0) == pytest.approx(np.mean(np_xent(logits, y)),
                                                                                  rel=1e-4)
    assert int(to_numpy(head.iteration)) == 8  # evaluation and prediction are not training steps
    # .keras round trip of the training model: config, counter, optimizer state, predictions, then more training.
    path = str(tmp_path / "train.keras")
    train_model.save(path)
    reloaded = keras.saving.load_model(path)
    (new_head,) = [layer for layer in reloaded.layers if isinstance(layer, PartialFCHead)]
    assert new_head.get_config() == head.get_config()
    assert int(to_numpy(new_head.iteration)) == 8
    assert isinstance(reloaded.optimizer, PartialFCOptimizer)
    for a, b in zip(reloaded.optimizer.variables, train_model.optimizer.variables):
        np.testing.assert_array_equal(to_numpy(a), to_numpy(b))
    if pattern == "subclassed":
        np.testing.assert_allclose(reloaded.predict(x, verbose=0), logits, rtol=1e-6, atol=1e-6)
    else:
        np.testing.assert_allclose(reloaded.predict([x, y], verbose=0), logits, rtol=1e-6, atol=1e-6)
    recorder = _Recorder(new_head, lambda: [])
    reloaded.fit(train_inputs, y, batch_size=16, epochs=1, verbose=0, callbacks=[recorder])
    assert int(to_numpy(new_head.iteration)) == 12
    _assert_never_sampled_columns_unchanged(recorder, 203)
    if pattern == "functional":  # the features-only model saves and serves alone
        testing.assert_keras_roundtrip(inference_model, x, tmp_path / "inference")


def test_fit_with_a_partial_last_batch(rng):
    """Batches of 16 then 6: the sample size follows the batch (TensorFlow may trace an unknown batch size)."""
    x, y = _toy_data(rng, n=70)
    head = PartialFCHead(30, loss_type="cosface", scale=16.0, sample_rate=0.1, num_shards=2, seed=0)
    train_model, _ = _two_input_model(head, d=6, backbone=keras.layers.Dense(3))
    train_model.compile(optimizer=PartialFCOptimizer(keras.optimizers.Adam(1e-2)), loss=None)
    recorder = _Recorder(head, lambda: [])
    train_model.fit([x, y], None, batch_size=16, epochs=3, shuffle=False, verbose=0, callbacks=[recorder])
    sizes = [int(state["mask"].sum()) for state in recorder.states[1:]]
    # k_block = min(15, max(2, B)): 15 for B = 16 (the whole block), 6 for the last batch of 6.
    assert sizes == [30, 30, 30, 30, 12] * 3


@pytest.mark.tensorflow_only
def test_fit_under_xla_keeps_unsampled_columns(rng):
    x, y = _toy_data(rng, classes=200)
    head = PartialFCHead(200, loss_type="asoftmax", annealing="sphereface", sample_rate=0.1, num_shards=2, seed=0)
    train_model, _ = _two_input_model(head, d=6, backbone=keras.layers.Dense(3))
    train_model.compile(optimizer=PartialFCOptimizer(keras.optimizers.SGD(0.05, momentum=0.9)), loss=None,
                        jit_compile=True)
    recorder = _Recorder(head, lambda: [])
    history = train_model.fit([x, y], None, batch_size=8, epochs=1, verbose=0, callbacks=[recorder])
    assert np.all(np.isfinite(history.history["loss"]))
    assert int(to_numpy(head.iteration)) == 8
    _assert_never_sampled_columns_unchanged(recorder, 200)


def test_mixed_float16_outputs_are_float32_and_fit_keeps_unsampled_columns(rng):
    keras.mixed_precision.set_global_policy("mixed_float16")
    x, y = _toy_data(rng, classes=200)
    head = PartialFCHead(200, loss_type="cosface", sample_rate=0.05, num_shards=2, use_bias=True, seed=0)
    train_model, inference_model = _two_input_model(head, d=6, backbone=keras.layers.Dense(4))
    assert head.kernel.dtype == "float32" and head.bias.dtype == "float32"
    features = keras.ops.cast(x[:8, :4], "float16")
    dtype = keras.backend.standardize_dtype
    assert dtype(head(features, labels=y[:8], training=True).dtype) == "float32"
    (loss,) = head.losses
    assert dtype(loss.dtype) == "float32"
    assert dtype(head(features).dtype) == "float32"
    train_model.compile(optimizer=PartialFCOptimizer(keras.optimizers.SGD(0.05, momentum=0.9)), loss=None)
    assert isinstance(train_model.optimizer, keras.optimizers.LossScaleOptimizer)
    recorder = _Recorder(head, lambda: [])
    history = train_model.fit([x, y], None, batch_size=16, epochs=2, verbose=0, callbacks=[recorder])
    assert np.all(np.isfinite(history.history["loss"]))
    _assert_never_sampled_columns_unchanged(recorder, 200)
    assert inference_model.predict(x, verbose=0).dtype == np.float32


def test_symbolic_output_shapes():
    head = PartialFCHead(30, sample_rate=0.1, num_shards=2)
    features, labels = keras.Input((6,)), keras.Input((), dtype="int32")
    assert tuple(head(features).shape) == (None, 30)
    assert tuple(head(features, labels=labels).shape) == (None, None)  # training or not is unknown here
    assert tuple(head(features, labels=labels, training=False).shape) == (None, 30)
    spec = head.compute_output_spec(keras.KerasTensor((16, 6)), labels=keras.KerasTensor((16,), "int32"),
                                    training=True)
    assert tuple(spec.shape) == (16, 2 * 15) and spec.dtype == "float32"
    with pytest.raises(ValueError, match="expected ndim=2"):
        head(keras.Input((4, 6)))


def test_training_without_labels_uses_every_column(rng):
    head, _, _ = _head_with_kernel(rng, 10, loss_type="cosface", sample_rate=0.2)  # k = max(2, 3) = 3
    x = rng.normal(size=(3, 4)).astype(np.float32)
    head(x, labels=np.array([0, 1, 2]), training=True)
    assert len(head.sampled_classes()) < 10
    out = head(x, training=True)
    assert tuple(out.shape) == (3, 10) and head.losses == []
    np.testing.assert_array_equal(head.sampled_classes(), np.arange(10))


# ---------------------------------------------------------------------------------------
# Configuration, bad input.


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(loss_type="arcface", sample_rate=0.1, num_shards=4, seed=3),
        dict(loss_type="combined", margin=(1.2, 0.3, 0.1), scale=16.0, use_bias=True, sample_rate=0.5),
        dict(loss_type="asoftmax", annealing="sphereface", num_shards=3),
    ],
)
def test_config_roundtrip(kwargs):
    head = PartialFCHead(30, **kwargs)
    rebuilt = testing.assert_config_roundtrip(head)
    assert (rebuilt.sample_rate, rebuilt.num_shards, rebuilt.seed) == (head.sample_rate, head.num_shards, head.seed)


def test_padding_is_logged_and_zero(caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="sphere_tf.layers.partial_fc"):
        head = PartialFCHead(10, num_shards=4)
    assert "not divisible by num_shards=4" in caplog.text and "2 zero padding column(s)" in caplog.text
    head.build((None, 3))
    assert tuple(head.kernel.shape) == (12, 3) and head.num_padded_classes == 12  # class-major
    np.testing.assert_array_equal(to_numpy(head.kernel)[10:], 0.0)
    assert np.all(to_numpy(head.kernel)[:10] != 0)
    assert is_partial_fc_variable(head.kernel) and not is_partial_fc_variable(head.iteration)


@pytest.mark.parametrize(
    "kwargs,argument",
    [
        (dict(sample_rate=0), "sample_rate"),
        (dict(sample_rate=0.0), "sample_rate"),
        (dict(sample_rate=1.5), "sample_rate"),
        (dict(sample_rate=float("nan")), "sample_rate"),
        (dict(sample_rate=-0.1), "sample_rate"),
        (dict(sample_rate="0.1"), "sample_rate"),
        (dict(num_shards=0), "num_shards"),
        (dict(num_shards=2.0), "num_shards"),
        (dict(num_shards=11), "num_shards"),
        (dict(seed=-1), "seed"),
        (dict(seed=1.5), "seed"),
        (dict(loss_type="asoftmax", margin=5), "margin"),
        (dict(loss_type="focal"), "loss_type"),
    ],
)
def test_bad_arguments_raise_naming_the_argument(kwargs, argument):
    with pytest.raises(ValueError, match=rf"Invalid value for argument `{argument}`.*Received: {argument}="):
        PartialFCHead(10, **kwargs)


@pytest.mark.parametrize("bad", (-1, 10, 11))
def test_out_of_range_labels_raise_like_margin_head(rng, bad):
    head = PartialFCHead(10, loss_type="cosface", sample_rate=0.3, num_shards=4)  # 12 columns: 10, 11 are padding
    x = rng.normal(size=(4, 3)).astype(np.float32)
    y = np.array([0, 1, bad, 2], np.int32)
    with pytest.raises(ValueError, match=rf"class id in \[0, 10\).*out of range \[{bad}\]"):
        head(x, labels=y, training=True)
    with pytest.raises(ValueError, match=r"integer class ids in \[0, 10\)"):
        head(x, labels=y.astype(np.float32), training=True)


@pytest.mark.tensorflow_only
def test_out_of_range_label_in_tf_function_and_under_xla(rng):
    import tensorflow as tf  # noqa: PLC0415  (tf.function, InvalidArgumentError)

    head = PartialFCHead(10, loss_type="cosface", sample_rate=0.3, num_shards=4, seed=0)
    x = rng.normal(size=(4, 3)).astype(np.float32)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"class id in \[0, 10\)"):
        tf.function(lambda a, b: head(a, labels=b, training=True))(x, np.array([0, 1, 10, 2], np.int32))
    out = tf.function(lambda a, b: head(a, labels=b, training=True), jit_compile=True)(
        x, np.array([0, 1, 11, 2], np.int32)).numpy()
    assert np.all(np.isnan(out[2])) and np.all(np.isfinite(out[[0, 1, 3], :9]))


def test_optimizer_wrapper_bad_arguments_and_config():
    with pytest.raises(ValueError, match="does not take base optimizer arguments"):
        PartialFCOptimizer("sgd", clipnorm=1.0)
    with pytest.raises(ValueError, match="gradient_accumulation_steps"):
        PartialFCOptimizer(keras.optimizers.SGD(gradient_accumulation_steps=2))
    with pytest.raises(ValueError, match="already is a PartialFCOptimizer"):
        PartialFCOptimizer(PartialFCOptimizer("sgd"))
    built = keras.optimizers.SGD(momentum=0.9)
    built.build([keras.Variable(np.zeros(3, np.float32))])
    with pytest.raises(ValueError, match="unbuilt optimizer"):
        PartialFCOptimizer(built).build([keras.Variable(np.zeros(3, np.float32))])
    optimizer = PartialFCOptimizer(keras.optimizers.Adam(1e-3, beta_1=0.8))
    clone = keras.optimizers.deserialize(keras.optimizers.serialize(optimizer))
    assert isinstance(clone, PartialFCOptimizer) and isinstance(clone.optimizer, keras.optimizers.Adam)
    assert clone.optimizer.beta_1 == 0.8
    assert float(to_numpy(optimizer.learning_rate)) == pytest.approx(1e-3)
    optimizer.learning_rate = 5e-4
    assert float(to_numpy(optimizer.optimizer.learning_rate)) == pytest.approx(5e-4)


def test_kernel_is_class_major_and_legacy_column_layout_loads(rng, tmp_path):
    """The kernel is stored `(C_padded, d)`; `real_kernel()` is MarginHead's `(d, C)`; a `.keras` weight store
    written with the earlier `(d, C_padded)` kernel loads transposed; a shape matching neither is refused."""
    head, w, b = _head_with_kernel(rng, 10, num_shards=4, use_bias=True, seed=0)
    assert tuple(head.kernel.shape) == (12, 4)
    np.testing.assert_array_equal(to_numpy(head.real_kernel()), w)
    variables = head._trainable_variables + head._non_trainable_variables
    index = str(next(i for i, v in enumerate(variables) if v is head.kernel))
    legacy = {str(i): to_numpy(v).copy() for i, v in enumerate(variables)}
    legacy[index] = legacy[index].T  # as written before the layout change
    fresh = PartialFCHead(10, num_shards=4, use_bias=True, seed=0)
    fresh.build((None, 4))
    fresh.load_own_variables(legacy)
    np.testing.assert_array_equal(to_numpy(fresh.kernel), to_numpy(head.kernel))
    np.testing.assert_array_equal(to_numpy(fresh.bias), to_numpy(head.bias))
    legacy[index] = np.zeros((5, 5), np.float32)
    with pytest.raises(ValueError):
        fresh.load_own_variables(legacy)


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="keras.distribution's jitted initialisation is JAX's")
def test_large_sharded_kernel_initialises_under_keras_jit(monkeypatch):
    """Keras initialises a variable of 250 MB or more under a layout with `jax.jit(initializer.__call__)`: the
    head's (padded, class-major) initializers must be jit-able objects, not closures (a C = 10^5 sharded head
    failed with "cannot create weak reference to 'method-wrapper' object")."""
    from keras.src.backend.jax import core as jax_core

    from sphere_tf.layers import class_sharding_layout

    monkeypatch.setattr(jax_core, "should_shard_at_init", lambda layout, shape: True)
    devices = keras.distribution.list_devices()[:1]
    mesh = keras.distribution.DeviceMesh((1,), ("devices",), devices)
    layout_map = class_sharding_layout(keras.distribution.LayoutMap(mesh), "head", "devices")
    distribution = keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="devices")
    with distribution.scope():
        head = PartialFCHead(10, num_shards=4, use_bias=True, kernel_initializer=keras.initializers.Ones(),
                             bias_initializer=keras.initializers.Ones(), name="head")
        head.build((None, 3))
    kernel = to_numpy(head.kernel)
    assert kernel.shape == (12, 3)
    np.testing.assert_array_equal(kernel[:10], 1.0)
    np.testing.assert_array_equal(kernel[10:], 0.0)  # padding rows
    np.testing.assert_array_equal(to_numpy(head.bias), [1.0] * 10 + [0.0] * 2)


def test_class_major_kernel_takes_weight_decay_only_and_tracks_its_neurons(rng):
    """`regularization.attach` refuses a neuron-wise regularizer on the (C, d) kernel (it would read classes as
    inputs), accepts weight decay; the energy tracking measures `real_kernel()`, the (d, C) neurons."""
    from sphere_tf.layers import kernels
    from sphere_tf.training import regularization

    head, w, _ = _head_with_kernel(rng, 10, num_shards=4, seed=0, name="logits")
    model, _ = _two_input_model(head)
    with pytest.raises(ValueError, match=r"regularizers\[0\] \('mhe'\).*class-major"):
        regularization.attach(model, [{"name": "mhe", "layers": ["logits"]}])
    assert regularization.attach(model, [{"name": "weight_decay", "layers": ["logits"], "factor": 1e-4}]) == {
        "logits": "weight_decay"}
    np.testing.assert_array_equal(to_numpy(kernels.effective_kernel(head)), w)
