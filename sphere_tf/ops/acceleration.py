"""The boundary between the reference maths and a backend's accelerated implementation of the hot path.

Every layer computes its response through `sphere_tf.ops.response`, the reference
implementation written with `keras.ops` (it runs unchanged on the TensorFlow, JAX
and PyTorch backends). A backend may add an *accelerator*: an object that takes
over some of the hot-path pieces (patch energy, conv + patch energy, the response
tails) with faster code for that backend, and answers `NotImplemented` for
anything it does not handle, which then runs on the reference. An accelerator
never replaces the reference: operators, magnitudes and angular functions added
later run on the reference path until an accelerator chooses to handle them.

Accelerators are plug-ins found by backend name (`PLUGINS`), imported the first
time a layer asks for its path under that backend, in the manner of Keras's own
backend selection: the maths tier never imports a plug-in module by name in
Python, so nothing here depends on TensorFlow. Three plug-ins exist:
`sphere_tf.backends.tensorflow` (the compiled CPU kernels, XLA clusters and
TensorFlow custom gradients), `sphere_tf.backends.jax` (the patch energy as an
XLA reduce-window, TanhConv + cosine with a hand-written VJP) and
`sphere_tf.backends.torch` (the convolution without layout copies, a sum-pool
patch energy, `torch.autograd.Function`s for the θ and TanhConv tails).

Two process-wide switches:

* `set_acceleration(False)` (or ``SPHERE_TF_ACCELERATION=0`` in the
  environment): no plug-in, the reference path everywhere. Values agree with
  the accelerated paths to float32 rounding (the parity tests check it).
* `set_training_fusion(False)`: the accelerator may not use its fused training
  implementations (for the TensorFlow plug-in: no XLA clusters, no compiled
  kernels; its plain TensorFlow custom gradients only).
"""

import dataclasses
import importlib
import logging
import os

import keras

# Backend name -> the module that registers that backend's accelerator when imported.
PLUGINS = {
    "tensorflow": "sphere_tf.backends.tensorflow",
    "jax": "sphere_tf.backends.jax",
    "torch": "sphere_tf.backends.torch",
}

_STATE = {
    "acceleration": os.environ.get("SPHERE_TF_ACCELERATION", "1") != "0",
    "training_fusion": True,
}
_ACCELERATORS = {}  # backend name -> registered accelerator
_IMPORTED = set()  # backends whose plug-in import was attempted


@dataclasses.dataclass(frozen=True)
class Path:
    """Which implementation the hot path of one layer call runs (chosen once per call by `layer_path`).

    Attributes:
        name: 'reference' / 'reference_inference' for the `keras.ops` reference,
            otherwise the accelerator's own name for its path.
        inference: True for calls with `training` falsy: no parameter gradients
            are needed, so per-filter scales may ride on the kernel and the
            fewest ops per value are preferred.
        accelerator: the `Accelerator` that handles this path, or None for the
            reference.
    """

    name: str
    inference: bool = False
    accelerator: object = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def fused(self):
        """True on an accelerator's fused training paths (the reference has none)."""
        return False


REFERENCE = Path("reference")
REFERENCE_INFERENCE = Path("reference_inference", inference=True)


