"""Step-level checkpoints with exact resume for `model.fit`, and the workdir's config guard.

A training run is a pure function of its starting state and the sequence of
batches it sees. Resuming exactly therefore needs two things:

1. **All the state**, saved every N optimizer steps: every model variable
   (trainable and not: BatchNorm moving statistics, the E{‖x‖} moving averages
   `norm_mean_biased` / `norm_mean_weight` of the TanhConv-style magnitudes of
   Decoupled Networks (Liu et al., CVPR 2018, Eq. 5-6), `MarginHead`'s
   `iteration` counter behind the λ annealing of SphereFace / L-Softmax, random
   seed states), every optimizer variable (slots such as Adam's m and v, and
   `iterations`) and the global step. They are written with
   `tf.train.Checkpoint` and `tf.train.CheckpointManager`: a checkpoint becomes
   the latest only after all its files exist, so `kill -9` during a save leaves
   the previous one in charge.
2. **The input position.** `keras.callbacks.BackupAndRestore` restores the
   variables at an epoch boundary but builds a fresh iterator over the
   training set, and a `Dataset.shuffle(..., seed=s, reshuffle_each_iteration=True)`
   starts its sequence of orders again: the resumed epoch sees the order of the
   *first* epoch, not the one the uninterrupted run sees. That is the state it
   loses (`tests/training/test_checkpoint.py` shows it). Here the training data
   is one stream of batches indexed by the global step, `dataset.repeat()`:
   each pass reshuffles deterministically under the pipeline's seed, and a run
   resumed at step s reads `dataset.repeat().skip(s)`, exactly the batches the
   uninterrupted run reads from step s on. A pipeline that can jump to a step
   without reading the skipped batches passes a callable `step -> dataset`.

`fit_resumable` is a small driver around `model.fit` rather than a callback
alone: a callback cannot hand `fit` a repositioned dataset, nor start it in the
middle of an epoch. The driver restores the latest checkpoint, finishes a
partial epoch with one `fit` call of the remaining steps, runs the remaining
epochs with a second, and leaves everything else (callbacks, progress bars,
`tf.distribute`, mixed precision) to `fit`. `StepCheckpoint` is the callback it
uses to count steps and save.

Under `tf.distribute.MultiWorkerMirroredStrategy` every worker saves (as the
strategy requires) but only the chief writes to `directory`; the others write
to a temporary folder inside it and delete it after each save, and every
worker restores from the chief's checkpoints (`training.distribute`). Callbacks
whose state must survive a resume (e.g. `callbacks.SOPTEpisodes`) expose it
through a `checkpoint_state()` method; `fit_resumable` saves it with the rest.

On the JAX and PyTorch backends the same state is written by
`training.array_checkpoint` (NumPy archives keyed by name, a JSON index, the
same atomicity); TensorFlow keeps `tf.train.Checkpoint`, so its existing
checkpoints still resume. A directory holds one format: a run on another
backend than the one that wrote it is refused, naming both.

Every checkpoint records the sphere_tf version that wrote it: the array
format's index per archive, TensorFlow's in `checkpoint_versions.json` beside
its `checkpoint` file (written before the checkpoint, so none of this release
goes unrecorded). Restoring one written by a newer major or minor release
raises `sphere_tf.saving.NewerFileError` naming the checkpoint; one of an older
or newer-patch release, or without a record (written by sphere_tf 0.1.0), is
restored.

Damage is detected, never restored: TensorFlow's bundles carry CRC-32C checksums of every block and tensor,
the array archives a SHA-256 recorded in their index. A damaged checkpoint is named in a warning and the previous
one restored; a damaged list of them (TensorFlow's `checkpoint` file, which `tf.train.get_checkpoint_state` reads
as "no checkpoint" when it does not parse, `checkpoint_versions.json`, the array index) is named and the checkpoint
files in the folder are used instead; none readable is an error. A checkpoint is never written holding NaN or inf
in a model or optimizer variable, and the first non-finite training loss stops the run (`NonFiniteError`, naming
the step) before anything of its step is saved. A write that fails for lack of space raises `DiskFullError`
naming the file; the previous checkpoint stays the latest.

`check_workdir_config` / `record_config` refuse a workdir written by a
different config, naming the keys that differ.
"""

import errno
import json
import math
import os
import re
import time

import keras
from absl import logging

from sphere_tf import dependencies
from sphere_tf import json_files
from sphere_tf import saving
from sphere_tf import validation
from sphere_tf import version
from sphere_tf.training import array_checkpoint
from sphere_tf.training import distribute

# The file `tf.train.CheckpointManager` keeps in a directory it wrote (the array format's is `checkpoint.json`).
TF_INDEX_FILE = "checkpoint"
# Beside it: the sphere_tf version that wrote each of its checkpoints, `{"checkpoints": {"ckpt-<step>": version}}`.
TF_VERSIONS_FILE = "checkpoint_versions.json"


def _tf():
    """TensorFlow, for the tf.train checkpoints of the TensorFlow backend and tf.data streams (only those)."""
    return dependencies.tensorflow(__name__)


CorruptCheckpointError = array_checkpoint.CorruptCheckpointError
NonFiniteCheckpointError = array_checkpoint.NonFiniteCheckpointError
NonFiniteError = array_checkpoint.NonFiniteError
_TF_CHECKPOINT = re.compile(r"^ckpt-(\d+)\.index$")


class DiskFullError(OSError):
    """A write of the run failed for lack of space (errno ENOSPC or EDQUOT); the message names the file and says
    what stayed valid. `filename` is the file whose write failed (when the error named it)."""

    def __init__(self, message, filename=None):
        super().__init__(errno.ENOSPC, message, filename)
        self.message = message

    def __str__(self):
        return self.message


_FULL_DISK_TEXTS = ("No space left on device", "Disk quota exceeded")


def disk_full_file(error):
    """For an exception raised by a write: None if it is not a full disk, else the file it names ('' if none).

    A full disk reaches Python as `OSError` with errno ENOSPC / EDQUOT, or as TensorFlow's
    `ResourceExhaustedError` whose message is ``<file>; No space left on device`` (its C++ file system maps the
    errno so), or as another error carrying that text (an export child process's output).
    """
    if isinstance(error, DiskFullError):
        return error.filename or ""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return error.filename or ""
    text = str(error)
    for reason in _FULL_DISK_TEXTS:
        if reason in text:
            match = re.search(r"(\S+); " + reason, text)
            return match.group(1) if match else ""
    return None


