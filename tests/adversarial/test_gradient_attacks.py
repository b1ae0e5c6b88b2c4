"""`gradient_attacks` (keras.ops, every backend) against cleverhans on TensorFlow and closed-form NumPy references.

(a) On TensorFlow the examples equal those of the cleverhans-based `attacks` (PGD from the start cleverhans drew,
recorded) for a small trained conv model in the pixel spaces the runner uses. (b) On every backend they equal
explicit NumPy loops on a linear softmax model, whose cross-entropy input gradient is (softmax − onehot)·Wᵀ.
(c) Degenerate inputs: ε = 0, images on the box boundary, a batch of one. (d) DeepFool through foolbox on the
backend's model class, against the closed-form distance of a linear model to its nearest decision boundary.
"""

import keras
import numpy as np
import pytest
from keras import ops

from sphere_tf import dependencies
from sphere_tf.adversarial import gradient_attacks as ga
from sphere_tf.adversarial import pixels
from sphere_tf.layers import PixelNormalization
from tests.adversarial import _linear

BACKEND = keras.backend.backend()
CENTERED = pixels.pixel_space("centered_128", 1)
MEAN = (120.0, 60.0, 200.0)
MEAN_SPACE = pixels.pixel_space("mean_subtraction", 3, channel_mean=MEAN)
# (space, image shape, weight scale, tolerance in input units): a softmax that is not saturated on either.
LINEAR_CASES = {"centered_128": (CENTERED, (4, 4, 1), 1.0, 1e-6),
                "mean_subtraction": (MEAN_SPACE, (2, 2, 3), 0.002, 1e-4)}


def _np(tensor):
    return np.asarray(ops.convert_to_numpy(tensor))


def _images(space, n, shape, seed=0):
    """Pixel images with a row at 0 and a row at 255 (the clipping is exercised), in input space."""
    rng = np.random.default_rng(seed)
    values = rng.uniform(0, 255, size=(n,) + shape)
    values[:, 0] = 0.0
    values[:, -1] = 255.0
    return space.from_pixels(values)


# -- (b) the closed-form reference: explicit NumPy loops on the linear model -------------------------------------


def _box(space):
    return np.asarray(space.lower, np.float32), np.asarray(space.upper, np.float32)


def _clip(v, lo, hi):
    return np.minimum(np.maximum(v, lo), hi).astype(np.float32)


def _ref_fgsm(x, y, w, b, eps, lo, hi):
    """clip(x + ε·sign((softmax(xW + b) − onehot(y))·Wᵀ)), the iterate in float32 as the backends compute it."""
    g = _linear.input_gradient(x, y, w, b)
    return _clip(x + np.float32(eps) * np.sign(g).astype(np.float32), lo, hi)


def _ref_iterative(x, y, w, b, eps, tau, iterations, lo, hi, start=None):
    """BIM (start None) or PGD from `start` (η, input units): FGSM steps of τ, then the ε-ball and the box."""
    eps32 = np.float32(eps)
    adv = _clip(x, lo, hi) if start is None else _clip(x + _clip(start, -eps32, eps32), lo, hi)
    for _ in range(iterations):
        adv = _ref_fgsm(adv, y, w, b, tau, lo, hi)
        adv = _clip(x + _clip(adv - x, -eps32, eps32), lo, hi)
    return adv