class Accelerator:
    """Base class of a backend's plug-in: an accelerated hot path, and the replica hooks of the training paradigms.

    A hot-path method receives the `Path` this accelerator returned from `path` and the
    same arguments as the reference function of `sphere_tf.ops.response` it stands in
    for; it must return the same values to float32 rounding (gradients included), or
    `NotImplemented` to leave the case to the reference.

    The replica hooks (`num_replicas_in_sync`, `per_replica_update`,
    `all_gather_across_replicas`) are for the backend's own distribution engine
    where Keras has no backend-neutral API (for TensorFlow: `tf.distribute`); they
    are correctness, not speed, so `plugin()` returns the plug-in even while
    `set_acceleration(False)`.
    """

    name = "accelerator"

    def num_replicas_in_sync(self):
        """How many replicas a loss is divided over inside the current train step."""
        return 1

    def per_replica_update(self, variables, update_fn):
        """Runs `update_fn(v)` once for each variable (once per device copy under a replicating strategy)."""
        for variable in variables:
            update_fn(variable)

    def all_gather_across_replicas(self, x):
        """`x` of every replica of the current train step, concatenated on axis 0 in replica order.

        `x` itself outside a replicating engine or with one replica. For values the
        replicas must agree on, e.g. the labels that drive Partial FC's class sample
        (`sphere_tf.layers.PartialFCHead`). No gradient is defined through it.
        """
        return x

    def replicated_updates(self):
        """True when variable updates must go through the backend's replica engine (a `tf.distribute`
        strategy), so an optimizer may not assign the variables itself."""
        return False

    def update_variables(self, update_fn, variables, inputs):
        """Assigns `update_fn(*values, *inputs)` to `variables` (keras Variables), one new value each.

        `update_fn` is a pure elementwise function of tensors (an optimizer's rule,
        e.g. `sphere_tf.optimizers.PartialFCOptimizer`'s masked SGD/Adam step); a
        plug-in may run it where it reads and writes the variables in one fused
        pass (TensorFlow: an XLA cluster). The same values as the default.
        """
        new_values = update_fn(*[variable.value for variable in variables], *inputs)
        for variable, value in zip(variables, new_values):
            variable.assign(value)

    def run_eagerly(self, fn):
        """`fn()` with concrete tensors and working gradients even when called inside a traced function
        (TensorFlow builds layers inside `tf.function` traces; JAX and PyTorch build them eagerly)."""
        return fn()

    def path(self, training, fusion):
        """The `Path` of a layer call: `training` the call's flag, `fusion` whether fused paths are allowed."""
        del training, fusion
        return None

    def patch_squared_norm(self, inputs, kernel_size, strides, padding, dilation_rate, path):
        """`sphere_tf.ops.response.patch_squared_norm` (same arguments, same values and gradient), or
        NotImplemented."""
        return NotImplemented

    def gather_columns(self, values, index, num_shards, axis):
        """`sphere_tf.ops.sampling.gather_columns` (same arguments, same values and gradient), or NotImplemented."""
        return NotImplemented

    def conv_and_patch_squared_norm(self, inputs, kernel, strides, padding, dilation_rate, path):
        """`sphere_tf.ops.response.conv_and_patch_squared_norm` (same arguments, same values and gradient), or
        NotImplemented."""
        return NotImplemented

    def response_from_dot(self, dot, x_norm, inv_norm, w_norm, *, magnitude, angular, alpha, beta, radius, k,
                          weighted, weight_radius, path):
        """`sphere_tf.ops.response.decoupled_response_from_dot` (same arguments, `magnitude` resolved to a
        `Magnitude`; same values and gradient), or NotImplemented."""
        return NotImplemented

    def conv_norm(self, inputs, kernel, normalizer, strides, padding):
        """`sphere_tf.ops.fourier.fourier_conv_norm` (same arguments, strides a pair; same values and gradients),
        or NotImplemented."""
        return NotImplemented

    def depthwise_conv(self, inputs, kernel, strides, padding):
        """`keras.ops.depthwise_conv` (same arguments, strides a pair, no dilation; same values and gradients), or
        NotImplemented."""
        return NotImplemented


class FallBack:
    """A plug-in's way to leave a call to the reference: returns NotImplemented, after one INFO line per distinct
    reason on the plug-in's logger, so a user who wonders why a case is slow finds the reason once in the log."""

    def __init__(self, logger_name, plugin_name):
        self._logger = logging.getLogger(logger_name)
        self._plugin_name = plugin_name
        self.reported = set()

    def __call__(self, reason):
        if reason not in self.reported:
            self.reported.add(reason)
            self._logger.info("sphere_tf %s plug-in: the keras.ops reference computes this call: %s",
                              self._plugin_name, reason)
        return NotImplemented


def register_accelerator(backend, accelerator):
    """Make `accelerator` (an `Accelerator`) the hot path's accelerator under Keras backend `backend`."""
    if not isinstance(accelerator, Accelerator):
        raise TypeError(f"`accelerator` must be a sphere_tf.ops.acceleration.Accelerator. Received: {accelerator!r}")
    _ACCELERATORS[backend] = accelerator