def _tf_checkpoints_on_disk(directory):
    """The prefixes of the ``ckpt-<step>.index`` files of `directory`, newest first."""
    found = [(int(match.group(1)), os.path.join(directory, name[:-len(".index")]))
             for name in os.listdir(directory) if (match := _TF_CHECKPOINT.match(name))]
    return [prefix for _, prefix in sorted(found, reverse=True)]


def _tf_state(directory):
    """The prefixes TensorFlow's `checkpoint` file of `directory` names, newest first.

    TensorFlow reads the file as a text protocol buffer and, when it does not parse, logs a warning and returns
    None, so a damaged file would look like an empty folder; here every way it can be damaged is an error: not
    parsed, no checkpoint named, names that are not ``<directory>/ckpt-<step>``, a latest that is not the last of
    the list (a changed digit of the latest shows so; one of an older entry names a file that is not there, which
    the restore of that entry, if it comes to it, reports). The list is in the order of the saves, not of the steps:
    a run resumed from an older checkpoint saves its later steps again, at the end.

    Raises:
        CorruptCheckpointError: the file is damaged (named in the message).
    """
    path = os.path.join(directory, TF_INDEX_FILE)
    try:
        state = _tf().train.get_checkpoint_state(directory)
        problem = None if state is not None else "not a CheckpointState text protocol buffer"
    except ValueError as error:  # no latest checkpoint named; UnicodeDecodeError (a byte that is not UTF-8)
        state, problem = None, str(error)
    if state is not None:
        paths = list(state.all_model_checkpoint_paths)
        for prefix in paths:
            if not re.fullmatch(r"ckpt-\d+", os.path.basename(prefix)) or \
                    os.path.abspath(os.path.dirname(prefix)) != os.path.abspath(directory):
                problem = f"it names {prefix!r}, not a ckpt-<step> of {directory}"
                break
        else:
            if not paths or paths[-1] != state.model_checkpoint_path:
                problem = (f"its latest checkpoint {state.model_checkpoint_path!r} is not the last of "
                           f"{[os.path.basename(p) for p in paths]}")
    if problem:
        raise CorruptCheckpointError(f"TensorFlow's checkpoint list {path} is damaged ({problem[:200]})")
    return list(reversed(paths))


def _tf_checkpoints(directory, report=False):
    """The tf.train checkpoint prefixes of `directory`, newest first ([] without any; no TensorFlow needed then).

    TensorFlow's `checkpoint` file names them; where it is missing or damaged, the ``ckpt-<step>.index`` files
    found in the folder do (`report`: say so, naming the file).

    Raises:
        CorruptCheckpointError: the `checkpoint` file is damaged and no checkpoint is left on disk.
    """
    if not os.path.isdir(directory):
        return []
    on_disk = _tf_checkpoints_on_disk(directory)
    if not os.path.isfile(os.path.join(directory, TF_INDEX_FILE)):
        if on_disk and report:
            array_checkpoint.warn(f"{directory} holds checkpoints ({', '.join(map(os.path.basename, on_disk))}) "
                                  f"but not TensorFlow's list of them, {TF_INDEX_FILE!r}; using them")
        return on_disk
    try:
        return _tf_state(directory)
    except CorruptCheckpointError as error:
        if not on_disk:
            raise CorruptCheckpointError(f"{error}, and {directory} holds no checkpoint (ckpt-<step>.index) to "
                                         "use instead") from None
        if report:
            array_checkpoint.warn(f"{error}; using the checkpoints found in {directory} instead: "
                                  f"{', '.join(map(os.path.basename, on_disk))}")
        return on_disk


def _tf_files(prefix):
    """The files of the tf.train checkpoint `prefix`, by name ('ckpt-4.index, ckpt-4.data-00000-of-00001'), for
    messages: TensorFlow's own error names a file only for some kinds of damage."""
    directory, name = os.path.split(prefix)
    files = sorted(f for f in os.listdir(directory) if f.startswith(name + ".")) if os.path.isdir(directory) else []
    return ", ".join(files) or "no file left"


def _tf_latest(directory):
    """The newest tf.train checkpoint prefix in `directory` (None when it holds none; no TensorFlow needed then)."""
    found = _tf_checkpoints(directory)
    return found[0] if found else None

DEFAULT_EVERY_STEPS = 100
DEFAULT_MAX_TO_KEEP = 2
CONFIG_FILE = "config.json"
HISTORY_FILE = "history.json"
# The batch-averaged metrics of the epoch in progress at the latest save, so that a resumed epoch reports them
# over all its steps, not only the ones after the resume.
PARTIAL_FILE = "partial_epoch.json"
# The checkpoint groups that must hold finite values (model weights and optimizer slots); callbacks' state may
# legitimately hold inf (`BestCheckpoint`'s best value before the first evaluation is -inf).
_FINITE_GROUPS = ("model_variables/", "optimizer_variables/")
# Keys that change what a run prints or where it reads the same files from, not what it computes.
RESUME_INSENSITIVE_KEYS = ("train.verbose", "data.data_dir", "data.manual_dir", "evaluation.precise_bn_batches",
                           "export_class_matrix")


class ConfigMismatchError(ValueError):
    """A workdir holds the config of a different run."""


def _build_optimizer(model):
    optimizer = getattr(model, "optimizer", None)
    if optimizer is None:
        raise ValueError("The model has no optimizer; call `model.compile(optimizer=...)` before checkpointing.")
    if not model.built:
        raise ValueError(f"Model {model.name!r} is not built; build it (or call it on a batch) before checkpointing.")
    if not optimizer.built:
        with distribute.model_strategy(model).scope():  # slots are distributed like the variables they follow
            optimizer.build(model.trainable_variables)
    return optimizer


