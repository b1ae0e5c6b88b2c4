r"""Verification of a trained run on an LFW-format pair list: 10-fold accuracy, TAR@FAR, ROC plot.

  sphere-tf eval-verification --workdir runs/sf20 --pairs lfw/pairs.txt --images lfw-112x96

Loads `WORKDIR/checkpoints/model.keras`, embeds every image of the pairs with
its horizontal flip (features concatenated), scores pairs by cosine, and adds
`lfw_accuracy`, `lfw_std` (percent, 10 folds, threshold chosen on the other 9),
`tar_at_far` and the angular Fisher score to `WORKDIR/results.json`; the ROC
goes to `WORKDIR/roc.png` where matplotlib is installed. Images are `NAME/NAME_%04d.jpg` under `--images`
(the run's `verification.image_pattern` when `train_face` recorded one; `--image_pattern`
overrides both) and must have the training crops' size.

YouTube Faces: `--protocol=ytf --pairs YouTubeFaces/splits.txt --images
YouTubeFaces/aligned_images_DB` embeds `--frames_per_video` evenly spaced frames
of each video (0: all), averages their unit-norm features per video and writes
`ytf_accuracy`, `ytf_std`.
"""

from sphere_tf_cli import _quiet_logs

if __name__ == "__main__":
    _quiet_logs.quiet_tensorflow_logs()

from absl import app  # noqa: E402
from absl import flags  # noqa: E402

from sphere_tf.data import faces  # noqa: E402
from sphere_tf.runners import face  # noqa: E402

_WORKDIR = flags.DEFINE_string("workdir", None, "A finished training run (holds checkpoints/model.keras).")
_PAIRS = flags.DEFINE_string("pairs", None, "Pair list in the LFW pairs.txt format.")
_IMAGES = flags.DEFINE_string("images", None, "Folder of the pair list's images.")
_PATTERN = flags.DEFINE_string(
    "image_pattern", None, "Relative path of image (name, index) under --images, e.g. "
    f"{faces.LFW_IMAGE_PATTERN!r}; default: the run's verification.image_pattern (train_face records it in "
    "WORKDIR/verification.json), else that LFW pattern.")
_BATCH = flags.DEFINE_integer("batch_size", 64, "Images per embedding batch.")
_FARS = flags.DEFINE_list("far", ["1e-3", "1e-4"], "False accept rates of TAR@FAR.")
_PROTOCOL = flags.DEFINE_enum("protocol", "lfw", ["lfw", "ytf"],
                              "lfw: image pairs (pairs.txt); ytf: YouTube Faces video pairs (splits.txt).")
_FRAMES = flags.DEFINE_integer("frames_per_video", 100, "YTF: frames embedded per video, evenly spaced (0: all).",
                               lower_bound=0)
flags.mark_flags_as_required(["workdir", "pairs", "images"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
    results = face.evaluate_workdir(
        _WORKDIR.value, _PAIRS.value, _IMAGES.value, image_pattern=_PATTERN.value, batch_size=_BATCH.value,
        far_targets=tuple(float(f) for f in _FARS.value), protocol=_PROTOCOL.value,
        frames_per_video=_FRAMES.value or None,
    )
    key = _PROTOCOL.value
    if results[f"{key}_accuracy"] is not None:
        count = f"{results['num_videos']} videos" if key == "ytf" else f"{results['num_images']} images"
        print(f"Verification accuracy: {results[f'{key}_accuracy']:.2f}% +- {results[f'{key}_std']:.2f} "
              f"({results['num_pairs']} pairs, {count})")
    else:  # a one-fold list (View 1): no held-out threshold, only the ROC
        print(f"One fold ({results['num_pairs']} pairs): no 10-fold accuracy; see the ROC.")
    print(face.tar_at_far_table(results["tar_at_far"]))
    print(f"ROC plot: {results['roc_png']}" if results["roc_png"] else "ROC plot: none (matplotlib is not installed)")


if __name__ == "__main__":
    app.run(main)
