"""FGSM / BIM / PGD through cleverhans in input space, against NumPy references.

The TensorFlow reference (`sphere_tf.adversarial.attacks`); `test_gradient_attacks.py` holds the backend-neutral
attacks to it and to the same references on every backend.
"""

import hypothesis
import hypothesis.strategies as st
import keras
import numpy as np
import pytest

from sphere_tf import models
from sphere_tf.adversarial import pixel_space
from sphere_tf.adversarial.attacks import bim
from sphere_tf.adversarial.attacks import fgsm
from sphere_tf.adversarial.attacks import inference_fn
from sphere_tf.adversarial.attacks import make_attack
from sphere_tf.adversarial.attacks import make_fgsm_sweep
from sphere_tf.adversarial.attacks import pgd
from tests.adversarial import _linear

pytestmark = pytest.mark.tensorflow_only

SPACE = pixel_space("centered_128", 1)
LO, HI = SPACE.lower[0], SPACE.upper[0]


def _pixels(n, shape=(4, 4, 1), seed=0):
    """Pixel images with a row at 0 and a row at 255 (to exercise the clipping), in input space."""
    rng = np.random.default_rng(seed)
    pixels = rng.uniform(0, 255, size=(n,) + shape)
    pixels[:, 0] = 0.0
    pixels[:, -1] = 255.0
    return SPACE.from_pixels(pixels)


def test_fgsm_moves_every_unclipped_pixel_by_exactly_epsilon_and_matches_closed_form():
    model, w, b = _linear.linear_model()
    x = _pixels(6)
    y = np.array([0, 1, 2, 0, 1, 2], np.int32)
    adv = fgsm(inference_fn(model), x, y, SPACE, epsilon=8).numpy()
    eps = 8 / 128
    reference = _linear.fgsm_reference(x, y, w, b, eps, LO, HI)
    np.testing.assert_allclose(adv, reference, atol=1e-6)
    g = _linear.input_gradient(x, y, w, b)
    assert np.all(g != 0)
    target = x + eps * np.sign(g)
    free = (target >= LO) & (target <= HI)
    assert free.mean() > 0.5 and (~free).sum() > 0  # both cases are exercised
    np.testing.assert_allclose(np.abs(adv - x)[free], eps, rtol=0, atol=1e-6)
    np.testing.assert_allclose(adv[~free], np.clip(target, LO, HI)[~free], atol=1e-6)
    assert adv.min() >= LO and adv.max() <= HI


def test_fgsm_clips_per_channel_with_mean_subtraction():
    mean = (120.0, 60.0, 200.0)
    space = pixel_space("mean_subtraction", 3, channel_mean=mean)
    model, w, b = _linear.linear_model(shape=(2, 2, 3), seed=1, scale=0.002)  # unsaturated softmax on pixel-unit inputs
    rng = np.random.default_rng(1)
    pixels = rng.choice([0.0, 3.0, 128.0, 252.0, 255.0], size=(5, 2, 2, 3))
    x = space.from_pixels(pixels)
    y = np.array([0, 1, 2, 1, 0], np.int32)
    adv = fgsm(inference_fn(model), x, y, space, epsilon=8).numpy()
    lower, upper = np.array(space.lower), np.array(space.upper)
    np.testing.assert_allclose(adv, _linear.fgsm_reference(x, y, w, b, 8.0, lower, upper), atol=1e-4)
    assert np.all(adv >= lower - 1e-4) and np.all(adv <= upper + 1e-4)