@saving.register_serializable()
class StepCheckpoint(keras.callbacks.Callback):
    """Saves the whole training state every `every_steps` optimizer steps and when `fit` ends.

    The state is every variable of the model (`model.variables`: trainable and
    non-trainable weights, seed states) and of its optimizer
    (`optimizer.variables`: `iterations` and all slots), plus the global step
    counted by this callback, plus any `extra` trackables (objects holding
    `tf.Variable`s, e.g. a callback's counters kept as variables).

    On TensorFlow the state is written with `tf.train.CheckpointManager`; on
    the other Keras backends with `array_checkpoint.ArrayCheckpoints` (every
    entry must then be a variable).

    Put it last in `fit`'s callbacks, so that a save holds what the other
    callbacks changed at that batch. A save due at the last step of an epoch
    is made at the epoch's end, after `fit`'s test evaluation and the other
    callbacks' `on_epoch_end`, so that a run killed during that work resumes
    before it and does it again. Call `restore()` (after `set_model`)
    before `fit` to continue from the latest checkpoint; `fit_resumable` does
    this and positions the data.

    Under `MultiWorkerMirroredStrategy` (the model's `distribute_strategy`)
    only the chief writes `directory` (checkpoints and `history.json`); the
    other workers save to `distribute.checkpoint_directory(...)`, a temporary
    folder removed after each save, and restore from the chief's `directory`.

    Args:
        directory: str, the checkpoint folder (created on the first save).
        every_steps: int > 0, save after every this many steps.
        max_to_keep: int > 0, checkpoints kept on disk (oldest deleted first).
        extra: optional dict name -> trackable, saved and restored with the rest.
    """

    def __init__(self, directory, every_steps=DEFAULT_EVERY_STEPS, max_to_keep=DEFAULT_MAX_TO_KEEP, extra=None):
        super().__init__()
        if not isinstance(directory, (str, os.PathLike)) or not str(directory):
            raise validation.invalid_argument("directory", "a non-empty path", directory)
        self.directory = os.fspath(directory)
        self.every_steps = validation.positive_int(every_steps, "every_steps")
        self.max_to_keep = validation.positive_int(max_to_keep, "max_to_keep")
        self.extra = dict(extra or {})
        self._step = None
        self._manager = None
        self._epoch_start = 0
        self._history = {}
        self._chief = True
        self._strategy = None
        self._saved_step = None
        # The epoch in progress: its Keras index, the running means of this `fit`'s batch logs and, after a
        # resume inside it, the means and batch count of its steps before the interruption (PARTIAL_FILE).
        self._epoch = None
        self._batch_logs = {}
        self._carried = None
        self._save_at_epoch_end = False  # a save due at an epoch's last step, made in `on_epoch_end`
        self._diverged = False  # set when a non-finite loss stopped the run: nothing more is saved
        self._skip_reported = False

    def set_model(self, model):
        if self._manager is not None and model is self.model:
            return  # `fit` sets the model again: keep the restored step
        super().set_model(model)
        optimizer = _build_optimizer(model)
        self._strategy = distribute.model_strategy(model)
        self._chief = distribute.is_chief(self._strategy)
        with self._strategy.scope():  # state a regularizer creates here lives where the model's does
            regularizers = regularizer_states(model)
        if keras.backend.backend() != "tensorflow":
            # int32: JAX without x64 holds int64 as int32 (and warns); 2^31 steps are out of reach.
            self._step = keras.Variable(0, dtype="int32", trainable=False, name="global_step")
            self._manager = array_checkpoint.ArrayCheckpoints(
                {**_named("model_variables", model.variables), **_named("optimizer_variables", optimizer.variables),
                 "step": self._step, **regularizers, **self.extra},
                self.directory, self.max_to_keep, finite=_FINITE_GROUPS)
            self._history = self._read_history()
            return
        tf = _tf()
        if self._chief:
            _repair_tf_state(self.directory)  # before the manager reads it (an empty one makes it raise)
        self._step = tf.Variable(0, dtype=tf.int64, trainable=False, name="global_step")
        checkpoint = tf.train.Checkpoint(
            model_variables=list(model.variables),  # Keras 3 variables are trackable on TensorFlow
            optimizer_variables=list(optimizer.variables),
            step=self._step,
            **regularizers,
            **self.extra,
        )
        self._manager = tf.train.CheckpointManager(
            checkpoint,
            distribute.checkpoint_directory(self.directory, self._strategy),
            max_to_keep=self.max_to_keep,
            step_counter=self._step,
        )
        self._history = self._read_history()

    def _require_model(self):
        if self._manager is None:
            raise ValueError("StepCheckpoint has no model yet; call `set_model(model)` (or `fit`) first.")

    @property
    def step(self):
        """int, the global step: optimizer steps taken over all runs of this directory."""
        self._require_model()
        return int(keras.ops.convert_to_numpy(self._step))

    @property
    def latest_checkpoint(self):
        """str or None, the prefix of the newest complete checkpoint in `directory` (the chief's)."""
        self._require_model()
        if self._chief or self._arrays:
            return self._manager.latest_checkpoint
        return _tf_latest(self.directory)

    @property
    def _arrays(self):
        return isinstance(self._manager, array_checkpoint.ArrayCheckpoints)

    @property
    def history(self):
        """dict metric -> list of per-epoch values over all runs (epochs completed so far)."""
        return {key: list(values) for key, values in self._history.items()}

    def restore(self):
        """Loads the latest checkpoint (if any) into the model, optimizer, step and extras.

        A checkpoint file that cannot be read (truncated, emptied, a flipped bit: TensorFlow's bundles carry
        CRC-32C checksums, the array archives a SHA-256 in their index), or whose model or optimizer variables
        hold NaN or inf, is reported by name with a warning and the previous complete one is restored instead;
        where none can be read the error names them all. A damaged list of the checkpoints (TensorFlow's
        `checkpoint` file, the array index) gives way, with a warning, to the checkpoint files found in the folder.
        A run never starts afresh over a folder that held checkpoints: none left beside a `partial_epoch.json`
        of two entries or more (it gains one before each save) is an error too.

        Returns:
            int, the restored global step (0 when the directory holds no checkpoint).

        Raises:
            ValueError: the checkpoint does not hold exactly the model's and
                optimizer's variables (another architecture or optimizer wrote it).
            array_checkpoint.CorruptCheckpointError (a ValueError): no checkpoint of the directory can be read.
            sphere_tf.saving.NewerFileError (a ValueError): the latest checkpoint was written by a newer major
                or minor sphere_tf release (named in the message with the file and both versions).
        """
        self._require_model()
        _check_format(self.directory, keras.backend.backend())
        candidates = self._checkpoints(report=True)
        if not candidates:
            partial = os.path.join(self.directory, PARTIAL_FILE)
            if self._partial_shows_a_checkpoint():
                raise CorruptCheckpointError(
                    f"{self.directory} holds no checkpoint, yet {partial} shows that one was written (it gains an "
                    "entry before each save, so two entries mean a save completed): the checkpoints were deleted "
                    "or lost. Not starting afresh: restore them, or move the folder away to train from step 0.")
            self._step.assign(0)
            self._saved_step = None
            return 0
        versions = {} if self._arrays else _read_tf_versions(self.directory, report=True)
        unreadable = []
        for path in candidates:  # newest first: a corrupt file gives way to the previous complete checkpoint
            self._check_version(path, versions)
            try:
                self._restore_from(path)
            except array_checkpoint.CorruptCheckpointError as error:  # not a NewerFileError: that one is raised
                unreadable.append(str(error))
                array_checkpoint.warn(f"{error}; trying the previous checkpoint.")
                continue
            break
        else:
            raise array_checkpoint.CorruptCheckpointError(
                f"no checkpoint in {self.directory} can be read ({'; '.join(unreadable)}). Not starting afresh: "
                "move the folder away to train from step 0.")
        if unreadable:
            array_checkpoint.warn(f"resumed from {path} (step {self.step}), the newest checkpoint that could be "
                                  f"read; the steps after it are trained again.")
        self._saved_step = self.step
        self._carried = self._read_partial(self._saved_step)
        return self.step

    def _checkpoints(self, report=False):
        """The complete checkpoints of `directory` (the chief's), newest first (`report`: warn of a damaged list)."""
        if self._arrays:
            return [path for _, path in array_checkpoint.checkpoints(self.directory, report=report)]
        return _tf_checkpoints(self.directory, report=report)

    def _check_version(self, path, versions):
        """`NewerFileError` when a newer major or minor sphere_tf release wrote the checkpoint `path` (`versions`:
        TensorFlow's record, `_read_tf_versions`)."""
        if self._arrays:
            array_checkpoint.check_version(path)
        else:
            saving.check_version(versions.get(os.path.basename(path)), f"checkpoint {path}")

    def _restore_from(self, path):
        """Restores the checkpoint `path`; `CorruptCheckpointError` if it cannot be read, `ValueError` if it
        does not match the model."""
        try:
            if self._arrays:
                self._manager.restore(path)
            else:
                tf = _tf()
                try:
                    self._manager.checkpoint.restore(path).assert_consumed()
                # A truncated or overwritten file: TensorFlow's reader raises an OpError (DataLossError, ...) or,
                # for a data file shorter than its index says, IndexError ("Read less bytes than requested").
                except (tf.errors.OpError, IndexError) as error:
                    raise array_checkpoint.CorruptCheckpointError(
                        f"checkpoint {path} ({_tf_files(path)}) cannot be read ({type(error).__name__}: "
                        f"{str(error)[:200]})") from None
                found = self._non_finite_variable()
                if found:  # restored already: the caller restores an older checkpoint over it, or stops
                    raise NonFiniteCheckpointError(f"checkpoint {path} holds non-finite values: variable "
                                                   f"{found[0]!r} has {found[1]}")
        except (array_checkpoint.CorruptCheckpointError, saving.NewerFileError):
            raise
        except (AssertionError, ValueError) as error:
            raise ValueError(
                f"The checkpoint {path} does not match this model and optimizer "
                f"({len(self.model.variables)} model variables, {len(self.model.optimizer.variables)} optimizer "
                f"variables): {error}"
            ) from error

    def keep_epochs(self, count, steps_per_epoch=None):
        """Drops history entries past the first `count` epochs (ones a restored checkpoint predates).

        Test evaluations (`val_*` keys) are sparse when `fit` evaluates every few epochs; where the history
        records their global steps (`val_step`, `callbacks.TestErrorLog`) the ones up to step
        `count · steps_per_epoch` are kept, otherwise every epoch is taken to have one.
        """
        evaluated = self._history.get("val_step")
        if evaluated is not None and steps_per_epoch:
            evaluations = sum(1 for step in evaluated if step <= count * steps_per_epoch)
        else:
            evaluations = count
        self._history = {key: values[:evaluations if key.startswith("val_") else count]
                         for key, values in self._history.items()}

    def save(self):
        """Writes a checkpoint at the current step now; returns its prefix (None on a JAX process that is not
        the chief: it writes nothing).

        Raises:
            NonFiniteError: a model or optimizer variable holds NaN or inf; nothing is written, the previous
                checkpoint stays the latest (a checkpoint never holds a diverged state).
            DiskFullError (an OSError): a write failed for lack of space; the message names the file. What was
                written of this step never becomes the latest checkpoint (a temporary file renamed into place,
                TensorFlow's list updated last), so the previous one stays valid and a rerun resumes from it.
        """
        self._require_model()
        step = self.step
        try:
            prefix = self._write(step)
        except NonFiniteError as error:
            raise NonFiniteError(f"At global step {step} {error}: training diverged (a NaN or inf gradient, while "
                                 f"the loss was still finite). {self._stopped_here(step)}") from None
        except Exception as error:
            filename = disk_full_file(error)
            if filename is None:
                raise
            latest = self._latest_description()
            if self._saved_step == step:  # the checkpoint was complete; a file written after it was not
                kept = f"the checkpoint itself is complete and the latest, {latest}"
            else:
                kept = f"nothing of step {step} replaced the latest checkpoint, {latest}"
            raise DiskFullError(
                f"No space left on device while writing the checkpoint of step {step} to {self.directory}"
                f"{f' ({filename})' if filename else ''}; {kept}. Free some space and run the same command again: "
                "it resumes from there.", filename) from error
        if not self._chief and prefix is not None:
            distribute.remove_worker_directory(self.directory, self._strategy)
            return os.path.join(self.directory, os.path.basename(prefix))
        return prefix

    def _write(self, step):
        """`save`'s writes: `partial_epoch.json`'s entry of `step`, then the checkpoint of `step`; returns the
        prefix."""
        if self._chief:
            self._record_partial(step)
        if self._arrays:
            self.model  # noqa: B018  (on JAX, reading the property copies the training state into the variables)
            # Multi-process JAX: the variables are replicated, so the chief's copy is the whole state; the other
            # processes write nothing. The manager refuses non-finite model and optimizer variables itself.
            prefix = self._manager.save(step) if self._chief else None
        else:
            found = self._non_finite_variable()
            if found:
                raise NonFiniteError(f"variable {found[0]!r} holds {found[1]}")
            if self._chief:  # first: a checkpoint of this release is never without its version
                _record_tf_version(self.directory, f"ckpt-{step}",
                                   [os.path.basename(path) for path in self._manager.checkpoints])
            prefix = self._manager.save(checkpoint_number=self._step)
        self._saved_step = step
        return prefix

    def _record_partial(self, step):
        """Adds the entry of the save at `step` to `partial_epoch.json`: the epoch in progress, its batches so far
        and their running means (none at an epoch's end). Written before the checkpoint, so that whichever
        checkpoint a kill during the save leaves the latest (this one or the previous) has its entry: written
        after it, a kill between the two lost the metrics of the interrupted epoch's earlier steps. The entries
        of the checkpoints a restore may fall back to are kept."""
        entry = {"step": step, "epoch": self._epoch, "batches": 0, "means": {}}
        if self._epoch is not None:
            entry["batches"], entry["means"] = self._epoch_means(self._batch_logs)
        kept = [e for e in self._partial_entries() if e.get("step", step) < step]
        os.makedirs(self.directory, exist_ok=True)
        json_files.write_json(os.path.join(self.directory, PARTIAL_FILE),
                              {"saves": (kept + [entry])[-(self.max_to_keep + 1):]})

    def _read_partial_file(self):
        path = os.path.join(self.directory, PARTIAL_FILE)
        if not os.path.isfile(path):
            return None
        with open(path) as f:
            return json.load(f)

    def _partial_entries(self):
        """The entries of `partial_epoch.json`, oldest first ([] without the file; an earlier release's file, one
        entry written after its checkpoint, reads as that entry)."""
        partial = self._read_partial_file()
        if partial is None:
            return []
        return list(partial["saves"]) if "saves" in partial else [partial]

    def _partial_shows_a_checkpoint(self):
        """Whether `partial_epoch.json` proves a checkpoint was completed: two entries (the second is written only
        after the first one's save), or an earlier release's file (written after its checkpoint)."""
        partial = self._read_partial_file()
        return partial is not None and ("saves" not in partial or len(partial["saves"]) > 1)

    def _non_finite_variable(self):
        """`(name, description)` of the first model or optimizer variable holding NaN or inf, or None (TensorFlow:
        one reduction per variable and one transfer to the host; the array format checks the values it writes)."""
        tf = _tf()
        named = {**_named("model_variables", self.model.variables),
                 **_named("optimizer_variables", self.model.optimizer.variables)}
        named = {name: v for name, v in named.items()
                 if keras.backend.is_float_dtype(keras.backend.standardize_dtype(v.dtype))}
        if not named:
            return None
        finite = tf.stack([tf.reduce_all(tf.math.is_finite(tf.convert_to_tensor(v))) for v in named.values()]).numpy()
        if finite.all():
            return None
        name, variable = list(named.items())[int((~finite).nonzero()[0][0])]
        return array_checkpoint.non_finite({name: keras.ops.convert_to_numpy(variable)})

    def _latest_description(self):
        """'<file> (step s)' of the latest checkpoint, for messages ('none yet' before the first)."""
        try:
            latest = self.latest_checkpoint
        except (OSError, ValueError):
            latest = None
        return "none yet" if latest is None else f"{latest} (step {_step_of(latest)})"

    def _stopped_here(self, step):
        """What a run stopped by a non-finite value at `step` kept, and what to do."""
        return (f"Nothing of step {step} is saved; the latest checkpoint is {self._latest_description()}. Check the "
                "training data for NaN or inf values, lower the learning rate or clip the gradients "
                "(optimizer.clipnorm); the same command resumes from that checkpoint and meets the same batches "
                "again.")

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_start = self.step
        if self._carried is not None and self._carried["epoch"] != epoch:
            self._carried = None  # saved at the end of an epoch: nothing of this one came before
        self._epoch = epoch
        self._batch_logs = {}

    def _epoch_means(self, logs):
        """`(batches, means)` of the epoch so far: this `fit`'s running means (`logs`, over its batches since
        the epoch began) merged, weighted by batches, with the means carried over an interruption."""
        batches = self.step - self._epoch_start
        means = {key: float(value) for key, value in logs.items() if _is_number(value)}
        carried = self._carried
        if carried is None:
            return batches, means
        total = batches + carried["batches"]
        for key, before in carried["means"].items():
            if key in means:
                means[key] = (before * carried["batches"] + means[key] * batches) / max(total, 1)
        return total, means

    def on_train_batch_end(self, batch, logs=None):
        # `batch` is the last batch of the execution (several with steps_per_execution > 1).
        self._batch_logs = dict(logs or {})
        previous = self.step
        current = self._epoch_start + batch + 1
        self._check_loss(current, self._batch_logs.get("loss"))  # before anything of this step is saved
        self._step.assign(current)
        if current // self.every_steps > previous // self.every_steps:
            steps = (self.params or {}).get("steps")  # of this `fit` epoch (after a resume: what is left of it)
            if steps and batch + 1 >= steps:
                # The epoch's last step: saved in `on_epoch_end`, after the epoch's test evaluation and the other
                # callbacks' epoch-end work (history, `.keras` file, schedules). Saved here, a kill during that
                # work would resume past the epoch's end and never redo it: its history entry and evaluation lost.
                self._save_at_epoch_end = True
            else:
                self.save()

    def _check_loss(self, step, loss):
        """Stops the run at the first non-finite training loss, naming the global step (`NonFiniteError`).

        Keras logs the running mean of the epoch's batch losses, so one non-finite batch loss makes it non-finite
        at once: this is the first step whose batch gave one. Under a `LossScaleOptimizer` (mixed precision) a
        non-finite step is skipped by the optimizer, as loss scaling intends (Micikevicius et al., "Mixed
        Precision Training", ICLR 2018, Sec. 3.2): reported once, not stopped; the check of the saved variables
        still holds.
        """
        if loss is None or not _is_number(loss) or math.isfinite(float(loss)) or self._diverged:
            return
        if _skips_non_finite_steps(getattr(self.model, "optimizer", None)):
            if not self._skip_reported:
                self._skip_reported = True
                array_checkpoint.warn(f"the training loss is {float(loss)} at global step {step}; the "
                                      "LossScaleOptimizer skips such steps (the epoch's mean loss stays non-finite).")
            return
        self._diverged = True
        raise NonFiniteError(
            f"The training loss is {float(loss)} at global step {step} (epoch {(self._epoch or 0) + 1}): a NaN or "
            f"inf entered training (in the batch of that step, or through a diverging update), and every weight it "
            f"updated is now non-finite. The run stops. {self._stopped_here(step)}")

    def on_epoch_end(self, epoch, logs=None):
        logs = dict(logs or {})
        if self._carried is not None:
            # A resumed epoch: its batch-averaged metrics cover the steps before the interruption too.
            _, merged = self._epoch_means({key: logs[key] for key in self._batch_logs if key in logs})
            logs.update(merged)
            self._carried = None
        self._epoch = None
        for key, value in logs.items():
            self._history.setdefault(key, []).append(float(value))
        if not self._chief:
            self._save_deferred()  # every worker takes part in a save
            return
        os.makedirs(self.directory, exist_ok=True)
        path = os.path.join(self.directory, HISTORY_FILE)
        try:
            json_files.write_json(path, {"epochs": epoch + 1, **self._history})
        except OSError as error:
            if disk_full_file(error) is None:
                raise
            raise DiskFullError(
                f"No space left on device while writing {path} at the end of epoch {epoch + 1} ({path} is as it "
                f"was). The latest checkpoint is still {self._latest_description()}. Free some space and run the "
                "same command again: it resumes from there.", path) from error
        # After history.json: a kill between the two leaves a history one epoch ahead of the latest checkpoint,
        # which the resume trims (`keep_epochs`); the other order would leave the checkpoint ahead of the history.
        self._save_deferred()

    def _save_deferred(self):
        if self._save_at_epoch_end:
            self._save_at_epoch_end = False
            self.save()

    def on_train_end(self, logs=None):
        # Decided on the step alone, the same on every worker (all of them take part in a save).
        self._save_at_epoch_end = False  # `fit` stopped before the epoch's end: saved here instead
        if self._saved_step != self.step and not self._diverged:
            self.save()

    def _read_partial(self, step):
        for partial in self._partial_entries():
            if partial.get("step") == step and partial.get("batches"):
                return partial
        return None  # saved at an epoch's end, or by a release that wrote the entry after its checkpoint

    def _read_history(self):
        path = os.path.join(self.directory, HISTORY_FILE)
        if not os.path.exists(path):
            return {}
        with open(path) as f:
            stored = json.load(f)
        stored.pop("epochs", None)
        return stored

    def get_config(self):
        return {"directory": self.directory, "every_steps": self.every_steps, "max_to_keep": self.max_to_keep}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


