"""Downloaded files read as untrusted input: member names, declared sizes and decompression are checked first.

The data readers (`cifar`, `mnist` / `fashion_mnist`, `imagenet`, `faces`, `numpy_preprocessing.decode_image`)
read archives and images that came from elsewhere. None of them extracts anything to disk: each reads the members
it needs in place. What a file declares is checked before it is believed, and every refusal is a
`CorruptDataError` naming the file (and the member):

- Member names (`members`): an archive holding a member named by an absolute path or with a `..` component, or a
  link (symbolic or hard) whose target is absolute or leaves the archive's top folder, is refused as a whole. The
  published archives have none; a reader that matched such a name to the member it wants (CIFAR's once stripped
  leading `../` and `/` from names) would read what an extractor would have written outside its folder. A member
  a reader needs that is a link or anything but a regular file is refused too (`check_regular`).
- Declared sizes: a tar member or an idx header that declares more bytes than the reader accepts (the published
  file's size, or the archive's own size for an uncompressed tar) is refused before a buffer of that size exists.
- Decompression (`open_tar`, `read_exactly`): a compressed tar is read through `BoundedReader`, which refuses one
  read larger than the largest member the reader accepts (`tarfile` reads a pax or GNU long-name header whole,
  whatever size it declares) and any position past a total decompressed size, so a small file that expands to
  many gigabytes fails after bounded work and memory. Idx files are read in 1 MiB chunks into an array of the size
  their header declares; a byte more than that is an error.
- Headers per archive (`members`): `tarfile` keeps every header it has read, so an archive of millions of empty
  members (they compress to almost nothing) is cut off at a member count well above the published one.
- Images (`check_image_pixels`): an image whose header declares more pixels than Pillow's `MAX_IMAGE_PIXELS`
  (89.5 M by default, which a user may raise) is refused before it is decoded; Pillow itself only warns below
  twice that and raises its own `DecompressionBombError`, naming no file, above.

No reader unpickles anything (CIFAR is read from its binary version; the python version's batches are pickles,
which run code when loaded, and are not read: `cifar` says so when only they are found), and no Keras file is
loaded with `safe_mode=False` (`sphere_tf.saving.load_model`).
"""

import bz2
import contextlib
import gzip
import lzma
import os
import posixpath
import tarfile

import numpy as np

from sphere_tf.data.errors import CorruptDataError

# One read of a decompressed stream at a time: the bound on the memory a bomb can make a reader hold at once.
CHUNK_BYTES = 1 << 20


def _describe_size(size):
    return f"{size:,} bytes" if size < 1 << 20 else f"{size:,} bytes ({size / (1 << 20):,.1f} MiB)"


class BoundedReader:
    """A read-only binary file that refuses to read or seek past `max_total` bytes and one read above `max_read`.

    Wraps a decompressed stream (`gzip.GzipFile`, ...) or a plain file for `tarfile` (which needs `read`, `seek`
    and `tell`). `what` names the file in the `CorruptDataError` it raises.
    """

    def __init__(self, fileobj, what, max_read, max_total):
        self._file = fileobj
        self._what = what
        self.max_read = int(max_read)
        self.max_total = int(max_total)

    def _refuse(self, message):
        raise CorruptDataError(f"{self._what}: {message}; refused before reading it (a corrupt or hostile file).")

    def read(self, size=-1):
        """Up to `size` bytes (all up to the bound when negative); `CorruptDataError` past either bound."""
        if size is None or size < 0:
            # A read "to the end" of a stream whose end is unknown: as much as the bound allows, and one byte more
            # to tell a stream that ends within it from one that does not.
            size = self.max_total - self._file.tell() + 1
        if size > self.max_read:
            self._refuse(f"a header asks to read {_describe_size(size)} at once, more than the "
                         f"{_describe_size(self.max_read)} this reader accepts")
        if self._file.tell() + size > self.max_total + 1:
            size = self.max_total + 1 - self._file.tell()
        data = self._file.read(size)
        if self._file.tell() > self.max_total:
            self._refuse(f"expands past {_describe_size(self.max_total)}, more than the file this reader expects")
        return data

    def seek(self, offset, whence=os.SEEK_SET):
        """Moves as `io.IOBase.seek` does; `CorruptDataError` for a position past `max_total`."""
        target = {os.SEEK_SET: offset, os.SEEK_CUR: self._file.tell() + offset}.get(whence)
        if target is not None and target > self.max_total:
            self._refuse(f"a header places data at byte {target:,}, past {_describe_size(self.max_total)} (more "
                         "than the file this reader expects, or past the end of the archive)")
        return self._file.seek(offset, whence)

    def tell(self):
        """The current position in the decompressed stream."""
        return self._file.tell()

    def seekable(self):
        """True: `tarfile` seeks over the members it skips (forward seeks stay within the bound)."""
        return True

    def readable(self):
        """True: a file opened for reading."""
        return True

    def close(self):
        """Closes the wrapped file."""
        self._file.close()


def _decompressor(raw):
    """`raw` (a binary file) decompressed by the format its first bytes name (gzip, bzip2, xz), or itself."""
    magic = raw.read(6)
    raw.seek(0)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(fileobj=raw, mode="rb")
    if magic.startswith(b"BZh"):
        return bz2.BZ2File(raw)
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(raw)
    return raw


