"""The augmentations of `sphere_tf.data.preprocessing` in NumPy, for Grain pipelines on every backend.

Same recipes, same order of operations and the same distributions as the TensorFlow versions, with no
TensorFlow, JAX or PyTorch in sight: `fn(image, rng) -> image` on a float32 `(H, W, C)` array, every random
choice drawn from `rng`, a `numpy.random.Generator` (Grain's `MapDataset.random_map` hands one to each element,
seeded from the pipeline's seed and the element's index, so an example is augmented the same way in every run).
The draws of one element come in the order the operations run: crop row, crop column, horizontal flip, vertical
flip. Each crop offset is uniform over the valid positions and each flip happens with probability 1/2, as in
`preprocessing`; the streams differ (NumPy's generator, not TensorFlow's stateless draws), so the two pipelines
pick different crops of the same example, from the same distribution.

Augmentations (`NUMPY_AUGMENTATIONS`):

- `none`: identity. SphereNet (Liu et al., "Deep Hyperspherical Learning", NIPS 2017) §4.2, Tables 1-2: "no data
  augmentation".
- `flip`: random horizontal flip. SphereNet §4.1: "CIFAR10 (only with random left-right flipping)"; thesis 2020
  §3.4.1.
- `cifar_plus`: zero-pad 4, random crop back to the input size, horizontal flip. The CIFAR-10+ setting of
  L-Softmax (Liu et al., "Large-Margin Softmax Loss for Convolutional Neural Networks", ICML 2016) and He et al.
  ("Deep Residual Learning for Image Recognition", CVPR 2016, §4.2).
- `cifar_plus_symmetric`: as `cifar_plus` with mirror padding that repeats the edge pixel (`tf.pad`'s
  'SYMMETRIC', NumPy's `mode='symmetric'`), as the authors' TF code does
  (`sphere_resnet/baseline/cifar10plus_input.py` in wy1iu/SphereNet; OPT).
- `spherenet_cifar_plus`: `cifar_plus_symmetric` plus a random vertical flip. SphereNet §4.5: "random flip (both
  horizontal and vertical) and random crop" (the authors' `cifar10plus_input.py` flips horizontally only).
- `imagenet_train`: shorter side to 256, random 224 crop, horizontal flip. SphereNet App. B (thesis 2020,
  App. B.2) "minimum data augmentation"; DCNet (Liu et al., "Decoupled Networks", CVPR 2018) follows it.
- `imagenet_eval`: shorter side to 256, centre 224 crop: the single centre-crop evaluation (SphereNet Fig. 6,
  DCNet Table 6).
- `imagenet_train_square`, `imagenet_eval_square`: the same with the image resized to 256×256 first, as
  SphereNet's text words it ("resize to 256×256").

`resize_bilinear` is `tf.image.resize(..., method='bilinear', antialias=False)` (TensorFlow's `ResizeBilinear`
kernel with half-pixel centres: float32 source coordinates `(i + 0.5) * in / out - 0.5`, neighbours clamped to
the edge, the same float32 arithmetic), so the deterministic augmentations agree with TensorFlow's to float32
rounding. Where TensorFlow raises (a crop larger than the image, mirror padding wider than the image), these
raise `ValueError` naming the image's shape.

`decode_image` turns encoded JPEG/PNG bytes into uint8 `(H, W, C)` through Pillow (`pip install pillow`).
"""

import io

import numpy as np

from sphere_tf import registry
from sphere_tf.data import untrusted
from sphere_tf.data.errors import CorruptDataError

IMAGENET_RESIZE = 256
IMAGENET_CROP = 224
CIFAR_PAD = 4

_PAD_MODES = {"CONSTANT": "constant", "SYMMETRIC": "symmetric"}
_PIL_MODES = {1: "L", 3: "RGB", 4: "RGBA"}


def as_image(image):
    """`image` as a float32 `(H, W, C)` array (no copy when it already is one)."""
    image = np.asarray(image, dtype=np.float32)
    if image.ndim != 3:
        raise ValueError(f"Expected an image of shape (height, width, channels); got shape {image.shape}.")
    return image


def _check_fits(image, crop_height, crop_width):
    height, width = image.shape[:2]
    if not (0 < crop_height <= height and 0 < crop_width <= width):
        raise ValueError(f"Cannot crop {crop_height}x{crop_width} (height x width) from an image of shape "
                         f"{image.shape}.")


def flip_draw(rng):
    """True with probability 1/2 (one draw from `rng`)."""
    return bool(rng.random() < 0.5)


