"""Synthetic identities: features around random unit class centres, labels uniform over the classes.

A stand-in for a face-recognition training set when only the classification head matters (the Partial FC
benchmark, tests): class c has the unit centre `u_c` (a normalised standard normal vector of dimension d) and
its samples are `u_c + noise·ε`, `ε ~ N(0, I_d / d)`, so the noise part has norm ≈ `noise` against the unit
centre. Pure NumPy, no TensorFlow (the benchmark runs on JAX without it).

Deterministic by `seed`. A centre depends only on `(seed, c)`, not on which other classes are asked for, so
`class_centres` never materialises the `(C, d)` table (2 GB at C = 10^6, d = 512): a batch computes the centres
of its own labels. A runner over a face folder could later write tiny images from these features; the head
benchmark needs the features alone.
"""

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
