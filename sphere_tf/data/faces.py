"""Face data: an identity-per-folder tree of aligned crops, and LFW-style verification pair lists.

Identity folder (CASIA-WebFace as distributed after alignment; the VGGFace2 /
MS1M image-folder layout is the same)::

    ROOT/<identity>/<image>.jpg|.jpeg|.png|.bmp|.gif

Labels are the positions of the identity folders in sorted order; the images of
an identity are taken in sorted order. Every crop must have the same size (the
SphereFace crops are 112x96); a crop of another size fails when it is decoded,
naming the file. `index_identity_folder` lists the tree; the runner reads it
through `sphere_tf.data.get_datasets('face_folder', manual_dir=ROOT, ...)`.

LFW pairs (`pairs.txt`, Huang et al., "Labeled Faces in the Wild", 2007, View 2)::

    10 300                              <- folds, pairs of each kind per fold
    Abel_Pacheco 1 4                    <- 300 matched pairs: name idx1 idx2
    ...
    Abdel_Madi_Shabneh 1 Dean_Barker 1  <- 300 mismatched pairs: name1 idx1 name2 idx2
    ...                                 (then the next fold)

An image `(name, idx)` is the file `name/name_%04d.jpg` under the image folder
(`image_pattern` changes the pattern). The View 1 files (`pairsDevTrain.txt`,
header "1100") are one fold: `read_pairs` takes a one-number header as one fold
of that many pairs of each kind. A malformed line raises `CorruptDataError`
naming the file and the line number.

YouTube Faces (Wolf et al., "Face Recognition in Unconstrained Videos with
Matched Background Similarity", CVPR 2011) `splits.txt`::

    split number, pair number, first name, second name, match pair, is same
    1, 1, Alan_Ball/2, Alan_Ball/4, 1, 1   <- 10 splits of 500 video pairs
    ...

Each name is a video folder `<identity>/<video>` of the aligned frames
(`aligned_images_DB/`); the last column is the label. `read_ytf_splits` returns
the same `Pairs` with `videos=True`, whose sides are video folders:
verification embeds frames and averages them per video (`video_frames`).
"""

import dataclasses
import os

import numpy as np

from sphere_tf import dependencies
from sphere_tf import validation
from sphere_tf.data import numpy_preprocessing
from sphere_tf.data import untrusted
from sphere_tf.data.errors import CorruptDataError
from sphere_tf.data.errors import DataNotFoundError



def _tf():
    """TensorFlow, for the tf.data pipeline's decoder (`decode_image`) and the writer (`write_identity_images`)."""
    return dependencies.tensorflow(__name__)

IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
LFW_IMAGE_PATTERN = "{name}/{name}_{index:04d}.jpg"
# The SphereFace crops (wy1iu/sphereface `preprocess/code/face_align_demo.m`: 96x112 similarity-aligned).
SPHEREFACE_CROP = (112, 96)


@dataclasses.dataclass(frozen=True)
class IdentityFolder:
    """The images of an identity-per-folder tree.

    Attributes:
        root: str, the folder.
        paths: tuple of str, every image (absolute), identities in sorted order, images sorted within.
        labels: int32 array, the identity index of each image.
        identities: tuple of str, the sorted identity folder names (label i is `identities[i]`).
    """

    root: str
    paths: tuple
    labels: np.ndarray
    identities: tuple

    @property
    def num_classes(self):
        """The number of identities."""
        return len(self.identities)


def index_identity_folder(root):
    """Lists an identity-per-folder tree of images.

    Args:
        root: str, the folder holding one sub-folder of images per identity.

    Returns:
        `IdentityFolder`.

    Raises:
        DataNotFoundError: `root` is not a folder, or holds no identity folder with images.
        CorruptDataError: an identity folder holds no image.
    """
    if not isinstance(root, (str, os.PathLike)) or not os.path.isdir(root):
        raise DataNotFoundError(
            f"face folder {root!r} is not a folder; expected ROOT/<identity>/<image> with extensions "
            f"{', '.join(IMAGE_EXTENSIONS)}."
        )
    root = os.fspath(root)
    identities = sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))
    if not identities:
        raise DataNotFoundError(f"face folder {root!r} holds no identity sub-folder (ROOT/<identity>/<image>).")
    paths, labels = [], []
    for label, identity in enumerate(identities):
        folder = os.path.join(root, identity)
        images = sorted(f for f in os.listdir(folder) if f.lower().endswith(IMAGE_EXTENSIONS))
        if not images:
            raise CorruptDataError(
                f"identity folder {folder!r} holds no image (extensions {', '.join(IMAGE_EXTENSIONS)})."
            )
        paths.extend(os.path.join(folder, f) for f in images)
        labels.extend([label] * len(images))
    return IdentityFolder(root, tuple(paths), np.asarray(labels, np.int32), tuple(identities))


