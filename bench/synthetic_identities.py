"""Synthetic identities: features around random unit class centres, labels uniform over the classes.

A stand-in for a face-recognition training set when only the classification head matters (the Partial FC
benchmark, tests): class c has the unit centre `u_c` (a normalised standard normal vector of dimension d) and
its samples are `u_c + noise·ε`, `ε ~ N(0, I_d / d)`, so the noise part has norm ≈ `noise` against the unit
centre. Pure NumPy, no TensorFlow (the benchmark runs on JAX without it).

Deterministic by `seed`. A centre depends only on `(seed, c)`, not on which other classes are asked for, so
`class_centres` never materialises the `(C, d)` table (2 GB at C = 10^6, d = 512): a batch computes the centres
of its own labels. The head benchmark needs the features alone; the face runner reads images, so
`write_identity_folder` writes tiny PNG faces from the same centres (the centre of dimension h·w·c as the
identity's image, plus per-image noise) as an identity-per-folder tree (`sphere_tf.data.faces`):

    python -m bench.synthetic_identities DIR [--classes 300] [--images 4] [--height 12] [--width 10]
"""

import argparse
import os

import numpy as np


def class_centres(class_ids, feature_dim, seed=0, dtype="float32"):
    """Unit centres of `class_ids`, `(len(class_ids), feature_dim)`: each a function of `(seed, class id)` only.

    Args:
        class_ids: 1-D integer array-like of class ids >= 0.
        feature_dim: int > 0, d.
        seed: int >= 0.
        dtype: NumPy dtype of the result.
    """
    class_ids = np.asarray(class_ids, dtype=np.int64).reshape(-1)
    if feature_dim <= 0:
        raise ValueError(f"feature_dim must be a positive int. Received: feature_dim={feature_dim}")
    if class_ids.size and class_ids.min() < 0:
        raise ValueError(f"class ids must be >= 0. Received: min={class_ids.min()}")
    unique, inverse = np.unique(class_ids, return_inverse=True)
    centres = np.empty((len(unique), feature_dim), np.float64)
    for row, class_id in enumerate(unique):
        centres[row] = np.random.default_rng([seed, 1, int(class_id)]).standard_normal(feature_dim)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    return centres[inverse].astype(dtype)


def synthetic_identities(num_samples, num_classes, feature_dim, noise=0.1, seed=0, dtype="float32"):
    """`num_samples` features around the unit centres of labels drawn uniformly from `[0, num_classes)`.

    Args:
        num_samples: int >= 0, N.
        num_classes: int > 0, C.
        feature_dim: int > 0, d.
        noise: float >= 0, the expected norm of a sample's offset from its centre (the centres have norm 1).
        seed: int >= 0; the same arguments give the same arrays.
        dtype: NumPy dtype of the features.

    Returns:
        `(features, labels)`: `features` of shape `(N, d)` and `dtype`, `labels` int32 `(N,)`.
    """
    if num_classes <= 0:
        raise ValueError(f"num_classes must be a positive int. Received: num_classes={num_classes}")
    if noise < 0:
        raise ValueError(f"noise must be >= 0. Received: noise={noise}")
    rng = np.random.default_rng([seed, 0])
    labels = rng.integers(0, num_classes, size=num_samples).astype(np.int32)
    offsets = rng.standard_normal((num_samples, feature_dim)) * (noise / np.sqrt(feature_dim))
    features = class_centres(labels, feature_dim, seed=seed, dtype=np.float64) + offsets
    return features.astype(dtype), labels


def identity_images(class_id, count, image_shape=(12, 10, 3), noise=0.25, seed=0):
    """`count` uint8 images of identity `class_id`: its unit centre of dimension h·w·c as pixels, plus noise.

    The centre `u` (norm 1, so entries of about ±1/√(h·w·c)) maps to `127.5 + 40·√(h·w·c)·u`, so pixels spread
    ±40 around grey (clipped to 0..255); image k adds `noise·40·√(h·w·c)·ε/√(h·w·c)` per pixel, ε standard
    normal, drawn from `(seed, class_id, k)`. Deterministic by `(seed, class_id)` only.
    """
    dim = int(np.prod(image_shape))
    centre = class_centres([class_id], dim, seed=seed, dtype=np.float64)[0] * np.sqrt(dim)
    images = np.empty((count,) + tuple(image_shape), np.uint8)
    for k in range(count):
        offset = np.random.default_rng([seed, 2, int(class_id), k]).standard_normal(dim) * noise
        images[k] = np.clip(np.rint(127.5 + 40.0 * (centre + offset)), 0, 255).reshape(image_shape)
    return images


def write_identity_folder(root, num_classes=300, images_per_class=4, image_shape=(12, 10, 3), noise=0.25, seed=0):
    """Writes `root/id<c:06d>/<k:04d>.png`, `images_per_class` tiny faces of each of `num_classes` identities.

    The folder names sort in class order, so `sphere_tf.data.faces.index_identity_folder` gives identity c
    the label c. Writing needs TensorFlow (its PNG encoder).

    Args:
        root: str, the folder (created).
        num_classes: int > 0.
        images_per_class: int > 0.
        image_shape: (height, width, channels), channels 1 or 3.
        noise: float >= 0, see `identity_images`.
        seed: int >= 0.

    Returns:
        `(num_classes, images_per_class)`, what was written.
    """
    import tensorflow as tf  # noqa: PLC0415 (the rest of the module is NumPy only)

    if num_classes <= 0 or images_per_class <= 0:
        raise ValueError("num_classes and images_per_class must be positive ints. Received: "
                         f"num_classes={num_classes}, images_per_class={images_per_class}")
    for class_id in range(num_classes):
        folder = os.path.join(root, f"id{class_id:06d}")
        os.makedirs(folder, exist_ok=True)
        for k, image in enumerate(identity_images(class_id, images_per_class, image_shape, noise, seed)):
            tf.io.write_file(os.path.join(folder, f"{k:04d}.png"), tf.io.encode_png(image))
    return num_classes, images_per_class


def _main(argv=None):
    parser = argparse.ArgumentParser(description="Writes a synthetic identity folder of tiny PNG faces.")
    parser.add_argument("root")
    parser.add_argument("--classes", type=int, default=300)
    parser.add_argument("--images", type=int, default=4)
    parser.add_argument("--height", type=int, default=12)
    parser.add_argument("--width", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    write_identity_folder(args.root, args.classes, args.images, (args.height, args.width, 3), seed=args.seed)
    print(f"{args.classes} identities x {args.images} images in {args.root}")


if __name__ == "__main__":
    _main()