def set_acceleration(enabled):
    """Use the backend's accelerator where one is registered (default) or the reference path everywhere."""
    _STATE["acceleration"] = bool(enabled)


def acceleration_enabled():
    """Whether `set_acceleration` is on."""
    return _STATE["acceleration"]


def set_training_fusion(enabled):
    """Allow the accelerator's fused training implementations (default) or only its plain ones.

    For the TensorFlow plug-in, on: the layers' training calls (outside code that
    XLA compiles as a whole) run their full-size elementwise work through the
    compiled kernels (where built) and small `jit_compile=True` clusters; off:
    plain TensorFlow ops with hand-written gradients. Same values to float32
    rounding. Inference and export never use the fused paths.
    """
    _STATE["training_fusion"] = bool(enabled)


def training_fusion_enabled():
    """Whether `set_training_fusion` is on."""
    return _STATE["training_fusion"]


def accelerator():
    """The accelerator of the current Keras backend, or None (none registered, or acceleration off)."""
    return plugin() if _STATE["acceleration"] else None


def plugin():
    """The current Keras backend's plug-in (acceleration on or off), or None where there is none.

    The first call under a backend imports its plug-in (`PLUGINS`), which registers
    itself. A plug-in that fails to import is an error, not a silent fallback.
    """
    backend = keras.backend.backend()
    if backend not in _IMPORTED:
        _IMPORTED.add(backend)
        if backend in PLUGINS:
            importlib.import_module(PLUGINS[backend])
    return _ACCELERATORS.get(backend)


def all_gather_across_replicas(x):
    """`Accelerator.all_gather_across_replicas` of the current backend's plug-in (`x` without one)."""
    backend_plugin = plugin()
    return x if backend_plugin is None else backend_plugin.all_gather_across_replicas(x)


def replicated_updates():
    """`Accelerator.replicated_updates` of the current backend's plug-in (False without one)."""
    backend_plugin = plugin()
    return False if backend_plugin is None else backend_plugin.replicated_updates()


def update_variables(update_fn, variables, inputs):
    """`Accelerator.update_variables` of the current accelerator (the default implementation without one, or
    with `set_acceleration(False)`)."""
    backend_accelerator = accelerator() or Accelerator()
    backend_accelerator.update_variables(update_fn, variables, inputs)


def conv_norm(inputs, kernel, normalizer, strides, padding):
    """`Accelerator.conv_norm` of the current accelerator: ConvNorm's convolution, or NotImplemented where there is
    no accelerator or it leaves the case to `sphere_tf.ops.fourier.fourier_conv_norm`."""
    backend_accelerator = accelerator()
    if backend_accelerator is None:
        return NotImplemented
    return backend_accelerator.conv_norm(inputs, kernel, normalizer, strides, padding)


def depthwise_conv(inputs, kernel, strides, padding):
    """`Accelerator.depthwise_conv` of the current accelerator, or NotImplemented where there is none or it leaves
    the case to `keras.ops.depthwise_conv`."""
    backend_accelerator = accelerator()
    if backend_accelerator is None:
        return NotImplemented
    return backend_accelerator.depthwise_conv(inputs, kernel, strides, padding)


def run_eagerly(fn):
    """`Accelerator.run_eagerly` of the current backend's plug-in (`fn()` without one)."""
    backend_plugin = plugin()
    return fn() if backend_plugin is None else backend_plugin.run_eagerly(fn)


def layer_path(training, fusion=True):
    """The `Path` of one layer call: the accelerator's where it gives one, else the reference.

    Args:
        training: the call's `training` flag (None counts as inference).
        fusion: False pins this call to the accelerator's plain path (a layer's
            `_use_training_fusion`); the global `set_training_fusion` applies too.
    """
    acc = accelerator()
    if acc is not None:
        path = acc.path(bool(training), bool(fusion) and _STATE["training_fusion"])
        if path is not None:
            return path
    return REFERENCE if training else REFERENCE_INFERENCE