# Pillow's image modes -> the channels TensorFlow's `decode_image` gives the same file (with `channels=0`): grey
# (any bit depth) 1, grey and alpha 2, colour 3, colour and alpha 4. A palette image is decoded to RGB, RGBA when
# it has a transparent entry (`png_set_tRNS_to_alpha`); GIF frames are always RGB (`decode_gif`).
_MODE_CHANNELS = {"1": 1, "L": 1, "I": 1, "I;16": 1, "I;16B": 1, "I;16L": 1, "F": 1, "LA": 2, "La": 2, "RGB": 3,
                  "YCbCr": 3, "LAB": 3, "HSV": 3, "RGBA": 4, "RGBa": 4, "RGBX": 4, "CMYK": 4, "PA": 4}


def _header_channels(opened):
    if opened.format == "GIF":
        return 3
    if opened.mode == "P":
        return 4 if "transparency" in opened.info else 3
    return _MODE_CHANNELS.get(opened.mode, len(opened.getbands()))


def image_shape(path):
    """(height, width, channels) of the image file `path`, read from its header (Pillow; nothing is decoded).

    The channels are those TensorFlow's `decode_image` gives the file (`_MODE_CHANNELS`), so a folder reads with
    the same shape on every backend.

    Raises:
        DataNotFoundError: no such file.
        CorruptDataError: not a readable image, or its header declares more pixels than Pillow's `MAX_IMAGE_PIXELS`
            (`untrusted.check_image_pixels`); the message names the file.
    """
    if not os.path.isfile(path):
        raise DataNotFoundError(f"image {path!r} does not exist.")
    try:
        from PIL import Image  # noqa: PLC0415 (Pillow, optional: only the image readers need it)
    except ImportError as error:
        raise ImportError("sphere_tf.data.faces.image_shape needs Pillow: pip install pillow") from error
    try:
        with Image.open(path) as opened:  # reads the header only
            width, height = opened.size
            channels = _header_channels(opened)
    except Image.DecompressionBombError as error:  # above twice MAX_IMAGE_PIXELS Pillow refuses in `open`
        raise CorruptDataError(f"image {path!r}: {str(error).rstrip('.')}; refused before decoding it.") from None
    except (OSError, SyntaxError, ValueError) as error:  # UnidentifiedImageError is an OSError
        raise CorruptDataError(f"image {path!r} is not a readable image: {error}") from None
    # The shape every image of a folder must have: a header declaring a huge one is refused here, not decoded.
    untrusted.check_image_pixels(width, height, f"image {path!r}", Image)
    return int(height), int(width), int(channels)


def decode_image(path, shape):
    """Reads and decodes one image file to a uint8 `shape` tensor (graph-friendly).

    A file of another size or channel count fails with an `InvalidArgumentError`
    whose message names the file and the expected shape.

    Args:
        path: scalar string tensor.
        shape: (height, width, channels), the size every image must have.

    Returns:
        uint8 tensor of `shape`.
    """
    height, width, channels = (int(d) for d in shape)
    tf = _tf()
    image = tf.io.decode_image(tf.io.read_file(path), channels=channels, expand_animations=False)
    ok = tf.reduce_all(tf.equal(tf.shape(image)[:2], [height, width]))
    message = tf.strings.join(["image ", path, f" is not {height}x{width}x{channels}: height, width "])
    check = tf.debugging.Assert(ok, [message, tf.shape(image)[:2]])
    with tf.control_dependencies([check]):
        image = tf.identity(image)
    return tf.ensure_shape(image, (height, width, channels))


