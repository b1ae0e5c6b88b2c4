"""Face verification of a trained model: embed the images of an LFW-format pair list, score the pairs by cosine.

`verify(model, pairs, images_dir)` embeds every distinct image of the pairs (image and horizontal flip
concatenated, `verification.flip_embedding_fn`) and returns:

* `lfw_accuracy`, `lfw_std` (percent; 10-fold, threshold from the other folds),
  `fold_accuracies`, `fold_thresholds` (`ytf_*` for YouTube Faces video pairs);
* `tar_at_far` (`{"0.001": percent, "0.0001": percent}`) and, with `roc_path`, the ROC as a PNG;
* `angular_fisher_score` (thesis Eq. A.1) and `min_interclass_angle_deg` of the
  pair images' flip-concatenated features grouped by identity folder (`sphere_tf.metrics`).

The pair images are read in NumPy batches (`pair_image_batches`) on every Keras backend: each file decoded as
the backend's training pipeline decodes it (`decode_pair_image`), normalised by `sphere_tf.data.normalization`,
batched in the order of the paths. PNG, BMP and GIF pixels are the same from either decoder. A JPEG differs:
TensorFlow's `decode_image` / `decode_jpeg` use libjpeg's fast integer DCT (`dct_method='INTEGER_FAST'`, its
default), Pillow the accurate one (`INTEGER_ACCURATE`; Pillow cannot pick the fast DCT without turning off
libjpeg's fancy chroma upsampling, which changes 4:2:0 JPEGs far more), which differ by a few grey levels at most
pixels. So on the TensorFlow backend the files are decoded by TensorFlow, as its tf.data training pipeline decodes
them, and its verification figures are those of the tf.data version before this one (to float rounding); on JAX
and PyTorch by Pillow, as the Grain pipeline decodes them (`faces.decode_image_numpy`), without TensorFlow.

Training a face model from a config and evaluating a run's workdir are the face task of the runner
(`sphere_tf.runners.face`).
"""

import os

import keras
import numpy as np

from sphere_tf import metrics
from sphere_tf import validation
from sphere_tf.data import errors as data_errors
from sphere_tf.data import faces
from sphere_tf.data import normalization as normalization_lib
from sphere_tf.evaluation import verification
from sphere_tf.layers import pixel_normalization


def _pipeline_normalization(model, normalization):
    """The normalisation `verify` applies to the decoded pixels: 'none' for a model whose first layer is a
    `PixelNormalization` (it normalises them itself; `normalization` must be None or the layer's), else
    `normalization`, `DEFAULT_NORMALIZATION` when None (a model saved before the layer existed)."""
    in_model = pixel_normalization.model_normalization(model)
    if in_model is None:
        return normalization_lib.DEFAULT_NORMALIZATION if normalization is None else normalization
    if normalization is not None and normalization != in_model[0]:
        raise validation.invalid_argument(
            "normalization", f"None or {in_model[0]!r}: the model's first layer (PixelNormalization) normalises "
            f"its pixels with {in_model[0]!r}", normalization)
    return "none"


def _decode_with_tensorflow(path, shape):
    """`faces.decode_image_numpy` with TensorFlow's decoder (its fast-DCT JPEGs; the module docstring)."""
    import tensorflow as tf  # noqa: PLC0415 (the TensorFlow backend's own decoder, on that backend only)

    height, width, channels = (int(d) for d in shape)
    try:
        image = tf.io.decode_image(tf.io.read_file(path), channels=channels, expand_animations=False).numpy()
    except tf.errors.InvalidArgumentError as error:
        raise data_errors.CorruptDataError(f"image {path} is not a readable image: {error.message}") from None
    if image.shape[:2] != (height, width):
        raise data_errors.CorruptDataError(
            f"image {path} is not {height}x{width}x{channels}: height, width {image.shape[:2]}")
    return image


def decode_pair_image(path, shape):
    """The image file `path` as a uint8 `(height, width, channels)` array of `shape`, decoded as the Keras
    backend's training pipeline decodes it: TensorFlow's decoder on the TensorFlow backend, Pillow's elsewhere
    (`faces.decode_image_numpy`; the module docstring says where they differ).

    Raises:
        CorruptDataError: not a readable image, or not of `shape` (the message names the file).
    """
    if keras.backend.backend() == "tensorflow":
        return _decode_with_tensorflow(str(path), shape)
    return faces.decode_image_numpy(path, shape)


def pair_image_batches(paths, shape, normalization, batch_size):
    """The images of `paths` as float32 NumPy batches `(b, height, width, channels)`, normalised, in path order.

    One file after another in this thread: decoding a 112x96 crop takes a fraction of a millisecond, the
    embedding of it far longer, so a parallel reader (tf.data's map) would not shorten the evaluation.

    Args:
        paths: sequence of str, image files of `shape`.
        shape: (height, width, channels).
        normalization: str or callable `fn(image, channel_mean)` (`sphere_tf.data.normalization`).
        batch_size: int > 0; the last batch holds the rest.

    Yields:
        float32 arrays; the last may be smaller.

    Raises:
        CorruptDataError: an unreadable image, or one of another shape (the file named).
    """
    normalize = normalization_lib.get_normalization(normalization)
    batch_size = validation.positive_int(batch_size, "batch_size")
    paths = list(paths)
    for start in range(0, len(paths), batch_size):
        images = np.stack([decode_pair_image(p, shape) for p in paths[start:start + batch_size]])
        yield np.asarray(normalize(images.astype(np.float32), None), np.float32)