def _is_number(value):
    try:
        float(value)
    except (TypeError, ValueError):
        return False
    return True


def _named(group, variables):
    """`{"<group>/<variable path>": variable}`; a path met again gets `#<n>` (a model may reuse a name)."""
    named = {}
    for variable in variables:
        key = f"{group}/{variable.path}"
        count = 1
        while key in named:
            key, count = f"{group}/{variable.path}#{count}", count + 1
        named[key] = variable
    return named


def _read_tf_versions(directory, report=False):
    """`{checkpoint name: sphere_tf version}` of the tf.train checkpoints of `directory` ({} without a record).

    A damaged record (not JSON, not `{"checkpoints": {name: version}}`, a version that is not one) is treated as
    no record, as a folder of sphere_tf 0.1.0 (`report`: with a warning naming it); the next save rewrites it.
    """
    path = os.path.join(directory, TF_VERSIONS_FILE)
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            recorded = json.load(f)
        checkpoints = recorded.get("checkpoints") if isinstance(recorded, dict) else None
        if checkpoints is None:
            checkpoints = {}
        if not isinstance(checkpoints, dict):
            raise ValueError("'checkpoints' is not an object")
        for name, written_by in checkpoints.items():
            if not re.fullmatch(r"ckpt-\d+", name):
                raise ValueError(f"{name!r} is not a checkpoint name")
            problem = array_checkpoint.version_problem(written_by, recorded.get(saving.VERSION_KEY))
            if problem or not isinstance(written_by, str):
                raise ValueError(f"the version of {name} {problem or 'is not a string'}")
    except (ValueError, TypeError, AttributeError) as error:  # UnicodeDecodeError is a ValueError
        if report:
            array_checkpoint.warn(f"{path} is damaged ({str(error)[:200]}); the versions of the checkpoints it "
                                  "recorded are unknown, and they are restored as this release's")
        return {}
    return dict(checkpoints)