@pytest.mark.parametrize("case", sorted(LINEAR_CASES))
def test_fgsm_bim_pgd_match_numpy_loops_on_a_linear_model(case):
    space, shape, scale, atol = LINEAR_CASES[case]
    model, w, b = _linear.linear_model(shape=shape, seed=1, scale=scale)
    x = _images(space, 6, shape, seed=1)
    y = np.array([0, 1, 2, 0, 1, 2], np.int32)
    lo, hi = _box(space)
    eps, tau = space.epsilon(8), space.epsilon(2)
    assert np.all(np.abs(_linear.input_gradient(x, y, w, b)) > 1e-6)  # no sign decided by rounding
    f = ga.inference_fn(model)
    np.testing.assert_allclose(_np(ga.fgsm(f, x, y, space, epsilon=8)), _ref_fgsm(x, y, w, b, eps, lo, hi),
                               rtol=0, atol=atol)
    bim = _np(ga.bim(f, x, y, space, epsilon=8, step=2, iterations=3))
    np.testing.assert_allclose(bim, _ref_iterative(x, y, w, b, eps, tau, 3, lo, hi), rtol=0, atol=atol)
    start = np.random.default_rng(2).uniform(-eps, eps, size=x.shape).astype(np.float32)
    pgd = _np(ga.pgd(f, x, y, space, epsilon=8, step=2, iterations=3, start=start))
    np.testing.assert_allclose(pgd, _ref_iterative(x, y, w, b, eps, tau, 3, lo, hi, start), rtol=0, atol=atol)
    for adv in (bim, pgd):
        assert np.all(np.abs(adv - x) <= eps + atol) and np.all(adv >= lo - atol) and np.all(adv <= hi + atol)
    assert not np.allclose(pgd, bim)


@pytest.mark.parametrize("case", sorted(LINEAR_CASES))
def test_compiled_attacks_match_the_numpy_loops_and_follow_weight_updates(case):
    """`make_attack` / `make_fgsm_sweep` / `make_predict`: one compiled function per model, reading the current
    weights (JAX passes them to its jitted function; TensorFlow's reads the variables)."""
    space, shape, scale, atol = LINEAR_CASES[case]
    model, w, b = _linear.linear_model(shape=shape, seed=2, scale=scale)
    lo, hi = _box(space)
    eps, tau = space.epsilon(8), space.epsilon(2)
    fgsm = ga.make_attack(model, "fgsm", space)
    bim = ga.make_attack(model, "bim", space, epsilon=8, step=2, iterations=3)
    sweep = ga.make_fgsm_sweep(model, space)
    predict = ga.make_predict(model)
    for n, seed in ((4, 3), (4, 4)):
        x = _images(space, n, shape, seed=seed)
        y = np.arange(n, dtype=np.int32) % 3
        np.testing.assert_allclose(_np(fgsm(x, y)), _ref_fgsm(x, y, w, b, eps, lo, hi), rtol=0, atol=atol)
        np.testing.assert_allclose(_np(bim(x, y)), _ref_iterative(x, y, w, b, eps, tau, 3, lo, hi), rtol=0, atol=atol)
        for pixels_eps in (0.0, 4.0):
            np.testing.assert_allclose(_np(sweep(x, y, np.float32(pixels_eps))),
                                       _ref_fgsm(x, y, w, b, space.epsilon(pixels_eps), lo, hi), rtol=0, atol=atol)
        flat = x.reshape(n, -1).astype(np.float64)
        np.testing.assert_array_equal(_np(predict(x)), np.argmax(flat @ w + b, axis=1))
    if BACKEND != "torch":  # compiled: one trace for both batches (the same shape on JAX, any on TensorFlow)
        assert (fgsm.traces, bim.traces, sweep.traces, predict.traces) == (1, 1, 1, 1)
    model.layers[-1].set_weights([-w, b])  # new weights: the compiled attack sees them
    np.testing.assert_allclose(_np(bim(x, y)), _ref_iterative(x, y, -w, b, eps, tau, 3, lo, hi), rtol=0, atol=atol)


