"""The identity-folder data set and the LFW pair-list parser (published format, malformed files)."""

import os

import numpy as np
import pytest
import tensorflow as tf

from sphere_tf.data import CorruptDataError
from sphere_tf.data import DataNotFoundError
from sphere_tf.data import faces
from sphere_tf.data import get_datasets

# The first lines of each block of LFW's published pairs.txt (View 2), cut to 2 folds of 2 pairs each.
PUBLISHED = """2\t2
Abel_Pacheco\t1\t4
Akhmed_Zakayev\t1\t3
Abdel_Madi_Shabneh\t1\tDean_Barker\t1
Abdel_Madi_Shabneh\t1\tGiancarlo_Fisichella\t1
Aaron_Peirsol\t1\t2
Aaron_Peirsol\t3\t4
AJ_Cook\t1\tMarsha_Thomason\t1
Aaron_Sorkin\t2\tFrank_Solich\t5
"""


def _write(tmp_path, text, name="pairs.txt"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def test_published_format(tmp_path):
    pairs = faces.read_pairs(_write(tmp_path, PUBLISHED))
    assert len(pairs) == 8 and pairs.num_folds == 2
    assert pairs.left[0] == "Abel_Pacheco/Abel_Pacheco_0001.jpg"
    assert pairs.right[0] == "Abel_Pacheco/Abel_Pacheco_0004.jpg"
    assert pairs.left[2] == "Abdel_Madi_Shabneh/Abdel_Madi_Shabneh_0001.jpg"
    assert pairs.right[2] == "Dean_Barker/Dean_Barker_0001.jpg"
    assert pairs.right[7] == "Frank_Solich/Frank_Solich_0005.jpg"
    np.testing.assert_array_equal(pairs.same, [1, 1, 0, 0, 1, 1, 0, 0])
    np.testing.assert_array_equal(pairs.fold, [0, 0, 0, 0, 1, 1, 1, 1])
    np.testing.assert_array_equal(pairs.line, np.arange(2, 10))


def test_view1_header_and_pattern(tmp_path):
    pairs = faces.read_pairs(_write(tmp_path, "1\nA 1 2\nA 1 B 3\n"), image_pattern="{name}/{index}.png")
    assert pairs.num_folds == 1 and pairs.left == ("A/1.png", "A/1.png") and pairs.right == ("A/2.png", "B/3.png")


@pytest.mark.parametrize("text, line, message", [
    ("2 2\nA 1 2\nA 1 2 3\n", 3, "expected a matched pair"),
    ("1 1\nA 1 2\nA 1 B\n", 3, "expected a mismatched pair"),
    ("1 1\nA x 2\nA 1 B 1\n", 2, "'x' is not a positive integer"),
    ("1 1\nA 0 2\nA 1 B 1\n", 2, "'0' is not a positive integer"),
    ("ten 300\nA 1 2\n", 1, "header"),
    ("1 1 1\nA 1 2\n", 1, "header"),
    ("1 2\nA 1 2\nA 2 3\nA 1 B 1\n", 4, "announces 1 folds x (2 x 2) = 4 pair lines, the file has 3"),
    ("1 1\nA 1 2\nA 1 B 1\nA 1 2\n", 4, "the file has 3"),
])
def test_malformed_lines_name_file_and_line(tmp_path, text, line, message):
    path = _write(tmp_path, text)
    with pytest.raises(CorruptDataError) as info:
        faces.read_pairs(path)
    assert f"{path}:{line}" in str(info.value) and message in str(info.value)


def test_missing_and_empty_files(tmp_path):
    with pytest.raises(DataNotFoundError, match="nowhere.txt"):
        faces.read_pairs(str(tmp_path / "nowhere.txt"))
    with pytest.raises(CorruptDataError, match="empty pair list"):
        faces.read_pairs(_write(tmp_path, "\n"))
    with pytest.raises(ValueError, match="image_pattern"):
        faces.read_pairs(_write(tmp_path, PUBLISHED), image_pattern="{name}.jpg")


def _png(path, array):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tf.io.write_file(path, tf.io.encode_png(array))


def test_missing_pair_image_names_the_line(tmp_path):
    path = _write(tmp_path, "1 1\nA 1 2\nA 1 B 1\n")
    for name in ("A/A_0001.jpg", "A/A_0002.jpg"):
        os.makedirs(tmp_path / "img" / "A", exist_ok=True)
        (tmp_path / "img" / name).write_bytes(b"x")
    pairs = faces.read_pairs(path)
    with pytest.raises(DataNotFoundError, match=r"pairs.txt:3: image 'B/B_0001.jpg'"):
        faces.check_pair_images(pairs, str(tmp_path / "img"))


def test_identity_folder_reads_labels_flip_and_normalization(tmp_path):
    root = tmp_path / "faces"
    rng = np.random.default_rng(0)
    images = {}
    for identity, count in (("zed", 2), ("amy", 3), ("bob", 1)):  # labels follow the sorted names
        for k in range(count):
            array = rng.integers(0, 256, (4, 3, 3), dtype=np.uint8)
            images[(identity, k)] = array
            _png(str(root / identity / f"{k}.png"), array)
    (root / "amy" / "notes.txt").write_text("not an image")
    folder = faces.index_identity_folder(str(root))
    assert folder.identities == ("amy", "bob", "zed") and folder.labels.tolist() == [0, 0, 0, 1, 2, 2]

    _, test_ds, info = get_datasets("face_folder", manual_dir=str(root), batch_size=2)
    assert info["num_classes"] == 3 and info["input_shape"] == (4, 3, 3) and info["test_size"] == 6
    x, y = (np.concatenate(a) for a in zip(*[(b[0].numpy(), b[1].numpy()) for b in test_ds]))
    order = [("amy", 0), ("amy", 1), ("amy", 2), ("bob", 0), ("zed", 0), ("zed", 1)]
    expected = np.stack([(images[k].astype(np.float64) - 127.5) / 128.0 for k in order])
    np.testing.assert_allclose(x, expected, atol=1e-6)
    assert y.tolist() == [0, 0, 0, 1, 2, 2]

    train_ds, _, _ = get_datasets("face_folder", manual_dir=str(root), batch_size=6, augmentation="flip", seed=3)
    x, y = next(iter(train_ds))
    originals = {tuple(np.round((images[k].astype(np.float64) - 127.5) / 128.0, 5).ravel()) for k in order}
    flipped = {tuple(np.round((images[k][:, ::-1].astype(np.float64) - 127.5) / 128.0, 5).ravel()) for k in order}
    seen = [tuple(np.round(v.astype(np.float64), 5).ravel()) for v in x.numpy()]
    assert all(s in originals or s in flipped for s in seen)
    assert any(s in flipped and s not in originals for s in seen)  # some image was flipped
    assert sorted(y.numpy().tolist()) == [0, 0, 0, 1, 2, 2]


def test_identity_folder_errors(tmp_path):
    with pytest.raises(DataNotFoundError, match="is not a folder"):
        faces.index_identity_folder(str(tmp_path / "none"))
    with pytest.raises(DataNotFoundError, match="no identity sub-folder"):
        faces.index_identity_folder(str(tmp_path))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorruptDataError, match="empty.*holds no image"):
        faces.index_identity_folder(str(tmp_path))
    with pytest.raises(DataNotFoundError, match="manual_dir"):
        get_datasets("face_folder", batch_size=2)


