"""FGSM adversarial training: examples from the current weights, the mixed loss, against NumPy (every backend)."""

import keras
import numpy as np
import pytest
from keras import ops

from sphere_tf.adversarial import FGSMAdversarialModel
from sphere_tf.adversarial import adversarial_wrap
from sphere_tf.adversarial import pixel_space
from tests.adversarial import _linear

SPACE = pixel_space("centered_128", 1)
LO, HI = SPACE.lower[0], SPACE.upper[0]
EPS = 8 / 128


def _data(seed=0, n=6):
    rng = np.random.default_rng(seed)
    x = SPACE.from_pixels(rng.uniform(0, 255, size=(n, 4, 4, 1)))
    return x, (np.arange(n) % 3).astype(np.int32)


def test_examples_come_from_the_current_weights():
    model, w, b = _linear.linear_model(seed=0)
    wrapped = adversarial_wrap(model, SPACE, epsilon=8)
    x, y = _data()
    first = ops.convert_to_numpy(wrapped.adversarial_examples(x, y))
    np.testing.assert_allclose(first, _linear.fgsm_reference(x, y, w, b, EPS, LO, HI), atol=1e-6)
    w2 = -w[:, ::-1].copy()
    model.layers[-1].set_weights([w2, b])  # the wrapper shares the layers: new weights, new examples
    second = ops.convert_to_numpy(wrapped.adversarial_examples(x, y))
    assert not np.allclose(first, second)
    np.testing.assert_allclose(second, _linear.fgsm_reference(x, y, w2, b, EPS, LO, HI), atol=1e-6)


@pytest.mark.parametrize("mix", [1.0, 0.5, 0.25])
def test_one_sgd_step_follows_the_mixed_loss_at_the_pre_step_weights(mix):
    model, w, b = _linear.linear_model(seed=1, scale=0.3)
    x, y = _data(1)
    lr = 0.1
    wrapped = adversarial_wrap(model, SPACE, epsilon=8, mix=mix)
    wrapped.compile(optimizer=keras.optimizers.SGD(lr), loss=keras.losses.SparseCategoricalCrossentropy(
        from_logits=True))
    wrapped.train_on_batch(x, y)
    x_adv = _linear.fgsm_reference(x, y, w, b, EPS, LO, HI)  # crafted with the weights before the step
    gw_clean, gb_clean = _linear.weight_gradient(x, y, w, b)
    gw_adv, gb_adv = _linear.weight_gradient(x_adv, y, w, b)
    gw = (1 - mix) * gw_clean + mix * gw_adv
    gb = (1 - mix) * gb_clean + mix * gb_adv
    new_w, new_b = model.layers[-1].get_weights()
    np.testing.assert_allclose(new_w, w - lr * gw, atol=1e-5)
    np.testing.assert_allclose(new_b, b - lr * gb, atol=1e-5)


def test_config_round_trip_and_bad_arguments():
    model, _, _ = _linear.linear_model()
    wrapped = adversarial_wrap(model, SPACE, epsilon=4, mix=0.3)
    config = wrapped.get_config()
    assert config["epsilon"] == pytest.approx(4 / 128) and config["mix"] == 0.3
    assert config["clip_min"] == pytest.approx(LO) and config["clip_max"] == pytest.approx(HI)
    with pytest.raises(ValueError, match="mix"):
        adversarial_wrap(model, SPACE, mix=1.5)
    with pytest.raises(ValueError, match="space"):
        adversarial_wrap(model, "centered_128")
    with pytest.raises(ValueError, match="clip_max"):
        FGSMAdversarialModel(model.inputs[0], model.outputs[0], epsilon=0.1, clip_min=1.0, clip_max=0.0)


def test_keras_file_round_trip_keeps_settings_weights_and_training(tmp_path):
    model, _, _ = _linear.linear_model(seed=2)
    wrapped = adversarial_wrap(model, SPACE, epsilon=4, mix=0.3)
    wrapped.compile(optimizer=keras.optimizers.SGD(0.1), loss=keras.losses.SparseCategoricalCrossentropy(
        from_logits=True))
    x, y = _data(2)
    wrapped.train_on_batch(x, y)
    path = str(tmp_path / "adversarial.keras")
    wrapped.save(path)
    loaded = keras.models.load_model(path)
    assert isinstance(loaded, FGSMAdversarialModel)
    assert (loaded.epsilon, loaded.mix) == (pytest.approx(4 / 128), 0.3)
    assert loaded.clip_min == pytest.approx(LO) and loaded.clip_max == pytest.approx(HI)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(loaded(x)), keras.ops.convert_to_numpy(wrapped(x)),
                               atol=1e-6)
    np.testing.assert_allclose(ops.convert_to_numpy(loaded.adversarial_examples(x, y)),
                               ops.convert_to_numpy(wrapped.adversarial_examples(x, y)), atol=1e-6)
    # The reloaded model trains on as the original does (same optimizer state, same step).
    loaded.train_on_batch(x, y)
    wrapped.train_on_batch(x, y)
    for a, b in zip(loaded.get_weights(), wrapped.get_weights()):
        np.testing.assert_allclose(a, b, atol=1e-6)