def _tanh_cnn(seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((6, 6, 1))
    x = keras.layers.Conv2D(4, 3, activation="tanh")(inputs)
    return keras.Model(inputs, keras.layers.Dense(3)(keras.layers.Flatten()(x)))


def test_bim_stays_in_the_ball_and_range_after_every_iteration():
    model = _tanh_cnn()
    rng = np.random.default_rng(2)
    x = SPACE.from_pixels(rng.choice([0.0, 4.0, 100.0, 251.0, 255.0], size=(4, 6, 6, 1)))
    y = np.array([0, 1, 2, 0], np.int32)
    eps, tau = 8 / 128, 2 / 128
    previous = x
    for n in range(1, 7):  # the N-step run's t-th iterate is the t-step run (no random start)
        adv = bim(inference_fn(model), x, y, SPACE, epsilon=8, step=2, iterations=n).numpy()
        assert np.max(np.abs(adv - x)) <= eps + 1e-6
        assert adv.min() >= LO and adv.max() <= HI
        assert np.max(np.abs(adv - previous)) <= tau + 1e-6  # one step of at most τ per iteration
        previous = adv
    assert np.isclose(np.max(np.abs(previous - x)), eps, atol=1e-6)  # 6 steps of τ reach the ball's edge


def test_one_bim_step_is_fgsm_with_epsilon_tau_on_the_linear_model():
    model, w, b = _linear.linear_model(seed=3)
    x = _pixels(4, seed=3)
    y = np.array([2, 1, 0, 2], np.int32)
    adv = bim(inference_fn(model), x, y, SPACE, epsilon=8, step=2, iterations=1).numpy()
    np.testing.assert_allclose(adv, _linear.fgsm_reference(x, y, w, b, 2 / 128, LO, HI), atol=1e-6)


def test_pgd_random_start_stays_in_the_ball():
    model = _tanh_cnn(1)
    x = _pixels(3, shape=(6, 6, 1))
    y = np.array([0, 1, 2], np.int32)
    adv = pgd(inference_fn(model), x, y, SPACE, epsilon=8, step=2, iterations=3).numpy()
    assert np.max(np.abs(adv - x)) <= 8 / 128 + 1e-6 and adv.min() >= LO and adv.max() <= HI
    plain = bim(inference_fn(model), x, y, SPACE, epsilon=8, step=2, iterations=3).numpy()
    assert not np.allclose(adv, plain)  # the random start changes the path


def test_make_attack_traces_once_for_all_batches():
    model = _tanh_cnn(2)
    attack = make_attack(model, "bim", SPACE, epsilon=8, step=2, iterations=4)
    for n in (3, 5, 2):
        x = _pixels(n, shape=(6, 6, 1), seed=n)
        y = np.arange(n, dtype=np.int32) % 3
        compiled = attack(x, y).numpy()
        eager = bim(inference_fn(model), x, y, SPACE, epsilon=8, step=2, iterations=4).numpy()
        np.testing.assert_allclose(compiled, eager, atol=1e-6)
    assert attack.experimental_get_tracing_count() == 1
    sweep = make_fgsm_sweep(model, SPACE)
    for eps in (0.0, 4.0, 8.0):
        out = sweep(x, y, np.float32(eps)).numpy()
        np.testing.assert_allclose(out, fgsm(inference_fn(model), x, y, SPACE, epsilon=eps).numpy(), atol=1e-6)
    assert sweep.experimental_get_tracing_count() == 1


@hypothesis.settings(max_examples=12, deadline=None)
@hypothesis.given(level=st.sampled_from([0.0, 255.0]), eps=st.floats(0.0, 32.0))
def test_saturated_images_stay_in_range_and_finite(level, eps):
    model, w, b = _linear.linear_model(seed=4)
    x = SPACE.from_pixels(np.full((2, 4, 4, 1), level))
    y = np.array([0, 1], np.int32)
    adv = fgsm(inference_fn(model), x, y, SPACE, epsilon=eps).numpy()
    assert np.all(np.isfinite(adv)) and adv.min() >= LO and adv.max() <= HI
    np.testing.assert_allclose(adv, _linear.fgsm_reference(x, y, w, b, eps / 128, LO, HI), atol=1e-6)


def test_bad_arguments_are_named():
    model = _tanh_cnn()
    x = _pixels(1, shape=(6, 6, 1))
    with pytest.raises(ValueError, match="step"):
        bim(inference_fn(model), x, [0], SPACE, epsilon=2, step=4)
    with pytest.raises(ValueError, match="iterations"):
        make_attack(model, "bim", SPACE, iterations=0)
    with pytest.raises(ValueError, match="attack"):
        make_attack(model, "deepfool", SPACE)
    with pytest.raises(ValueError, match="epsilon"):
        fgsm(inference_fn(model), x, [0], SPACE, epsilon=-1.0)
    margin = models.create_model("small_cnn", input_shape=(8, 8, 1), num_classes=3, widths=(2,),
                                 convs_per_stage=1, dense_units=4, head={"layer": "margin", "loss_type": "asoftmax", "margin": 2})
    with pytest.raises(ValueError, match="labels"):
        inference_fn(margin)


def test_one_trace_per_model_is_not_reported_as_retracing():
    """TensorFlow counts traces per code object across the closures of `make_attack`: six models read as
    retracing; `per_model_tracing` drops exactly that warning while each function stays at one trace."""
    import logging

    from sphere_tf.adversarial import attacks

    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("tensorflow")
    logger.addHandler(handler)
    x, y = _pixels(2, shape=(6, 6, 1)), np.array([0, 1], np.int32)

    def attack_models(count, seed):
        functions = [make_attack(_tanh_cnn(seed + i), "fgsm", SPACE) for i in range(count)]
        for function in functions:
            function(x, y)
        return functions

    def retracing():
        return [r for r in records if "retracing" in r.getMessage()]

    # TensorFlow warns at most twice per code object and process: forget its counts before each phase.
    from tensorflow.python.eager.polymorphic_function import polymorphic_function

    detectors = polymorphic_function._frequent_tracing_detector_manager._detectors
    try:
        detectors.clear()
        functions = attack_models(6, 10)
        assert retracing() and all(f.experimental_get_tracing_count() == 1 for f in functions)
        records.clear()
        detectors.clear()
        with attacks.per_model_tracing():
            attack_models(6, 20)
        assert retracing() == []
    finally:
        logger.removeHandler(handler)
