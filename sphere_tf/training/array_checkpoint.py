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

The module does not import TensorFlow.
"""

import json
import os
import zipfile

import keras
import numpy as np

from sphere_tf import json_files
from sphere_tf import saving
from sphere_tf import version

INDEX_FILE = "checkpoint.json"
FORMAT = "sphere_tf.array_checkpoint/1"
_PREFIX, _SUFFIX, _TEMPORARY = "state-", ".npz", ".tmp"


def _archive_name(step):
    return f"{_PREFIX}{int(step)}{_SUFFIX}"


def read_index(directory):
    """The index of `directory` (dict with `checkpoints`: list of `{"step", "file"}`, oldest first), or None."""
    path = os.path.join(directory, INDEX_FILE)
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            index = json.load(f)
    except ValueError as error:
        raise CorruptCheckpointError(f"checkpoint index {path} is not valid JSON ({error}); it is replaced "
                                     "atomically, so something else wrote it: restore it or use a new workdir.") from None
    if index.get("format") != FORMAT:
        # A format this release does not know: a newer release's (named as such), or something else.
        saving.check_version(index.get(saving.VERSION_KEY), f"checkpoint index {path}")
        raise ValueError(f"{path} is not a sphere_tf array checkpoint index (format {index.get('format')!r}, "
                         f"expected {FORMAT!r}).")
    return index


def checkpoints(directory):
    """`[(step, archive path)]` the index of `directory` names, newest first ([] without an index)."""
    index = read_index(directory) if os.path.isdir(directory) else None
    entries = index["checkpoints"] if index else []
    return [(int(entry["step"]), os.path.join(directory, entry["file"])) for entry in reversed(entries)]


def latest(directory):
    """`(step, archive path)` of the newest checkpoint in `directory`, or None."""
    index = read_index(directory) if os.path.isdir(directory) else None
    if not index or not index["checkpoints"]:
        return None
    entry = index["checkpoints"][-1]
    return int(entry["step"]), os.path.join(directory, entry["file"])


class CorruptCheckpointError(ValueError):
    """A checkpoint file that cannot be read (truncated, overwritten, not an archive); the message names it."""


def read(path):
    """dict name -> NumPy array, the values an archive holds.

    Raises:
        CorruptCheckpointError: the file is missing or not a complete archive (named in the message).
    """
    try:
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as error:
        raise CorruptCheckpointError(f"checkpoint file {path} cannot be read ({type(error).__name__}: "
                                     f"{str(error)[:200]})") from None


def check_version(path):
    """Raises `sphere_tf.saving.NewerFileError` when the index beside the archive `path` records that a newer
    major or minor sphere_tf release wrote it (no index entry, or none recorded: nothing to check)."""
    directory, name = os.path.split(os.fspath(path))
    index = read_index(directory) if os.path.isdir(directory) else None
    for entry in (index or {}).get("checkpoints", []):
        if entry.get("file") == name:
            saving.check_version(entry.get(saving.VERSION_KEY), f"checkpoint {path}")


def _write_archive(path, values):
    temporary = path + _TEMPORARY
    with open(temporary, "wb") as f:
        np.savez(f, **values)
        f.flush()
        os.fsync(f.fileno())
    os.replace(temporary, path)


class ArrayCheckpoints:
    """Saves and restores a fixed set of Keras variables as ``state-<step>.npz`` files plus an index.

    Args:
        variables: dict name -> variable (`keras.Variable`, or any object with
            `assign` whose value converts with `keras.ops.convert_to_numpy`);
            the names key the archive.
        directory: str, the checkpoint folder (created on the first save).
        max_to_keep: int > 0, archives kept (oldest deleted first).
    """

    def __init__(self, variables, directory, max_to_keep):
        self.variables = dict(variables)
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
        """Writes the variables' current values as the checkpoint of `step`; returns the archive's path."""
        os.makedirs(self.directory, exist_ok=True)
        values = {name: keras.ops.convert_to_numpy(variable) for name, variable in self.variables.items()}
        path = os.path.join(self.directory, _archive_name(step))
        _write_archive(path, values)
        index = read_index(self.directory) or {"format": FORMAT, "checkpoints": []}
        kept = [entry for entry in index["checkpoints"] if int(entry["step"]) != int(step)]
        kept.append({"step": int(step), "file": os.path.basename(path), saving.VERSION_KEY: version.__version__})
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

    def restore(self, path):
        """Assigns the values of the archive `path` to the variables.

        Raises:
            sphere_tf.saving.NewerFileError: a newer major or minor sphere_tf
                release wrote the archive (its index says so); nothing is assigned.
            ValueError: the archive does not hold these names (or, under other
                default names, as many variables in each group) with these shapes
                (another model or optimizer wrote it); nothing is assigned.
        """
        check_version(path)
        values = read(path)
        if set(values) != set(self.variables):
            values = self._by_position(values)
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
