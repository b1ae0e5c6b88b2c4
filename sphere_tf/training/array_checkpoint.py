"""Step checkpoints of Keras variables as NumPy archives: the training state on JAX and PyTorch.

`tf.train.Checkpoint` saves TensorFlow trackables; on the other Keras backends a
variable is a `keras.Variable` over a JAX array or a torch tensor.
`ArrayCheckpoints` writes the same state — a dict name -> variable (model,
optimizer, step, regularizer and callback state) — as one
``state-<step>.npz`` per save (arrays keyed by those names) and a JSON index,
``checkpoint.json``, naming the saves in order.

Each save is atomic as `tf.train.CheckpointManager`'s: the archive is written
to a temporary file, flushed to disk and renamed, and only then does the index
(itself replaced by a rename) name it. A `kill -9` at any point leaves the
previous index, whose archives all exist, in charge; a half-written temporary
file or an archive no index names is ignored and removed by the next save. The
oldest archives beyond `max_to_keep` are deleted after the index stops naming
them.

The index records the sphere_tf version that wrote each archive (and the last
writer's, at its top): restoring an archive of a newer major or minor release
raises `sphere_tf.saving.NewerFileError` naming it; an archive of an older or
newer-patch release, or of one that recorded no version (0.1.0), is restored.

Damage after the write (a truncated or emptied file, a flipped bit) is detected, never restored: the index records
the SHA-256 of each archive's bytes, checked before the archive is read (the ZIP format's own CRC-32 covers each
member's data but not the names, sizes and headers around it: a flip there can rename an array or go unnoticed);
archives of releases that recorded no digest are checked by that CRC alone. A damaged archive raises
`CorruptCheckpointError` naming it, and `training.checkpoint.StepCheckpoint` falls back to the previous one. The
index is checked for its structure (every entry ``{"step": s, "file": "state-<s>.npz"}`` with distinct steps, a
64-digit digest, a version no newer than the index's writer); an index that fails (not JSON, truncated, emptied,
an edited field) is reported by name and the archives found in the folder are used instead, newest first. An
archive whose model or optimizer variables hold NaN or inf (`finite` names them; sphere_tf never writes one, an
older release or another program may have) is refused as damaged, naming the variable.

The module does not import TensorFlow.
"""

import hashlib
import json
import os
import re
import zipfile

import keras
import numpy as np
from absl import logging

from sphere_tf import json_files
from sphere_tf import saving
from sphere_tf import version

INDEX_FILE = "checkpoint.json"
FORMAT = "sphere_tf.array_checkpoint/1"
# The key of an index entry's SHA-256 of its archive (hex), recorded at the save and checked at the restore.
DIGEST_KEY = "sha256"
_PREFIX, _SUFFIX, _TEMPORARY = "state-", ".npz", ".tmp"
_ARCHIVE = re.compile(r"^state-(\d+)\.npz$")
_HEX_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def _archive_name(step):
    return f"{_PREFIX}{int(step)}{_SUFFIX}"


def read_index(directory):
    """The index of `directory` (dict with `checkpoints`: list of `{"step", "file"}`, oldest first), or None."""
    path = os.path.join(directory, INDEX_FILE)
    if not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8") as f:
            index = json.load(f)
    except ValueError as error:  # UnicodeDecodeError included
        raise CorruptCheckpointError(f"checkpoint index {path} is not valid JSON ({error}); it is replaced "
                                     "atomically, so it was damaged after it was written") from None
    if not isinstance(index, dict):
        raise CorruptCheckpointError(f"checkpoint index {path} holds a JSON {type(index).__name__}, not an object")
    if index.get("format") != FORMAT:
        # A format this release does not know: a newer release's (named as such), or something else.
        try:
            saving.check_version(index.get(saving.VERSION_KEY), f"checkpoint index {path}")
        except saving.NewerFileError:
            raise
        except ValueError as error:
            raise CorruptCheckpointError(str(error)) from None
        raise CorruptCheckpointError(f"{path} is not a sphere_tf array checkpoint index (format "
                                     f"{index.get('format')!r}, expected {FORMAT!r})")
    problem = _index_problem(index)
    if problem:
        raise CorruptCheckpointError(f"checkpoint index {path} is damaged ({problem})")
    return index


