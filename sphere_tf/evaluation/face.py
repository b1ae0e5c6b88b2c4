"""Face verification of a trained model: embed the images of an LFW-format pair list, score the pairs by cosine.

`verify(model, pairs, images_dir)` embeds every distinct image of the pairs (image and horizontal flip
concatenated, `verification.flip_embedding_fn`) and returns:

* `lfw_accuracy`, `lfw_std` (percent; 10-fold, threshold from the other folds),
  `fold_accuracies`, `fold_thresholds` (`ytf_*` for YouTube Faces video pairs);
* `tar_at_far` (`{"0.001": percent, "0.0001": percent}`) and, with `roc_path`, the ROC as a PNG;
* `angular_fisher_score` (thesis Eq. A.1) and `min_interclass_angle_deg` of the
  pair images' flip-concatenated features grouped by identity folder (`sphere_tf.metrics`).

Training a face model from a config and evaluating a run's workdir are the face task of the runner
(`sphere_tf.runners.face`).
"""

import os

import numpy as np

from sphere_tf import dependencies
from sphere_tf import metrics
from sphere_tf import validation
from sphere_tf.data import faces
from sphere_tf.data import preprocessing
from sphere_tf.evaluation import verification
from sphere_tf.layers import pixel_normalization

tf = dependencies.tensorflow(__name__)


def _pipeline_normalization(model, normalization):
    """The normalisation `verify` applies to the decoded pixels: 'none' for a model whose first layer is a
    `PixelNormalization` (it normalises them itself; `normalization` must be None or the layer's), else
    `normalization`, `DEFAULT_NORMALIZATION` when None (a model saved before the layer existed)."""
    in_model = pixel_normalization.model_normalization(model)
    if in_model is None:
        return preprocessing.DEFAULT_NORMALIZATION if normalization is None else normalization
    if normalization is not None and normalization != in_model[0]:
        raise validation.invalid_argument(
            "normalization", f"None or {in_model[0]!r}: the model's first layer (PixelNormalization) normalises "
            f"its pixels with {in_model[0]!r}", normalization)
    return "none"


def _pair_images_dataset(paths, shape, normalization, batch_size):
    normalize = preprocessing.get_normalization(normalization)
    paths_t = tf.constant(list(paths), tf.string)
    return (
        tf.data.Dataset.from_tensor_slices(paths_t)
        .map(lambda p: normalize(tf.cast(faces.decode_image(p, shape), tf.float32), None),
             num_parallel_calls=tf.data.AUTOTUNE)
        .batch(batch_size)
        .prefetch(tf.data.AUTOTUNE)
    )


def _video_features(embed, videos, images_dir, shape, normalization, batch_size, frames_per_video):
    """One feature per video folder: the mean of its frames' unit-norm (flip-concatenated) embeddings."""
    frames, owner = [], []
    for index, video in enumerate(videos):
        listed = faces.video_frames(video, frames_per_video)
        frames += listed
        owner += [index] * len(listed)
    per_frame = verification.extract_embeddings(embed, _pair_images_dataset(frames, shape, normalization, batch_size))
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
            embed, _pair_images_dataset(paths, shape, normalization, batch_size))
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
