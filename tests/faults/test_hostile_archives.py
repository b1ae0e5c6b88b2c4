"""Hostile data files: every reader of a user-supplied file refuses what would write, read or allocate outside it.

Each case is a small crafted file in the published format with one hostile part, given to the reader a user calls
(`cifar.load_cifar10` / `load_cifar100`, `mnist.load_idx_split`, `imagenet.index_train_tar` / `index_val_tar`,
`faces.image_shape` / `decode_image_numpy`, `numpy_preprocessing.decode_image`, the pair lists, `get_datasets`):

- member names that leave the archive's folder (`../`, absolute, symbolic and hard links pointing outside): a
  `CorruptDataError` naming the archive and the member, and nothing new anywhere under the test's folder;
- declared sizes far beyond the file (an idx header of 2^31 images, a tar member or pax header of 1 TiB, an image
  header of 100000x100000 pixels): refused with the file named, before anything of that size is allocated (the
  peak of traced memory, `tracemalloc`, stays a few MB);
- decompression bombs (a gzip of a few hundred KB expanding to hundreds of MB, or GBs in the slow tier): refused
  after a bounded read, the traced peak (fast tier) or the process's peak RSS (slow tier, a subprocess) bounded;
- pickles: CIFAR's python version (pickled batches) is never unpickled; a batch whose `__reduce__` calls
  `os.system` runs nothing (no `pickle.find_class` audit event, no side effect) and the error says why.
"""

import contextlib
import gzip
import io
import os
import pickle
import re
import shlex
import struct
import subprocess
import sys
import tarfile
import textwrap
import tracemalloc
import zlib

import keras
import numpy as np
import pytest

from sphere_tf.data import archive_writers
from sphere_tf.data import cifar
from sphere_tf.data import datasets
from sphere_tf.data import faces
from sphere_tf.data import fashion_mnist
from sphere_tf.data import imagenet
from sphere_tf.data import mnist
from sphere_tf.data import numpy_preprocessing
from sphere_tf.data import untrusted
from sphere_tf.data.errors import CorruptDataError
from sphere_tf.data.errors import DataNotFoundError
from tests.faults._untrusted import code_execution_monitor
from tests.faults._untrusted import gzip_of
from tests.faults._untrusted import tar_bytes
from tests.faults._untrusted import tar_member

CATEGORY = "untrusted file"  # the tables of docs/reliability.md group by it
# The most traced memory a refused read may reach: the small valid parts of the crafted files and one 1 MiB chunk.
BOUNDED = 8 << 20


def _tree(root):
    """Every path under `root` (files, folders, links), to show that a refusal wrote nothing anywhere."""
    return {os.path.relpath(os.path.join(folder, name), root)
            for folder, folders, files in os.walk(root) for name in folders + files}


@contextlib.contextmanager
def _peak_memory():
    """Yields a dict whose 'peak' is the traced memory peak (bytes) of the block: Python objects and NumPy arrays."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    result = {}
    try:
        yield result
    finally:
        result["peak"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()


# --- CIFAR: tar.gz of fixed-length records ------------------------------------------------------------------------

def _cifar10_members(per_batch=2):
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (per_batch, 32, 32, 3), dtype=np.uint8)
    records = archive_writers.cifar_records(images, rng.integers(0, 10, per_batch))
    names = [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]
    return [tar_member(f"{cifar.CIFAR10_FOLDER}/{name}", records) for name in names]


def _write_cifar10(folder, members):
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, cifar.CIFAR10_ARCHIVE)
    with open(path, "wb") as f:
        f.write(gzip.compress(tar_bytes(members), compresslevel=1))
    return path


def _traversal_members(outside):
    """`{case: (member, ...)}`: members a naive extractor would write outside the archive's folder. `outside` is
    an absolute path inside the test's folder, where such a write would land."""
    return {
        "../ name": [tar_member("../../outside/x", b"escaped")],
        "absolute name": [tar_member(os.path.join(outside, "x"), b"escaped")],
        "symlink to an absolute path": [tar_member("folder/link", kind=tarfile.SYMTYPE, linkname="/etc/passwd")],
        "symlink leaving the folder": [tar_member("folder/link", kind=tarfile.SYMTYPE, linkname="../../outside/x")],
        "hard link leaving the folder": [tar_member("folder/link", kind=tarfile.LNKTYPE, linkname="../outside/x")],
    }


