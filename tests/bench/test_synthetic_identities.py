"""bench.synthetic_identities: deterministic features around unit class centres (NumPy only), and the identity
folder of tiny PNG faces written from them (TensorFlow's PNG encoder)."""

import numpy as np
import pytest

from bench.synthetic_identities import class_centres
from bench import synthetic_identities as synthetic_identities_module
from bench.synthetic_identities import synthetic_identities


def test_deterministic_by_seed_shapes_and_ranges():
    x, y = synthetic_identities(200, 50, 16, noise=0.2, seed=3)
    x2, y2 = synthetic_identities(200, 50, 16, noise=0.2, seed=3)
    assert x.shape == (200, 16) and x.dtype == np.float32
    assert y.shape == (200,) and y.dtype == np.int32
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(y, y2)
    assert y.min() >= 0 and y.max() < 50
    x3, y3 = synthetic_identities(200, 50, 16, noise=0.2, seed=4)
    assert not np.array_equal(y, y3) and not np.array_equal(x, x3)
    assert synthetic_identities(5, 3, 4, dtype="float64")[0].dtype == np.float64


def test_labels_are_uniform():
    _, y = synthetic_identities(20000, 10, 4, seed=0)
    counts = np.bincount(y, minlength=10)
    assert np.all(np.abs(counts - 2000) < 6 * np.sqrt(2000 * 0.9))


def test_centres_are_unit_and_independent_of_the_subset_asked_for():
    centres = class_centres([7, 3, 7, 999_999], 32, seed=1)
    np.testing.assert_allclose(np.linalg.norm(centres, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_array_equal(centres[0], centres[2])
    np.testing.assert_array_equal(class_centres([3], 32, seed=1)[0], centres[1])
    assert not np.array_equal(class_centres([3], 32, seed=2)[0], centres[1])


@pytest.mark.parametrize("noise", [0.0, 0.3])
def test_features_lie_around_their_own_centre(noise):
    x, y = synthetic_identities(300, 20, 64, noise=noise, seed=0)
    own = class_centres(y, 64, seed=0)
    offsets = np.linalg.norm(x - own, axis=1)
    assert abs(offsets.mean() - noise) <= 0.1 * noise + 1e-6
    # Nearest centre (by cosine) is the sample's own class.
    table = class_centres(np.arange(20), 64, seed=0)
    assert np.mean(np.argmax(x @ table.T, axis=1) == y) == 1.0


def test_bad_arguments():
    with pytest.raises(ValueError, match="num_classes"):
        synthetic_identities(3, 0, 4)
    with pytest.raises(ValueError, match="noise"):
        synthetic_identities(3, 2, 4, noise=-1.0)
    with pytest.raises(ValueError, match="feature_dim"):
        class_centres([1], 0)
    with pytest.raises(ValueError, match=">= 0"):
        class_centres([-1], 4)


@pytest.mark.tensorflow_only
def test_identity_folder_reads_back_as_faces_with_class_labels(tmp_path):
    import tensorflow as tf  # noqa: PLC0415 (the writer's PNG encoder)

    from sphere_tf.data import faces  # noqa: PLC0415

    assert synthetic_identities_module.write_identity_folder(str(tmp_path / "a"), 12, 3, (6, 5, 3), seed=4) == (12, 3)
    synthetic_identities_module.write_identity_folder(str(tmp_path / "b"), 12, 3, (6, 5, 3), seed=4)
    folder = faces.index_identity_folder(str(tmp_path / "a"))
    assert folder.num_classes == 12 and len(folder.paths) == 36
    np.testing.assert_array_equal(folder.labels, np.repeat(np.arange(12), 3))  # folder order = class order
    images = np.stack([tf.io.decode_png(tf.io.read_file(p)).numpy() for p in folder.paths]).astype(np.float64)
    again = [tf.io.decode_png(tf.io.read_file(p.replace(str(tmp_path / "a"), str(tmp_path / "b")))).numpy()
             for p in folder.paths]
    np.testing.assert_array_equal(images, np.stack(again))  # deterministic by seed
    assert images.shape == (36, 6, 5, 3)
    np.testing.assert_array_equal(images[:3], synthetic_identities_module.identity_images(0, 3, (6, 5, 3), seed=4))
    # Each image is nearest the mean image of its own identity.
    flat = images.reshape(36, -1)
    means = flat.reshape(12, 3, -1).mean(axis=1)
    nearest = np.argmin(((flat[:, None, :] - means[None]) ** 2).sum(-1), axis=1)
    np.testing.assert_array_equal(nearest, folder.labels)
    with pytest.raises(ValueError, match="num_classes"):
        synthetic_identities_module.write_identity_folder(str(tmp_path / "c"), 0)
