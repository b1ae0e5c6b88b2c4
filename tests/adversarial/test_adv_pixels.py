"""Budgets on the 0–255 scale in input space: `pixel_space`, and `input_space` read from the model."""

import keras
import numpy as np
import pytest

from sphere_tf.adversarial import input_space
from sphere_tf.adversarial import pixel_space
from sphere_tf.adversarial import space_for
from sphere_tf.adversarial.attacks import make_attack
from sphere_tf.data import preprocessing
from sphere_tf.layers import PixelNormalization
from tests.adversarial import _linear


def test_centered_128_maps_pixels_by_one_over_128():
    space = pixel_space("centered_128", 1)
    assert space.scale == pytest.approx(1 / 128)
    assert space.lower == pytest.approx((-127.5 / 128,))
    assert space.upper == pytest.approx((127.5 / 128,))
    assert space.epsilon(8) == pytest.approx(8 / 128)
    assert space.clip_bounds() == pytest.approx((-127.5 / 128, 127.5 / 128))


def test_mean_subtraction_keeps_pixel_units_with_per_channel_range():
    mean = (125.3, 123.0, 113.9)
    space = pixel_space("mean_subtraction", 3, channel_mean=mean)
    assert space.scale == pytest.approx(1.0)
    assert space.epsilon(8) == pytest.approx(8.0)
    np.testing.assert_allclose(space.lower, [-m for m in mean], rtol=1e-6)
    np.testing.assert_allclose(space.upper, [255 - m for m in mean], rtol=1e-6)
    lo, hi = space.clip_bounds()
    np.testing.assert_allclose(keras.ops.convert_to_numpy(lo), [-m for m in mean], rtol=1e-6)
    pixels = np.array([[[[0.0, 128.0, 255.0]]]])
    np.testing.assert_allclose(space.to_pixels(space.from_pixels(pixels)), pixels, atol=1e-4)


def test_none_is_the_pixel_range():
    space = pixel_space("none", 1)
    assert (space.scale, space.lower, space.upper) == (1.0, (0.0,), (255.0,))


def test_refuses_non_affine_and_per_channel_scales():
    with pytest.raises(ValueError, match="affine"):
        pixel_space(lambda image, mean: (image / 255.0) ** 2, 1)
    with pytest.raises(ValueError, match="one scale for every channel"):
        pixel_space(lambda image, mean: image * np.array([1.0, 2.0], np.float32), 2)
    with pytest.raises(ValueError, match="channel_mean"):
        pixel_space("mean_subtraction", 3, channel_mean=(1.0, 2.0))
    with pytest.raises(ValueError, match="mean_subtraction"):  # no means given: the error says which normalisation
        pixel_space("mean_subtraction", 3)
    with pytest.raises(ValueError, match="no_such_normalization"):
        pixel_space("no_such_normalization", 1)
    assert "centered_128" in preprocessing.NORMALIZATIONS


# -- the space read from the model (`input_space`): a PixelNormalization model takes raw pixels ------------------


def _normalising_linear_model(shape=(4, 4, 1), classes=3, seed=0):
    """`PixelNormalization('centered_128') -> Flatten -> Dense`, seeded; returns (model, W, b)."""
    rng = np.random.default_rng(seed)
    inputs = keras.Input(shape)
    dense = keras.layers.Dense(classes)
    model = keras.Model(inputs, dense(keras.layers.Flatten()(PixelNormalization()(inputs))))
    w = rng.normal(size=(int(np.prod(shape)), classes)).astype(np.float32)
    b = rng.normal(size=(classes,)).astype(np.float32)
    dense.set_weights([w, b])
    return model, w, b


def test_model_with_the_layer_gets_budgets_in_pixel_units():
    model, _, _ = _normalising_linear_model()
    space = input_space(model)
    assert (space.scale, space.lower, space.upper) == (1.0, (0.0,), (255.0,))
    assert space.epsilon(8) == 8.0 and space.clip_bounds() == (0.0, 255.0)
    assert input_space(model, normalization="centered_128") == space  # the layer's own name agrees
    with pytest.raises(ValueError, match="argument `normalization`.*'centered_128'"):
        input_space(model, normalization="unit_interval")
    # A model without the layer: the named normalisation's space, DEFAULT_NORMALIZATION when not named.
    legacy, _, _ = _linear.linear_model()
    assert input_space(legacy) == pixel_space("centered_128", 1)
    assert input_space(legacy, "mean_subtraction", [100.0]) == pixel_space("mean_subtraction", 1, [100.0])


@pytest.mark.tensorflow_only  # cleverhans' make_attack (gradient_attacks' is tested on every backend)
def test_fgsm_on_raw_pixels_of_a_normalising_model_against_numpy():
    """ε = 8 pixels moves each unclipped pixel by 8; the gradient's sign is that of the normalised model's."""
    model, w, b = _normalising_linear_model()
    rng = np.random.default_rng(2)
    pixels = rng.uniform(0, 255, (6, 4, 4, 1)).astype(np.float32)
    pixels[:, 0], pixels[:, -1] = 0.0, 255.0
    labels = np.array([0, 1, 2, 0, 1, 2], np.int32)
    adv = make_attack(model, "fgsm", epsilon=8)(pixels, labels).numpy()  # space read from the model
    # ∂CE/∂pixel = (1/128)·(softmax(z) − e_y)·Wᵀ with z = ((pixel − 127.5)/128)·W + b: a positive multiple.
    normalised = (pixels.astype(np.float64) - 127.5) / 128.0
    g = _linear.input_gradient(normalised, labels, w, b)
    np.testing.assert_allclose(adv, np.clip(pixels + 8.0 * np.sign(g), 0.0, 255.0), atol=1e-4)


def test_a_normalised_space_for_a_normalising_model_is_refused():
    model, _, _ = _normalising_linear_model()
    with pytest.raises(ValueError, match="argument `space`.*PixelNormalization"):
        make_attack(model, "fgsm", pixel_space("centered_128", 1))
    assert space_for(model, pixel_space("none", 1)) == pixel_space("none", 1)
    legacy, _, _ = _linear.linear_model()
    assert space_for(legacy) == pixel_space("centered_128", 1)
