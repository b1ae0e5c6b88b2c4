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

`check_workdir_config` / `record_config` refuse a workdir written by a
different config, naming the keys that differ.
"""

import json
import os
import re

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


def _tf_latest(directory):
    """The newest tf.train checkpoint prefix in `directory` (None when it holds none; no TensorFlow needed then)."""
    if not os.path.isfile(os.path.join(directory, TF_INDEX_FILE)):
        return None
    return _tf().train.latest_checkpoint(directory)

DEFAULT_EVERY_STEPS = 100
DEFAULT_MAX_TO_KEEP = 2
CONFIG_FILE = "config.json"
HISTORY_FILE = "history.json"
# The batch-averaged metrics of the epoch in progress at the latest save, so that a resumed epoch reports them
# over all its steps, not only the ones after the resume.
PARTIAL_FILE = "partial_epoch.json"
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
    callbacks changed at that batch. Call `restore()` (after `set_model`)
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
                self.directory, self.max_to_keep)
            self._history = self._read_history()
            return
        tf = _tf()
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

        A checkpoint file that cannot be read (truncated, overwritten) is reported by name with a warning and
        the previous complete one is restored instead; where none can be read the error names them all (a run
        never starts afresh over a folder of checkpoints).

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
        candidates = self._checkpoints()
        if not candidates:
            self._step.assign(0)
            self._saved_step = None
            return 0
        unreadable = []
        for path in candidates:  # newest first: a corrupt file gives way to the previous complete checkpoint
            self._check_version(path)
            try:
                self._restore_from(path)
            except array_checkpoint.CorruptCheckpointError as error:  # not a NewerFileError: that one is raised
                unreadable.append(str(error))
                logging.warning("%s; trying the previous checkpoint.", error)
                print(f"Warning: {error}; trying the previous checkpoint.")
                continue
            break
        else:
            raise array_checkpoint.CorruptCheckpointError(
                f"no checkpoint in {self.directory} can be read ({'; '.join(unreadable)}). Not starting afresh: "
                "move the folder away to train from step 0.")
        self._saved_step = self.step
        self._carried = self._read_partial(self._saved_step)
        return self.step

    def _checkpoints(self):
        """The complete checkpoints of `directory` (the chief's), newest first."""
        if self._arrays:
            return [path for _, path in array_checkpoint.checkpoints(self.directory)]
        if not os.path.isfile(os.path.join(self.directory, TF_INDEX_FILE)):
            return []
        state = _tf().train.get_checkpoint_state(self.directory)
        return list(reversed(state.all_model_checkpoint_paths)) if state else []

    def _check_version(self, path):
        """`NewerFileError` when a newer major or minor sphere_tf release wrote the checkpoint `path`."""
        if self._arrays:
            array_checkpoint.check_version(path)
        else:
            recorded = _read_tf_versions(self.directory).get(os.path.basename(path))
            saving.check_version(recorded, f"checkpoint {path}")

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
                        f"checkpoint {path} cannot be read ({type(error).__name__}: {str(error)[:200]})") from None
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
        the chief: it writes nothing)."""
        self._require_model()
        if self._arrays:
            self.model  # noqa: B018  (on JAX, reading the property copies the training state into the variables)
            # Multi-process JAX: the variables are replicated, so the chief's copy is the whole state; the other
            # processes write nothing.
            prefix = self._manager.save(self.step) if self._chief else None
        else:
            if self._chief:  # first: a checkpoint of this release is never without its version
                _record_tf_version(self.directory, f"ckpt-{self.step}",
                                   [os.path.basename(path) for path in self._manager.checkpoints])
            prefix = self._manager.save(checkpoint_number=self._step)
        self._saved_step = self.step
        if self._chief and self._epoch is not None:
            batches, means = self._epoch_means(self._batch_logs)
            json_files.write_json(os.path.join(self.directory, PARTIAL_FILE),
                                  {"step": self._saved_step, "epoch": self._epoch, "batches": batches, "means": means})
        if not self._chief and prefix is not None:
            distribute.remove_worker_directory(self.directory, self._strategy)
            return os.path.join(self.directory, os.path.basename(prefix))
        return prefix

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
        self._step.assign(current)
        if current // self.every_steps > previous // self.every_steps:
            self.save()

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
            return
        os.makedirs(self.directory, exist_ok=True)
        json_files.write_json(os.path.join(self.directory, HISTORY_FILE), {"epochs": epoch + 1, **self._history})

    def on_train_end(self, logs=None):
        # Decided on the step alone, the same on every worker (all of them take part in a save).
        if self._saved_step != self.step:
            self.save()

    def _read_partial(self, step):
        path = os.path.join(self.directory, PARTIAL_FILE)
        if not os.path.exists(path):
            return None
        with open(path) as f:
            partial = json.load(f)
        # Written after its checkpoint: a kill between the two leaves an older one, which is not used.
        return partial if partial.get("step") == step and partial.get("batches") else None

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


def _read_tf_versions(directory):
    """`{checkpoint name: sphere_tf version}` of the tf.train checkpoints of `directory` ({} without a record)."""
    path = os.path.join(directory, TF_VERSIONS_FILE)
    if not os.path.isfile(path):
        return {}
    try:
        with open(path) as f:
            recorded = json.load(f)
    except ValueError as error:
        raise array_checkpoint.CorruptCheckpointError(
            f"{path} is not valid JSON ({error}); it is replaced atomically, so something else wrote it: "
            "restore it, delete it (its checkpoints then load as written by sphere_tf 0.1.0) or use a new "
            "workdir.") from None
    return dict(recorded.get("checkpoints") or {})


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
        index = array_checkpoint.read_index(directory)
        raise ValueError(
            f"{directory} holds array checkpoints written on the {index.get('backend')!r} Keras backend; this run is "
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