@contextlib.contextmanager
def open_tar(path, max_read, max_total, compressed=True):
    """The tar archive `path` (plain, gzip, bzip2 or xz) read through a `BoundedReader`.

    Args:
        path: str, the archive.
        max_read: int, the largest member (or pax / long-name header) the caller accepts.
        max_total: int, the largest the uncompressed archive may be (for a plain tar: its size).
        compressed: bool, detect a compression from the first bytes (as `tarfile`'s mode 'r:*'); False for a tar
            that is published uncompressed (ImageNet's), read as it is.

    Yields:
        `tarfile.TarFile`; iterate it with `members`.

    Raises:
        CorruptDataError: a header asks for more than the bounds allow (the message names `path`).
        tarfile.TarError, OSError, EOFError: not a readable archive (the caller names the file).
    """
    with open(path, "rb") as raw:
        stream = _decompressor(raw) if compressed else raw
        try:
            with tarfile.open(fileobj=BoundedReader(stream, path, max_read, max_total), mode="r:") as tar:
                yield tar
        finally:
            if stream is not raw:
                stream.close()


def _absolute(name):
    """A POSIX absolute path, or a Windows one (`C:...`): `name` with backslashes as slashes."""
    return name.startswith("/") or (len(name) > 1 and name[1] == ":" and name[0].isalpha())


def unsafe_member(member):
    """Why reading `member` (a `tarfile.TarInfo`) by name could mean a file outside the archive's folder: a
    phrase, or None when its name (and its link target) stays inside."""
    name = member.name.replace("\\", "/")
    if _absolute(name):
        return "is an absolute path"
    if ".." in name.split("/"):
        return "has a '..' component (it names a place outside the archive's folder)"
    if member.issym() or member.islnk():
        target = member.linkname.replace("\\", "/")
        if _absolute(target):
            return f"is a link to the absolute path {member.linkname!r}"
        # A symbolic link's target is relative to its folder, a hard link's to the archive's top.
        base = posixpath.dirname(name) if member.issym() else ""
        resolved = posixpath.normpath(posixpath.join(base, target))
        if resolved == ".." or resolved.startswith("../"):
            return f"is a link to {member.linkname!r}, outside the archive's folder"
    return None


def members(tar, path, max_members):
    """The members of `tar` (opened from `path`), each checked by `unsafe_member`, at most `max_members`.

    Raises:
        CorruptDataError: a member's name or link leaves the archive's folder, or the archive holds more than
            `max_members` members (the message names `path` and the member).
    """
    for count, member in enumerate(tar, start=1):
        if count > max_members:
            raise CorruptDataError(
                f"{path}: more than {max_members:,} members (the published archive holds far fewer); refused "
                "before reading more headers (a corrupt or hostile archive).")
        reason = unsafe_member(member)
        if reason is not None:
            raise CorruptDataError(
                f"{path}: member {member.name!r} {reason}; the archive is refused (nothing was extracted).")
        yield member


def member_name(member):
    """`member`'s name without leading `./` (as `tar -C dir .` writes them): the name a reader matches."""
    name = member.name
    while name.startswith("./"):
        name = name[2:]
    return name


def check_regular(path, member):
    """Raises `CorruptDataError` unless `member` of the archive `path` is a regular file (not a link, a folder or
    a device): a reader reads only regular members."""
    if not member.isfile():
        kind = ("a symbolic link to " + repr(member.linkname) if member.issym()
                else "a hard link to " + repr(member.linkname) if member.islnk()
                else "a folder" if member.isdir() else "not a regular file")
        raise CorruptDataError(f"{path}: member {member.name!r} is {kind}, not a regular file; refused.")


def check_member_size(path, member, limit, why):
    """Raises `CorruptDataError` when `member` declares more than `limit` bytes (`why`: what the limit is)."""
    if member.size > limit:
        raise CorruptDataError(
            f"{path}: member {member.name!r} declares {_describe_size(member.size)}, more than {why} "
            f"({_describe_size(limit)}); refused before reading it (a corrupt or hostile archive).")


def read_exactly(fileobj, size, what, whole=True):
    """`size` bytes of `fileobj` as a uint8 array, read in `CHUNK_BYTES` chunks.

    Args:
        fileobj: a binary file (a decompressing one: each chunk is decompressed on demand).
        size: int, the bytes the file's header declares (checked against a bound by the caller).
        what: str, the file's name for errors.
        whole: bool, also require the file to end there.

    Raises:
        CorruptDataError: fewer bytes, or (`whole`) more bytes than `size`; the message names `what`.
    """
    out = np.empty(size, np.uint8)
    view = memoryview(out)
    done = 0
    while done < size:
        count = fileobj.readinto(view[done:done + CHUNK_BYTES])
        if not count:
            raise CorruptDataError(
                f"{what}: the header declares {_describe_size(size)} of data but the file holds "
                f"{_describe_size(done)}; the file is truncated or corrupt.")
        done += count
    if whole and fileobj.read(1):
        raise CorruptDataError(
            f"{what}: the file holds more than the {_describe_size(size)} its header declares; refused after "
            "reading that much (a corrupt file, or a decompression bomb).")
    return out


def check_image_pixels(width, height, what, image_module):
    """Raises `CorruptDataError` when an image header declares more than Pillow's `MAX_IMAGE_PIXELS` pixels.

    Args:
        width, height: ints from the header.
        what: str, the image's name for errors.
        image_module: `PIL.Image` (Pillow is optional: the caller imported it).
    """
    limit = image_module.MAX_IMAGE_PIXELS
    if limit is not None and width * height > limit:
        raise CorruptDataError(
            f"{what}: the header declares {width}x{height} = {width * height:,} pixels, more than Pillow's "
            f"MAX_IMAGE_PIXELS ({int(limit):,}); refused before decoding it (raise PIL.Image.MAX_IMAGE_PIXELS to "
            "read larger images you trust).")


__all__ = ["BoundedReader", "CHUNK_BYTES", "check_image_pixels", "check_member_size", "check_regular", "member_name",
           "members", "open_tar", "read_exactly", "unsafe_member"]
