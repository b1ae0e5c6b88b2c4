"""The NumPy augmentations against explicit-loop references, their distributions, and TensorFlow's own functions.

The TensorFlow comparisons are marked `tensorflow_only`: they run in the TensorFlow suite and are deselected in the
JAX and PyTorch suites (tests/conftest.py), which run everything else here without TensorFlow installed.
"""

import ast
import io
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sphere_tf.data import numpy_preprocessing as npp

NAMES = ["none", "flip", "cifar_plus", "cifar_plus_symmetric", "spherenet_cifar_plus", "imagenet_train",
         "imagenet_eval", "imagenet_train_square", "imagenet_eval_square"]
RANDOM = {"flip", "cifar_plus", "cifar_plus_symmetric", "spherenet_cifar_plus", "imagenet_train",
          "imagenet_train_square"}
PAD_CROP = {"cifar_plus": "CONSTANT", "cifar_plus_symmetric": "SYMMETRIC", "spherenet_cifar_plus": "SYMMETRIC"}


# -- explicit-loop references --------------------------------------------------------------------------------------


def _source_index(i, size, pad, mode):
    """Index into the image of padded position `i` (None: a zero of CONSTANT padding)."""
    i -= pad
    if 0 <= i < size:
        return i
    if mode == "CONSTANT":
        return None
    return -i - 1 if i < 0 else 2 * size - i - 1  # SYMMETRIC: the edge pixel repeats


def loop_pad_crop(image, pad, mode, row, col):
    """The `H x W` window at `(row, col)` of `image` padded by `pad` (zeros or mirror), pixel by pixel."""
    height, width, channels = image.shape
    out = np.zeros_like(image)
    for i in range(height):
        for j in range(width):
            si, sj = _source_index(row + i, height, pad, mode), _source_index(col + j, width, pad, mode)
            if si is not None and sj is not None:
                for c in range(channels):
                    out[i, j, c] = image[si, sj, c]
    return out


def loop_crop(image, row, col, height, width):
    out = np.zeros((height, width, image.shape[2]), image.dtype)
    for i in range(height):
        for j in range(width):
            out[i, j] = image[row + i, col + j]
    return out


def loop_flip(image, vertical):
    out = np.zeros_like(image)
    height, width = image.shape[:2]
    for i in range(height):
        for j in range(width):
            out[i, j] = image[height - 1 - i, j] if vertical else image[i, width - 1 - j]
    return out


def loop_resize(image, height, width):
    """Bilinear resize with half-pixel centres and edge clamping, in float64, pixel by pixel."""
    in_h, in_w, _ = image.shape
    out = np.zeros((height, width, image.shape[2]), np.float64)
    for i in range(height):
        y = (i + 0.5) * in_h / height - 0.5
        y0 = int(np.floor(y))
        for j in range(width):
            x = (j + 0.5) * in_w / width - 0.5
            x0 = int(np.floor(x))
            for dy, wy in ((0, 1 - (y - y0)), (1, y - y0)):
                for dx, wx in ((0, 1 - (x - x0)), (1, x - x0)):
                    yy, xx = min(max(y0 + dy, 0), in_h - 1), min(max(x0 + dx, 0), in_w - 1)
                    out[i, j] += wy * wx * image[yy, xx]
    return out


def unique_image(height, width, channels=1):
    """Pixels 1, 2, ... (distinct and non-zero, so a window and its flips tell their position)."""
    return np.arange(1, height * width * channels + 1, dtype=np.float32).reshape(height, width, channels)


def random_image(seed, shape):
    return np.random.default_rng(seed).integers(0, 256, shape).astype(np.float32)


def expected_pad_crop_flips(image, seed, mode, vertical):
    """What the recipe gives for a Generator seeded with `seed`: draws in the documented order (crop row, crop
    column, horizontal flip, vertical flip), then the loop references."""
    draws = np.random.default_rng(seed)
    row, col = int(draws.integers(0, 9)), int(draws.integers(0, 9))
    hflip = draws.random() < 0.5
    vflip = vertical and draws.random() < 0.5
    out = loop_pad_crop(image, 4, mode, row, col)
    out = loop_flip(out, False) if hflip else out
    return (loop_flip(out, True) if vflip else out), (row, col, hflip, vflip)