def test_compiled_pgd_draws_a_uniform_start_in_the_ball_from_its_seed():
    space, shape, scale, atol = LINEAR_CASES["centered_128"]
    model, w, b = _linear.linear_model(shape=shape, seed=3, scale=scale)
    x = _images(space, 5, shape, seed=5)
    y = np.array([0, 1, 2, 0, 1], np.int32)
    eps, tau = space.epsilon(8), space.epsilon(2)
    one, again = (ga.make_attack(model, "pgd", space, epsilon=8, step=2, iterations=3, seed=7) for _ in range(2))
    first = _np(one(x, y))
    np.testing.assert_array_equal(first, _np(again(x, y)))  # same seed, same start
    assert not np.array_equal(first, _np(one(x, y)))  # the generator advances: a new start per call
    lo, hi = _box(space)
    assert np.all(np.abs(first - x) <= eps + atol) and first.min() >= lo - atol and first.max() <= hi + atol
    # Eager PGD with an int seed: the start is `random_start` with that seed, and the rest the NumPy loop.
    start = _np(ga.random_start(x.shape, space, epsilon=8, seed=11))
    eager = _np(ga.pgd(ga.inference_fn(model), x, y, space, epsilon=8, step=2, iterations=3, seed=11))
    np.testing.assert_allclose(eager, _ref_iterative(x, y, w, b, eps, tau, 3, lo, hi, start), rtol=0, atol=atol)
    # The start's law: U[−ε, ε) per element (cleverhans' tf.random.uniform(shape, −ε, ε)).
    draws = _np(ga.random_start((20000,), space, epsilon=8, seed=1))
    assert draws.dtype == np.float32 and draws.min() >= -eps and draws.max() < eps
    assert abs(draws.mean()) < 0.02 * eps and abs(draws.std() - eps / np.sqrt(3)) < 0.02 * eps
    np.testing.assert_allclose(np.histogram(draws, bins=4, range=(-eps, eps))[0] / draws.size, 0.25, atol=0.02)


# -- (c) degenerate inputs ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", sorted(LINEAR_CASES))
def test_zero_epsilon_returns_the_input(case):
    space, shape, scale, _ = LINEAR_CASES[case]
    model, _, _ = _linear.linear_model(shape=shape, seed=4, scale=scale)
    x = _images(space, 3, shape, seed=6)
    y = np.array([2, 0, 1], np.int32)
    f = ga.inference_fn(model)
    for adv in (ga.fgsm(f, x, y, space, epsilon=0), ga.bim(f, x, y, space, epsilon=0, step=0, iterations=2),
                ga.pgd(f, x, y, space, epsilon=0, step=0, iterations=2, seed=1),
                ga.make_attack(model, "pgd", space, epsilon=0, step=0, iterations=2)(x, y),
                ga.make_attack(model, "none", space)(x, y)):
        np.testing.assert_array_equal(_np(adv), x)


@pytest.mark.parametrize("level", [0.0, 255.0])
@pytest.mark.parametrize("case", sorted(LINEAR_CASES))
def test_images_on_the_box_boundary_stay_in_the_box(case, level):
    space, shape, scale, atol = LINEAR_CASES[case]
    model, w, b = _linear.linear_model(shape=shape, seed=5, scale=scale)
    x = space.from_pixels(np.full((2,) + shape, level))
    y = np.array([0, 1], np.int32)
    lo, hi = _box(space)
    f = ga.inference_fn(model)
    eps, tau = space.epsilon(16), space.epsilon(4)
    for adv, reference in (
            (ga.fgsm(f, x, y, space, epsilon=16), _ref_fgsm(x, y, w, b, eps, lo, hi)),
            (ga.bim(f, x, y, space, epsilon=16, step=4, iterations=4), _ref_iterative(x, y, w, b, eps, tau, 4, lo, hi)),
            (ga.pgd(f, x, y, space, epsilon=16, step=4, iterations=4, seed=2), None)):
        adv = _np(adv)
        assert np.all(np.isfinite(adv)) and np.all(adv >= lo) and np.all(adv <= hi)
        assert np.all(np.abs(adv - x) <= eps + atol)
        if reference is not None:
            np.testing.assert_allclose(adv, reference, rtol=0, atol=atol)