def _index_problem(index):
    """What is wrong with the structure of a parsed index (a field a damaged byte changed), or None."""
    entries = index.get("checkpoints")
    if not isinstance(entries, list):
        return "no list of checkpoints"
    seen = set()
    # In the order of the saves, not of the steps: a run resumed from an older checkpoint saves later steps again.
    for entry in entries:
        if not isinstance(entry, dict):
            return f"an entry {entry!r} is not an object"
        step = entry.get("step")
        if isinstance(step, bool) or not isinstance(step, int) or step < 0 or step in seen:
            return f"step {step!r} is not a new non-negative integer"
        seen.add(step)
        if entry.get("file") != _archive_name(step):  # the file name repeats the step: a changed digit shows
            return f"step {step} names the file {entry.get('file')!r}, not {_archive_name(step)!r}"
        digest = entry.get(DIGEST_KEY)
        if digest is not None and not (isinstance(digest, str) and _HEX_DIGEST.match(digest)):
            return f"the {DIGEST_KEY} of {entry['file']} is {digest!r}, not 64 hexadecimal digits"
        problem = version_problem(entry.get(saving.VERSION_KEY), index.get(saving.VERSION_KEY))
        if problem:
            return f"the {saving.VERSION_KEY} of {entry['file']} {problem}"
    return None


def version_problem(recorded, writer):
    """What is wrong with the version `recorded` for one checkpoint in a record last written by release `writer`
    (None: nothing, or nothing recorded).

    Not a version string is damage; so is a checkpoint of a newer format than the record's last writer: a release
    refuses to resume a newer format's checkpoints, so it never writes a record listing one, and a changed digit
    would otherwise read as "written by a newer release, upgrade".
    """
    if recorded is None:
        return None
    try:
        version.parse(recorded)
    except (TypeError, ValueError):
        return f"{recorded!r} is not a version"
    try:
        if writer is not None and version.newer_format(recorded, writer):
            return f"{recorded!r} is newer than the record's writer, {writer!r}"
    except (TypeError, ValueError):
        return f"is recorded by a writer whose version {writer!r} is not one"
    return None


def warn(message):
    """Reports damage that a restore works around: in the log and on stdout, where the user of a run sees it."""
    logging.warning("%s", message)
    print(f"Warning: {message}", flush=True)


def archives_on_disk(directory):
    """`[(step, path)]` of the ``state-<step>.npz`` files in `directory`, newest first (what an index would name:
    an archive is renamed into place only once it is complete, so none of them is half-written)."""
    found = [(int(match.group(1)), os.path.join(directory, name))
             for name in os.listdir(directory) if (match := _ARCHIVE.match(name))]
    return sorted(found, reverse=True)


def checkpoints(directory, report=False):
    """`[(step, archive path)]` the index of `directory` names, newest first.

    Without an index, or with a damaged one, the archives found in `directory` (`archives_on_disk`); `report`:
    say so (`warn`), naming the index.

    Raises:
        CorruptCheckpointError: the index is damaged and no archive is left (never an empty list then: a run
            does not start afresh over a folder that held checkpoints).
        sphere_tf.saving.NewerFileError: the index is in the format of a newer release.
    """
    if not os.path.isdir(directory):
        return []
    try:
        index = read_index(directory)
    except CorruptCheckpointError as error:
        found = archives_on_disk(directory)
        if not found:
            raise CorruptCheckpointError(f"{error}, and {directory} holds no checkpoint archive "
                                         f"({_PREFIX}<step>{_SUFFIX}) to use instead") from None
        if report:
            warn(f"{error}; using the checkpoint archives found in {directory} instead: "
                 f"{', '.join(os.path.basename(path) for _, path in found)}")
        return found
    if index is None:
        found = archives_on_disk(directory)
        if found and report:
            warn(f"{directory} holds checkpoint archives ({', '.join(os.path.basename(p) for _, p in found)}) "
                 f"but no index {INDEX_FILE}; using them")
        return found
    return [(int(entry["step"]), os.path.join(directory, entry["file"])) for entry in reversed(index["checkpoints"])]


def latest(directory):
    """`(step, archive path)` of the newest checkpoint in `directory` (`checkpoints`), or None."""
    found = checkpoints(directory)
    return found[0] if found else None


class CorruptCheckpointError(ValueError):
    """A checkpoint file that cannot be read (truncated, overwritten, not an archive); the message names it."""


class NonFiniteCheckpointError(CorruptCheckpointError):
    """A checkpoint whose model or optimizer variables hold NaN or inf; the message names the file and variable."""


class NonFiniteError(FloatingPointError):
    """Training produced NaN or inf (a loss, or a variable about to be saved); the message names the step."""


