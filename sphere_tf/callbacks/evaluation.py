"""Periodic test evaluation in a run: the test-error curve and the best-checkpoint selection.

Keras evaluates the test set inside `fit` (`validation_data`, every `validation_freq` epochs) and logs
`val_loss` and `val_<metric>`. `TestErrorLog` adds what the papers plot, the test error in percent and the global
step of each evaluation, so the history, TensorBoard (the validation run's `epoch_error`) and the runner's
`results.json` hold the curve. `BestCheckpoint` is Keras's `ModelCheckpoint` (best weights only) whose best value
survives a resume.

Which papers report what: SphereNet (NIPS 2017) and DCNet (CVPR 2018) plot test accuracy over iterations
(SphereNet Fig. 3, Fig. 5) and report the final model; ConvNorm (NeurIPS 2021) reports the best validation
accuracy over training (its Table 7 and the authors' `train.py` keep `best_acc`); OPT (CVPR 2021) and MHE
(NeurIPS 2018) report the final model of a fixed schedule.
"""

import math

import keras
from keras import ops

from sphere_tf import saving
from sphere_tf import validation


def evaluation_freq(eval_every_steps, steps_per_epoch):
    """`fit`'s `validation_freq` (in epochs) for an evaluation every `eval_every_steps` steps.

    Raises:
        ValueError: `eval_every_steps` is not a positive multiple of `steps_per_epoch` (naming both keys).
    """
    if eval_every_steps <= 0 or eval_every_steps % steps_per_epoch:
        raise ValueError(
            f"evaluation.eval_every_steps={eval_every_steps} must be a positive multiple of the run's epoch of "
            f"{steps_per_epoch} steps (train.steps_per_epoch): Keras evaluates at the end of an epoch.")
    return eval_every_steps // steps_per_epoch


@saving.register_serializable()
class TestErrorLog(keras.callbacks.Callback):
    """Adds `val_error` (test error, percent) and `val_step` (the global step) to the logs of every epoch that
    Keras evaluated the test set in. Put it before the callbacks that read the logs (TensorBoard, checkpoints).

    Args:
        accuracy_name: str, the compiled accuracy metric's name (`val_<name>` is read).
        steps_per_epoch: int > 0, steps of one `fit` epoch.
    """

    def __init__(self, accuracy_name, steps_per_epoch):
        super().__init__()
        self.accuracy_name = validation.text(accuracy_name, "accuracy_name")
        self.steps_per_epoch = validation.positive_int(steps_per_epoch, "steps_per_epoch",
                                                       maximum=validation.MAX_INT32)

    def on_epoch_end(self, epoch, logs=None):
        key = f"val_{self.accuracy_name}"
        if logs is None or key not in logs:
            return
        logs["val_error"] = 100.0 * (1.0 - float(logs[key]))
        logs["val_step"] = float((epoch + 1) * self.steps_per_epoch)

    def get_config(self):
        return {"accuracy_name": self.accuracy_name, "steps_per_epoch": self.steps_per_epoch}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


@saving.register_serializable()
class BestCheckpoint(keras.callbacks.ModelCheckpoint):
    """`ModelCheckpoint(save_best_only=True, save_weights_only=True)` on `monitor` (maximised), whose best value
    is a variable saved with the run's step checkpoints (`checkpoint_state`), so that a resumed run keeps the
    weights of the best evaluation before the interruption unless a later one beats it.

    Args:
        filepath: str, the weights file (`*.weights.h5`).
        monitor: str, the logged value to maximise (e.g. 'val_accuracy').
    """

    def __init__(self, filepath, monitor):
        # Keras's ModelCheckpoint fails on a non-str path with an AttributeError from `filepath.endswith`.
        filepath = validation.path(filepath, "filepath")
        monitor = validation.text(monitor, "monitor")
        super().__init__(filepath, monitor=monitor, mode="max", save_best_only=True, save_weights_only=True,
                         verbose=0)
        self._best = keras.Variable(-math.inf, dtype="float32", trainable=False, name="best_monitored")

    def get_config(self):
        return {"filepath": self.filepath, "monitor": self.monitor}

    @classmethod
    def from_config(cls, config):
        return cls(**config)

    def checkpoint_state(self):
        """dict name -> `keras.Variable`: the best value so far."""
        return {"best": self._best}

    def on_train_begin(self, logs=None):
        super().on_train_begin(logs)
        restored = float(ops.convert_to_numpy(self._best))  # by the step checkpoint, on a resume
        self.best = restored if math.isfinite(restored) else None

    def on_epoch_end(self, epoch, logs=None):
        if logs is None or self.monitor not in logs:
            return  # an epoch without a test evaluation (Keras's callback would warn at each)
        super().on_epoch_end(epoch, logs)
        if self.best is not None:
            self._best.assign(self.best)

    @property
    def best_value(self):
        """float, the best monitored value so far (−inf before any evaluation)."""
        return float(ops.convert_to_numpy(self._best))


__all__ = ["BestCheckpoint", "TestErrorLog", "evaluation_freq"]