def _repair_tf_state(directory):
    """Rewrites a missing or damaged TensorFlow `checkpoint` file of `directory` from the ``ckpt-<step>.index``
    files found there (with a warning naming it, `_tf_checkpoints`): `tf.train.CheckpointManager` reads the file
    when it is made (an empty one makes it raise), and goes on deleting the oldest beyond `max_to_keep`.

    Raises:
        CorruptCheckpointError: the file is damaged and no checkpoint is left.
    """
    state = os.path.join(directory, TF_INDEX_FILE)
    if not os.path.isdir(directory) or (not os.path.isfile(state) and not _tf_checkpoints_on_disk(directory)):
        return
    if os.path.isfile(state):
        try:
            _tf_state(directory)
            return
        except CorruptCheckpointError:
            pass
    found = _tf_checkpoints(directory, report=True)
    names = [os.path.basename(prefix) for prefix in reversed(found)]  # relative: read against `directory`
    # TensorFlow's text format of the CheckpointState proto. A timestamp after `last_preserved_timestamp` puts a
    # checkpoint among those the manager deletes once `max_to_keep` newer ones exist.
    now = time.time()
    text = "".join([f'model_checkpoint_path: "{names[-1]}"\n']
                   + [f'all_model_checkpoint_paths: "{name}"\n' for name in names]
                   + [f"all_model_checkpoint_timestamps: {now:.3f}\n" for _ in names]
                   + ["last_preserved_timestamp: 0.0\n"])
    temporary = f"{state}.tmp"
    with open(temporary, "w") as f:
        f.write(text)
    os.replace(temporary, state)


