"""One run per workdir: an exclusive `flock` on `<workdir>/run.lock` for as long as a run writes the folder.

Two runs started on one workdir would both restore the same checkpoint, both train, and interleave their
checkpoints, `history.json` and `results.json`: what is left matches neither. The runner's tasks therefore take
this lock after the config and the data are checked (a refused config still leaves no workdir) and before they
write anything, and hold it until they return; a second run on the folder is refused at once with
`WorkdirLockedError`, naming the workdir and the holder (pid, host, start time and command, which the holder
writes into the lock file).

The lock is `flock(2)`, not the file's existence: the kernel releases it when the holder's last descriptor
closes, including when the process is killed with `kill -9`, so the same command resumes a killed run without
anyone deciding that a leftover file is "stale". The file stays in the workdir between runs. Its descriptor is
opened close-on-exec (an exported child process does not inherit it), and a process forked by the holder (a data
loader's worker) closes its copy at once, so a forked child that outlives a killed holder does not keep the
workdir locked. (On NFS, Linux implements `flock` with NFS byte-range locks, which hosts share; on file systems
without locks the `OSError` of `flock` is raised as it is.)

Multi-process runs share one workdir: only the process that writes it (the chief of a `tf.distribute`
multi-worker run, process 0 of a multi-process JAX run) takes the lock.

`acquire(workdir)` takes the lock for the innermost function decorated with `@held_while_running` (a task's
`run`), which releases it when that function returns or raises; a process that holds a workdir's lock may
acquire it again (the face task runs the classification task in the same workdir). `hold(workdir)` is the
context-manager form for scripts that drive the library themselves.
"""

import contextlib
import functools
import json
import os
import socket
import sys
import threading
import time

try:
    import fcntl
except ImportError:  # Windows: no flock; the runner then works without the lock (see `acquire`)
    fcntl = None

from sphere_tf.training import multi_device

LOCK_FILE = "run.lock"
_COMMAND_CHARS = 300  # the holder's command line, shortened, in the refusal message
_RECORD_WAITS = 20  # × 50 ms: how long a refused run waits for a holder's record that is not written yet


class WorkdirLockedError(ValueError):
    """Another live process holds the workdir's lock; the message names the workdir and that process."""


class _Held:
    def __init__(self, fd, path):
        self.fd, self.path = fd, path


_mutex = threading.Lock()
_held = {}  # realpath(workdir) -> _Held, the locks this process holds
_scopes = threading.local()  # per thread: a stack of lists of the workdirs each `held_while_running` call took


def _scope_stack():
    stack = getattr(_scopes, "stack", None)
    if stack is None:
        stack = _scopes.stack = []
    return stack


def _forget_in_child():
    global _mutex
    _mutex = threading.Lock()  # another thread of the parent may have held it at the fork
    # A forked child shares the holder's open file description; flock belongs to that description, so the child
    # only closes its own descriptor (never LOCK_UN, which would unlock the parent too). Without this a data
    # loader's worker that outlives a killed holder would keep the workdir locked.
    for held in _held.values():
        try:
            os.close(held.fd)
        except OSError:
            pass
    _held.clear()
    _scopes.stack = []


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def _record():
    return {"pid": os.getpid(), "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime()),
            "command": " ".join(sys.argv)[:_COMMAND_CHARS]}


def _read_record(fd):
    """The holder's record in the lock file (empty when it is still being written or unreadable)."""
    try:
        data = os.pread(fd, 4096, 0)
        record = json.loads(data.decode("utf-8")) if data else {}
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _message(workdir, path, record):
    if record.get("pid") is None:
        who = "a process whose record is not written yet"
    else:
        who = (f"pid {record.get('pid')} on host {record.get('host', '?')}, started {record.get('started', '?')}"
               f" ({record.get('command') or 'command unknown'})")
    return (f"The workdir {workdir} is in use by another run: {who}. Two runs on one workdir would interleave their "
            f"checkpoints: wait for that run to end or stop it, or pass another --workdir (the lock is {path}, "
            "released by the kernel when its process ends, even by kill -9).")