def test_cifar_member_names_leaving_the_folder_are_refused_naming_archive_and_member(tmp_path, tally):
    manual = tmp_path / "a" / "b"
    cases = _traversal_members(str(tmp_path / "outside"))
    for case, extra in cases.items():
        path = _write_cifar10(manual, _cifar10_members() + extra)
        before = _tree(tmp_path)
        with pytest.raises(CorruptDataError) as raised:
            cifar.load_cifar10(str(manual), "train")
        message = str(raised.value)
        assert path in message and repr(extra[0][0].name) in message, (case, message)
        assert _tree(tmp_path) == before, case
    # The only copy of a wanted member, under a name that climbs out and back in: read before (leading "../" and
    # "/" were stripped from names), refused now.
    for name in ("../cifar-10-batches-bin/data_batch_1.bin", "/cifar-10-batches-bin/data_batch_1.bin"):
        members = _cifar10_members()
        members[0] = tar_member(name, members[0][1])
        path = _write_cifar10(manual, members)
        with pytest.raises(CorruptDataError, match=rf"{path}: member {name!r} "):
            cifar.load_cifar10(str(manual), "train")
    # A wanted member that is a link (to a member or outside) is not read.
    members = _cifar10_members()
    members[0] = tar_member(members[0][0].name, kind=tarfile.SYMTYPE, linkname="test_batch.bin")
    path = _write_cifar10(manual, members)
    with pytest.raises(CorruptDataError, match=rf"{path}: member '{members[0][0].name}' is a symbolic link"):
        cifar.load_cifar10(str(manual), "train")
    tally(CATEGORY, "CIFAR tar.gz member name or link leaving the folder", tried=len(cases) + 3)


def test_cifar_huge_declared_sizes_are_refused_before_reading(tmp_path, tally):
    manual = str(tmp_path)
    wanted = f"{cifar.CIFAR10_FOLDER}/data_batch_1.bin"
    cases = {
        # ustar's largest size (8 GiB - 1, octal) and 1 TiB (GNU base-256): the data are not there at all.
        "member declaring 8 GiB": tar_member(wanted, b"\0" * 3073, size=8**11 - 1),
        "member declaring 1 TiB": tar_member(wanted, b"\0" * 3073, size=1 << 40),
    }
    for case, member in cases.items():
        path = _write_cifar10(manual, [member] + _cifar10_members()[1:])
        with _peak_memory() as memory:
            with pytest.raises(CorruptDataError, match=rf"{path}: member '{wanted}' declares [\d,]+ bytes .*, more "
                                                       r"than the published data_batch_1\.bin \(10000 records"):
                cifar.load_cifar10(manual, "train")
        assert memory["peak"] < BOUNDED, case
    # A member declaring (and holding) 300 MiB of zeros, more than the published file: refused before its data are
    # decompressed. And a pax header declaring 300 MiB, which tarfile reads whole: refused before it is read.
    header = tarfile.TarInfo(wanted)
    header.size = 300 << 20
    pax = tarfile.TarInfo("././@PaxHeader")
    pax.type, pax.size = tarfile.XHDTYPE, 300 << 20
    for case, head in (("member holding 300 MiB of zeros", header), ("pax header of 300 MiB", pax)):
        path = os.path.join(manual, cifar.CIFAR10_ARCHIVE)
        with open(path, "wb") as f:
            f.write(gzip_of(head.tobuf(format=tarfile.GNU_FORMAT), 300 << 20, bytes(1024)))
        assert os.path.getsize(path) < 1 << 20
        with _peak_memory() as memory:
            with pytest.raises(CorruptDataError, match=rf"{path}: .*(declares|asks to read) [\d,]+ bytes"):
                cifar.load_cifar10(manual, "train")
        assert memory["peak"] < BOUNDED, case
    # An extracted folder's file larger than the published one is not read either.
    folder = tmp_path / "x" / cifar.CIFAR10_FOLDER
    folder.mkdir(parents=True)
    for name in cifar.CIFAR10_FILES["test"]:
        with open(folder / name, "wb") as f:
            f.truncate(40_000_000)  # sparse: 40 MB declared by the file system, nothing on disk
    with pytest.raises(CorruptDataError, match=r"test_batch\.bin: 40,000,000 bytes, more than the published"):
        cifar.load_cifar10(str(tmp_path / "x"), "test")
    tally(CATEGORY, "CIFAR member, pax header or file declaring more than the published file", tried=5)