def _video_features(embed, videos, images_dir, shape, normalization, batch_size, frames_per_video):
    """One feature per video folder: the mean of its frames' unit-norm (flip-concatenated) embeddings."""
    frames, owner = [], []
    for index, video in enumerate(videos):
        listed = faces.video_frames(video, frames_per_video)
        frames += listed
        owner += [index] * len(listed)
    per_frame = verification.extract_embeddings(embed, pair_image_batches(frames, shape, normalization, batch_size))
    return verification.mean_unit_embeddings(per_frame, np.asarray(owner), len(videos))


def verify(model, pairs, images_dir, *, batch_size=64, normalization=None,
           far_targets=verification.DEFAULT_FAR_TARGETS, roc_path=None, frames_per_video=100):
    """Evaluates `model`'s embeddings on verification pairs.

    Args:
        model: a trained `keras.Model` of `sphere_tf.models` (see `verification.embedding_model`).
        pairs: `faces.Pairs` (from `faces.read_pairs`).
        images_dir: str, the folder the pair list's image paths are relative to.
        batch_size: int > 0, images per embedding batch.
        normalization: None or str, the normalisation the model was trained with. A model whose first
            layer is a `sphere_tf.layers.PixelNormalization` is fed raw pixels (None reads the layer; a
            name must be the layer's); an older model without it gets the pixels normalised by
            `normalization` (the run's `data.normalization`), `DEFAULT_NORMALIZATION` when None.
        far_targets: floats, the FARs of `tar_at_far`.
        roc_path: str or None, write the ROC there as a PNG.
        frames_per_video: int or None, for video pairs (YouTube Faces, `pairs.videos`): frames
            embedded per video, evenly spaced (None: all). A video's feature is the mean of its
            frames' unit-norm features.

    Returns:
        dict (accuracies and rates in percent): `lfw_accuracy`, `lfw_std` (`ytf_accuracy`,
        `ytf_std` for video pairs), `fold_accuracies`,
        `fold_thresholds`, `tar_at_far` (keys `str(far)`), `angular_fisher_score`,
        `min_interclass_angle_deg`, `num_pairs`, `num_images`.

    Raises:
        DataNotFoundError: a missing image (named with the pair list line).
        ValueError: a bad argument (named), or a `normalization` that disagrees with the model's layer.
    """
    batch_size = validation.positive_int(batch_size, "batch_size")
    normalization = _pipeline_normalization(model, normalization)
    embedder = verification.embedding_model(model)
    shape = tuple(int(d) for d in embedder.input.shape[1:])
    paths, left, right = faces.check_pair_images(pairs, images_dir)
    embed = verification.flip_embedding_fn(embedder)
    if pairs.videos:
        features = _video_features(embed, paths, images_dir, shape, normalization, batch_size, frames_per_video)
    else:
        features = verification.extract_embeddings(
            embed, pair_image_batches(paths, shape, normalization, batch_size))
    scores = verification.cosine_scores(features, left, right)
    folds = verification.kfold_accuracy(scores, pairs.same, pairs.fold) if pairs.num_folds > 1 else None
    rates = verification.tar_at_far(scores, pairs.same, far_targets)
    if roc_path:
        far, tar, _ = verification.roc_curve(scores, pairs.same)
        verification.plot_roc(far, tar, roc_path, label=model.name, far_targets=far_targets,
                              title=f"ROC, {os.path.basename(pairs.path)}")
    identity_names = [os.path.relpath(p, images_dir).split(os.sep)[0] for p in paths]
    names = sorted(set(identity_names))
    labels = np.asarray([names.index(n) for n in identity_names], np.int32)
    protocol = "ytf" if pairs.videos else "lfw"  # the key names of the 10-fold figures
    results = {
        f"{protocol}_accuracy": None if folds is None else 100.0 * folds["accuracy"],
        f"{protocol}_std": None if folds is None else 100.0 * folds["std"],
        "fold_accuracies": None if folds is None else [100.0 * a for a in folds["fold_accuracies"]],
        "fold_thresholds": None if folds is None else folds["thresholds"],
        "tar_at_far": {str(k): 100.0 * v for k, v in rates.items()},
        "num_pairs": len(pairs),
        "num_videos" if pairs.videos else "num_images": len(paths),
    }
    if len(names) > 1:
        results["angular_fisher_score"] = float(metrics.angular_fisher_score(features, labels, len(names)))
        results["min_interclass_angle_deg"] = float(
            np.degrees(metrics.min_interclass_angle(features, labels, len(names))))
    return results