@pytest.mark.parametrize("attack", ["fgsm", "bim", "pgd"])
def test_a_batch_of_one(attack):
    space, shape, scale, atol = LINEAR_CASES["mean_subtraction"]
    model, w, b = _linear.linear_model(shape=shape, seed=6, scale=scale)
    x = _images(space, 1, shape, seed=7)
    y = np.array([1], np.int32)
    lo, hi = _box(space)
    eps, tau = space.epsilon(8), space.epsilon(2)
    adv = _np(ga.make_attack(model, attack, space, epsilon=8, step=2, iterations=3, seed=0)(x, y))
    assert adv.shape == x.shape and np.all(adv >= lo) and np.all(adv <= hi)
    if attack == "fgsm":
        np.testing.assert_allclose(adv, _ref_fgsm(x, y, w, b, eps, lo, hi), rtol=0, atol=atol)
    elif attack == "bim":
        np.testing.assert_allclose(adv, _ref_iterative(x, y, w, b, eps, tau, 3, lo, hi), rtol=0, atol=atol)
    else:
        start = np.full(x.shape, -eps / 2, np.float32)
        eager = _np(ga.pgd(ga.inference_fn(model), x, y, space, epsilon=8, step=2, iterations=3, start=start))
        np.testing.assert_allclose(eager, _ref_iterative(x, y, w, b, eps, tau, 3, lo, hi, start), rtol=0, atol=atol)
    assert _np(ga.make_predict(model)(x)).shape == (1,)


def test_bad_arguments_are_named():
    model, _, _ = _linear.linear_model()
    f = ga.inference_fn(model)
    x, y = _images(CENTERED, 1, (4, 4, 1)), np.array([0], np.int32)
    with pytest.raises(ValueError, match="step"):
        ga.bim(f, x, y, CENTERED, epsilon=2, step=4)
    with pytest.raises(ValueError, match="iterations"):
        ga.make_attack(model, "bim", CENTERED, iterations=0)
    with pytest.raises(ValueError, match="attack"):
        ga.make_attack(model, "deepfool", CENTERED)
    with pytest.raises(ValueError, match="epsilon"):
        ga.fgsm(f, x, y, CENTERED, epsilon=-1.0)
    with pytest.raises(ValueError, match="start"):
        ga.pgd(f, x, y, CENTERED, start=np.zeros((2, 4, 4, 1), np.float32))
    with pytest.raises(ValueError, match="space"):
        ga.fgsm(f, x, y, "centered_128")
    assert (ga.ATTACKS, ga.PAPER_EPSILON, ga.PAPER_STEP, ga.PAPER_ITERATIONS) == (
        ("none", "fgsm", "bim", "pgd"), 8.0, 2.0, 20)


# -- (a) TensorFlow: the same examples as the cleverhans-based attacks --------------------------------------------

RUNNER_SPACES = ("raw_pixels", "centered_128", "mean_subtraction")