def decode_image_numpy(path, shape):
    """`decode_image` for the Grain pipeline: the image file `path` as a uint8 NumPy array of `shape`.

    The size is checked from the file's header before it is decoded (an image declaring 100000x100000 pixels
    is refused unread).

    Raises:
        CorruptDataError: not a readable image, or not of `shape`; the message names the file.
    """
    height, width, channels = (int(d) for d in shape)
    path = str(path)
    with open(path, "rb") as f:
        data = f.read()
    try:
        image = numpy_preprocessing.decode_image(data, channels=channels, what=path, size=(height, width))
    except ValueError as error:
        raise CorruptDataError(str(error)) from None
    if image.shape[:2] != (height, width):
        raise CorruptDataError(f"image {path} is not {height}x{width}x{channels}: height, width {image.shape[:2]}")
    return image


@dataclasses.dataclass(frozen=True)
class Pairs:
    """Verification pairs read from a pair list.

    Attributes:
        path: str, the pair-list file.
        left, right: tuples of str, the image paths of each pair relative to the image folder.
        same: bool array, True for a matched (same identity) pair.
        fold: int32 array, the fold of each pair (0-based).
        line: int32 array, the line number (1-based) of each pair in `path`.
        videos: bool, the sides are video folders of frames (YouTube Faces), not images.
    """

    path: str
    left: tuple
    right: tuple
    same: np.ndarray
    fold: np.ndarray
    line: np.ndarray
    videos: bool = False

    def __len__(self):
        return len(self.left)

    @property
    def num_folds(self):
        """The number of folds."""
        return int(self.fold.max()) + 1 if len(self.fold) else 0


def _check_name(name, path, number):
    """Raises `CorruptDataError` for a name of a pair list (`path`, line `number`) that is not one folder name: a
    list naming `../../etc` or `/home` would make the evaluation read images outside the image folder."""
    if name in (".", "..") or "/" in name or "\\" in name:
        raise CorruptDataError(f"{path}:{number}: name {name!r} is not a folder name (it would leave the image "
                               "folder); refused.")


def _parse_index(token, path, number):
    if not token.isdigit() or int(token) < 1:
        raise CorruptDataError(f"{path}:{number}: image number {token!r} is not a positive integer.")
    return int(token)


def read_pairs(path, image_pattern=LFW_IMAGE_PATTERN):
    """Parses a pair list in the published LFW format (see the module docstring).

    Args:
        path: str, e.g. `lfw/pairs.txt`.
        image_pattern: str with `{name}` and `{index}` fields, the path of image `(name, index)`
            relative to the image folder.

    Returns:
        `Pairs` in file order.

    Raises:
        DataNotFoundError: `path` does not exist.
        CorruptDataError: a malformed header or line, or the wrong number of lines; the message
            names the file and the line.
    """
    if not isinstance(image_pattern, str) or "{name" not in image_pattern or "{index" not in image_pattern:
        raise validation.invalid_argument("image_pattern", "a str with {name} and {index} fields", image_pattern)
    if not os.path.isfile(path):
        raise DataNotFoundError(f"pair list {path!r} does not exist (the LFW file is pairs.txt).")
    with open(path, encoding="utf-8") as f:
        lines = [(n, line.split()) for n, line in enumerate(f, start=1)]
    lines = [(n, fields) for n, fields in lines if fields]
    if not lines:
        raise CorruptDataError(f"{path}: empty pair list (expected a header line 'FOLDS PAIRS' such as '10 300').")
    header_line, header = lines[0]
    try:
        counts = [int(t) for t in header]
    except ValueError:
        counts = []
    if len(counts) == 1:
        counts = [1] + counts
    if len(counts) != 2 or min(counts) < 1:
        raise CorruptDataError(
            f"{path}:{header_line}: header {' '.join(header)!r} is not 'FOLDS PAIRS' (e.g. '10 300') or 'PAIRS'."
        )
    folds, per_kind = counts
    body = lines[1:]
    expected = folds * 2 * per_kind
    left, right, same, fold, line_numbers = [], [], [], [], []
    for k, (number, fields) in enumerate(body[:expected]):
        fold_index, position = divmod(k, 2 * per_kind)
        matched = position < per_kind
        if matched:
            if len(fields) != 3:
                raise CorruptDataError(
                    f"{path}:{number}: expected a matched pair 'name idx1 idx2' (fold {fold_index + 1}, "
                    f"line {position + 1} of {per_kind} matched), got {len(fields)} fields: {' '.join(fields)!r}."
                )
            name1 = name2 = fields[0]
            index1, index2 = fields[1], fields[2]
        else:
            if len(fields) != 4:
                raise CorruptDataError(
                    f"{path}:{number}: expected a mismatched pair 'name1 idx1 name2 idx2' (fold {fold_index + 1}, "
                    f"line {position - per_kind + 1} of {per_kind} mismatched), got {len(fields)} fields: "
                    f"{' '.join(fields)!r}."
                )
            name1, index1, name2, index2 = fields
        index1, index2 = _parse_index(index1, path, number), _parse_index(index2, path, number)
        _check_name(name1, path, number)
        _check_name(name2, path, number)
        left.append(image_pattern.format(name=name1, index=index1))
        right.append(image_pattern.format(name=name2, index=index2))
        same.append(matched)
        fold.append(fold_index)
        line_numbers.append(number)
    if len(body) != expected:
        where = body[expected][0] if len(body) > expected else (body[-1][0] if body else header_line)
        raise CorruptDataError(
            f"{path}:{where}: the header {' '.join(header)!r} announces {folds} folds x (2 x {per_kind}) = "
            f"{expected} pair lines, the file has {len(body)}."
        )
    return Pairs(
        os.fspath(path), tuple(left), tuple(right), np.asarray(same, bool), np.asarray(fold, np.int32),
        np.asarray(line_numbers, np.int32),
    )