# -- recipes against the references --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PAD_CROP))
def test_pad_crop_flip_matches_the_loop_reference(name):
    image = random_image(0, (10, 9, 3))
    fn = npp.get_numpy_augmentation(name)
    seen = set()
    for seed in range(60):
        expected, draws = expected_pad_crop_flips(image, seed, PAD_CROP[name], name == "spherenet_cifar_plus")
        out = fn(image, np.random.default_rng(seed))
        assert out.dtype == np.float32 and out.shape == image.shape
        np.testing.assert_array_equal(out, expected)
        seen.add(draws)
    assert len(seen) > 40  # the draws really vary


def test_flip_and_none_match_the_loop_reference():
    image = random_image(1, (3, 5, 2))
    for seed in range(20):
        hflip = np.random.default_rng(seed).random() < 0.5
        out = npp.get_numpy_augmentation("flip")(image, np.random.default_rng(seed))
        np.testing.assert_array_equal(out, loop_flip(image, False) if hflip else image)
        np.testing.assert_array_equal(npp.get_numpy_augmentation("none")(image, np.random.default_rng(seed)), image)


def test_random_flip_vertical_matches_the_loop_reference():
    image = random_image(2, (4, 3, 1))
    for seed in range(20):
        flipped = np.random.default_rng(seed).random() < 0.5
        out = npp.random_flip(image, np.random.default_rng(seed), vertical=True)
        np.testing.assert_array_equal(out, loop_flip(image, True) if flipped else image)


@pytest.mark.parametrize("name, square", [("imagenet_train", False), ("imagenet_train_square", True)])
def test_imagenet_train_is_a_window_of_the_resized_image(name, square):
    # Shorter side 256 already (square: 256x256), so the resize is the identity and the crop a plain window.
    image = random_image(3, (256, 256 if square else 261, 3))
    for seed in range(8):
        draws = np.random.default_rng(seed)
        row, col = int(draws.integers(0, 33)), int(draws.integers(0, image.shape[1] - 224 + 1))
        expected = loop_crop(image, row, col, 224, 224)
        expected = loop_flip(expected, False) if draws.random() < 0.5 else expected
        np.testing.assert_array_equal(npp.get_numpy_augmentation(name)(image, np.random.default_rng(seed)), expected)