def crop_offsets(rng, height, width, crop_height, crop_width):
    """Top-left corner `(row, col)` of a random `crop_height x crop_width` window, uniform over positions."""
    row = int(rng.integers(0, height - crop_height + 1))
    col = int(rng.integers(0, width - crop_width + 1))
    return row, col


def random_flip(image, rng, vertical=False):
    """Mirrors `image` left-right (or top-bottom) with probability 1/2."""
    image = as_image(image)
    if not flip_draw(rng):
        return image
    return np.ascontiguousarray(image[::-1] if vertical else image[:, ::-1])


def random_crop(image, rng, crop_height, crop_width):
    """A `crop_height x crop_width` window of `image` at `crop_offsets`."""
    image = as_image(image)
    _check_fits(image, crop_height, crop_width)
    row, col = crop_offsets(rng, image.shape[0], image.shape[1], crop_height, crop_width)
    return image[row : row + crop_height, col : col + crop_width]


def pad(image, padding, mode="CONSTANT"):
    """`tf.pad` of height and width by `padding` on every side: zeros ('CONSTANT') or mirror ('SYMMETRIC')."""
    image = as_image(image)
    if mode not in _PAD_MODES:
        raise ValueError(f"Unknown padding mode {mode!r}; expected one of {sorted(_PAD_MODES)}.")
    if mode == "SYMMETRIC" and padding > min(image.shape[:2]):
        raise ValueError(f"SYMMETRIC padding of {padding} needs an image at least {padding}x{padding}; got shape "
                         f"{image.shape}.")
    return np.pad(image, ((padding, padding), (padding, padding), (0, 0)), mode=_PAD_MODES[mode])


def pad_and_crop(image, rng, padding=CIFAR_PAD, mode="CONSTANT"):
    """Pads `padding` pixels on every side (zeros or 'SYMMETRIC' mirror) and crops back to the input size."""
    image = as_image(image)
    return random_crop(pad(image, padding, mode), rng, image.shape[0], image.shape[1])


def _interpolation(in_size, out_size):
    """`ResizeBilinear`'s `(lower, upper, lerp)` per output index, half-pixel centres, float32 as TensorFlow."""
    scale = np.float32(in_size) / np.float32(out_size)
    source = (np.arange(out_size, dtype=np.float32) + np.float32(0.5)) * scale - np.float32(0.5)
    floor = np.floor(source)
    lower = np.maximum(floor, 0).astype(np.intp)
    upper = np.minimum(np.ceil(source), in_size - 1).astype(np.intp)
    return lower, upper, source - floor


def resize_bilinear(image, height, width):
    """`tf.image.resize(image, [height, width], method='bilinear', antialias=False)` in NumPy, float32."""
    image = as_image(image)
    if min(image.shape[:2]) < 1 or height < 1 or width < 1:
        raise ValueError(f"Cannot resize an image of shape {image.shape} to {height}x{width}: both need positive "
                         "height and width.")
    y_lower, y_upper, y_lerp = _interpolation(image.shape[0], height)
    x_lower, x_upper, x_lerp = _interpolation(image.shape[1], width)
    channels = image.shape[2]
    # Rows as (H, W * C): gathering and interpolating whole pixels along the flat axis (faster than a trailing
    # axis of 3), with the same per-element arithmetic.
    rows = image.reshape(image.shape[0], -1)
    columns = np.arange(channels)
    lower, upper = (x_lower[:, None] * channels + columns).ravel(), (x_upper[:, None] * channels + columns).ravel()
    x_lerp = np.repeat(x_lerp, channels)
    top, bottom = rows[y_lower], rows[y_upper]
    top = _lerp(np.take(top, lower, axis=1), np.take(top, upper, axis=1), x_lerp)
    bottom = _lerp(np.take(bottom, lower, axis=1), np.take(bottom, upper, axis=1), x_lerp)
    return _lerp(top, bottom, y_lerp[:, None]).reshape(height, width, channels)


def _lerp(a, b, t):
    """`a + (b - a) * t` in float32, TensorFlow's order of operations, in place (`b` is consumed)."""
    b -= a
    b *= t
    a += b
    return a


def shorter_side_size(height, width, size):
    """`(new_height, new_width)` with the shorter side `size`: `round(shape * size / min(shape))` in float32 as
    `preprocessing.resize_shorter_side` computes it (half to even), each at least `size`."""
    shape = np.array([height, width], dtype=np.float32)
    new = np.round(shape * (np.float32(size) / shape.min())).astype(np.int64)
    return tuple(int(n) for n in np.maximum(new, size))


def resize_shorter_side(image, size):
    """Bilinear resize so that the shorter side is `size`, keeping the aspect ratio (rounded)."""
    image = as_image(image)
    if min(image.shape[:2]) < 1:
        raise ValueError(f"Cannot resize an empty image (shape {image.shape}).")
    return resize_bilinear(image, *shorter_side_size(image.shape[0], image.shape[1], size))


