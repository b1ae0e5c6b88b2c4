"""YouTube Faces: the splits.txt parser (published format, malformed files), frame thinning, per-video mean
features, and video-pair verification against a NumPy reference with explicit loops."""

import os

import keras
import numpy as np
import pytest
from PIL import Image

from sphere_tf import models
from sphere_tf.data import CorruptDataError
from sphere_tf.data import DataNotFoundError
from sphere_tf.data import faces
from sphere_tf.evaluation import face
from sphere_tf.evaluation import verification

# The first lines of the published splits.txt (Wolf et al., CVPR 2011), cut to 2 splits of 2 pairs.
PUBLISHED = """split number, pair number, first name, second name, match pair, is same
1, 1, Alan_Ball/2, Alan_Ball/4, 1, 1
1, 2, Alan_Ball/2, Jaime_Pressly/1, 0, 0
2, 1, Aaron_Eckhart/0, Aaron_Eckhart/1, 1, 1
2, 2, Aaron_Eckhart/0, Zhu_Rongji/3, 0, 0
"""


def _write(tmp_path, text):
    path = tmp_path / "splits.txt"
    path.write_text(text)
    return str(path)


def test_published_format(tmp_path):
    pairs = faces.read_ytf_splits(_write(tmp_path, PUBLISHED))
    assert pairs.videos and len(pairs) == 4 and pairs.num_folds == 2
    assert pairs.left == ("Alan_Ball/2", "Alan_Ball/2", "Aaron_Eckhart/0", "Aaron_Eckhart/0")
    assert pairs.right == ("Alan_Ball/4", "Jaime_Pressly/1", "Aaron_Eckhart/1", "Zhu_Rongji/3")
    np.testing.assert_array_equal(pairs.same, [1, 0, 1, 0])
    np.testing.assert_array_equal(pairs.fold, [0, 0, 1, 1])
    np.testing.assert_array_equal(pairs.line, [2, 3, 4, 5])


HEADER = PUBLISHED.splitlines()[0] + "\n"


@pytest.mark.parametrize("text,line,message", [
    ("split, pair, a, b\n1, 1, A/1, A/2, 1, 1\n", 1, "header"),
    (HEADER + "1, 1, A/1, A/2, 1\n", 2, "expected 6 comma-separated fields"),
    (HEADER + "1, 1, A/1, A/2, 1, yes\n", 2, "'is same' is 'yes'"),
    (HEADER + "1, 1, A, A/2, 1, 1\n", 2, "video 'A' is not 'identity/video'"),
    (HEADER + "x, 1, A/1, A/2, 1, 1\n", 2, "split number 'x'"),
    (HEADER + "2, 1, A/1, A/2, 1, 1\n", 2, "expected 1"),
    (HEADER + "1, 1, A/1, A/2, 1, 1\n3, 1, A/1, B/2, 0, 0\n", 3, "splits must come in order"),
])
def test_malformed_lines_name_file_and_line(tmp_path, text, line, message):
    path = _write(tmp_path, text)
    with pytest.raises(CorruptDataError, match=rf"splits\.txt:{line}: .*{message}"):
        faces.read_ytf_splits(path)


def test_missing_empty_and_unequal_files(tmp_path):
    with pytest.raises(DataNotFoundError, match="splits.txt"):
        faces.read_ytf_splits(str(tmp_path / "splits.txt"))
    with pytest.raises(CorruptDataError, match="no pair lines"):
        faces.read_ytf_splits(_write(tmp_path, HEADER))
    with pytest.raises(CorruptDataError, match=r"splits of different sizes \[2, 1\]"):
        faces.read_ytf_splits(_write(tmp_path, HEADER + "1, 1, A/1, A/2, 1, 1\n1, 2, A/1, B/1, 0, 0\n"
                                     "2, 1, B/1, B/2, 1, 1\n"))


def test_video_frames_are_sorted_and_evenly_thinned(tmp_path):
    for k in range(10):
        (tmp_path / f"aligned_detect_0.{k:03d}.jpg").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("not a frame")
    frames = faces.video_frames(str(tmp_path))
    assert [os.path.basename(f) for f in frames] == [f"aligned_detect_0.{k:03d}.jpg" for k in range(10)]
    thinned = faces.video_frames(str(tmp_path), 4)  # frames k*10//4: 0, 2, 5, 7
    assert [os.path.basename(f) for f in thinned] == [f"aligned_detect_0.{k:03d}.jpg" for k in (0, 2, 5, 7)]
    assert faces.video_frames(str(tmp_path), 20) == frames
    with pytest.raises(DataNotFoundError, match="holds no image"):
        faces.video_frames(str(tmp_path / "empty")) if os.makedirs(tmp_path / "empty") is None else None
    with pytest.raises(ValueError, match="frames_per_video"):
        faces.video_frames(str(tmp_path), 0)


