"""Helpers of the untrusted-file tests: a monitor of code execution (PEP 578 audit events) and hostile-file writers.

The monitor is the tests' oracle for "nothing from the file was run": CPython raises an audit event whenever
bytecode is unmarshalled (`marshal.loads`, how Keras rebuilds a Python lambda), a pickle names a global to load
(`pickle.find_class`, how a pickle reaches `os.system`), source is compiled or a code object executed (`compile`,
`exec`: eval/exec), or a process is started. Imports raise the same events for module code, so events raised while
the import machinery is on the stack are left out (a lazy import during a load is not the file's code).
"""

import contextlib
import gzip
import io
import sys
import tarfile
import zlib

CODE_EVENTS = frozenset({
    "marshal.loads", "marshal.load", "pickle.find_class", "exec", "compile",
    "os.system", "os.exec", "os.posix_spawn", "os.spawn", "subprocess.Popen",
})

_active = []  # the event lists of the monitors now open
_installed = []  # an audit hook cannot be removed: installed once per process, idle when no monitor is open


def _importing(frame):
    """Whether the import machinery is on the stack (frozen in CPython builds, a file in others)."""
    while frame is not None:
        filename = frame.f_code.co_filename
        if "importlib" in filename and "_bootstrap" in filename:
            return True
        frame = frame.f_back
    return False


def _summary(event, args):
    first = args[0] if args else None
    if event == "exec" and hasattr(first, "co_filename"):
        return f"{first.co_name} of {first.co_filename}"
    return repr(first)[:120]


def _hook(event, args):
    if not _active or event not in CODE_EVENTS or _importing(sys._getframe(1)):
        return
    for events in list(_active):
        events.append((event, _summary(event, args)))


@contextlib.contextmanager
def code_execution_monitor():
    """Yields a list that collects `(event, detail)` for every code-running audit event raised (outside imports)
    while the block runs, in any thread."""
    if not _installed:
        sys.addaudithook(_hook)
        _installed.append(True)
    events = []
    _active.append(events)
    try:
        yield events
    finally:
        _active.remove(events)


# --- hostile archives -------------------------------------------------------------------------------------------

def tar_member(name, data=b"", *, kind=tarfile.REGTYPE, linkname="", size=None):
    """A `(TarInfo, data)` pair; `size` overrides the declared size (the data written stay `data`)."""
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    info.size = len(data) if size is None else size
    if kind != tarfile.REGTYPE:
        info.size = 0
    return info, data


def tar_bytes(members, fmt=tarfile.GNU_FORMAT):
    """The bytes of a tar of `members` (`tar_member` pairs), each header written as declared: a member declaring
    more than its data is written with its data only (what a hostile archive does; `tarfile` would refuse)."""
    out = io.BytesIO()
    for info, data in members:
        out.write(info.tobuf(format=fmt, encoding="utf-8", errors="surrogateescape"))
        out.write(data)
        out.write(b"\0" * (-len(data) % tarfile.BLOCKSIZE))
    out.write(b"\0" * (2 * tarfile.BLOCKSIZE))
    return out.getvalue()


_ZERO_BLOCK = 64 << 20
_zero_member = []


def _zeros_member():
    """One gzip member of 64 MiB of zeros (about 64 KB compressed), made once."""
    if not _zero_member:
        compressor = zlib.compressobj(9, zlib.DEFLATED, 31)  # wbits 31: a gzip member; zeros deflate ~1000:1
        chunk = bytes(1 << 20)
        body = b"".join(compressor.compress(chunk) for _ in range(_ZERO_BLOCK >> 20)) + compressor.flush()
        _zero_member.append(body)
    return _zero_member[0]


def gzip_of(*parts):
    """A multi-member gzip file of `parts` (bytes, or an int: that many zero bytes), in order.

    Readers decompress the members as one stream; a run of zeros is stored as repeated 64 MiB members, so a
    file of a few MB expands to gigabytes without compressing them here.
    """
    out = []
    for part in parts:
        if isinstance(part, int):
            blocks, rest = divmod(part, _ZERO_BLOCK)
            out.extend([_zeros_member()] * blocks)
            if rest:
                out.append(gzip.compress(bytes(rest), compresslevel=1))
        else:
            out.append(gzip.compress(part, compresslevel=1))
    return b"".join(out)