def central_crop(image, crop_height, crop_width):
    """The centred `crop_height x crop_width` window (offset `(H − h) // 2`)."""
    image = as_image(image)
    _check_fits(image, crop_height, crop_width)
    row, col = (image.shape[0] - crop_height) // 2, (image.shape[1] - crop_width) // 2
    return image[row : row + crop_height, col : col + crop_width]


def _none(image, rng):
    del rng
    return as_image(image)


def _flip(image, rng):
    return random_flip(image, rng)


def _cifar_plus(image, rng):
    return random_flip(pad_and_crop(image, rng), rng)


def _cifar_plus_symmetric(image, rng):
    return random_flip(pad_and_crop(image, rng, mode="SYMMETRIC"), rng)


def _spherenet_cifar_plus(image, rng):
    return random_flip(_cifar_plus_symmetric(image, rng), rng, vertical=True)


def _imagenet_train(image, rng):
    image = resize_shorter_side(image, IMAGENET_RESIZE)
    return random_flip(random_crop(image, rng, IMAGENET_CROP, IMAGENET_CROP), rng)


def _imagenet_eval(image, rng):
    del rng
    return central_crop(resize_shorter_side(image, IMAGENET_RESIZE), IMAGENET_CROP, IMAGENET_CROP)


def _square(image):
    return resize_bilinear(image, IMAGENET_RESIZE, IMAGENET_RESIZE)


def _imagenet_train_square(image, rng):
    return random_flip(random_crop(_square(image), rng, IMAGENET_CROP, IMAGENET_CROP), rng)


def _imagenet_eval_square(image, rng):
    del rng
    return central_crop(_square(image), IMAGENET_CROP, IMAGENET_CROP)


NUMPY_AUGMENTATIONS = {
    "none": _none,
    "flip": _flip,
    "cifar_plus": _cifar_plus,
    "cifar_plus_symmetric": _cifar_plus_symmetric,
    "spherenet_cifar_plus": _spherenet_cifar_plus,
    "imagenet_train": _imagenet_train,
    "imagenet_eval": _imagenet_eval,
    "imagenet_train_square": _imagenet_train_square,
    "imagenet_eval_square": _imagenet_eval_square,
}
# Augmentations whose output size does not depend on the input size (any ImageNet image batches); the same set as
# `preprocessing.FIXED_SIZE_AUGMENTATIONS` (that module imports TensorFlow).
FIXED_SIZE_AUGMENTATIONS = frozenset(
    {"imagenet_train", "imagenet_eval", "imagenet_train_square", "imagenet_eval_square"}
)


# -- whole batches ---------------------------------------------------------------------------------------------------
# The pad / crop / flip recipes on a (B, H, W, C) batch with one generator per image: each generator is drawn from
# exactly as the per-image recipe draws it (crop row, crop column, left-right flip, then top-bottom flip), so a
# batch equals the stack of the per-image results bit for bit; the batch is padded once and each image copied once
# from a view of it, instead of a padding, a crop and a flip per image. Grain's read-ahead threads share the GIL with the training step, so on an eager backend (PyTorch)
# the per-image Python work of a CIFAR batch (about 20 ms for 128 images on a 2-core AVX2 host) showed in the
# step time (bench/bench_fit_pipeline.py).


def _batch_windows(images, rngs, padding, mode, vertical):
    images = np.asarray(images, dtype=np.float32)
    if images.ndim != 4:
        raise ValueError(f"Expected a batch of shape (batch, height, width, channels); got shape {images.shape}.")
    if len(rngs) != len(images):
        raise ValueError(f"Expected one generator per image ({len(images)}); got {len(rngs)}.")
    height, width = images.shape[1:3]
    if padding:
        if mode == "SYMMETRIC" and padding > min(height, width):
            pad(images[0], padding, mode)  # the per-image error
        padded = np.pad(images, ((0, 0), (padding, padding), (padding, padding), (0, 0)), mode=_PAD_MODES[mode])
    out = np.empty_like(images)
    for k, rng in enumerate(rngs):  # views of one padded batch: a copy per image, no per-image padding
        window = images[k]
        if padding:
            row, col = crop_offsets(rng, height + 2 * padding, width + 2 * padding, height, width)
            window = padded[k, row : row + height, col : col + width]
        if flip_draw(rng):
            window = window[:, ::-1]
        if vertical and flip_draw(rng):
            window = window[::-1]
        out[k] = window
    return out


BATCH_AUGMENTATIONS = {
    "flip": lambda images, rngs: _batch_windows(images, rngs, 0, None, False),
    "cifar_plus": lambda images, rngs: _batch_windows(images, rngs, CIFAR_PAD, "CONSTANT", False),
    "cifar_plus_symmetric": lambda images, rngs: _batch_windows(images, rngs, CIFAR_PAD, "SYMMETRIC", False),
    "spherenet_cifar_plus": lambda images, rngs: _batch_windows(images, rngs, CIFAR_PAD, "SYMMETRIC", True),
}


def get_batch_augmentation(name):
    """The whole-batch twin `fn(images, rngs) -> images` of the built-in augmentation `name`, or None (a
    registered or callable augmentation runs image by image)."""
    return BATCH_AUGMENTATIONS.get(name) if isinstance(name, str) else None


def register_numpy_augmentation(name, fn):
    """Adds `fn(image, rng) -> image` as NumPy augmentation `name` (a taken name raises `KeyError`)."""
    return registry.register(NUMPY_AUGMENTATIONS, name, fn, "NumPy augmentation")


def get_numpy_augmentation(name):
    """The NumPy augmentation registered as `name`; a callable passes through."""
    return name if callable(name) else registry.lookup(NUMPY_AUGMENTATIONS, name, "NumPy augmentation")


def _describe(data, what):
    return what if what is not None else f"{len(data)} bytes starting {bytes(data[:8])!r}"


def _eight_bit(opened, image_module):
    """16-bit grey (Pillow's 'I;16*' and 'I' modes) as 8-bit 'L' by its high byte, as `tf.io.decode_png` reads it;
    Pillow's own conversion would clip every value above 255 to white."""
    if not opened.mode.startswith("I"):
        return opened
    high = np.clip(np.asarray(opened, dtype=np.int64), 0, 65535) >> 8
    return image_module.fromarray(high.astype(np.uint8), "L")


def decode_image(data, channels=3, what=None, size=None):
    """Encoded image bytes (JPEG, PNG, anything Pillow reads) -> uint8 `(H, W, channels)`, channels 1, 3 or 4.

    Converts as `tf.io.decode_image` does: grey to RGB by repetition, an alpha channel dropped for 3, 16-bit
    grey to its high byte; the EXIF orientation is not applied (TensorFlow ignores it too). JPEGs decode with
    libjpeg's accurate integer DCT, as `tf.io.decode_jpeg(..., dct_method='INTEGER_ACCURATE')` does; TensorFlow's
    default (fast) DCT differs from it by about one grey level on average. `what` (a file name, say) names the data
    in errors. The data are untrusted: the size the header declares is checked before anything is decoded, against
    Pillow's `MAX_IMAGE_PIXELS` (`untrusted.check_image_pixels`) and against `size`, (height, width), when given.

    Raises:
        ImportError: Pillow is not installed.
        ValueError: `channels` is not 1, 3 or 4, or Pillow cannot decode the data (the message names `what`).
        CorruptDataError: (a `ValueError`) the header declares more pixels than Pillow's `MAX_IMAGE_PIXELS`, or
            another size than `size`.
    """
    if channels not in _PIL_MODES:
        raise ValueError(f"channels must be one of {sorted(_PIL_MODES)}; got {channels!r}.")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"decode_image takes the encoded bytes (read the file first); got {type(data).__name__}.")
    try:
        from PIL import Image  # noqa: PLC0415 (optional: only the Grain pipeline decodes with Pillow)
    except ImportError as error:
        raise ImportError("sphere_tf.data.numpy_preprocessing.decode_image needs Pillow: pip install pillow") from error
    described = _describe(data, what)
    try:
        with Image.open(io.BytesIO(bytes(data))) as opened:  # reads the header only
            width, height = opened.size
            untrusted.check_image_pixels(width, height, described, Image)
            if size is not None and (height, width) != tuple(size):
                raise CorruptDataError(f"{described} is not {size[0]}x{size[1]}x{channels}: height, width "
                                       f"({height}, {width}) (its header; not decoded)")
            opened.load()
            pixels = np.asarray(_eight_bit(opened, Image).convert(_PIL_MODES[channels]), dtype=np.uint8)
    except CorruptDataError:
        raise
    except Image.DecompressionBombError as error:  # above twice MAX_IMAGE_PIXELS Pillow refuses in `open`
        raise CorruptDataError(f"{described}: {str(error).rstrip('.')}; refused before decoding it.") from None
    except (OSError, SyntaxError, ValueError) as error:  # UnidentifiedImageError is an OSError; truncated: OSError
        raise ValueError(f"Cannot decode {described} as an image: {error}") from error
    return pixels.reshape(pixels.shape[0], pixels.shape[1], channels)
