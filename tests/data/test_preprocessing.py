"""Augmentations and normalisations against NumPy references drawn from the same stateless seeds."""

import re

import numpy as np
import pytest
import tensorflow as tf

from sphere_tf.data import preprocessing


def np_pad_crop(image, row, col, pad, mode):
    padded = np.pad(image, ((pad, pad), (pad, pad), (0, 0)), mode="constant" if mode == "CONSTANT" else "symmetric")
    return padded[row : row + image.shape[0], col : col + image.shape[1]]


def _draws(seed, height, width, crop_height, crop_width):
    row, col = preprocessing.crop_offsets(seed, height, width, crop_height, crop_width)
    return (int(row), int(col), bool(preprocessing.flip_draw(seed)),
            bool(preprocessing.flip_draw(seed, preprocessing._VFLIP)))


SEEDS = [preprocessing.element_seed(3, epoch, index) for epoch in range(2) for index in range(12)]


@pytest.mark.parametrize(
    "name, mode, vertical",
    [("cifar_plus", "CONSTANT", False), ("cifar_plus_symmetric", "SYMMETRIC", False),
     ("spherenet_cifar_plus", "SYMMETRIC", True)],
)
def test_pad_crop_flip_matches_numpy(name, mode, vertical):
    image = np.random.default_rng(0).integers(0, 256, (32, 32, 3)).astype(np.float32)
    fn = preprocessing.get_augmentation(name)
    seen_offsets, seen_flips = set(), set()
    for seed in SEEDS:
        row, col, hflip, vflip = _draws(seed, 40, 40, 32, 32)
        expected = np_pad_crop(image, row, col, 4, mode)
        if hflip:
            expected = expected[:, ::-1]
        if vertical and vflip:
            expected = expected[::-1]
        np.testing.assert_array_equal(fn(tf.constant(image), seed).numpy(), expected)
        seen_offsets.add((row, col))
        seen_flips.add((hflip, vflip))
    assert len(seen_offsets) > 10 and len(seen_flips) == 4  # the draws really vary
    assert all(0 <= r <= 8 and 0 <= c <= 8 for r, c in seen_offsets)


def test_flip_and_none():
    image = np.arange(2 * 3 * 1, dtype=np.float32).reshape(2, 3, 1)
    for seed in SEEDS[:6]:
        out = preprocessing.get_augmentation("flip")(tf.constant(image), seed).numpy()
        np.testing.assert_array_equal(out, image[:, ::-1] if bool(preprocessing.flip_draw(seed)) else image)
        np.testing.assert_array_equal(preprocessing.get_augmentation("none")(tf.constant(image), seed), image)


def test_imagenet_crops_match_numpy():
    # The shorter side is already 256, so the resize is the identity and the crops are plain slices.
    image = np.random.default_rng(1).integers(0, 256, (256, 300, 3)).astype(np.float32)
    eval_out = preprocessing.get_augmentation("imagenet_eval")(tf.constant(image), SEEDS[0]).numpy()
    np.testing.assert_allclose(eval_out, image[16:240, 38:262], atol=1e-3)
    for seed in SEEDS[:5]:
        row, col, hflip, _ = _draws(seed, 256, 300, 224, 224)
        expected = image[row : row + 224, col : col + 224]
        expected = expected[:, ::-1] if hflip else expected
        out = preprocessing.get_augmentation("imagenet_train")(tf.constant(image), seed).numpy()
        np.testing.assert_allclose(out, expected, atol=1e-3)


def test_square_imagenet_variants_match_numpy():
    image = np.random.default_rng(2).integers(0, 256, (256, 256, 3)).astype(np.float32)
    out = preprocessing.get_augmentation("imagenet_eval_square")(tf.constant(image), SEEDS[0]).numpy()
    np.testing.assert_allclose(out, image[16:240, 16:240], atol=1e-3)
    row, col, hflip, _ = _draws(SEEDS[3], 256, 256, 224, 224)
    expected = image[row : row + 224, col : col + 224]
    out = preprocessing.get_augmentation("imagenet_train_square")(tf.constant(image), SEEDS[3]).numpy()
    np.testing.assert_allclose(out, expected[:, ::-1] if hflip else expected, atol=1e-3)
    # A non-square image is squashed to 256 x 256, not cropped to its shorter side.
    stripes = np.zeros((256, 512, 1), np.float32)
    stripes[:, 256:] = 100.0
    out = preprocessing.get_augmentation("imagenet_eval_square")(tf.constant(stripes), SEEDS[0]).numpy()
    np.testing.assert_allclose(out[:, :100], 0.0)
    np.testing.assert_allclose(out[:, -100:], 100.0)


def test_resize_shorter_side_keeps_aspect_ratio():
    out = preprocessing.resize_shorter_side(tf.fill([100, 150, 3], 7.0), 256)
    assert out.shape == (256, 384, 3)
    np.testing.assert_allclose(out.numpy(), 7.0)
    out = preprocessing.get_augmentation("imagenet_eval")(tf.fill([333, 90, 3], 1.0), SEEDS[0])
    assert out.shape == (224, 224, 3)


def test_element_seed_is_deterministic_and_distinct():
    a = preprocessing.element_seed(5, 1, 7).numpy()
    np.testing.assert_array_equal(a, preprocessing.element_seed(5, 1, 7).numpy())
    others = [preprocessing.element_seed(*k).numpy().tolist() for k in ((5, 1, 8), (5, 2, 7), (6, 1, 7))]
    assert a.tolist() not in others and len({tuple(o) for o in others}) == 3


def test_normalizations_hand_values():
    x = tf.constant([[[0.0, 127.5, 255.0]]])
    np.testing.assert_allclose(
        preprocessing.get_normalization("centered_128")(x, None).numpy(), [[[-127.5 / 128, 0.0, 127.5 / 128]]]
    )
    np.testing.assert_allclose(
        preprocessing.get_normalization("mean_subtraction")(x, (1.0, 2.0, 3.0)).numpy(), [[[-1.0, 125.5, 252.0]]]
    )
    np.testing.assert_array_equal(preprocessing.get_normalization("none")(x, None).numpy(), x.numpy())


def test_registry_names():
    with pytest.raises(ValueError, match=re.escape("Unknown augmentation 'cifar+'")):
        preprocessing.get_augmentation("cifar+")
    with pytest.raises(KeyError, match="already registered"):
        preprocessing.register_augmentation("flip", lambda image, seed: image)
    with pytest.raises(ValueError, match="Unknown normalization"):
        preprocessing.get_normalization("zscore")


@pytest.mark.parametrize("name", sorted(preprocessing.AUGMENTATIONS))
def test_every_augmentation_runs_in_tf_data(name):
    size = 256 if name.startswith("imagenet") else 32
    ds = tf.data.Dataset.range(2).map(
        lambda i: preprocessing.get_augmentation(name)(
            tf.fill([size, size, 3], 5.0), preprocessing.element_seed(0, 0, i)
        )
    )
    for out in ds:
        assert out.shape == ((224, 224, 3) if name.startswith("imagenet") else (32, 32, 3))
        values = set(np.unique(out.numpy()).tolist())
        # Only zero padding brings in a new value; mirror padding, flips, crops and resizes keep a constant image.
        assert values <= {0.0, 5.0} if name == "cifar_plus" else values == {5.0}