def _lock(workdir, path):
    """A descriptor of `path` holding its exclusive flock; `WorkdirLockedError` when another process holds it."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            record = _read_record(fd)
            for _ in range(_RECORD_WAITS):  # the holder writes its record right after its flock succeeds
                if record:
                    break
                time.sleep(0.05)
                record = _read_record(fd)
            os.close(fd)
            raise WorkdirLockedError(_message(workdir, path, record)) from None
        except BaseException:
            os.close(fd)
            raise
        # A holder that removed the file (`release(..., remove=True)`) between our open and our flock left us
        # locking an inode no later run opens: lock the file now at `path` instead.
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)


def acquire(workdir):
    """Takes the exclusive lock of `workdir` (creating the folder) for this process.

    Held until the innermost `@held_while_running` function of this thread returns (or, called outside one,
    until `release(workdir)` or the end of the process). Acquiring a workdir this process already holds does
    nothing. Without `fcntl` (Windows) nothing is locked.

    Returns:
        str, the lock file's path.

    Raises:
        WorkdirLockedError (a ValueError): another process holds the lock; the message names the workdir and
            that process (pid, host, start time, command).
    """
    workdir = os.fspath(workdir)
    path = os.path.join(workdir, LOCK_FILE)
    if fcntl is None:
        return path
    key = os.path.realpath(workdir)
    with _mutex:
        if key in _held:
            return _held[key].path
        os.makedirs(workdir, exist_ok=True)
        fd = _lock(workdir, path)
        data = json.dumps(_record()).encode("utf-8")
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        _held[key] = _Held(fd, path)
    stack = _scope_stack()
    if stack:
        stack[-1].append(key)
    return path


def release(workdir, remove=False):
    """Releases this process's lock of `workdir` (nothing when it holds none); `remove` also deletes the file
    (used where a refused run removes the workdir it created)."""
    _release(os.path.realpath(os.fspath(workdir)), remove)


def _release(key, remove=False):
    with _mutex:
        held = _held.pop(key, None)
        if held is None:
            return
        try:
            # Emptied first: a run refused in the instant before the next holder writes its record reads no
            # record rather than this finished one's.
            os.ftruncate(held.fd, 0)
            if remove:
                os.remove(held.path)
        except OSError:
            pass
        finally:
            os.close(held.fd)  # releases the flock


def held_while_running(function):
    """Decorator: the locks `acquire` takes during a call of `function` are released when it returns or raises."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        stack = _scope_stack()
        stack.append([])
        try:
            return function(*args, **kwargs)
        finally:
            for key in reversed(stack.pop()):
                _release(key)

    return wrapper


@contextlib.contextmanager
def hold(workdir):
    """Context manager: `acquire(workdir)`, released on exit (unless this process held it already)."""
    key = os.path.realpath(os.fspath(workdir))
    already = key in _held
    path = acquire(workdir)
    try:
        yield path
    finally:
        if not already:
            _release(key)


def holder(workdir):
    """The record (`pid`, `host`, `started`, `command`) of the process holding `workdir`'s lock, or None when no
    process holds it. Another process's lock is probed, not waited for."""
    path = os.path.join(os.fspath(workdir), LOCK_FILE)
    if fcntl is None or not os.path.isfile(path):
        return None
    key = os.path.realpath(os.fspath(workdir))
    if key in _held:
        return _read_record(_held[key].fd)
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _read_record(fd)
        return None
    finally:
        os.close(fd)  # also drops the shared lock the probe may have taken


def is_writer(strategy_name=None):
    """Whether this process is the one that writes a run's workdir: not a non-chief `tf.distribute` worker
    (`strategy_name='multi_worker'`, read from TF_CONFIG) nor a JAX process other than 0. For code that decides
    before the run's strategy exists (the face task); the classifier asks its strategy (`distribute.is_chief`)."""
    if multi_device.process_index() != 0:
        return False
    if strategy_name != "multi_worker" or not os.environ.get("TF_CONFIG"):
        return True
    try:
        spec = json.loads(os.environ["TF_CONFIG"])
        task_type, index, cluster = spec["task"]["type"], int(spec["task"]["index"]), spec["cluster"]
    except (ValueError, KeyError, TypeError):
        return True  # the strategy refuses a bad TF_CONFIG later, with its own message
    return task_type == "chief" or (task_type == "worker" and index == 0 and "chief" not in cluster)


__all__ = ["LOCK_FILE", "WorkdirLockedError", "acquire", "held_while_running", "hold", "holder", "is_writer",
           "release"]