def file_digest(path):
    """The SHA-256 of the bytes of the file `path`, in hexadecimal."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def non_finite(values):
    """`(name, description)` of the first array of `values` (dict name -> array) holding NaN or inf, or None."""
    for name, value in values.items():
        value = np.asarray(value)
        if value.dtype.kind not in "fcV":  # integers, booleans: always finite
            continue
        try:
            finite = np.isfinite(value)
        except TypeError:  # a structured or opaque dtype
            continue
        if not finite.all():
            nan = int(np.isnan(value).sum())
            return name, f"{nan} NaN and {value.size - int(finite.sum()) - nan} inf of its {value.size} values"
    return None


def read(path, sha256=None):
    """dict name -> NumPy array, the values an archive holds.

    Args:
        path: str, the archive.
        sha256: optional hexadecimal SHA-256 the archive's bytes must have (its index entry's).

    Raises:
        CorruptCheckpointError: the file is missing, not a complete archive, or not the bytes `sha256` records
            (named in the message).
    """
    try:
        if sha256 is not None and file_digest(path) != sha256:
            raise CorruptCheckpointError(
                f"checkpoint file {path} does not hold the bytes that were written (its SHA-256 differs from the one "
                f"{INDEX_FILE} recorded at the save): it was damaged afterwards")
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as error:
        if isinstance(error, CorruptCheckpointError):
            raise
        raise CorruptCheckpointError(f"checkpoint file {path} cannot be read ({type(error).__name__}: "
                                     f"{str(error)[:200]})") from None


def _entry(path):
    """The index entry of the archive `path` ({} without one, or when the index is damaged: nothing recorded)."""
    directory, name = os.path.split(os.fspath(path))
    try:
        index = read_index(directory) if os.path.isdir(directory) else None
    except CorruptCheckpointError:
        return {}
    for entry in (index or {}).get("checkpoints", []):
        if entry.get("file") == name:
            return entry
    return {}


def check_version(path):
    """Raises `sphere_tf.saving.NewerFileError` when the index beside the archive `path` records that a newer
    major or minor sphere_tf release wrote it (no index entry, or none recorded: nothing to check)."""
    saving.check_version(_entry(path).get(saving.VERSION_KEY), f"checkpoint {path}")


def _write_archive(path, values):
    """Writes the archive through a temporary file renamed into place; returns the SHA-256 of its bytes."""
    temporary = path + _TEMPORARY
    try:
        with open(temporary, "wb") as f:
            np.savez(f, **values)
            f.flush()
            os.fsync(f.fileno())
        digest = file_digest(temporary)  # of the bytes on disk, after the flush
        os.replace(temporary, path)
    except BaseException as error:
        _remove(temporary)  # a write that failed (a full disk) gives its space back at once
        if isinstance(error, OSError) and error.filename is None:  # a failed write() names no file: name it
            raise OSError(error.errno, error.strerror, temporary) from error
        raise
    return digest


class ArrayCheckpoints:
    """Saves and restores a fixed set of Keras variables as ``state-<step>.npz`` files plus an index.

    Args:
        variables: dict name -> variable (`keras.Variable`, or any object with
            `assign` whose value converts with `keras.ops.convert_to_numpy`);
            the names key the archive.
        directory: str, the checkpoint folder (created on the first save).
        max_to_keep: int > 0, archives kept (oldest deleted first).
        finite: names (or prefixes of names, ending with '/') of the variables that must hold finite values: a
            save of NaN or inf in one raises `NonFiniteError`, a restore of one `NonFiniteCheckpointError`.
    """

    def __init__(self, variables, directory, max_to_keep, finite=()):
        self.variables = dict(variables)
        self.finite = tuple(finite)
        for name, variable in self.variables.items():
            if not callable(getattr(variable, "assign", None)):
                raise ValueError(f"Checkpoint entry {name!r} is a {type(variable).__name__}, not a variable "
                                 "(keras.Variable); array checkpoints save variables only.")
        self.directory = os.fspath(directory)
        self.max_to_keep = max_to_keep

    @property
    def latest_checkpoint(self):
        """str or None, the path of the newest archive."""
        found = latest(self.directory)
        return None if found is None else found[1]

    def save(self, step):
        """Writes the variables' current values as the checkpoint of `step`; returns the archive's path.

        Raises:
            NonFiniteError: a `finite` variable holds NaN or inf (nothing is written).
            OSError: a write failed (a full disk: errno ENOSPC); the previous checkpoint stays the latest, and the
                partial archive is removed.
        """
        values = {name: keras.ops.convert_to_numpy(variable) for name, variable in self.variables.items()}
        found = non_finite(self._checked(values))
        if found:
            raise NonFiniteError(f"variable {found[0]!r} holds {found[1]}; the checkpoint of step {int(step)} is not "
                                 f"written to {self.directory}")
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, _archive_name(step))
        digest = _write_archive(path, values)
        kept = [entry for entry in self._entries() if int(entry["step"]) != int(step)]
        kept.append({"step": int(step), "file": os.path.basename(path), saving.VERSION_KEY: version.__version__,
                     DIGEST_KEY: digest})
        kept = kept[-self.max_to_keep:]
        json_files.write_json(os.path.join(self.directory, INDEX_FILE),
                              {"format": FORMAT, "backend": keras.backend.backend(),
                               saving.VERSION_KEY: version.__version__, "checkpoints": kept})
        # Only now that the index no longer names them: older archives, and what killed saves left (a
        # temporary file, or an archive renamed before its index was written).
        named = {entry["file"] for entry in kept}
        for name in os.listdir(self.directory):
            if name.startswith(_PREFIX) and name not in named:
                _remove(os.path.join(self.directory, name))
        return path

    def _entries(self):
        """The index's entries, oldest first; where the index is damaged, the archives on disk (no record)."""
        try:
            index = read_index(self.directory)
        except CorruptCheckpointError:
            return [{"step": step, "file": os.path.basename(path)}
                    for step, path in reversed(archives_on_disk(self.directory))]
        return index["checkpoints"] if index else []

    def _checked(self, values):
        """The entries of `values` that must be finite (`finite`)."""
        return {name: value for name, value in values.items()
                if any(name == key or (key.endswith("/") and name.startswith(key)) for key in self.finite)}

    def restore(self, path):
        """Assigns the values of the archive `path` to the variables.

        Raises:
            sphere_tf.saving.NewerFileError: a newer major or minor sphere_tf
                release wrote the archive (its index says so); nothing is assigned.
            ValueError: the archive does not hold these names (or, under other
                default names, as many variables in each group) with these shapes
                (another model or optimizer wrote it); nothing is assigned.
            CorruptCheckpointError: the archive cannot be read or is not the bytes its index recorded;
                `NonFiniteCheckpointError` (a subclass): a `finite` variable holds NaN or inf. Nothing is assigned.
        """
        entry = _entry(path)
        saving.check_version(entry.get(saving.VERSION_KEY), f"checkpoint {path}")
        values = read(path, entry.get(DIGEST_KEY))
        if set(values) != set(self.variables):
            values = self._by_position(values)
        found = non_finite(self._checked(values))
        if found:
            raise NonFiniteCheckpointError(f"checkpoint file {path} holds non-finite values: variable {found[0]!r} "
                                           f"has {found[1]}")
        for name, variable in self.variables.items():
            if tuple(values[name].shape) != tuple(variable.shape):
                raise ValueError(f"{name!r} has shape {values[name].shape} in the checkpoint, "
                                 f"{tuple(variable.shape)} here")
        for name, variable in self.variables.items():
            variable.assign(values[name].astype(keras.backend.standardize_dtype(variable.dtype)))


    def _by_position(self, values):
        """`values` renamed to this checkpoint's names, group by group in order (`model_variables/...`).

        Keras numbers the default names of layers and optimizers per process (`adam`, then `adam_1`), so
        a run resumed in a process that made other objects first saves the same variables under other
        paths; like `tf.train.Checkpoint`'s lists, the variables of a group are then matched by position.
        """
        def groups(names):
            grouped = {}
            for name in names:
                grouped.setdefault(name.split("/", 1)[0] if "/" in name else name, []).append(name)
            return grouped

        saved, own = groups(values), groups(self.variables)
        if {g: len(n) for g, n in saved.items()} != {g: len(n) for g, n in own.items()}:
            missing = sorted(set(self.variables) - set(values))
            unexpected = sorted(set(values) - set(self.variables))
            raise ValueError(f"missing {missing[:5]}{' ...' if len(missing) > 5 else ''}, unexpected "
                             f"{unexpected[:5]}{' ...' if len(unexpected) > 5 else ''}")
        return {mine: values[theirs] for group in own for mine, theirs in zip(own[group], saved[group])}


def _remove(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass
