"""Tracks the hyperspherical energy of a model's layers during `fit` [T-E.2].

The default measurement is the one the thesis plots for CoMHE's training curves
(Fig. 6.1 and Figs. E.2–E.5, App. E.2.3): the *unprojected* half-space energy
with s = 1 (Eq. E.2, per-layer mean over the ordered pairs of the 2N points
{ŵ_k, −ŵ_k}), per layer and summed over layers. `power` and `half_space` select
another: Fig. 6.2's text names E_2 of Eq. 6.1 (full space, s = 2).

A layer's neurons are its effective kernel (`sphere_tf.layers.kernels`): the
`kernel` of a Conv2D / Dense / SphereConv2D / DecoupledConv2D, ``W = R·V`` of an
OPT layer, whatever a layer's `effective_kernel()` returns.
"""

import keras
import numpy as np
from keras import ops

from sphere_tf import energy as energy_lib
from sphere_tf import saving
from sphere_tf import validation
from sphere_tf.callbacks import tensorboard
from sphere_tf.layers import kernels


def kernel_layers(model):
    """All layers under `model` with an effective kernel, in model order (`sphere_tf.layers.kernels`)."""
    return kernels.kernel_layers(model)


def layer_energies(model, layers=None, **energy_kwargs):
    """Dict layer name -> float energy of the layer's effective kernel (`energy.hyperspherical_energy` kwargs)."""
    layers = kernel_layers(model) if layers is None else layers
    return {
        layer.name: float(ops.convert_to_numpy(
            energy_lib.hyperspherical_energy(kernels.effective_kernel(layer), **energy_kwargs)))
        for layer in layers
    }


@saving.register_serializable()
class HypersphericalEnergy(keras.callbacks.Callback):
    """Logs per-layer and total hyperspherical energy to the History and TensorBoard.

    Adds `<prefix><layer name>` for each tracked layer and `<prefix>total` (sum
    over layers, as in the thesis's plots) to the epoch logs, so they appear in
    `model.fit(...).history` (and in any TensorBoard callback placed *after*
    this one, as `epoch_<prefix><layer>`). With `log_dir`, it also writes them
    itself, on every Keras backend, as TensorBoard scalars tagged
    `<prefix><layer>` and `<prefix>total` in an event file of `log_dir`
    (through tensorboardX, `sphere_tf.callbacks.scalar_writer`), at the epoch
    index (`update_freq='epoch'`) or the global batch counted from 1
    (`update_freq='batch'`).

    Args:
        power: float >= 0, s (default 1, the thesis's tracking metric).
        half_space: bool (default True, Eq E.2).
        distance: 'euclidean', 'angular' or 'normalized_angular'.
        layer_names: optional list of layer names to track (default: every layer
            with an effective kernel, including the output layer).
        frequency: int >= 1, write to TensorBoard every `frequency` epochs (or
            batches). The History gets a value at the end of every epoch.
        update_freq: 'epoch' or 'batch' (TensorBoard granularity).
        log_dir: optional str or os.PathLike, TensorBoard folder for the
            scalars (needs tensorboardX: `pip install tensorboardX`).
        prefix: str prepended to the log keys.

    Raises:
        ValueError: an argument is invalid (naming it).
        ImportError: `log_dir` is given and tensorboardX is not installed.
    """

    def __init__(self, power=1, half_space=True, distance="euclidean", layer_names=None, frequency=1,
                 update_freq="epoch", log_dir=None, prefix="energy/"):
        super().__init__()
        energy_lib.check_energy_args(power, distance)
        frequency = validation.positive_int(frequency, "frequency", maximum=validation.MAX_INT32)
        update_freq = validation.one_of(update_freq, "update_freq", ("epoch", "batch"))
        self.power = validation.plain_number(power)  # a NumPy scalar would not serialize
        self.half_space = validation.boolean(half_space, "half_space")
        self.distance = distance
        # A str is iterable too: 'conv' would become the names 'c', 'o', 'n', 'v'.
        if layer_names is not None and not (
                isinstance(layer_names, (list, tuple)) and all(isinstance(n, str) and n for n in layer_names)):
            raise validation.invalid_argument("layer_names", "None or a list of layer names (str)", layer_names)
        self.layer_names = None if layer_names is None else list(layer_names)
        self.frequency = frequency
        self.update_freq = update_freq
        self.log_dir = tensorboard.check_log_dir(log_dir, allow_none=True)
        if self.log_dir is not None:
            tensorboard.require_tensorboardx(f"HypersphericalEnergy(log_dir={self.log_dir!r})")
        self.prefix = validation.text(prefix, "prefix", allow_empty=True)
        self._writer = None
        self._batches = 0

    def _layers(self):
        layers = kernel_layers(self.model)
        if self.layer_names is not None:
            by_name = {layer.name: layer for layer in layers}
            missing = [n for n in self.layer_names if n not in by_name]
            if missing:
                raise validation.invalid_argument(
                    "layer_names", f"names of the model's layers with a kernel ({sorted(by_name)}); no kernel layer "
                    f"named {missing}", self.layer_names)
            layers = [by_name[n] for n in self.layer_names]
        return layers

    def measure(self):
        """Dict `<prefix><layer>` -> energy, plus `<prefix>total`."""
        values = layer_energies(self.model, self._layers(), power=self.power, half_space=self.half_space,
                                distance=self.distance)
        logs = {self.prefix + name: value for name, value in values.items()}
        logs[self.prefix + "total"] = float(np.sum(list(values.values()))) if values else 0.0
        return logs

    def _record(self, logs, step, write=True):
        measured = self.measure()
        if logs is not None:
            logs.update(measured)
        if write and self.log_dir is not None:
            # Keras has no summary writer of its own; tensorboardX writes on every backend.
            if self._writer is None:
                self._writer = tensorboard.scalar_writer(self.log_dir)
            for key, value in measured.items():
                self._writer.scalar(key, value, step)
            self._writer.flush()

    def on_train_begin(self, logs=None):
        self._batches = 0

    def on_train_batch_end(self, batch, logs=None):
        self._batches += 1
        if self.update_freq == "batch" and self._batches % self.frequency == 0:
            self._record(logs, self._batches)

    def on_epoch_end(self, epoch, logs=None):
        # The History always gets one value per epoch; `frequency` thins the TensorBoard writes.
        write = self.update_freq == "epoch" and (epoch + 1) % self.frequency == 0
        self._record(logs, epoch, write=write)

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def get_config(self):
        return {
            "power": self.power,
            "half_space": self.half_space,
            "distance": self.distance,
            "layer_names": self.layer_names,
            "frequency": self.frequency,
            "update_freq": self.update_freq,
            "log_dir": self.log_dir,
            "prefix": self.prefix,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)