YTF_HEADER = ("split number", "pair number", "first name", "second name", "match pair", "is same")


def read_ytf_splits(path):
    """Parses a YouTube Faces `splits.txt` (see the module docstring).

    Args:
        path: str, e.g. `YouTubeFaces/splits.txt`.

    Returns:
        `Pairs` with `videos=True`: `left`/`right` are video folders `identity/video`,
        `fold` the split - 1, `same` the 'is same' column.

    Raises:
        DataNotFoundError: `path` does not exist.
        CorruptDataError: a malformed header or line (file and line named), split numbers that are
            not 1..K in order, or splits of different sizes.
    """
    if not os.path.isfile(path):
        raise DataNotFoundError(f"YouTube Faces split list {path!r} does not exist (the published file is splits.txt).")
    with open(path, encoding="utf-8") as f:
        rows = [(n, [t.strip() for t in line.split(",")]) for n, line in enumerate(f, start=1) if line.strip()]
    if not rows:
        raise CorruptDataError(f"{path}: empty split list (expected the header '{', '.join(YTF_HEADER)}').")
    header_line, header = rows[0]
    if tuple(t.lower() for t in header) != YTF_HEADER:
        raise CorruptDataError(f"{path}:{header_line}: header {', '.join(header)!r} is not "
                               f"{', '.join(YTF_HEADER)!r}.")
    left, right, same, fold, numbers = [], [], [], [], []
    for number, fields in rows[1:]:
        if len(fields) != 6:
            raise CorruptDataError(f"{path}:{number}: expected 6 comma-separated fields "
                                   f"'split, pair, name1, name2, match, same', got {len(fields)}.")
        split, _, first, second, _, is_same = fields
        if not split.isdigit() or int(split) < 1:
            raise CorruptDataError(f"{path}:{number}: split number {split!r} is not a positive integer.")
        if is_same not in ("0", "1"):
            raise CorruptDataError(f"{path}:{number}: 'is same' is {is_same!r}, expected 0 or 1.")
        for video in (first, second):
            parts = video.split("/")
            if len(parts) != 2 or not all(parts):
                raise CorruptDataError(f"{path}:{number}: video {video!r} is not 'identity/video'.")
            for part in parts:
                _check_name(part, path, number)
        if fold and int(split) - 1 not in (fold[-1], fold[-1] + 1):
            raise CorruptDataError(f"{path}:{number}: split {split} follows split {fold[-1] + 1}; splits must "
                                   "come in order 1, 2, ...")
        if not fold and int(split) != 1:
            raise CorruptDataError(f"{path}:{number}: the first pair is in split {split}, expected 1.")
        left.append(first)
        right.append(second)
        same.append(is_same == "1")
        fold.append(int(split) - 1)
        numbers.append(number)
    if not left:
        raise CorruptDataError(f"{path}: no pair lines after the header.")
    sizes = np.bincount(np.asarray(fold))
    if len(set(sizes.tolist())) != 1:
        raise CorruptDataError(f"{path}: splits of different sizes {sizes.tolist()} (the protocol has equal splits).")
    return Pairs(os.fspath(path), tuple(left), tuple(right), np.asarray(same, bool), np.asarray(fold, np.int32),
                 np.asarray(numbers, np.int32), videos=True)