def test_imagenet_eval_is_the_centre_window():
    image = random_image(4, (256, 301, 3))
    out = npp.get_numpy_augmentation("imagenet_eval")(image, np.random.default_rng(0))
    np.testing.assert_array_equal(out, loop_crop(image, 16, (301 - 224) // 2, 224, 224))


def test_every_augmentation_is_float32_and_fixed_size_ones_are_224():
    image = random_image(5, (40, 50, 3)).astype(np.uint8)  # uint8 in (decoded JPEGs): float32 out
    for name in NAMES:
        out = npp.get_numpy_augmentation(name)(image, np.random.default_rng(0))
        assert out.dtype == np.float32, name
        assert out.shape == ((224, 224, 3) if name in npp.FIXED_SIZE_AUGMENTATIONS else (40, 50, 3)), name


# -- distributions ----------------------------------------------------------------------------------------------


def test_cifar_plus_offsets_are_uniform_and_flips_half():
    """Each output is matched against all 81 x 2 reference windows (no knowledge of the draw order)."""
    image = unique_image(8, 8)
    windows = {}
    for row in range(9):
        for col in range(9):
            window = loop_pad_crop(image, 4, "CONSTANT", row, col)
            windows[window.tobytes()] = (row, col, False)
            windows[loop_flip(window, False).tobytes()] = (row, col, True)
    assert len(windows) == 162  # every (offset, flip) gives a different window
    fn = npp.get_numpy_augmentation("cifar_plus")
    counts, flips, draws = np.zeros((9, 9), int), 0, 4050
    for seed in range(draws):
        row, col, flipped = windows[fn(image, np.random.default_rng(seed)).tobytes()]
        counts[row, col] += 1
        flips += flipped
    assert counts.min() > 0  # every offset occurs
    chi2 = ((counts - draws / 81) ** 2 / (draws / 81)).sum()
    assert chi2 < 130  # 80 degrees of freedom: p < 1e-3 beyond 130 (fixed seeds: no flake)
    assert abs(flips / draws - 0.5) < 0.03  # sd 0.008


def test_spherenet_flips_are_independent_halves():
    image = random_image(6, (6, 6, 1))
    fn = npp.get_numpy_augmentation("spherenet_cifar_plus")
    combos = {}
    for seed in range(2000):
        expected, (_, _, hflip, vflip) = expected_pad_crop_flips(image, seed, "SYMMETRIC", True)
        np.testing.assert_array_equal(fn(image, np.random.default_rng(seed)), expected)
        combos[hflip, vflip] = combos.get((hflip, vflip), 0) + 1
    assert len(combos) == 4
    assert all(abs(n / 2000 - 0.25) < 0.04 for n in combos.values())  # sd 0.01


def test_random_crop_reaches_every_offset():
    # The 224 crop of the ImageNet recipes from a 226 x 227 image: 3 x 4 positions, told by the top-left pixel.
    image = unique_image(226, 227)
    seen = set()
    for seed in range(200):
        out = npp.random_crop(image, np.random.default_rng(seed), 224, 224)
        seen.add((int(out[0, 0, 0] - 1) // 227, int(out[0, 0, 0] - 1) % 227))
    assert seen == {(r, c) for r in range(3) for c in range(4)}


# -- determinism ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_same_seed_same_output(name):
    image = random_image(7, (30, 37, 3))
    fn = npp.get_numpy_augmentation(name)
    outs = [fn(image, np.random.default_rng(seed)) for seed in range(6)]
    for seed, out in enumerate(outs):
        np.testing.assert_array_equal(fn(image, np.random.default_rng(seed)), out)
    distinct = len({out.tobytes() for out in outs})
    assert distinct > 1 if name in RANDOM else distinct == 1


def test_under_grain_random_map():
    import grain  # noqa: PLC0415 (only this test needs it)

    images = [random_image(i, (12, 12, 3)) for i in range(4)]
    dataset = grain.MapDataset.source(images).random_map(npp.get_numpy_augmentation("cifar_plus"), seed=11)
    first = [dataset[i] for i in range(4)]
    again = [dataset[i] for i in range(4)]
    for a, b in zip(first, again):
        np.testing.assert_array_equal(a, b)
    assert len({a.tobytes() for a in first}) == 4


# -- resizing and cropping -------------------------------------------------------------------------------------


@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 3), st.integers(1, 12), st.integers(1, 12))
def test_resize_bilinear_matches_the_float64_loop(height, width, channels, out_h, out_w):
    image = random_image(height * 100 + width, (height, width, channels))
    out = npp.resize_bilinear(image, out_h, out_w)
    assert out.dtype == np.float32 and out.shape == (out_h, out_w, channels)
    np.testing.assert_allclose(out, loop_resize(image, out_h, out_w), rtol=0, atol=1e-3)


def test_resize_bilinear_identity_and_constant():
    image = random_image(8, (7, 5, 2))
    np.testing.assert_array_equal(npp.resize_bilinear(image, 7, 5), image)
    constant = np.full((3, 4, 1), 17.25, np.float32)
    np.testing.assert_array_equal(npp.resize_bilinear(constant, 11, 2), np.full((11, 2, 1), 17.25, np.float32))


@pytest.mark.parametrize("shape, expected", [
    ((375, 500), (256, 341)), ((500, 375), (341, 256)), ((256, 256), (256, 256)), ((1, 1), (256, 256)),
    ((1, 3), (256, 768)),
    ((512, 513), (256, 256)), ((512, 515), (256, 258)),  # 256.5 and 257.5: half to even, as tf.round
    ((100, 1000), (256, 2560)), ((999, 1001), (256, 257)),
])
def test_shorter_side_size(shape, expected):
    assert npp.shorter_side_size(*shape, 256) == expected
    assert npp.resize_shorter_side(np.zeros(shape + (1,), np.float32), 256).shape == expected + (1,)


def test_central_crop_matches_the_loop_reference():
    image = random_image(9, (9, 12, 2))
    for h, w in [(9, 12), (1, 1), (4, 7), (8, 3)]:
        expected = loop_crop(image, (9 - h) // 2, (12 - w) // 2, h, w)
        np.testing.assert_array_equal(npp.central_crop(image, h, w), expected)


# -- degenerate shapes ---------------------------------------------------------------------------------------------

shapes = st.tuples(st.integers(1, 12), st.integers(1, 12), st.integers(1, 4))


@given(shapes, st.sampled_from(NAMES), st.integers(0, 2**32 - 1))
def test_any_shape_gives_the_recipe_or_a_clear_error(shape, name, seed):
    image = random_image(seed % 1000, shape)
    fn = npp.get_numpy_augmentation(name)
    if PAD_CROP.get(name) == "SYMMETRIC" and min(shape[:2]) < 4:  # tf.pad 'SYMMETRIC' refuses it too
        with pytest.raises(ValueError, match=r"SYMMETRIC padding of 4 .*" + re_shape(shape)):
            fn(image, np.random.default_rng(seed))
        return
    out = fn(image, np.random.default_rng(seed))
    assert out.dtype == np.float32
    if name in npp.FIXED_SIZE_AUGMENTATIONS:
        assert out.shape == (224, 224, shape[2])
        assert np.all(out >= image.min()) and np.all(out <= image.max())  # bilinear: convex combinations
    else:
        assert out.shape == shape
        if name in PAD_CROP:
            expected, _ = expected_pad_crop_flips(image, seed, PAD_CROP[name], name == "spherenet_cifar_plus")
            np.testing.assert_array_equal(out, expected)


def re_shape(shape):
    return "\\" + str(tuple(shape)).replace(")", "\\)")


@given(shapes, st.integers(1, 14), st.integers(1, 14))
def test_crops_larger_than_the_image_raise_naming_both(shape, crop_h, crop_w):
    image = np.zeros(shape, np.float32)
    for crop in (lambda: npp.central_crop(image, crop_h, crop_w),
                 lambda: npp.random_crop(image, np.random.default_rng(0), crop_h, crop_w)):
        if crop_h <= shape[0] and crop_w <= shape[1]:
            assert crop().shape == (crop_h, crop_w, shape[2])
        else:
            with pytest.raises(ValueError, match=rf"{crop_h}x{crop_w} .*{re_shape(shape)}"):
                crop()


def test_one_by_one_images():
    pixel = np.full((1, 1, 1), 9.0, np.float32)
    rng = np.random.default_rng(0)
    for name in ("imagenet_train", "imagenet_eval", "imagenet_train_square", "imagenet_eval_square"):
        np.testing.assert_array_equal(npp.get_numpy_augmentation(name)(pixel, rng), np.full((224, 224, 1), 9.0))
    out = npp.get_numpy_augmentation("cifar_plus")(pixel, rng)  # zero padding: the pixel or a zero
    assert out.shape == (1, 1, 1) and out[0, 0, 0] in (0.0, 9.0)


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match=r"\(height, width, channels\).*\(4, 4\)"):
        npp.get_numpy_augmentation("flip")(np.zeros((4, 4)), np.random.default_rng(0))
    with pytest.raises(ValueError, match="padding mode 'REFLECT'"):
        npp.pad(np.zeros((4, 4, 1)), 1, "REFLECT")
    with pytest.raises(ValueError, match=r"\(0, 3, 1\)"):
        npp.resize_bilinear(np.zeros((0, 3, 1)), 2, 2)
    with pytest.raises(ValueError, match="to 0x2"):
        npp.resize_bilinear(np.zeros((2, 3, 1)), 0, 2)


# -- registry ---------------------------------------------------------------------------------------------------


def test_registry(monkeypatch):
    assert sorted(npp.NUMPY_AUGMENTATIONS) == sorted(NAMES)
    assert npp.FIXED_SIZE_AUGMENTATIONS <= set(NAMES)
    monkeypatch.setattr(npp, "NUMPY_AUGMENTATIONS", dict(npp.NUMPY_AUGMENTATIONS))

    def halve(image, rng):
        del rng
        return image / 2

    assert npp.register_numpy_augmentation("halve", halve) is halve
    assert npp.get_numpy_augmentation("halve") is halve
    assert npp.get_numpy_augmentation(halve) is halve  # a callable passes through
    with pytest.raises(KeyError, match="'halve' is already registered"):
        npp.register_numpy_augmentation("halve", halve)
    with pytest.raises(ValueError, match=r"Unknown NumPy augmentation 'cifar_pluss'.*'cifar_plus'.*'halve'"):
        npp.get_numpy_augmentation("cifar_pluss")


def test_module_imports_no_framework():
    """Top-level imports: NumPy and the registry; inside functions: Pillow only. And importing it in a fresh
    interpreter on the JAX backend loads neither TensorFlow nor PyTorch."""
    with open(npp.__file__, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    top, inner = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            (top if node in tree.body else inner).update(n.split(".")[0] for n in names)
    assert top == {"io", "numpy", "sphere_tf"} and inner == {"PIL"}
    probe = ("import sys; import sphere_tf.data.numpy_preprocessing; "
             "print(sorted({'tensorflow', 'torch'} & {m.split('.')[0] for m in sys.modules}))")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": root}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, cwd=root,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"


# -- decoding ----------------------------------------------------------------------------------------------------


def encode(pixels, fmt, **kwargs):
    from PIL import Image  # noqa: PLC0415 (Pillow: a test dependency of decode_image)

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format=fmt, **kwargs)
    return buffer.getvalue()


def smooth_image(height=48, width=64):
    y, x = np.mgrid[0:height, 0:width]
    return np.stack([x * 255 // width, y * 255 // height, (x + y) * 255 // (height + width)], -1).astype(np.uint8)


def test_decode_png_round_trip_is_exact():
    rgb = random_image(10, (7, 11, 3)).astype(np.uint8)
    decoded = npp.decode_image(encode(rgb, "PNG"))
    assert decoded.dtype == np.uint8
    np.testing.assert_array_equal(decoded, rgb)
    grey = rgb[..., 0]
    np.testing.assert_array_equal(npp.decode_image(encode(grey, "PNG"), channels=1), grey[..., None])
    np.testing.assert_array_equal(npp.decode_image(encode(grey, "PNG"), channels=3), np.repeat(grey[..., None], 3, -1))
    rgba = random_image(11, (5, 6, 4)).astype(np.uint8)
    np.testing.assert_array_equal(npp.decode_image(encode(rgba, "PNG"), channels=4), rgba)
    np.testing.assert_array_equal(npp.decode_image(encode(rgba, "PNG"), channels=3), rgba[..., :3])


def test_decode_16_bit_png_keeps_the_high_byte():
    values = np.array([[0, 255, 256, 511, 32767, 32960, 65535]], np.uint16)
    decoded = npp.decode_image(encode(values, "PNG"), channels=1)
    np.testing.assert_array_equal(decoded[..., 0], np.array([[0, 0, 1, 1, 127, 128, 255]], np.uint8))


def test_decode_jpeg_is_close():
    image = smooth_image()
    decoded = npp.decode_image(encode(image, "JPEG", quality=95), what="smooth.jpg")
    assert decoded.shape == image.shape and decoded.dtype == np.uint8
    assert np.abs(decoded.astype(int) - image).mean() < 2.0


def test_decode_errors_name_the_file(monkeypatch):
    with pytest.raises(ValueError, match="Cannot decode /data/train/n01440764_10026.JPEG as an image"):
        npp.decode_image(b"not an image at all", what="/data/train/n01440764_10026.JPEG")
    truncated = encode(smooth_image(), "JPEG")[:300]
    with pytest.raises(ValueError, match="Cannot decode cut.jpg"):
        npp.decode_image(truncated, what="cut.jpg")
    with pytest.raises(ValueError, match="19 bytes starting b'not an i'"):
        npp.decode_image(b"not an image at all")
    with pytest.raises(ValueError, match="channels must be one of"):
        npp.decode_image(encode(smooth_image(), "PNG"), channels=2)
    with pytest.raises(TypeError, match="read the file first"):
        npp.decode_image("/data/x.png")
    monkeypatch.setitem(sys.modules, "PIL", None)  # Pillow not installed
    with pytest.raises(ImportError, match="pip install pillow"):
        npp.decode_image(b"\x89PNG")


# -- against TensorFlow (the TensorFlow suite only) ----------------------------------------------------------------


@pytest.mark.tensorflow_only
def test_tables_agree_with_preprocessing():
    from sphere_tf.data import preprocessing  # noqa: PLC0415 (TensorFlow-only test)

    assert sorted(npp.NUMPY_AUGMENTATIONS) == sorted(preprocessing.AUGMENTATIONS)
    assert npp.FIXED_SIZE_AUGMENTATIONS == preprocessing.FIXED_SIZE_AUGMENTATIONS
    assert (npp.IMAGENET_RESIZE, npp.IMAGENET_CROP, npp.CIFAR_PAD) == (
        preprocessing.IMAGENET_RESIZE, preprocessing.IMAGENET_CROP, preprocessing.CIFAR_PAD)


# Float32 ULP at 255 is 1.5e-5: a few ULPs of the [0, 255] range (observed: bit-exact on x86-64).
TF_ATOL = 1e-4


@pytest.mark.tensorflow_only
@given(st.integers(1, 40), st.integers(1, 40), st.integers(1, 4), st.integers(1, 60), st.integers(1, 60))
def test_resize_bilinear_matches_tensorflow(height, width, channels, out_h, out_w):
    import tensorflow as tf  # noqa: PLC0415 (TensorFlow-only test)

    image = random_image(height * 41 + width, (height, width, channels))
    expected = tf.image.resize(image, [out_h, out_w], method="bilinear", antialias=False).numpy()
    np.testing.assert_allclose(npp.resize_bilinear(image, out_h, out_w), expected, rtol=0, atol=TF_ATOL)


@pytest.mark.tensorflow_only
@pytest.mark.parametrize("shape", [(375, 500), (500, 375), (1, 1), (1, 3), (512, 513), (512, 515), (257, 1023),
                                   (999, 1001), (100, 30)])
def test_resize_shorter_side_and_eval_augmentations_match_tensorflow(shape):
    import tensorflow as tf  # noqa: PLC0415 (TensorFlow-only test)

    from sphere_tf.data import preprocessing  # noqa: PLC0415 (TensorFlow-only test)

    image = random_image(sum(shape), shape + (3,))
    ours, theirs = npp.resize_shorter_side(image, 256), preprocessing.resize_shorter_side(tf.constant(image), 256)
    assert ours.shape == tuple(theirs.shape)
    np.testing.assert_allclose(ours, theirs.numpy(), rtol=0, atol=TF_ATOL)
    seed = preprocessing.element_seed(0, 0, 0)
    for name in ("none", "imagenet_eval", "imagenet_eval_square"):
        expected = preprocessing.get_augmentation(name)(tf.constant(image), seed).numpy()
        out = npp.get_numpy_augmentation(name)(image, np.random.default_rng(0))
        assert out.shape == expected.shape, name
        np.testing.assert_allclose(out, expected, rtol=0, atol=TF_ATOL, err_msg=name)


@pytest.mark.tensorflow_only
@given(shapes, st.integers(1, 14), st.integers(1, 14))
def test_central_crop_matches_tensorflow_and_fails_where_it_fails(shape, crop_h, crop_w):
    import tensorflow as tf  # noqa: PLC0415 (TensorFlow-only test)

    from sphere_tf.data import preprocessing  # noqa: PLC0415 (TensorFlow-only test)

    image = random_image(7, shape)
    try:
        expected = preprocessing.central_crop(tf.constant(image), crop_h, crop_w).numpy()
    except tf.errors.InvalidArgumentError:
        with pytest.raises(ValueError):
            npp.central_crop(image, crop_h, crop_w)
        return
    np.testing.assert_array_equal(npp.central_crop(image, crop_h, crop_w), expected)


@pytest.mark.tensorflow_only
@given(shapes, st.integers(0, 5), st.sampled_from(["CONSTANT", "SYMMETRIC"]))
def test_pad_matches_tf_pad_and_fails_where_it_fails(shape, padding, mode):
    import tensorflow as tf  # noqa: PLC0415 (TensorFlow-only test)

    image = random_image(8, shape)
    try:
        expected = tf.pad(image, [[padding, padding], [padding, padding], [0, 0]], mode=mode).numpy()
    except tf.errors.InvalidArgumentError:
        with pytest.raises(ValueError, match=re_shape(shape)):
            npp.pad(image, padding, mode)
        return
    np.testing.assert_array_equal(npp.pad(image, padding, mode), expected)


@pytest.mark.tensorflow_only
def test_random_augmentations_have_tensorflows_support():
    """Over many seeds, TensorFlow's and NumPy's `cifar_plus` produce the same set of windows (all 162)."""
    import tensorflow as tf  # noqa: PLC0415 (TensorFlow-only test)

    from sphere_tf.data import preprocessing  # noqa: PLC0415 (TensorFlow-only test)

    image = unique_image(8, 8)
    tf_fn, np_fn = preprocessing.get_augmentation("cifar_plus"), npp.get_numpy_augmentation("cifar_plus")
    windows = tf.data.Dataset.range(2500).map(lambda i: tf_fn(image, preprocessing.element_seed(1, 0, i)))
    theirs = {window.tobytes() for window in next(iter(windows.batch(2500))).numpy()}
    ours = {np_fn(image, np.random.default_rng(i)).tobytes() for i in range(2500)}
    assert ours == theirs and len(ours) == 162


@pytest.mark.tensorflow_only
def test_decode_image_matches_tensorflow():
    import tensorflow as tf  # noqa: PLC0415 (TensorFlow-only test)

    rgba = random_image(12, (9, 13, 4)).astype(np.uint8)
    png = encode(rgba, "PNG")
    for channels in (3, 4):
        np.testing.assert_array_equal(npp.decode_image(png, channels=channels),
                                      tf.io.decode_png(png, channels=channels).numpy())
    # Grey from colour: ITU-R 601 luma both, rounded differently (at most one level).
    grey_diff = np.abs(npp.decode_image(png, channels=1).astype(int) - tf.io.decode_png(png, channels=1).numpy())
    assert grey_diff.max() <= 1
    noisy = np.clip(smooth_image(96, 128).astype(int) + np.random.default_rng(0).integers(-20, 20, (96, 128, 3)),
                    0, 255).astype(np.uint8)
    jpeg = encode(noisy, "JPEG", quality=90)
    ours = npp.decode_image(jpeg).astype(int)
    accurate = tf.io.decode_jpeg(jpeg, channels=3, dct_method="INTEGER_ACCURATE").numpy()
    assert np.abs(ours - accurate).mean() < 0.1 and np.abs(ours - accurate).max() <= 1
    fast = tf.io.decode_jpeg(jpeg, channels=3).numpy()  # TensorFlow's default DCT: about one level apart
    assert np.abs(ours - fast).mean() < 2.0


# -- whole batches --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["flip", *sorted(PAD_CROP)])
def test_batch_augmentation_equals_the_loop_reference_per_image(name):
    """The batch twin draws each image's generator in the per-image order; the loop references give each image."""
    images = np.stack([random_image(k, (10, 9, 3)) for k in range(40)])
    out = npp.get_batch_augmentation(name)(images, [np.random.default_rng(seed) for seed in range(40)])
    assert out.dtype == np.float32 and out.shape == images.shape
    for seed, (image, result) in enumerate(zip(images, out)):
        if name == "flip":
            hflip = np.random.default_rng(seed).random() < 0.5
            expected = loop_flip(image, False) if hflip else image
        else:
            expected, _ = expected_pad_crop_flips(image, seed, PAD_CROP[name], name == "spherenet_cifar_plus")
        np.testing.assert_array_equal(result, expected)


@given(st.integers(1, 5), st.integers(1, 6), st.integers(1, 6), st.sampled_from(["flip", *sorted(PAD_CROP)]),
       st.integers(0, 2**31 - 1))
def test_batch_augmentation_equals_the_per_image_recipe_on_any_shape(batch, height, width, name, seed):
    images = np.random.default_rng(seed).integers(0, 256, (batch, height, width, 2)).astype(np.float32)
    rngs = lambda: [np.random.default_rng([seed, k]) for k in range(batch)]  # noqa: E731
    try:
        per_image = np.stack([npp.get_numpy_augmentation(name)(image, rng) for image, rng in zip(images, rngs())])
    except ValueError as error:  # SYMMETRIC padding of 4 on a smaller image: the same error
        with pytest.raises(ValueError, match=str(error).split(";")[0]):
            npp.get_batch_augmentation(name)(images, rngs())
        return
    np.testing.assert_array_equal(npp.get_batch_augmentation(name)(images, rngs()), per_image)


def test_batch_augmentation_bad_inputs_and_the_names_without_a_twin():
    with pytest.raises(ValueError, match="one generator per image"):
        npp.get_batch_augmentation("cifar_plus")(np.zeros((2, 4, 4, 1)), [np.random.default_rng(0)])
    with pytest.raises(ValueError, match="batch of shape"):
        npp.get_batch_augmentation("cifar_plus")(np.zeros((4, 4, 1)), [np.random.default_rng(0)] * 4)
    assert npp.get_batch_augmentation("imagenet_train") is None and npp.get_batch_augmentation(len) is None