def test_an_image_of_another_size_is_named(tmp_path):
    root = tmp_path / "faces"
    _png(str(root / "a" / "0.png"), np.zeros((4, 3, 1), np.uint8))
    _png(str(root / "a" / "1.png"), np.zeros((5, 3, 1), np.uint8))
    _, test_ds, _ = get_datasets("face_folder", manual_dir=str(root), batch_size=2)
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"image /\S+/faces/a/1.png is not 4x3x1"):
        list(test_ds)


def test_make_and_write_pairs_round_trip(tmp_path):
    folds = faces.make_pairs(["a", "b", "c"], [4, 3, 1], folds=2, per_kind=3, seed=0)
    path = str(tmp_path / "pairs.txt")
    faces.write_pairs(path, folds)
    pairs = faces.read_pairs(path)
    assert len(pairs) == 12 and pairs.num_folds == 2
    for left, right, same in zip(pairs.left, pairs.right, pairs.same):
        assert (left.split("/")[0] == right.split("/")[0]) == bool(same)
        assert left != right
    assert len(set(zip(pairs.left, pairs.right))) == 12
    with pytest.raises(ValueError, match="matched pairs available"):
        faces.make_pairs(["a", "b"], [2, 2], folds=2, per_kind=2)
    with pytest.raises(ValueError, match="mismatched pairs available"):
        faces.make_pairs(["a", "b"], [5, 1], folds=2, per_kind=3)
