"""Budgets on the 0–255 scale in input space: `pixel_space`."""

import numpy as np
import pytest

from sphere_tf.adversarial import pixel_space
from sphere_tf.data import preprocessing


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
    np.testing.assert_allclose(lo.numpy(), [-m for m in mean], rtol=1e-6)
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