def _skips_non_finite_steps(optimizer):
    """Whether `optimizer`, or one it wraps, is a `LossScaleOptimizer` (it skips steps with non-finite gradients)."""
    while optimizer is not None:
        if isinstance(optimizer, keras.optimizers.LossScaleOptimizer):
            return True
        optimizer = getattr(optimizer, "inner_optimizer", None)
    return False


def _step_of(path):
    """The step of a checkpoint prefix (`.../ckpt-<step>`) or archive (`.../state-<step>.npz`)."""
    match = re.search(r"-(\d+)(?:\.npz)?$", os.fspath(path))
    return int(match.group(1)) if match else None


def _record_tf_version(directory, name, existing):
    """Records this release as the writer of the tf.train checkpoint `name` of `directory`; the records of
    checkpoints no longer in `existing` (names the manager deleted) are dropped."""
    kept = {key: value for key, value in _read_tf_versions(directory).items() if key in existing}
    os.makedirs(directory, exist_ok=True)
    json_files.write_json(os.path.join(directory, TF_VERSIONS_FILE),
                          {saving.VERSION_KEY: version.__version__, "checkpoints": {**kept, name: version.__version__}})


def _check_format(directory, backend):
    """Refuses a checkpoint directory written in the other format (TensorFlow's or the array one)."""
    arrays = array_checkpoint.latest(directory)
    tensorflow = _tf_latest(directory)
    if backend == "tensorflow" and arrays is not None and tensorflow is None:
        try:
            written_on = (array_checkpoint.read_index(directory) or {}).get("backend", "JAX or PyTorch")
        except array_checkpoint.CorruptCheckpointError:
            written_on = "JAX or PyTorch"
        raise ValueError(
            f"{directory} holds array checkpoints written on the {written_on!r} Keras backend; this run is "
            "on 'tensorflow'. Resume it with that backend (KERAS_BACKEND / --backend), or use a new workdir.")
    if backend != "tensorflow" and tensorflow is not None and arrays is None:
        raise ValueError(
            f"{directory} holds tf.train checkpoints written on the 'tensorflow' Keras backend; this run is on "
            f"{backend!r}. Resume it with KERAS_BACKEND=tensorflow (--backend=tensorflow), or use a new workdir.")