def test_mean_unit_embeddings_against_a_loop():
    rng = np.random.default_rng(0)
    features = rng.normal(size=(7, 5))
    owner = np.array([0, 2, 1, 0, 2, 2, 1])
    got = verification.mean_unit_embeddings(features, owner, 3)
    for group in range(3):
        rows = [features[i] / np.linalg.norm(features[i]) for i in range(7) if owner[i] == group]
        np.testing.assert_allclose(got[group], sum(rows) / len(rows), rtol=1e-6)
    with pytest.raises(ValueError, match="owner"):
        verification.mean_unit_embeddings(features, owner, 4)  # group 3 has no member


def test_video_pair_verification_against_numpy(tmp_path, lfw_reference):
    """10 splits of (1 matched + 1 mismatched) video pairs over generated frame folders."""
    shape, rng = (24, 20, 3), np.random.default_rng(1)
    identities = [f"Person_{chr(65 + i)}" for i in range(4)]
    prototypes = {name: rng.integers(0, 256, shape) for name in identities}
    root = tmp_path / "aligned_images_DB"
    for name in identities:
        for video in range(2):
            folder = root / name / str(video)
            os.makedirs(folder)
            for frame in range(3 + video):  # 3 or 4 frames per video
                image = np.clip(prototypes[name] + rng.normal(0, 30, shape), 0, 255).astype(np.uint8)
                Image.fromarray(image).save(folder / f"aligned_detect_{video}.{frame}.png")
    lines = [HEADER.strip()]
    for split in range(1, 11):
        a, b = identities[split % 4], identities[(split + 1) % 4]
        lines += [f"{split}, 1, {a}/0, {a}/1, 1, 1", f"{split}, 2, {a}/{split % 2}, {b}/{(split + 1) % 2}, 0, 0"]
    pairs = faces.read_ytf_splits(_write(tmp_path, "\n".join(lines) + "\n"))

    keras.utils.set_random_seed(0)
    model = models.create_model("sphereface4", input_shape=shape, num_classes=4, width_multiplier=0.25)
    results = face.verify(model, pairs, str(root), batch_size=5, frames_per_video=3)

    embedder = keras.Model(model.input, model.get_layer("embedding").output)

    def video_feature(video):  # 3 evenly spaced frames: k*n//3 of n sorted frames
        names = sorted(os.listdir(root / video))
        names = [names[k * len(names) // 3] for k in range(3)] if len(names) > 3 else names
        units = []
        for name in names:
            x = (np.asarray(Image.open(root / video / name), np.float32) - 127.5) / 128
            f = keras.ops.convert_to_numpy(embedder(np.stack([x, x[:, ::-1]])))
            v = np.concatenate([f[0], f[1]]).astype(np.float64)
            units.append(v / np.linalg.norm(v))
        return sum(units) / len(units)

    scores = []
    for left, right in zip(pairs.left, pairs.right):
        a, b = video_feature(left), video_feature(right)
        scores.append(float(a @ b / np.sqrt((a @ a) * (b @ b))))
    mean, std, accuracies = lfw_reference.kfold(scores, list(pairs.same), list(pairs.fold))
    assert results["ytf_accuracy"] == pytest.approx(100 * mean, abs=1e-6)
    assert results["ytf_std"] == pytest.approx(100 * std, abs=1e-6)
    np.testing.assert_allclose(results["fold_accuracies"], 100 * np.asarray(accuracies), atol=1e-6)
    assert results["num_pairs"] == 20 and results["num_videos"] == 8 and "lfw_accuracy" not in results


def test_missing_video_folder_names_the_line(tmp_path):
    pairs = faces.read_ytf_splits(_write(tmp_path, PUBLISHED))
    os.makedirs(tmp_path / "db" / "Alan_Ball" / "2")
    os.makedirs(tmp_path / "db" / "Aaron_Eckhart" / "0")  # every left video exists; the first right one does not
    with pytest.raises(DataNotFoundError, match=r"splits\.txt:2: video folder 'Alan_Ball/4'"):
        faces.check_pair_images(pairs, str(tmp_path / "db"))