def video_frames(video_dir, frames_per_video=None):
    """The frame images of one video folder, in sorted order, evenly thinned to `frames_per_video`.

    Args:
        video_dir: str, a folder of frame images.
        frames_per_video: int > 0 or None (all frames): frames k·n/m (k = 0..m-1) of n.

    Returns:
        list of str, the frame paths.

    Raises:
        DataNotFoundError: the folder is missing or holds no image.
    """
    frames_per_video = validation.positive_int(frames_per_video, "frames_per_video", allow_none=True)
    if not os.path.isdir(video_dir):
        raise DataNotFoundError(f"video folder {video_dir!r} does not exist.")
    frames = sorted(os.path.join(video_dir, f) for f in os.listdir(video_dir)
                    if f.lower().endswith(IMAGE_EXTENSIONS))
    if not frames:
        raise DataNotFoundError(f"video folder {video_dir!r} holds no image ({', '.join(IMAGE_EXTENSIONS)}).")
    if frames_per_video is not None and len(frames) > frames_per_video:
        frames = [frames[k * len(frames) // frames_per_video] for k in range(frames_per_video)]
    return frames


def check_pair_images(pairs, images_dir):
    """Absolute paths of the distinct images of `pairs` under `images_dir`, and each side's index into them.

    Args:
        pairs: `Pairs`.
        images_dir: str, the image folder the pair list refers to.

    Returns:
        `(paths, left_index, right_index)`: tuple of str (sorted), two int32 arrays.

    Raises:
        DataNotFoundError: `images_dir` is not a folder, or an image is missing (the message names the
            image, the pair list and its line).
    """
    if not os.path.isdir(images_dir):
        raise DataNotFoundError(f"image folder {images_dir!r} (for {pairs.path}) is not a folder.")
    exists = os.path.isdir if pairs.videos else os.path.isfile
    for side in (pairs.left, pairs.right):
        for relative, number in zip(side, pairs.line):
            if not exists(os.path.join(images_dir, relative)):
                raise DataNotFoundError(
                    f"{pairs.path}:{number}: {'video folder' if pairs.videos else 'image'} {relative!r} is not "
                    f"in {images_dir!r}."
                )
    unique = sorted(set(pairs.left) | set(pairs.right))
    position = {p: i for i, p in enumerate(unique)}
    left_index = np.asarray([position[p] for p in pairs.left], np.int32)
    right_index = np.asarray([position[p] for p in pairs.right], np.int32)
    return tuple(os.path.join(images_dir, p) for p in unique), left_index, right_index


def make_pairs(identities, counts, *, folds=10, per_kind=300, seed=0):
    """Draws LFW-style pairs: `folds` folds of `per_kind` matched and `per_kind` mismatched pairs.

    Matched pairs take two distinct images of one identity (with at least two images);
    mismatched pairs two images of two distinct identities. Pairs do not repeat within the list.

    Args:
        identities: sequence of str, identity names (no whitespace).
        counts: sequence of ints, the number of images of each identity (numbered from 1).
        folds, per_kind: ints >= 1.
        seed: int, the draw.

    Returns:
        list of folds, each `(matched, mismatched)`: lists of `(name, i, j)` and `(name1, i, name2, j)`.

    Raises:
        ValueError: fewer than two identities, none with two images, whitespace in a name, or too few
            distinct pairs for the request.
    """
    folds = validation.positive_int(folds, "folds")
    per_kind = validation.positive_int(per_kind, "per_kind")
    identities, counts = list(identities), [validation.integer(c, "counts", minimum=0) for c in counts]
    if len(identities) != len(counts) or len(identities) < 2:
        raise validation.invalid_argument("identities", "at least two names, one count each", identities)
    if any(not name or any(ch.isspace() for ch in name) for name in identities):
        raise validation.invalid_argument("identities", "names without whitespace", identities)
    rng = np.random.default_rng(seed)
    weights = np.asarray(counts, np.float64)
    matchable = np.asarray([c if c >= 2 else 0 for c in counts], np.float64)
    if not matchable.sum():
        raise validation.invalid_argument("counts", "at least one identity with two images", counts)
    total = folds * per_kind
    matched_pairs_available = sum(c * (c - 1) // 2 for c in counts)
    if matched_pairs_available < total:
        raise validation.invalid_argument("per_kind", f"at most {matched_pairs_available // folds} "
                                          "(distinct matched pairs available / folds)", per_kind)
    mismatched_pairs_available = sum(counts[a] * counts[b] for a in range(len(counts)) for b in range(a))
    if mismatched_pairs_available < total:
        raise validation.invalid_argument("per_kind", f"at most {mismatched_pairs_available // folds} "
                                          "(distinct mismatched pairs available / folds)", per_kind)
    seen_matched, seen_mismatched, matched, mismatched = set(), set(), [], []
    while len(matched) < total:
        a = int(rng.choice(len(counts), p=matchable / matchable.sum()))
        i, j = sorted(int(v) + 1 for v in rng.choice(counts[a], 2, replace=False))
        if (a, i, j) not in seen_matched:
            seen_matched.add((a, i, j))
            matched.append((identities[a], i, j))
    while len(mismatched) < total:
        a, b = sorted(int(v) for v in rng.choice(len(counts), 2, replace=False, p=weights / weights.sum()))
        i, j = int(rng.integers(counts[a])) + 1, int(rng.integers(counts[b])) + 1
        if (a, i, b, j) not in seen_mismatched:
            seen_mismatched.add((a, i, b, j))
            mismatched.append((identities[a], i, identities[b], j))
    return [(matched[k * per_kind:(k + 1) * per_kind], mismatched[k * per_kind:(k + 1) * per_kind])
            for k in range(folds)]


def write_pairs(path, folds):
    """Writes `folds` (as from `make_pairs`) as a pair list in the published LFW format.

    Args:
        path: str, the file to write.
        folds: list of `(matched, mismatched)`, every fold with the same number of each kind.
    """
    per_kind = {len(m) for f in folds for m in f}
    if len(per_kind) != 1:
        raise validation.invalid_argument("folds", "folds of equally many matched and mismatched pairs", per_kind)
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{len(folds)}\t{per_kind.pop()}\n")
        for matched, mismatched in folds:
            for name, i, j in matched:
                f.write(f"{name}\t{i}\t{j}\n")
            for name1, i, name2, j in mismatched:
                f.write(f"{name1}\t{i}\t{name2}\t{j}\n")


def write_identity_images(root, images, labels, identities, *, pattern=LFW_IMAGE_PATTERN, extension=None):
    """Writes uint8 images as an identity folder (`root/<name>/<name>_0001.png`, ...), LFW-style names.

    Args:
        root: str, the folder to write into (created).
        images: uint8 array (n, height, width) or (n, height, width, channels).
        labels: int array (n,), indices into `identities`.
        identities: sequence of str, folder names.
        pattern: str, the relative path of image `(name, index)` (1-based index per identity).
        extension: None (keep the pattern's), or '.png' / '.jpg' replacing it.

    Returns:
        list of ints, the number of images written per identity.
    """
    images = np.asarray(images)
    if images.dtype != np.uint8 or images.ndim not in (3, 4):
        raise validation.invalid_argument("images", "a uint8 array (n, h, w) or (n, h, w, c)", images.shape)
    if images.ndim == 3:
        images = images[..., None]
    labels = np.asarray(labels)
    counts = [0] * len(identities)
    for image, label in zip(images, labels):
        counts[label] += 1
        relative = pattern.format(name=identities[label], index=counts[label])
        if extension:
            relative = os.path.splitext(relative)[0] + extension
        target = os.path.join(root, relative)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        tf = _tf()
        encoded = tf.io.encode_png(image) if target.lower().endswith(".png") else tf.io.encode_jpeg(image, quality=95)
        tf.io.write_file(target, encoded)
    return counts