def test_cifar_decompression_bomb_and_header_flood_are_bounded(tmp_path, tally):
    manual = str(tmp_path)
    path = os.path.join(manual, cifar.CIFAR10_ARCHIVE)
    # More empty members than MAX_ARCHIVE_MEMBERS (tarfile keeps every header it reads: millions of them, a few MB
    # compressed, would fill memory): cut off there.
    flood = [tar_member(f"junk/{k}") for k in range(cifar.MAX_ARCHIVE_MEMBERS)]
    with open(path, "wb") as f:
        f.write(gzip.compress(tar_bytes(_cifar10_members() + flood), compresslevel=1))
    with _peak_memory() as memory:
        with pytest.raises(CorruptDataError, match=rf"{path}: more than 1,000 members"):
            cifar.load_cifar10(manual, "train")
    assert memory["peak"] < BOUNDED
    tally(CATEGORY, "CIFAR tar.gz of more empty members than the bound (header flood)")


@pytest.mark.slow
def test_cifar_decompression_bomb_past_the_archive_bound_is_refused(tmp_path, tally):
    """A member nobody wants, of 600 MiB of zeros (600 KB compressed): skipping it decompresses it, and the
    archive is refused once it expands past MAX_ARCHIVE_BYTES, with bounded memory."""
    junk = tarfile.TarInfo("junk.bin")
    junk.size = 600 << 20
    path = os.path.join(str(tmp_path), cifar.CIFAR10_ARCHIVE)
    with open(path, "wb") as f:
        f.write(gzip_of(tar_bytes(_cifar10_members())[:-1024], junk.tobuf(format=tarfile.GNU_FORMAT), 600 << 20,
                        bytes(1024)))
    with _peak_memory() as memory:
        with pytest.raises(CorruptDataError, match=rf"{path}: .*past 536,870,912 bytes"):
            cifar.load_cifar10(str(tmp_path), "train")
    assert memory["peak"] < BOUNDED
    tally(CATEGORY, "CIFAR tar.gz expanding past 512 MiB (decompression bomb)")


# --- pickles --------------------------------------------------------------------------------------------------------