def _checkpoint_step(prefix):
    """The step a `CheckpointManager` prefix (`.../ckpt-<step>`) was saved at."""
    return int(prefix.rsplit("-", 1)[1])


def positioned_stream(dataset, step):
    """The training batches from global step `step` on: `dataset.repeat().skip(step)`.

    `dataset` yields the batches of one pass; with a seeded
    `shuffle(..., reshuffle_each_iteration=True)` before the batching, every
    pass of the repeated stream has its own order, the same in every process
    built with the same seeds.

    Args:
        dataset: `tf.data.Dataset` of batches.
        step: int >= 0, the number of batches already consumed.

    Returns:
        `tf.data.Dataset`.
    """
    if not isinstance(dataset, _tf().data.Dataset):
        raise validation.invalid_argument("dataset", "a tf.data.Dataset", dataset)
    step = validation.integer(step, "step", minimum=0)
    stream = dataset.repeat()
    return stream.skip(step) if step else stream


def steps_per_pass(dataset):
    """int, the number of batches in one pass of `dataset` (its cardinality).

    Raises:
        ValueError: the cardinality is infinite or unknown; pass `steps_per_epoch`.
    """
    cardinality = int(dataset.cardinality())
    if cardinality <= 0:
        raise ValueError(
            f"Cannot tell the number of batches of the training data (cardinality {cardinality}); "
            "pass `steps_per_epoch`."
        )
    return cardinality


def fit_resumable(model, train_data, epochs, directory, steps_per_epoch=None, every_steps=DEFAULT_EVERY_STEPS,
                  max_to_keep=DEFAULT_MAX_TO_KEEP, callbacks=None, verbose="auto", extra=None, **fit_kwargs):
    """`model.fit` that checkpoints every `every_steps` steps and continues from the latest checkpoint.

    A first call trains from step 0; a call after an interruption (even
    `kill -9` in the middle of an epoch) restores the latest checkpoint of
    `directory` and trains the remaining `epochs * steps_per_epoch - step`
    steps on the same batches the uninterrupted run would have read, so it ends
    with the same variables. A call on a finished directory trains nothing.

    Args:
        model: a compiled, built `keras.Model`.
        train_data: `tf.data.Dataset` of the batches of one pass over the
            training set (deterministic under its seeds; see
            `positioned_stream`), or a callable `step -> tf.data.Dataset`
            yielding the batches from global step `step` on.
        epochs: int > 0, the epochs of the whole run.
        directory: str, the checkpoint folder.
        steps_per_epoch: int > 0, or None for one pass of `train_data` (a Dataset).
        every_steps: int > 0, save every this many steps.
        max_to_keep: int > 0, checkpoints kept.
        callbacks: list of Keras callbacks, passed to `fit`.
        verbose: `fit`'s verbosity.
        extra: optional dict name -> trackable saved with the checkpoint. The
            `checkpoint_state()` of every callback that has one is added
            (named `<class name>_<index>_<key>`).
        **fit_kwargs: passed to `model.fit` (e.g. `validation_data`).

    Returns:
        dict with `history` (metric -> per-epoch values over all runs; the
        epoch in which a run resumed averages its batch metrics over all its
        steps, before and after the resume, weighted by batches), `initial_step`
        (restored) and `step` (final global step).
    """
    epochs = validation.positive_int(epochs, "epochs")
    if callable(train_data):
        if steps_per_epoch is None:
            raise ValueError("`steps_per_epoch` is required when `train_data` is a callable.")
        make_stream = train_data
    elif isinstance(train_data, _tf().data.Dataset):
        if steps_per_epoch is None:
            steps_per_epoch = steps_per_pass(train_data)
        dataset = train_data
        make_stream = lambda step: positioned_stream(dataset, step)  # noqa: E731
    else:
        raise validation.invalid_argument("train_data", "a tf.data.Dataset or a callable step -> Dataset", train_data)
    steps_per_epoch = validation.positive_int(steps_per_epoch, "steps_per_epoch")
    for key in ("epochs", "initial_epoch", "steps_per_epoch", "x", "y", "shuffle"):
        if key in fit_kwargs:
            raise ValueError(f"`{key}` is set by fit_resumable; do not pass it in fit_kwargs.")
    # The stream fixes the order of every step (that is what makes resume exact); Keras's own
    # `shuffle` does not apply to datasets and only warns.
    fit_kwargs["shuffle"] = False

    saver = StepCheckpoint(directory, every_steps=every_steps, max_to_keep=max_to_keep,
                           extra={**(extra or {}), **callback_states(callbacks)})
    saver.set_model(model)
    initial_step = saver.restore()
    saver.keep_epochs(initial_step // steps_per_epoch, steps_per_epoch)
    if initial_step:
        logging.info("Resuming from step %d (%s).", initial_step, saver.latest_checkpoint)
    total = epochs * steps_per_epoch
    if initial_step > total:
        raise ValueError(
            f"The checkpoint in {directory} is at step {initial_step}, past this run's {total} steps "
            f"(epochs={epochs} × steps_per_epoch={steps_per_epoch})."
        )
    # Last: a save at the end of a batch holds what the other callbacks did at that batch (S-OPT merges, counters).
    all_callbacks = list(callbacks or []) + [saver]
    step = initial_step
    epoch, offset = divmod(step, steps_per_epoch)
    with distribute.distributed_fit(model):
        if offset:  # finish the interrupted epoch
            model.fit(make_stream(step), initial_epoch=epoch, epochs=epoch + 1,
                      steps_per_epoch=steps_per_epoch - offset, callbacks=all_callbacks, verbose=verbose,
                      **fit_kwargs)
            step, epoch = (epoch + 1) * steps_per_epoch, epoch + 1
        if epoch < epochs:
            model.fit(make_stream(step), initial_epoch=epoch, epochs=epochs, steps_per_epoch=steps_per_epoch,
                      callbacks=all_callbacks, verbose=verbose, **fit_kwargs)
    return {"history": saver.history, "initial_step": initial_step, "step": saver.step}


def callback_states(callbacks):
    """The trackables of the callbacks that keep state across a resume.

    Args:
        callbacks: list of Keras callbacks (or None).

    Returns:
        dict `<class name>_<index>_<key>` -> trackable, from every callback with
        a `checkpoint_state()` method (dict key -> `tf.Variable` / trackable);
        the index counts callbacks of the same class in list order.
    """
    states, seen = {}, {}
    for callback in callbacks or ():
        method = getattr(callback, "checkpoint_state", None)
        if not callable(method):
            continue
        name = type(callback).__name__
        index = seen[name] = seen.get(name, -1) + 1
        for key, trackable in method().items():
            states[f"{name}_{index}_{key}"] = trackable
    return states


def regularizer_states(model):
    """The state of the model's weight regularizers that a resume needs, as checkpoint entries.

    Keras regularizers are not model weights, so `model.variables` misses what
    some of them keep: the step counter of random draws (RP-CoMHE, mini-batch
    MHE) and the learned projections of AP-/Adv-CoMHE. Every regularizer with a
    `checkpoint_state(kernels)` method (see `sphere_tf.regularizers.CoMHE`) is
    asked for its variables, given the model variables it regularizes.

    Args:
        model: a built `keras.Model`.

    Returns:
        dict `regularizer_<index>_<name>` -> variable (index in order of first
        use over `model.variables`; names made attribute-safe).
    """
    owners, kernels = [], {}
    for variable in model.variables:
        regularizer = getattr(variable, "regularizer", None)
        # A sum of regularizers (several config entries on one layer) holds its terms in `parts`.
        for part in getattr(regularizer, "parts", None) or [regularizer]:
            if not callable(getattr(part, "checkpoint_state", None)):
                continue
            if id(part) not in kernels:
                owners.append(part)
                kernels[id(part)] = []
            kernels[id(part)].append(variable)
    states = {}
    for index, regularizer in enumerate(owners):
        for name, variable in regularizer.checkpoint_state(kernels[id(regularizer)]).items():
            states[f"regularizer_{index}_{re.sub(r'[^0-9A-Za-z_]', '_', name)}"] = variable
    return states


def latest_step(directory):
    """int, the global step of the newest checkpoint in `directory` (0 when there is none)."""
    arrays = array_checkpoint.latest(directory)
    if arrays is not None:
        return arrays[0]
    latest = _tf_latest(directory)
    return 0 if latest is None else _checkpoint_step(latest)


def _plain(value):
    """ConfigDict / tuples -> JSON-like plain values (tuples become lists, as in config.json)."""
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _flatten(value, prefix=""):
    if isinstance(value, dict) and value:
        flat = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: value}


