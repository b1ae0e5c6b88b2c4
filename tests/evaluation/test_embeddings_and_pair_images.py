"""Flip-concatenated embeddings (SphereFace, Liu et al., CVPR 2017, §4.1) and the pair images of LFW verification on
every Keras backend, against NumPy; on TensorFlow, the pixels and embeddings against TensorFlow's own decoders and
the tf.data / tf.function pipeline the verification used before it ran on every backend."""

import io

import keras
import numpy as np
import pytest
from PIL import Image

from sphere_tf.data import CorruptDataError
from sphere_tf.data import DataNotFoundError
from sphere_tf.data import faces
from sphere_tf.evaluation import face
from sphere_tf.evaluation import verification

SHAPE = (6, 5, 2)


def _dense_embedder():
    """images -> Flatten -> Dense 'embedding' (a linear map, so NumPy computes it exactly) -> Dense 'logits'."""
    keras.utils.set_random_seed(3)
    images = keras.Input(SHAPE)
    embedding = keras.layers.Dense(4, name="embedding")(keras.layers.Flatten()(images))
    model = keras.Model(images, keras.layers.Dense(3, name="logits")(embedding))
    kernel, bias = (keras.ops.convert_to_numpy(w).astype(np.float64) for w in model.get_layer("embedding").weights)
    return verification.embedding_model(model), kernel, bias


def _numpy_flip_features(images, kernel, bias):
    """[f(x), f(mirror x)] with f(x) = vec(x) W + b, the mirror reversing the width axis."""
    images = np.asarray(images, np.float64)
    plain = images.reshape(len(images), -1) @ kernel + bias
    mirrored = images[:, :, ::-1].reshape(len(images), -1) @ kernel + bias
    return np.concatenate([plain, mirrored], axis=1)


def test_flip_embeddings_equal_numpy_over_any_batches():
    embedder, kernel, bias = _dense_embedder()
    images = np.random.default_rng(0).normal(size=(7,) + SHAPE).astype(np.float32)
    expected = _numpy_flip_features(images, kernel, bias)
    embed = verification.flip_embedding_fn(embedder)
    # A list of arrays, an (images, labels) tuple and a generator; a last, smaller batch.
    for batches in ([images[:3], images[3:6], images[6:]], [(images[:4], None), (images[4:], None)],
                    (images[k:k + 2] for k in range(0, 7, 2))):
        got = verification.extract_embeddings(embed, batches)
        assert got.dtype == np.float32 and got.shape == (7, 8)
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    plain = verification.extract_embeddings(verification.plain_embedding_fn(embedder), [images])
    np.testing.assert_allclose(plain, expected[:, :4], rtol=1e-5, atol=1e-5)
    # uint8 batches are embedded as float32 pixels.
    pixels = np.random.default_rng(1).integers(0, 256, (2,) + SHAPE).astype(np.uint8)
    np.testing.assert_allclose(verification.extract_embeddings(embed, [pixels]),
                               _numpy_flip_features(pixels, kernel, bias), rtol=1e-5, atol=1e-3)


def test_the_compiled_function_sees_the_current_weights():
    embedder, _, _ = _dense_embedder()
    images = np.random.default_rng(2).normal(size=(3,) + SHAPE).astype(np.float32)
    embed = verification.flip_embedding_fn(embedder)
    embed(images)  # compiled with the first weights
    layer = embedder.get_layer("embedding")
    layer.kernel.assign(np.ones(layer.kernel.shape, np.float32))
    layer.bias.assign(np.zeros(layer.bias.shape, np.float32))
    expected = _numpy_flip_features(images, np.ones(layer.kernel.shape), np.zeros(layer.bias.shape))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(embed(images)), expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision_embeddings_are_float32_and_close_to_numpy(policy):
    """A model built under a mixed policy computes in half precision; the embeddings come out float32, finite and
    within half precision of the float64 NumPy features (zero images included: their features are the bias)."""
    previous = keras.mixed_precision.global_policy().name
    keras.mixed_precision.set_global_policy(policy)
    try:
        embedder, kernel, bias = _dense_embedder()
        images = np.random.default_rng(4).uniform(-1, 1, (5,) + SHAPE).astype(np.float32)
        images[0] = 0.0
        got = verification.extract_embeddings(verification.flip_embedding_fn(embedder), [images[:2], images[2:]])
    finally:
        keras.mixed_precision.set_global_policy(previous)
    assert got.dtype == np.float32 and np.isfinite(got).all()
    kernel, bias = kernel.astype(np.float32), bias.astype(np.float32)  # the float32 variables of the policy
    np.testing.assert_allclose(got, _numpy_flip_features(images, kernel, bias), rtol=0.05, atol=0.05)


