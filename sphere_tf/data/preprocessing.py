"""Augmentation and normalisation recipes of the papers, by name, deterministic under a seed.

Every random choice is a stateless draw (`tf.random.stateless_uniform`) keyed by
`element_seed(seed, epoch, index)`: the run's seed, the epoch and the example's
index in the data set. The same example in the same epoch is therefore
augmented the same way in every run, in any order and after a resume, and
differently in the next epoch.

Augmentations (`AUGMENTATIONS`, `fn(image, seed) -> image` on float32 HWC):

- `none`: identity. SphereNet (NIPS 2017) §4.2, Tables 1-2: "no data augmentation".
- `flip`: random horizontal flip. SphereNet §4.1: "CIFAR10 (only with random
  left-right flipping)"; thesis 2020 §3.4.1.
- `cifar_plus`: zero-pad 4, random crop back to the input size, horizontal
  flip. The CIFAR-10+ setting of L-Softmax (ICML 2016) and He et al. (2016).
- `cifar_plus_symmetric`: as `cifar_plus` with SYMMETRIC (mirror) padding, as
  the authors' TF code does (`sphere_resnet/baseline/cifar10plus_input.py` in
  wy1iu/SphereNet; OPT).
- `spherenet_cifar_plus`: `cifar_plus_symmetric` plus a random vertical flip.
  SphereNet §4.5: "random flip (both horizontal and vertical) and random crop"
  (the authors' `cifar10plus_input.py` flips horizontally only).
- `imagenet_train`: shorter side to 256, random 224 crop, horizontal flip.
  SphereNet App. B (thesis 2020, App. B.2) "minimum data augmentation"; DCNet
  (CVPR 2018) follows it.
- `imagenet_eval`: shorter side to 256, centre 224 crop: the single centre-crop
  evaluation (SphereNet Fig. 6, DCNet Table 6).

- `imagenet_train_square`, `imagenet_eval_square`: the same with the image
  resized to 256×256 first, as SphereNet's text words it ("resize to 256×256");
  the shorter-side versions keep the aspect ratio, and both agree on square
  images.

Normalisations (`NORMALIZATIONS`, `fn(image, channel_mean) -> image`) are defined in
`sphere_tf.data.normalization` (no TensorFlow there) and re-exported here.
"""

from sphere_tf import dependencies
from sphere_tf import registry
from sphere_tf.data.normalization import DEFAULT_NORMALIZATION
from sphere_tf.data.normalization import MEAN_NORMALIZATIONS
from sphere_tf.data.normalization import NORMALIZATIONS
from sphere_tf.data.normalization import get_normalization
from sphere_tf.data.normalization import register_normalization
from sphere_tf.data.normalization import uses_channel_mean

tf = dependencies.lazy_tensorflow(__name__)  # imported on first use: this module imports without TensorFlow

IMAGENET_RESIZE = 256
IMAGENET_CROP = 224
CIFAR_PAD = 4

# Sub-seed tags: one independent stream per random choice of an element.
_CROP, _HFLIP, _VFLIP = 1, 2, 3


def element_seed(seed, epoch, index):
    """The stateless seed (int64 `[2]`) of example `index` in `epoch` of a run seeded with `seed`."""
    base = tf.stack([tf.cast(seed, tf.int64), tf.cast(epoch, tf.int64)])
    return tf.random.experimental.stateless_fold_in(base, tf.cast(index, tf.int64))


def _sub_seed(seed, tag):
    return tf.random.experimental.stateless_fold_in(seed, tag)


def flip_draw(seed, tag=_HFLIP):
    """True with probability 1/2: whether the flip tagged `tag` happens for `seed`."""
    return tf.random.stateless_uniform([], seed=_sub_seed(seed, tag)) < 0.5


def crop_offsets(seed, height, width, crop_height, crop_width):
    """Top-left corner `(row, col)` of a random `crop_height x crop_width` window, uniform over positions."""
    row = tf.random.stateless_uniform(
        [], seed=_sub_seed(seed, _CROP), minval=0, maxval=height - crop_height + 1, dtype=tf.int32
    )
    col = tf.random.stateless_uniform(
        [], seed=_sub_seed(_sub_seed(seed, _CROP), _CROP), minval=0, maxval=width - crop_width + 1, dtype=tf.int32
    )
    return row, col


def random_flip(image, seed, vertical=False):
    """Mirrors `image` left-right (or top-bottom) when `flip_draw` says so."""
    tag, axis = (_VFLIP, 0) if vertical else (_HFLIP, 1)
    return tf.cond(flip_draw(seed, tag), lambda: tf.reverse(image, [axis]), lambda: image)


def random_crop(image, seed, crop_height, crop_width):
    """A `crop_height x crop_width` window of `image` at `crop_offsets`."""
    shape = tf.shape(image)
    row, col = crop_offsets(seed, shape[0], shape[1], crop_height, crop_width)
    return tf.slice(image, [row, col, 0], [crop_height, crop_width, -1])


def pad_and_crop(image, seed, padding=CIFAR_PAD, mode="CONSTANT"):
    """Pads `padding` pixels on every side (zeros or 'SYMMETRIC' mirror) and crops back to the input size."""
    shape = tf.shape(image)
    padded = tf.pad(image, [[padding, padding], [padding, padding], [0, 0]], mode=mode)
    return random_crop(padded, seed, shape[0], shape[1])


def resize_shorter_side(image, size):
    """Bilinear resize so that the shorter side is `size`, keeping the aspect ratio (rounded)."""
    shape = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = size / tf.reduce_min(shape)
    new = tf.cast(tf.round(shape * scale), tf.int32)
    new = tf.maximum(new, size)
    return tf.image.resize(image, new, method="bilinear")


def central_crop(image, crop_height, crop_width):
    """The centred `crop_height x crop_width` window (offset `(H − h) // 2`)."""
    shape = tf.shape(image)
    row, col = (shape[0] - crop_height) // 2, (shape[1] - crop_width) // 2
    return tf.slice(image, [row, col, 0], [crop_height, crop_width, -1])


def _none(image, seed):
    del seed
    return image


def _flip(image, seed):
    return random_flip(image, seed)


def _cifar_plus(image, seed):
    return random_flip(pad_and_crop(image, seed), seed)


def _cifar_plus_symmetric(image, seed):
    return random_flip(pad_and_crop(image, seed, mode="SYMMETRIC"), seed)


def _spherenet_cifar_plus(image, seed):
    return random_flip(_cifar_plus_symmetric(image, seed), seed, vertical=True)


def _imagenet_train(image, seed):
    image = resize_shorter_side(image, IMAGENET_RESIZE)
    return random_flip(random_crop(image, seed, IMAGENET_CROP, IMAGENET_CROP), seed)


def _imagenet_eval(image, seed):
    del seed
    return central_crop(resize_shorter_side(image, IMAGENET_RESIZE), IMAGENET_CROP, IMAGENET_CROP)


def _square(image):
    return tf.image.resize(image, [IMAGENET_RESIZE, IMAGENET_RESIZE], method="bilinear")


def _imagenet_train_square(image, seed):
    return random_flip(random_crop(_square(image), seed, IMAGENET_CROP, IMAGENET_CROP), seed)


def _imagenet_eval_square(image, seed):
    del seed
    return central_crop(_square(image), IMAGENET_CROP, IMAGENET_CROP)


AUGMENTATIONS = {
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
# Augmentations whose output size does not depend on the input size (any ImageNet image batches).
FIXED_SIZE_AUGMENTATIONS = frozenset(
    {"imagenet_train", "imagenet_eval", "imagenet_train_square", "imagenet_eval_square"}
)


def _resolve(table, name, kind):
    return name if callable(name) else registry.lookup(table, name, kind)


def register_augmentation(name, fn):
    """Adds `fn(image, seed) -> image` as augmentation `name` (a taken name raises `KeyError`)."""
    return registry.register(AUGMENTATIONS, name, fn, "augmentation")


def get_augmentation(name):
    """The augmentation registered as `name`; a callable passes through."""
    return _resolve(AUGMENTATIONS, name, "augmentation")