def config_differences(stored, config, ignore=RESUME_INSENSITIVE_KEYS, defaults=None):
    """The dotted keys whose values differ between two configs.

    Args:
        stored, config: dict / ConfigDict (nested).
        ignore: dotted keys (or prefixes of them) left out of the comparison.
        defaults: optional schema (nested dict of defaults): a key that `stored` lacks and `config` holds at its
            default is no difference (the schema gained the key after `stored` was written; the stored run
            behaved as the default does).

    Returns:
        sorted list of `(key, stored_value, new_value)`; a key missing on one
        side has the value `"<missing>"` there.
    """
    missing = "<missing>"
    old = _flatten(json.loads(json.dumps(_plain(stored), default=repr)))
    new = _flatten(json.loads(json.dumps(_plain(config), default=repr)))
    ignored = tuple(ignore or ())
    schema = _flatten(json.loads(json.dumps(_plain(defaults), default=repr))) if defaults else {}

    def skipped(key):
        if key not in old and key in schema and new.get(key, missing) == schema[key]:
            return True
        return any(key == k or key.startswith(k + ".") for k in ignored)

    return [(key, old.get(key, missing), new.get(key, missing)) for key in sorted(set(old) | set(new))
            if not skipped(key) and old.get(key, missing) != new.get(key, missing)]


def check_workdir_config(workdir, config, ignore=RESUME_INSENSITIVE_KEYS, defaults=None):
    """Refuses to reuse `workdir` when its `config.json` records a different config.

    Args:
        workdir: str, the run folder.
        config: dict / ConfigDict of this run.
        ignore: dotted keys not compared (by default the ones that do not
            change the computation: verbosity and data folders).
        defaults: optional schema; keys added to it since the workdir's run began compare equal at their
            defaults (`config_differences`).

    Returns:
        bool, whether `workdir` already held a (matching) `config.json`.

    Raises:
        ConfigMismatchError: the configs differ; the message names every
            differing key with both values.
    """
    path = os.path.join(workdir, CONFIG_FILE)
    if not os.path.exists(path):
        return False
    with open(path) as f:
        stored = json.load(f)
    differences = config_differences(stored, config, ignore, defaults)
    if differences:
        lines = "\n".join(f"  {key}: {old!r} in the workdir, {new!r} now" for key, old, new in differences)
        raise ConfigMismatchError(
            f"{workdir} holds a run of a different config ({path}); differing keys: "
            f"{', '.join(key for key, _, _ in differences)}.\n{lines}\n"
            "Use a new --workdir, or the workdir's config."
        )
    return True


def record_config(workdir, config, ignore=RESUME_INSENSITIVE_KEYS, defaults=None):
    """`check_workdir_config`, then writes `config` to `workdir/config.json` (creating `workdir`)."""
    check_workdir_config(workdir, config, ignore, defaults)
    os.makedirs(workdir, exist_ok=True)
    json_files.write_json(os.path.join(workdir, CONFIG_FILE), _plain(config))