def test_extract_embeddings_refuses_no_batch():
    embedder, _, _ = _dense_embedder()
    with pytest.raises(ValueError, match="non-empty iterable of image batches"):
        verification.extract_embeddings(verification.flip_embedding_fn(embedder), [])


def _write(path, array, **options):
    Image.fromarray(array).save(path, **options)
    return str(path)


def test_pair_image_batches_are_the_png_pixels_normalised(tmp_path):
    rng = np.random.default_rng(4)
    arrays = [rng.integers(0, 256, (6, 5, 3)).astype(np.uint8) for _ in range(5)]
    paths = [_write(tmp_path / f"{k}.png", a) for k, a in enumerate(arrays)]
    batches = list(face.pair_image_batches(paths, (6, 5, 3), "centered_128", 2))
    assert [len(b) for b in batches] == [2, 2, 1] and all(b.dtype == np.float32 for b in batches)
    expected = (np.stack(arrays).astype(np.float32) - np.float32(127.5)) / np.float32(128.0)
    np.testing.assert_array_equal(np.concatenate(batches), expected)
    # A grey PNG read as RGB repeats its channel.
    grey = rng.integers(0, 256, (6, 5)).astype(np.uint8)
    [batch] = face.pair_image_batches([_write(tmp_path / "grey.png", grey)], (6, 5, 3), "none", 4)
    np.testing.assert_array_equal(batch[0], np.repeat(grey[..., None], 3, axis=2).astype(np.float32))


def test_pair_image_of_another_size_or_unreadable_is_named(tmp_path):
    wrong = _write(tmp_path / "wrong.png", np.zeros((7, 5, 3), np.uint8))
    with pytest.raises(CorruptDataError, match=r"wrong\.png is not 6x5x3"):
        list(face.pair_image_batches([wrong], (6, 5, 3), "none", 2))
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not an image")
    with pytest.raises(CorruptDataError, match=r"broken\.jpg"):
        list(face.pair_image_batches([str(broken)], (6, 5, 3), "none", 2))


def _header_cases(tmp_path):
    """(file, the shape it was written with): the modes an aligned face folder may hold."""
    rng = np.random.default_rng(5)
    rgb = rng.integers(0, 256, (9, 7, 3)).astype(np.uint8)
    grey = rgb[..., 0]
    palette = Image.fromarray(rgb).convert("P")
    palette.save(tmp_path / "palette.png")
    palette.save(tmp_path / "palette_transparent.png", transparency=0)
    return {
        _write(tmp_path / "rgb.png", rgb): (9, 7, 3),
        _write(tmp_path / "rgba.png", np.dstack([rgb, grey])): (9, 7, 4),
        _write(tmp_path / "grey.png", grey): (9, 7, 1),
        _write(tmp_path / "grey_alpha.png", np.dstack([grey, grey]).astype(np.uint8)): (9, 7, 2),
        str(tmp_path / "palette.png"): (9, 7, 3),
        str(tmp_path / "palette_transparent.png"): (9, 7, 4),
        _write(tmp_path / "rgb.jpg", rgb, quality=95): (9, 7, 3),
        _write(tmp_path / "grey.jpg", grey, quality=95): (9, 7, 1),
        _write(tmp_path / "rgb.bmp", rgb): (9, 7, 3),
    }


def test_image_shape_reads_the_header(tmp_path):
    for path, shape in _header_cases(tmp_path).items():
        assert faces.image_shape(path) == shape, path
    with pytest.raises(DataNotFoundError, match="missing.jpg"):
        faces.image_shape(str(tmp_path / "missing.jpg"))
    (tmp_path / "garbage.png").write_bytes(b"\x89PNG but not really")
    with pytest.raises(CorruptDataError, match=r"garbage\.png.* is not a readable image"):
        faces.image_shape(str(tmp_path / "garbage.png"))


@pytest.mark.tensorflow_only
def test_image_shape_is_tensorflows(tmp_path):
    import tensorflow as tf  # noqa: PLC0415

    for path in _header_cases(tmp_path):
        decoded = tf.io.decode_image(tf.io.read_file(path), expand_animations=False)
        assert faces.image_shape(path) == tuple(decoded.shape), path