class _Shell:
    """Unpickled, runs a shell command: what a hostile pickle does with `__reduce__`."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def test_cifar_python_version_pickles_are_never_unpickled(tmp_path, tally):
    marker = tmp_path / "pickle_ran"
    batch = pickle.dumps({b"data": _Shell(f"touch {shlex.quote(str(marker))}"), b"labels": [0]}, protocol=2)
    # The python version, as published (a tar.gz) and as keras.datasets caches it (the extracted folder).
    members = [tar_member(f"cifar-10-batches-py/{name}", batch) for name in ("data_batch_1", "test_batch")]
    with open(tmp_path / "cifar-10-python.tar.gz", "wb") as f:
        f.write(gzip.compress(tar_bytes(members)))
    (tmp_path / "cifar-10-batches-py").mkdir()
    (tmp_path / "cifar-10-batches-py" / "data_batch_1").write_bytes(batch)
    for load in (lambda: cifar.load_cifar10(str(tmp_path), "train"),
                 lambda: datasets.get_datasets("cifar10", batch_size=2, manual_dir=str(tmp_path))):
        with code_execution_monitor() as events:
            with pytest.raises(DataNotFoundError, match=r"cifar-10-python\.tar\.gz and cifar-10-batches-py, the "
                                                        r"python version, which is not read: its batches are pickles"):
                load()
        assert events == [] and not marker.exists()
    # The control: the batch is live (unpickling it runs the command; the audit hook sees the global it loads).
    with code_execution_monitor() as events:
        pickle.loads(batch)  # noqa: S301 (the point: what the readers never do)
    assert any(event == "pickle.find_class" for event, _ in events)
    assert marker.exists()
    tally(CATEGORY, "CIFAR python-version batch whose __reduce__ calls os.system (never unpickled)", tried=2)


# --- MNIST / Fashion-MNIST: gzipped idx files -----------------------------------------------------------------------

def _idx_header(magic, dims):
    return struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in dims)


def _write_mnist_split(folder, images_file_bytes):
    """The four idx files of a small valid set, the train images replaced by `images_file_bytes` (gzip)."""
    archive_writers.write_mnist(str(folder))
    path = os.path.join(str(folder), fashion_mnist.FILES["train_images"])
    with open(path, "wb") as f:
        f.write(images_file_bytes)
    return path


def test_idx_header_declaring_too_much_is_refused_before_allocating(tmp_path, tally):
    cases = {
        "2^31 images": (2**31, 28, 28),
        "2^32 - 1 in every dimension (a NumPy int64 product wraps)": (2**32 - 1, 2**32 - 1, 2**32 - 1),
    }
    for case, dims in cases.items():
        path = _write_mnist_split(tmp_path, gzip.compress(_idx_header(2051, dims) + bytes(784)))
        with _peak_memory() as memory:
            with pytest.raises(CorruptDataError, match=re.escape(f"{path}: the header declares shape {dims!r}")):
                mnist.load_idx_split(str(tmp_path), "train")
        assert memory["peak"] < BOUNDED, case
    tally(CATEGORY, "idx header declaring 2^31 images or 2^96 bytes", tried=len(cases))


def test_idx_decompression_bomb_is_refused_with_bounded_memory(tmp_path, tally):
    # A valid header for 3 images, their bytes, then 256 MiB of zeros: a 260 KB file.
    path = _write_mnist_split(tmp_path, gzip_of(_idx_header(2051, (3, 28, 28)), 3 * 784 + (256 << 20)))
    assert os.path.getsize(path) < 1 << 20
    with _peak_memory() as memory:
        with pytest.raises(CorruptDataError, match=rf"{path}: the file holds more than the 2,352 bytes its header"):
            mnist.load_idx_split(str(tmp_path), "train")
    assert memory["peak"] < BOUNDED
    # Truncated data are named too, and a valid file still reads.
    path = _write_mnist_split(tmp_path, gzip.compress(_idx_header(2051, (3, 28, 28)) + bytes(784)))
    with pytest.raises(CorruptDataError, match=rf"{path}: the header declares 2,352 bytes of data but the file holds "
                                               r"784 bytes"):
        mnist.load_idx_split(str(tmp_path), "train")
    written = archive_writers.write_mnist(str(tmp_path))
    np.testing.assert_array_equal(mnist.load_idx_split(str(tmp_path), "train")[0][..., 0], written["x_train"])
    tally(CATEGORY, "idx.gz decompression bomb (260 KB expanding to 256 MiB)")


_BOMB_CHILD = textwrap.dedent("""
    import resource, sys
    from sphere_tf.data import fashion_mnist
    from sphere_tf.data.errors import CorruptDataError
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        fashion_mnist.read_idx(sys.argv[1])
    except CorruptDataError as error:
        print("refused:", error)
    print("grew_kib", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
""")


@pytest.mark.slow
def test_idx_bomb_of_4_gib_keeps_the_process_peak_bounded(tmp_path, tally):
    """The fast test's bomb at 4 GiB, read in a fresh process whose peak resident memory is compared before and
    after the read (ru_maxrss): what the OS saw, not only what Python traced."""
    path = str(tmp_path / "train-images-idx3-ubyte.gz")
    with open(path, "wb") as f:
        f.write(gzip_of(_idx_header(2051, (3, 28, 28)), 3 * 784 + (4 << 30)))
    env = dict(os.environ, KERAS_BACKEND=keras.backend.backend())
    result = subprocess.run([sys.executable, "-c", _BOMB_CHILD, path], capture_output=True, text=True, env=env,
                            timeout=300, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    assert "refused:" in result.stdout and path in result.stdout, result.stdout + result.stderr
    grew = int(result.stdout.split("grew_kib")[1])
    assert grew < 64 * 1024, f"the read grew the peak RSS by {grew} KiB"
    tally(CATEGORY, "idx.gz decompression bomb expanding to 4 GiB (peak RSS of a fresh process)")


# --- ImageNet: tars indexed in place ------------------------------------------------------------------------------

def _class_tar(wnid, extra=()):
    return tar_bytes([tar_member(f"{wnid}_{k}.JPEG", b"\xff\xd8 not decoded here") for k in range(2)] + list(extra))


def _write_imagenet(folder, outer_extra=(), inner_extra=(), val_extra=()):
    """Minimal ILSVRC2012 tars (the index reads headers only) with hostile members added."""
    os.makedirs(folder, exist_ok=True)
    outer = [tar_member(f"{w}.tar", _class_tar(w, inner_extra if w == "n01" else ()))
             for w in ("n01", "n02")] + list(outer_extra)
    with open(os.path.join(folder, imagenet.TRAIN_ARCHIVE), "wb") as f:
        f.write(tar_bytes(outer))
    val = [tar_member(f"ILSVRC2012_val_{k:08d}.JPEG", b"\xff\xd8 jpeg") for k in (1, 2)] + list(val_extra)
    with open(os.path.join(folder, imagenet.VAL_ARCHIVE), "wb") as f:
        f.write(tar_bytes(val))
    labels = os.path.join(folder, "labels.txt")
    with open(labels, "w") as f:
        f.write("n01\nn02\n")
    return labels


def test_imagenet_member_names_leaving_the_folder_are_refused(tmp_path, tally):
    manual = str(tmp_path / "a" / "b")
    tried = 0
    for case, extra in _traversal_members(str(tmp_path / "outside")).items():
        for where in ("outer", "inner", "val"):
            labels = _write_imagenet(manual, **{f"{where}_extra": extra})
            before = _tree(tmp_path)
            with pytest.raises(CorruptDataError) as raised:
                index = imagenet.index_train_tar(manual)
                imagenet.index_val_tar(manual, labels, index["wnids"])
            archive = os.path.join(manual, imagenet.VAL_ARCHIVE if where == "val" else imagenet.TRAIN_ARCHIVE)
            message = str(raised.value)
            assert message.startswith(archive + (":n01.tar" if where == "inner" else ":")), (case, where, message)
            assert repr(extra[0][0].name) in message, (case, where, message)
            assert _tree(tmp_path) == before
            tried += 1
    tally(CATEGORY, "ImageNet tar (outer, per-class or val) member leaving the folder", tried=tried)


def test_imagenet_members_declaring_more_than_the_tar_holds_are_refused(tmp_path, tally):
    manual = str(tmp_path)
    cases = {
        "val": dict(val_extra=[tar_member("ILSVRC2012_val_00000003.JPEG", b"x", size=1 << 40)]),
        "inner": dict(inner_extra=[tar_member("n01_9.JPEG", b"x", size=1 << 40)]),
        "outer": dict(outer_extra=[tar_member("n03.tar", b"x", size=1 << 40)]),
    }
    for where, extra in cases.items():
        labels = _write_imagenet(manual, **extra)
        with _peak_memory() as memory:
            with pytest.raises(CorruptDataError, match=r"declares 1,099,511,627,776 bytes at byte [\d,]+, past the "
                                                       r"end of the [\d,]+-byte tar"):
                index = imagenet.index_train_tar(manual)
                imagenet.index_val_tar(manual, labels, index["wnids"])
        assert memory["peak"] < BOUNDED, where
    # A pax header declaring 1 TiB (tarfile would read it whole): refused as larger than the archive.
    pax = tarfile.TarInfo("././@PaxHeader")
    pax.type, pax.size = tarfile.XHDTYPE, 1 << 40
    with open(os.path.join(manual, imagenet.VAL_ARCHIVE), "wb") as f:
        f.write(pax.tobuf(format=tarfile.GNU_FORMAT) + bytes(4096))
    with pytest.raises(CorruptDataError, match=r"ILSVRC2012_img_val\.tar: a header asks to read [\d,]+ bytes"):
        imagenet.index_val_tar(manual, labels, ("n01", "n02"))
    # The valid tars still index.
    labels = _write_imagenet(manual)
    index = imagenet.index_train_tar(manual)
    assert len(imagenet.index_val_tar(manual, labels, index["wnids"])["labels"]) == 2 and len(index["labels"]) == 4
    tally(CATEGORY, "ImageNet member or pax header declaring 1 TiB", tried=len(cases) + 1)


# --- images -----------------------------------------------------------------------------------------------------

def _png(width, height):
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    row = zlib.compress(bytes(1 + 3 * min(width, 64)))  # one short row: the pixel data are never reached
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", row) + chunk(b"IEND", b""))


def _patched(fmt, width, height):
    """A valid 8x8 image of `fmt` whose header declares `width` x `height` (the pixel data stay 8x8)."""
    from PIL import Image  # noqa: PLC0415 (Pillow: an optional dependency of the image readers)

    buffer = io.BytesIO()
    Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(buffer, fmt)
    data = bytearray(buffer.getvalue())
    if fmt == "JPEG":
        at = data.find(b"\xff\xc0")
        struct.pack_into(">HH", data, at + 5, height, width)
    elif fmt == "BMP":
        struct.pack_into("<ii", data, 18, width, height)
    elif fmt == "GIF":
        struct.pack_into("<HH", data, 6, width, height)
        at = data.find(b"\x2c")
        struct.pack_into("<HH", data, at + 5, width, height)
    return bytes(data)


def _huge_images(folder):
    """`{file: bytes}` of headers declaring huge images: far above Pillow's bomb limit (it would raise its own
    error, naming no file) and just above `MAX_IMAGE_PIXELS` (it would only warn, then decode 400 MB)."""
    files = {
        "png_100000x100000.png": _png(100000, 100000),
        "jpeg_65000x65000.jpg": _patched("JPEG", 65000, 65000),
        "bmp_100000x100000.bmp": _patched("BMP", 100000, 100000),
        "gif_65000x65000.gif": _patched("GIF", 65000, 65000),
        "png_12000x12000.png": _png(12000, 12000),
    }
    paths = {}
    for name, data in files.items():
        paths[name] = os.path.join(folder, name)
        with open(paths[name], "wb") as f:
            f.write(data)
    return paths


def test_images_declaring_huge_sizes_are_refused_before_decoding(tmp_path, tally):
    paths = _huge_images(str(tmp_path))
    readers = {
        "faces.image_shape": faces.image_shape,
        "faces.decode_image_numpy": lambda path: faces.decode_image_numpy(path, (112, 96, 3)),
        "numpy_preprocessing.decode_image": lambda path: numpy_preprocessing.decode_image(
            open(path, "rb").read(), what=path),
    }
    for name, path in paths.items():
        for reader, read in readers.items():
            with _peak_memory() as memory:
                with pytest.raises(CorruptDataError, match=r"(?s)" + path.replace(".", r"\.") + ".*pixels"):
                    read(path)
            assert memory["peak"] < BOUNDED, (reader, name)
    # The face-folder reader takes its shape from the first image's header.
    folder = tmp_path / "faces" / "someone"
    folder.mkdir(parents=True)
    (folder / "1.png").write_bytes(_png(100000, 100000))
    with pytest.raises(CorruptDataError, match=r"1\.png.*10,?000,?000,?000 pixels"):
        datasets.get_datasets("face_folder", batch_size=1, manual_dir=str(tmp_path / "faces"))
    tally(CATEGORY, "image header declaring up to 100000x100000 pixels (PNG, JPEG, BMP, GIF)",
          tried=len(paths) * len(readers) + 1)


def test_images_of_another_size_are_refused_from_their_header(tmp_path, tally):
    """A face crop must be the folder's size: one declaring 8000x8000 (64 M pixels, under Pillow's limit) is
    refused from its header, not decoded to 192 MB first."""
    path = str(tmp_path / "big.png")
    with open(path, "wb") as f:
        f.write(_png(8000, 8000))
    with _peak_memory() as memory:
        with pytest.raises(CorruptDataError, match=r"big\.png is not 112x96x3: height, width \(8000, 8000\)"):
            faces.decode_image_numpy(path, (112, 96, 3))
    assert memory["peak"] < BOUNDED
    tally(CATEGORY, "face crop whose header declares 8000x8000 pixels")


@pytest.mark.tensorflow_only
def test_tensorflow_decoders_refuse_huge_images_naming_the_file(tmp_path, tally):
    """The TensorFlow backend decodes pair images with TensorFlow (`evaluation.face`): its decoders refuse these
    headers themselves (over 2^29-2^31 bytes of pixels), and the error names the file."""
    from sphere_tf.evaluation import face  # noqa: PLC0415 (TensorFlow's decoder: this backend only)

    paths = _huge_images(str(tmp_path))
    for name, path in paths.items():
        if name == "png_12000x12000.png":
            continue  # 432 MB of pixels: under TensorFlow's bound, decoded (and then refused as the wrong size)
        with pytest.raises(CorruptDataError, match=path.replace(".", r"\.")):
            face.decode_pair_image(path, (112, 96, 3))
    tally(CATEGORY, "image header declaring up to 100000x100000 pixels, TensorFlow's decoder", tried=len(paths) - 1)


# --- pair lists -------------------------------------------------------------------------------------------------

def test_pair_lists_naming_paths_outside_the_image_folder_are_refused(tmp_path, tally):
    cases = {
        "lfw": ("1 1\n../../etc 1 2\nA 1 B 1\n", faces.read_pairs, r"pairs\.txt:2: name '\.\./\.\./etc'"),
        "lfw mismatched": ("1 1\nA 1 2\n/etc 1 B 1\n", faces.read_pairs, r"pairs\.txt:3: name '/etc'"),
        "ytf": ("split number, pair number, first name, second name, match pair, is same\n"
                "1, 1, ../x, A/1, 1, 1\n", faces.read_ytf_splits, r"pairs\.txt:2: name '\.\.'"),
    }
    for case, (text, read, message) in cases.items():
        path = tmp_path / "pairs.txt"
        path.write_text(text)
        with pytest.raises(CorruptDataError, match=message + r" is not a folder name"):
            read(str(path))
    tally(CATEGORY, "LFW / YouTube Faces pair list naming ../ or absolute paths", tried=len(cases))


def test_unsafe_member_covers_the_names_tarfile_can_hold():
    """`untrusted.unsafe_member`, the rule every reader applies, on names a hostile archive can hold."""
    unsafe = ["../x", "a/../../x", "/abs", "C:/x", "c:x", "a\\..\\..\\x", "\\abs", ".."]
    safe = ["a/b", "./a/b", "a..b/c", "..a/b", "a/b..", "n01440764.tar"]
    for name in unsafe:
        assert untrusted.unsafe_member(tarfile.TarInfo(name)) is not None, name
    for name in safe:
        assert untrusted.unsafe_member(tarfile.TarInfo(name)) is None, name
    for linkname, kind, ok in (("b", tarfile.SYMTYPE, True), ("../b", tarfile.SYMTYPE, True),
                               ("../../b", tarfile.SYMTYPE, False), ("/etc", tarfile.SYMTYPE, False),
                               ("a/b", tarfile.LNKTYPE, True), ("../b", tarfile.LNKTYPE, False)):
        info = tarfile.TarInfo("a/link")
        info.type, info.linkname = kind, linkname
        assert (untrusted.unsafe_member(info) is None) == ok, (linkname, kind)
