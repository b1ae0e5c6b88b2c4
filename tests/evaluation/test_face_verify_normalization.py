"""`face.verify` reads the normalisation from a model whose first layer is a `PixelNormalization`: it feeds raw
pixels, so such a model scores the pairs exactly as the same weights without the layer fed the pipeline's
normalised pixels; a `normalization` argument that disagrees with the layer is refused."""

import keras
import numpy as np
import pytest
from PIL import Image

from sphere_tf.data import faces
from sphere_tf.evaluation import face
from sphere_tf.layers import PixelNormalization

SHAPE = (12, 10, 3)


def _model(normalising):
    images = keras.Input(SHAPE)
    x = PixelNormalization()(images) if normalising else images
    x = keras.layers.Conv2D(4, 3, activation="tanh")(x)
    embedding = keras.layers.Dense(6, name="embedding")(keras.layers.Flatten()(x))
    return keras.Model(images, keras.layers.Dense(3, name="logits")(embedding))


@pytest.fixture(scope="module")
def pairs_and_images(tmp_path_factory):
    root = tmp_path_factory.mktemp("lfw")
    rng = np.random.default_rng(0)
    for name in ("A", "B"):
        prototype = rng.integers(0, 256, SHAPE)
        (root / name).mkdir()
        for index in (1, 2, 3):
            image = np.clip(prototype + rng.normal(0, 40, SHAPE), 0, 255).astype(np.uint8)
            Image.fromarray(image).save(root / name / f"{index}.png")
    (root / "pairs.txt").write_text("2\nA 1 2\nB 2 3\nA 1 B 3\nA 3 B 1\n")
    pairs = faces.read_pairs(str(root / "pairs.txt"), image_pattern="{name}/{index}.png")
    return pairs, str(root)


def test_model_with_the_layer_is_fed_raw_pixels(pairs_and_images):
    pairs, images = pairs_and_images
    keras.utils.set_random_seed(1)
    normalising = _model(True)
    legacy = _model(False)
    legacy.set_weights(normalising.get_weights())  # the layer has no weights: the same network
    # The legacy model gets (x − 127.5)/128 from verify's pipeline; the other normalises inside.
    reference = face.verify(legacy, pairs, images, batch_size=4, normalization="centered_128")
    for normalization in (None, "centered_128"):  # read from the model / the layer's own name
        got = face.verify(normalising, pairs, images, batch_size=4, normalization=normalization)
        assert got.keys() == reference.keys()
        assert got["tar_at_far"] == pytest.approx(reference["tar_at_far"])
        assert got["angular_fisher_score"] == pytest.approx(reference["angular_fisher_score"], rel=1e-4)
        assert got["min_interclass_angle_deg"] == pytest.approx(reference["min_interclass_angle_deg"], abs=1e-3)
    # A model without the layer and no argument: DEFAULT_NORMALIZATION ('centered_128').
    default = face.verify(legacy, pairs, images, batch_size=4)
    assert default["angular_fisher_score"] == pytest.approx(reference["angular_fisher_score"], rel=1e-6)
    # Feeding the legacy model raw pixels gives other features: the equality above is not vacuous.
    raw = face.verify(legacy, pairs, images, batch_size=4, normalization="none")
    assert raw["angular_fisher_score"] != pytest.approx(reference["angular_fisher_score"], rel=1e-3)


def test_normalization_disagreeing_with_the_layer_raises(pairs_and_images):
    pairs, images = pairs_and_images
    with pytest.raises(ValueError, match="argument `normalization`.*'centered_128'"):
        face.verify(_model(True), pairs, images, normalization="unit_interval")