def _lfw_like_jpeg(tmp_path, name, seed):
    """A 4:2:0 JPEG as TensorFlow's encoder writes it (and LFW's crops are): noise around a random face."""
    import tensorflow as tf  # noqa: PLC0415

    rng = np.random.default_rng(seed)
    image = np.clip(rng.integers(0, 256, (24, 20, 3)) + rng.normal(0, 25, (24, 20, 3)), 0, 255).astype(np.uint8)
    path = str(tmp_path / name)
    tf.io.write_file(path, tf.io.encode_jpeg(image, quality=95))
    return path, image


@pytest.mark.tensorflow_only
def test_pair_images_are_decoded_as_tensorflow_decodes_them(tmp_path):
    """On TensorFlow, the pair images are TensorFlow's pixels (its fast-DCT JPEGs); Pillow's (the Grain pipeline's,
    JAX and PyTorch) equal them for PNG and equal TensorFlow's accurate-DCT JPEG decode."""
    import tensorflow as tf  # noqa: PLC0415

    jpeg, _ = _lfw_like_jpeg(tmp_path, "face.jpg", 6)
    png = _write(tmp_path / "face.png", np.random.default_rng(7).integers(0, 256, (24, 20, 3)).astype(np.uint8))
    for path in (jpeg, png):
        tensorflow_pixels = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False).numpy()
        np.testing.assert_array_equal(face.decode_pair_image(path, (24, 20, 3)), tensorflow_pixels)
        assert faces.image_shape(path) == tensorflow_pixels.shape
    pillow_png = faces.decode_image_numpy(png, (24, 20, 3))
    np.testing.assert_array_equal(pillow_png, tf.io.decode_png(tf.io.read_file(png)).numpy())
    pillow_jpeg = faces.decode_image_numpy(jpeg, (24, 20, 3)).astype(int)
    accurate = tf.io.decode_jpeg(tf.io.read_file(jpeg), dct_method="INTEGER_ACCURATE").numpy().astype(int)
    fast = tf.io.decode_jpeg(tf.io.read_file(jpeg)).numpy().astype(int)
    np.testing.assert_array_equal(pillow_jpeg, accurate)
    # The documented difference (evaluation/face.py): the two DCTs differ by a few grey levels at most pixels.
    difference = np.abs(pillow_jpeg - fast)
    assert 0 < difference.mean() < 3 and difference.max() <= 16


@pytest.mark.tensorflow_only
def test_on_tensorflow_the_embeddings_are_the_tf_data_pipelines(tmp_path):
    """The tf.data + tf.function verification before every backend ran it, rebuilt with TensorFlow ops: the pair
    images' flip-concatenated features are the same bits."""
    import tensorflow as tf  # noqa: PLC0415

    from sphere_tf import models  # noqa: PLC0415

    paths = [_lfw_like_jpeg(tmp_path, f"{k}.jpg", k)[0] for k in range(5)]
    paths.append(_write(tmp_path / "5.png", np.random.default_rng(8).integers(0, 256, (24, 20, 3)).astype(np.uint8)))
    keras.utils.set_random_seed(0)
    model = models.create_model("sphereface4", input_shape=(24, 20, 3), num_classes=4, width_multiplier=0.25)
    embedder = verification.embedding_model(model)
    got = verification.extract_embeddings(verification.flip_embedding_fn(embedder),
                                          face.pair_image_batches(paths, (24, 20, 3), "centered_128", 4))

    def decode(path):
        image = tf.io.decode_image(tf.io.read_file(path), channels=3, expand_animations=False)
        return (tf.cast(tf.ensure_shape(image, (24, 20, 3)), tf.float32) - 127.5) / 128.0

    @tf.function(input_signature=[tf.TensorSpec((None, 24, 20, 3), tf.float32)])
    def embed(images):
        both = tf.concat([images, tf.reverse(images, axis=[2])], axis=0)
        plain, flipped = tf.split(tf.cast(embedder(both, training=False), tf.float32), 2, axis=0)
        return tf.concat([plain, flipped], axis=-1)

    dataset = tf.data.Dataset.from_tensor_slices(paths).map(decode).batch(4)
    expected = np.concatenate([embed(batch).numpy() for batch in dataset])
    np.testing.assert_array_equal(got, expected)