def _trained_cnn(kind):
    """A small conv net (ReLU, BatchNorm, tanh) fitted for a few epochs on separable synthetic 8×8×3 pixels.

    'raw_pixels': the runner's model (a `PixelNormalization('centered_128')` first layer, raw pixels in, the
    space read from the model); the others take pipeline-normalised inputs of that space.
    """
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 3, size=96).astype(np.int32)
    centres = np.array([[60.0, 128.0, 200.0], [200.0, 60.0, 128.0], [128.0, 200.0, 60.0]])
    values = np.clip(centres[labels][:, None, None, :] + rng.normal(0, 40, size=(96, 8, 8, 3)), 0, 255)
    values[:8, 0] = 0.0
    values[8:16, -1] = 255.0
    inputs = keras.Input((8, 8, 3))
    h = inputs
    if kind == "raw_pixels":
        space = pixels.pixel_space("none", 3)
        h = PixelNormalization("centered_128")(h)
    else:
        space = MEAN_SPACE if kind == "mean_subtraction" else pixels.pixel_space("centered_128", 3)
        if kind == "mean_subtraction":
            h = keras.layers.Rescaling(1 / 64.0)(h)
    h = keras.layers.Conv2D(6, 3, activation="relu")(h)
    h = keras.layers.BatchNormalization()(h)
    h = keras.layers.Conv2D(6, 3, activation="tanh")(h)
    outputs = keras.layers.Dense(3)(keras.layers.Flatten()(h))
    model = keras.Model(inputs, outputs)
    x = space.from_pixels(values)
    model.compile(optimizer=keras.optimizers.Adam(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, labels, batch_size=32, epochs=4, verbose=0)
    if kind == "raw_pixels":
        assert pixels.input_space(model) == space
    return model, space, x[:24], labels[:24]


def _max_diff(a, b):
    return float(np.max(np.abs(_np(a) - _np(b))))


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("kind", RUNNER_SPACES)
def test_same_examples_as_cleverhans_on_a_trained_cnn(kind, monkeypatch):
    from cleverhans.tf2.attacks import projected_gradient_descent as cleverhans_pgd  # noqa: PLC0415

    from sphere_tf.adversarial import attacks  # noqa: PLC0415

    model, space, x, y = _trained_cnn(kind)
    f = ga.inference_fn(model)
    diffs = {
        "fgsm": _max_diff(ga.fgsm(f, x, y, space), attacks.fgsm(attacks.inference_fn(model), x, y, space)),
        "bim": _max_diff(ga.bim(f, x, y, space, iterations=6),
                         attacks.bim(attacks.inference_fn(model), x, y, space, iterations=6)),
    }
    starts = []
    draw = cleverhans_pgd.random_lp_vector
    monkeypatch.setattr(cleverhans_pgd, "random_lp_vector", lambda *a, **k: starts.append(draw(*a, **k)) or starts[-1])
    reference = attacks.pgd(attacks.inference_fn(model), x, y, space, iterations=5)
    diffs["pgd"] = _max_diff(ga.pgd(f, x, y, space, iterations=5, start=starts[0]), reference)
    # The compiled functions against cleverhans' compiled ones (the same start: recorded again).
    x2, y2 = x[:10], y[:10]
    for name in ("fgsm", "bim"):
        diffs[f"make_attack {name}"] = _max_diff(ga.make_attack(model, name, space, iterations=5)(x2, y2),
                                                 attacks.make_attack(model, name, space, iterations=5)(x2, y2))
    # Inside cleverhans' tf.function the draw is symbolic: both get the same fixed start instead.
    eps = space.epsilon(8)
    fixed = np.random.default_rng(1).uniform(-eps, eps, size=x2.shape).astype(np.float32)
    monkeypatch.setattr(cleverhans_pgd, "random_lp_vector", lambda *a, **k: ops.convert_to_tensor(fixed))
    reference = attacks.make_attack(model, "pgd", space, iterations=5)(x2, y2)
    compiled_pgd = ga.make_attack(model, "pgd", space, iterations=5).compiled
    diffs["make_attack pgd"] = _max_diff(compiled_pgd(x2, y2, fixed), reference)
    diffs["sweep"] = max(_max_diff(ga.make_fgsm_sweep(model, space)(x2, y2, np.float32(e)),
                                   attacks.make_fgsm_sweep(model, space)(x2, y2, np.float32(e))) for e in (1.0, 8.0))
    assert max(diffs.values()) <= 1e-5, diffs
    adv = _np(ga.bim(f, x, y, space, iterations=6))
    assert np.max(np.abs(adv - x)) > 0.9 * space.epsilon(8)  # the attack moved the images
    print(f"{kind}: max |new − cleverhans| in input space: {diffs}")
    np.testing.assert_array_equal(_np(ga.make_predict(model)(adv)), attacks.make_predict(model)(adv).numpy())


@pytest.mark.tensorflow_only
def test_compiled_attack_traces_once_for_every_batch_size_on_tensorflow():
    space, shape, scale, _ = LINEAR_CASES["centered_128"]
    model, _, _ = _linear.linear_model(shape=shape, seed=8, scale=scale)
    attack = ga.make_attack(model, "pgd", space, iterations=2)
    for n in (3, 5, 1):
        attack(_images(space, n, shape, seed=n), np.arange(n, dtype=np.int32) % 3)
    assert attack.traces == 1 and attack.compiled.function.experimental_get_tracing_count() == 1


# -- (d) DeepFool through foolbox, on the backend's foolbox model class ------------------------------------------


def _near_boundary_linear(seed=0, n=6, classes=4):
    """A linear model on centred inputs with images near a decision boundary (small margins), and the images."""
    rng = np.random.default_rng(seed)
    model, w, b = _linear.linear_model(shape=(3, 3, 1), classes=classes, seed=seed)
    base = rng.uniform(-0.3, 0.3, size=(1, 9))
    bias = -(base @ w)[0] + np.linspace(0.3, 0.0, classes)
    model.layers[-1].set_weights([w, bias.astype(np.float32)])
    x = (base + rng.normal(0, 0.02, size=(n, 9))).reshape(n, 3, 3, 1).astype(np.float32)
    return model, w, bias.astype(np.float32), x


def _deepfool_closed_form(x, w, b, overshoot=0.02):
    """One DeepFool step reaches the nearest class boundary of a linear model: foolbox moves (1 + overshoot)·(d +
    1e-4) along it, d = |z_k − z_y| / ‖w_k − w_y‖ (L2: ℓ2 norm, L∞: ℓ1 norm of the gradient)."""
    flat = x.reshape(len(x), -1).astype(np.float64)
    z = flat @ w.astype(np.float64) + b
    y = z.argmax(axis=1)
    l2, linf = [], []
    for i in range(len(x)):
        others = [k for k in range(w.shape[1]) if k != y[i]]
        g = w[:, others].T.astype(np.float64) - w[:, y[i]]
        margin = np.abs(z[i, others] - z[i, y[i]])
        l2.append((1 + overshoot) * (np.min(margin / np.linalg.norm(g, axis=1)) + 1e-4))
        linf.append((1 + overshoot) * (np.min(margin / np.abs(g).sum(axis=1)) + 1e-4))
    return y.astype(np.int32), np.array(l2), np.array(linf)


def test_foolbox_deepfool_on_the_backend_model_matches_the_closed_form():
    foolbox = pytest.importorskip("foolbox")
    model, w, b, x = _near_boundary_linear()
    y, l2, linf = _deepfool_closed_form(x, w, b)
    fmodel = ga.foolbox_model(foolbox, model, (CENTERED.lower[0], CENTERED.upper[0]))
    assert type(fmodel).__name__ == ga.FOOLBOX_MODELS[BACKEND]
    for attack, expected, order in ((foolbox.attacks.L2DeepFoolAttack(steps=10), l2, 2),
                                    (foolbox.attacks.LinfDeepFoolAttack(steps=10), linf, np.inf)):
        _, clipped, success = attack(fmodel, ops.convert_to_tensor(x), ga.foolbox_labels(y), epsilons=None)
        assert _np(success).all()
        sizes = np.linalg.norm((_np(clipped) - x).reshape(len(x), -1), ord=order, axis=1)
        np.testing.assert_allclose(sizes, expected, rtol=2e-3)


@pytest.mark.skipif(not dependencies.installed("tensorflow"), reason="sphere_tf.adversarial.evaluation imports "
                    "TensorFlow (its cleverhans evaluations)")
def test_deepfool_strength_on_this_backend_matches_the_closed_form():
    pytest.importorskip("foolbox")
    from sphere_tf.adversarial import evaluation  # noqa: PLC0415

    model, w, b, x = _near_boundary_linear(seed=1, n=5)
    y, l2, linf = _deepfool_closed_form(x, w, b)
    wrong = (y[-1] + 1) % w.shape[1]  # one image labelled wrongly: not attacked
    labels = np.concatenate([y[:-1], [wrong]])
    result = evaluation.deepfool_strength(model, x, labels, CENTERED, steps=10, batch_size=3)
    assert result["attacked"] == 4 and result["l2_fooled"] == result["linf_fooled"] == 4
    np.testing.assert_allclose(result["l2"], l2[:-1] * 128, rtol=2e-3)  # pixel units: 128 per input unit
    np.testing.assert_allclose(result["linf"], linf[:-1] * 128, rtol=2e-3)
