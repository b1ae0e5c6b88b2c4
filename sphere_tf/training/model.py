"""DCNet optimisation tricks in a Keras `train_step`: weight projection and weighted gradients.

Standard (unweighted) decoupled and hyperspherical operators only see the unit
kernel ŵ = w/‖w‖, so the gradient of the loss with respect to w is orthogonal to
w and shrinks as 1/‖w‖ [D-17]:

```
∂(ŵᵀx̂)/∂w = (x̂ − (ŵᵀx̂)·ŵ) / ‖w‖                                   [D-17]
```

Under SGD ‖w‖ only grows (the step is ⊥ w), so learning stalls. DCNet offers two
remedies [D §4], both implemented here, per output channel (the norm is over all
kernel axes but the last: (kh, kw, C_in) for HWIO conv kernels, C_in for dense):

```
weight projection   w ← s·ŵ every N steps, after the update      [D §4.1]
weighted gradients  ∂L/∂w ← ‖w‖·∂L/∂w  before the optimizer       [D-18]
                    (for L = ŵᵀx̂ the step is x̂ − (ŵᵀx̂)·ŵ)
```

`SphereModel` (functional), `SphereSequential` and `SphereTrainingMixin` (for
your own `keras.Model` subclasses) run both inside Keras's own `train_step` of
the current backend (TensorFlow, JAX or PyTorch), as hooks around the
optimizer's `apply` (which every backend's step calls, JAX's through
`stateless_apply`): the gradients are scaled before the update and the kernels
projected after it, with `ops.where` on the step count (no stateful branch, so
it traces under `jit` and in JAX's stateless scope). `fit`, `evaluate`,
callbacks, regularisation losses, `LossScaleOptimizer` (mixed precision) and,
on TensorFlow, `tf.distribute` strategies work unchanged. `wrap(model)` turns
any functional or built Sequential model into a `SphereModel` sharing its layers.

Which layers are affected: every layer, found recursively (nested models and
layers held as attributes included), that exposes `supports_weight_projection`
and a `kernel` variable (the protocol of `sphere_tf.layers`' decoupled and
Sphere layers). Layers whose kernel is not trainable are left alone. A layer
with `supports_weight_projection == False` is a *weighted* operator whose
forward pass depends on ‖w‖; asking for either trick on a model containing one
raises `ValueError` naming the layer [D §4, §6.1.1].

Numerics follow the authors' TF code (wy1iu/DCNets): the projection is a plain
assign of w/‖w‖ every **100** iterations (`i % 100 == 0`), the default of
`weight_projection_every`; s = 1 as in all of the paper's experiments.
"""

import inspect
import threading

import contextlib

import keras
import numpy as np
from keras import ops

from sphere_tf import regularizers
from sphere_tf import saving
from sphere_tf import validation
from sphere_tf import walk
from sphere_tf.callbacks import label_range
from sphere_tf.ops import acceleration
from sphere_tf.ops import angles

# Upstream: `if i % 100 == 0: sess.run(wp_op)` (wy1iu/DCNets train_resnet.py).
DEFAULT_PROJECTION_EVERY = 100
# s = 1 "in all experiments" [D §4.1].
DEFAULT_PROJECTION_SCALE = 1.0

_SETTINGS = ("weight_projection_every", "projection_scale", "weighted_gradients")


def validate_settings(weight_projection_every, projection_scale, weighted_gradients):
    """Checks the three DCNet-trick settings and returns them as plain Python values.

    Args:
        weight_projection_every: int > 0 (project every N optimizer steps) or None (never).
        projection_scale: float > 0, the norm s of projected kernels.
        weighted_gradients: bool.

    Returns:
        `(every, scale, weighted)` as `(int or None, float, bool)`.

    Raises:
        ValueError: a setting is invalid; the message names it.
    """
    every = validation.positive_int(
        weight_projection_every, "weight_projection_every", allow_none=True, maximum=validation.MAX_INT32)
    scale = validation.positive_float(projection_scale, "projection_scale")
    if not isinstance(weighted_gradients, (bool, np.bool_)):
        raise validation.invalid_argument("weighted_gradients", "a bool", weighted_gradients)
    return every, scale, bool(weighted_gradients)


def project_kernel(kernel, scale=DEFAULT_PROJECTION_SCALE):
    """Weight projection of one kernel, w ← s·w/‖w‖ per output channel   [D §4.1].

    The norm is the plain Euclidean norm over all axes but the last (no ε), so
    the result has per-channel norm exactly `scale` (to float32 rounding). The
    channel is divided by its largest magnitude first, so neither tiny (1e-20)
    nor huge (1e20) kernels under- or overflow. An all-zero channel has no
    direction and is returned unchanged.

    Args:
        kernel: tensor `(..., units)` (Keras HWIO conv or `(in, out)` dense layout).
        scale: float > 0, the target norm s.

    Returns:
        float32 tensor of the kernel's shape.
    """
    # Not `angles.normalize`: that adds ε under the square root (the operators' forward
    # normalisation), while the projection wants the exact norm s, and pre-scaling by the
    # channel's peak keeps sum(w²) representable for any finite float32 kernel.
    w = ops.cast(kernel, "float32")
    axes = tuple(range(len(w.shape) - 1))
    peak = ops.max(ops.abs(w), axis=axes)
    nonzero = peak > 0.0
    unit = w / ops.where(nonzero, peak, 1.0)
    norm = ops.sqrt(ops.sum(ops.square(unit), axis=axes))
    return ops.where(nonzero, unit * (scale / ops.where(nonzero, norm, 1.0)), w)


def is_operator_layer(obj):
    """True for a layer that follows the DCNet-trick protocol (`supports_weight_projection`)."""
    return isinstance(obj, keras.layers.Layer) and hasattr(obj, "supports_weight_projection")


def find_operator_layers(root):
    """All layers under `root` that take part in the DCNet tricks, in a stable order.

    Walks nested models (`.layers`) and layers held as attributes, lists or
    dicts of other layers (custom blocks), without duplicates
    (`sphere_tf.walk`). A layer takes part when it exposes
    `supports_weight_projection` (the decoupled / Sphere layers of
    `sphere_tf.layers`, and any layer following the same protocol).

    Args:
        root: a `keras.Model` or `keras.layers.Layer`.

    Returns:
        list of layers (`root` itself included if it qualifies).
    """
    return walk.find_layers(root, is_operator_layer)


def _describe(layer):
    return f"'{layer.name}' ({type(layer).__name__}, weighted={getattr(layer, 'weighted', '?')!r})"


def compute_training_loss(model, x, y, y_pred, sample_weight):
    """`model.compute_loss` of a custom `train_step`, with `training=True` where its signature takes it."""
    if "training" in inspect.signature(model.compute_loss).parameters:
        return model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True)
    return model.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight)


def _num_replicas():
    # A replicating engine without a Keras API (tf.distribute) is the backend plug-in's business.
    backend_plugin = acceleration.plugin()
    return 1 if backend_plugin is None else backend_plugin.num_replicas_in_sync()


def track_loss(model, loss, batch_size):
    """Updates `model`'s compiled "loss" tracker as Keras's own step does (public API only).

    Losses are divided by the replica count inside `compute_loss`; the reported
    value undoes it, weighted by the batch size.
    """
    tracker = next((m for m in model.metrics if m.name == "loss"), None)
    if tracker is None:
        return
    replicas = _num_replicas()
    value = loss * ops.cast(replicas, loss.dtype) if replicas > 1 else loss
    tracker.update_state(value, sample_weight=batch_size)


def _per_replica_update(variables, update_fn):
    """Runs `update_fn(v)` once for each variable (once per device copy under `tf.distribute`)."""
    backend_plugin = acceleration.plugin()
    if backend_plugin is None:
        for variable in variables:
            update_fn(variable)
    else:
        backend_plugin.per_replica_update(variables, update_fn)


# Per thread: which model's hooks an optimizer's `apply` runs (see `SphereTrainingMixin._optimizer_hooks`).
_ACTIVE_HOOKS = threading.local()
_INSTALL_LOCK = threading.Lock()


def _install_apply_hook(optimizer):
    """Wraps `optimizer.apply` once: inside a model's `_optimizer_hooks` block it scales and projects."""
    with _INSTALL_LOCK:
        if getattr(optimizer, "_sphere_tf_apply_hooked", False):
            return
        apply = optimizer.apply

        def hooked_apply(grads, trainable_variables=None):
            model = getattr(_ACTIVE_HOOKS, "by_optimizer", {}).get(id(optimizer))
            if model is None:
                return apply(grads, trainable_variables)
            variables = optimizer._trainable_variables if trainable_variables is None else trainable_variables
            result = apply(model._scale_gradients(list(grads), list(variables)), trainable_variables)
            model._project_weights_if_due(optimizer.iterations)
            return result

        optimizer.apply = hooked_apply
        optimizer._sphere_tf_apply_hooked = True


def _leaf_optimizer(optimizer):
    # The optimizer that updates the variables (LossScaleOptimizer hands it unscaled gradients).
    while isinstance(getattr(optimizer, "inner_optimizer", None), keras.optimizers.Optimizer):
        optimizer = optimizer.inner_optimizer
    return optimizer


class SphereTrainingMixin:
    """Adds DCNet weight projection and weighted gradients to a `keras.Model` subclass.

    Put it first in the bases: `class MyNet(SphereTrainingMixin, keras.Model)`.
    The three settings are keyword arguments of `__init__` (consumed here, the
    rest go to the Keras base class), attributes of the model, and entries of
    `get_config` (restored by `from_config`, so `.keras` files keep them).

    ```
    every N optimizer steps (after the update):  w ← s·ŵ         [D §4.1]
    each step, before the optimizer:             g ← ‖w‖·g       [D-18]
    ```

    Args:
        weight_projection_every: int > 0 or None, project the kernels of all
            standard operator layers when `optimizer.iterations` (after the
            update) is a multiple of N; None disables it. Default 100 (upstream).
        projection_scale: float > 0, the norm s of projected kernels (paper: 1).
        weighted_gradients: bool, multiply each operator kernel's gradient per
            output channel by that channel's kernel norm before the optimizer.

    Raises:
        ValueError: invalid settings, or (at construction when the layers are
            known, else at the first training step) a trick requested on a model
            holding a weighted operator.

    Note: the weighted-gradient norm is the one the layer's forward pass divides
    by, sqrt(‖w‖² + ε) with the layer's `epsilon` (upstream 1e-4), so the 1/‖w‖
    factor of [D-17] cancels exactly; with `epsilon=0` it is the paper's ‖w‖.
    The whole kernel gradient is scaled, including the part coming from
    regularisation losses on that kernel: [D-18] rescales the gradient of w
    before the optimizer's update and the paper does not separate the loss
    terms. The projection
    uses the exact norm (no ε), so projected kernels have norm s; the forward
    pass changes only through ε, by a relative factor below ε/(2·min(s, ‖w‖)²).
    """

    def __init__(
        self,
        *args,
        weight_projection_every=DEFAULT_PROJECTION_EVERY,
        projection_scale=DEFAULT_PROJECTION_SCALE,
        weighted_gradients=False,
        **kwargs,
    ):
        settings = validate_settings(weight_projection_every, projection_scale, weighted_gradients)
        if len(args) == 2 or "outputs" in kwargs:
            # Keras's functional constructor drops the keywords it does not know: a misspelt
            # `weight_projection_evry=10` would be ignored without a word.
            unknown = sorted(set(kwargs) - {"inputs", "outputs", "name", "trainable"})
            if unknown:
                raise TypeError(f"{type(self).__name__}() got unexpected keyword arguments {unknown}; it takes "
                                "inputs, outputs, name, trainable and the DCNet settings (weight_projection_every, "
                                "projection_scale, weighted_gradients).")
        super().__init__(*args, **kwargs)
        self._set_sphere_settings(*settings)
        # Functional / Sequential-with-input models know their layers now: fail early.
        if getattr(self, "built", False):
            self.operator_layers()

    def _set_sphere_settings(self, every, scale, weighted):
        self.weight_projection_every = every
        self.projection_scale = scale
        self.weighted_gradients = weighted

    # -- public helpers --------------------------------------------------------------

    @property
    def uses_sphere_tricks(self):
        """Whether weight projection or weighted gradients are on."""
        return self.weight_projection_every is not None or self.weighted_gradients

    def operator_layers(self):
        """The operator layers affected by the tricks (see `find_operator_layers`).

        Raises:
            ValueError: a trick is on and one of the layers is a weighted operator.
        """
        layers = [layer for layer in find_operator_layers(self) if layer is not self]
        if self.uses_sphere_tricks:
            weighted = [layer for layer in layers if not layer.supports_weight_projection]
            if weighted:
                tricks = []
                if self.weight_projection_every is not None:
                    tricks.append(f"weight_projection_every={self.weight_projection_every}")
                if self.weighted_gradients:
                    tricks.append("weighted_gradients=True")
                raise ValueError(
                    f"{type(self).__name__} {self.name!r}: {' and '.join(tricks)} cannot be used with "
                    f"weighted operators, whose forward pass depends on ‖w‖ [D §4]. Weighted layer(s): "
                    f"{', '.join(_describe(layer) for layer in weighted)}. Use weighted=None for these "
                    "layers, or pass weight_projection_every=None and weighted_gradients=False."
                )
        return layers

    def projected_kernels(self):
        """Kernel variables that projection / weighted gradients act on (trainable only)."""
        kernels = []
        for layer in self.operator_layers():
            kernel = getattr(layer, "kernel", None)
            if isinstance(kernel, keras.Variable) and kernel.trainable and layer.trainable:
                kernels.append(kernel)
        return kernels

    def project_weights(self):
        """Projects every operator kernel to s·ŵ now (also works under a strategy scope)."""
        kernels = self.projected_kernels()
        if kernels:
            _per_replica_update(kernels, self._project_variable)

    # -- training ---------------------------------------------------------------------

    def fit(self, *args, callbacks=None, **kwargs):
        """`keras.Model.fit`, with the model's regularizer state tracked and margin-head labels checked.

        `sphere_tf.regularizers.track_state` (so JAX's train step carries the
        MHE/CoMHE counters and projections) and, for a model with a `MarginHead`,
        a `sphere_tf.callbacks.LabelRangeCheck` unless one is given (so an
        out-of-range label fails clearly under `jit_compile=True` too).
        """
        if self.built:
            # Refused before any step: on JAX an error raised inside the compiled step would leave the
            # variables released by the fit loop (Keras frees them while the step owns the state).
            self.operator_layers()
            regularizers.track_state(self)
        callbacks = list(callbacks or [])
        if label_range.has_margin_head(self) and not any(
            isinstance(c, label_range.LabelRangeCheck) for c in callbacks
        ):
            callbacks.append(label_range.LabelRangeCheck())
        return super().fit(*args, callbacks=callbacks, **kwargs)

    def train_step(self, *args, **kwargs):
        """Keras's `train_step` of the current backend, with the DCNet hooks around the update.

        `_scale_gradients` [D-18] runs on the gradients the optimizer receives and
        `_project_weights_if_due` [D §4.1] after its update (see `_optimizer_hooks`).
        """
        self.operator_layers()  # trace time: refuse weighted operators before any update
        if not self.uses_sphere_tricks or self.optimizer is None:
            return super().train_step(*args, **kwargs)
        with self._optimizer_hooks():
            return super().train_step(*args, **kwargs)

    @contextlib.contextmanager
    def _optimizer_hooks(self):
        """Routes the (innermost) optimizer's `apply` through the DCNet hooks for the length of one step.

        Every backend's step ends in that `apply` (TF and PyTorch directly, JAX
        via `stateless_apply`, a `LossScaleOptimizer` via its inner optimizer), so
        the tricks need no per-backend step. The wrapper is installed once per
        optimizer (`_hooked_apply`) and is active only inside this block, per
        thread: `tf.distribute.MirroredStrategy` runs the replicas' steps in
        concurrent threads, and a wrapper installed and removed around each of
        them would interleave (one replica wrapping the other's wrapper).
        """
        optimizer = _leaf_optimizer(self.optimizer)
        _install_apply_hook(optimizer)
        hooks = _ACTIVE_HOOKS.__dict__.setdefault("by_optimizer", {})
        previous = hooks.get(id(optimizer))
        hooks[id(optimizer)] = self
        try:
            yield
        finally:
            if previous is None:
                hooks.pop(id(optimizer), None)
            else:
                hooks[id(optimizer)] = previous

    def _scale_gradients(self, gradients, variables):
        """Weighted gradients [D-18]: g ← sqrt(‖w‖² + ε)·g per output channel."""
        if not self.weighted_gradients:
            return gradients
        epsilons = {}
        for layer in self.operator_layers():
            kernel = getattr(layer, "kernel", None)
            if isinstance(kernel, keras.Variable):
                epsilons[id(kernel)] = float(getattr(layer, "epsilon", 0.0))
        scaled = []
        for grad, var in zip(gradients, variables):
            if grad is not None and id(var) in epsilons:
                norm = angles.kernel_norm(var, epsilons[id(var)])  # float32, (units,)
                grad = grad * ops.cast(norm, grad.dtype)
            scaled.append(grad)
        return scaled

    def _project_weights_if_due(self, iterations):
        """Weight projection [D §4.1] when `iterations` (after the update) is a multiple of N."""
        if self.weight_projection_every is None:
            return
        kernels = self.projected_kernels()
        if not kernels:
            return
        every = self.weight_projection_every

        def update(var):
            step = ops.convert_to_tensor(iterations)
            due = ops.logical_and(ops.greater(step, 0), ops.equal(ops.mod(step, every), 0))
            # A select, not a branch that assigns: it traces the same on every backend (JAX's
            # stateless scope cannot assign inside `lax.cond`); the projection is a cheap norm.
            value = ops.where(due, project_kernel(var, self.projection_scale), ops.cast(var, "float32"))
            var.assign(ops.cast(value, var.dtype))

        _per_replica_update(kernels, update)

    def _project_variable(self, var):
        var.assign(ops.cast(project_kernel(var, self.projection_scale), var.dtype))

    # -- serialisation ----------------------------------------------------------------

    def get_config(self):
        """The Keras base class's config with the three settings added."""
        config = super().get_config()
        config.update(
            {
                "weight_projection_every": self.weight_projection_every,
                "projection_scale": self.projection_scale,
                "weighted_gradients": self.weighted_gradients,
            }
        )
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        """The model of a `get_config` dict, its three settings restored (on every Keras route, Sequential's
        included)."""
        # The settings stay in `config`: the functional and subclass routes pass them to
        # `__init__` (so the weighted-operator check sees the saved settings); Sequential's
        # route ignores them, hence the explicit set below.
        model = super().from_config(dict(config), custom_objects=custom_objects)
        model._set_sphere_settings(
            *validate_settings(
                config.get("weight_projection_every", DEFAULT_PROJECTION_EVERY),
                config.get("projection_scale", DEFAULT_PROJECTION_SCALE),
                config.get("weighted_gradients", False),
            )
        )
        return model


@saving.register_serializable()
class SphereModel(SphereTrainingMixin, keras.Model):
    """A functional `keras.Model` that trains decoupled operators with the DCNet tricks.

    ```
    every N optimizer steps (after the update):  w ← s·ŵ         [D §4.1]
    each step, before the optimizer:             g ← ‖w‖·g       [D-18]
    ```

    Args:
        inputs, outputs: as `keras.Model(inputs, outputs)`.
        weight_projection_every: int > 0 or None (default 100, as upstream).
        projection_scale: float > 0, s (default 1, as the paper).
        weighted_gradients: bool (default False; no upstream code, the paper is
            the reference).
        **kwargs: `name`, `trainable` and other `keras.Model` arguments.

    Raises:
        ValueError: invalid settings, or a trick requested on a model that holds
            a weighted operator (the message names the layer).

    Reference:
        Liu et al., Decoupled Networks, CVPR 2018, §4, https://arxiv.org/abs/1804.08071

    Example:

    >>> from sphere_tf import layers
    >>> inputs = keras.Input((8, 8, 1))
    >>> x = layers.DecoupledConv2D(4, 3, magnitude="linear")(inputs)
    >>> outputs = keras.layers.Dense(2)(keras.layers.Flatten()(x))
    >>> model = SphereModel(inputs, outputs, weight_projection_every=10)
    >>> [layer.name for layer in model.operator_layers()] == [model.layers[1].name]
    True
    """


@saving.register_serializable()
class SphereSequential(SphereTrainingMixin, keras.Sequential):
    """`keras.Sequential` trained with the DCNet tricks (see `SphereModel`).

    Args:
        layers: list of layers, as `keras.Sequential`.
        weight_projection_every, projection_scale, weighted_gradients: as `SphereModel`.
        **kwargs: `name`, `trainable`.

    Example:

    >>> from sphere_tf import layers
    >>> model = SphereSequential(
    ...     [keras.Input((5,)), layers.SphereDense(3), keras.layers.Dense(2)],
    ...     weight_projection_every=1)
    >>> model.weight_projection_every
    1
    """


def wrap(
    model,
    weight_projection_every=DEFAULT_PROJECTION_EVERY,
    projection_scale=DEFAULT_PROJECTION_SCALE,
    weighted_gradients=False,
    name=None,
):
    """A `SphereModel` over the layers of an existing functional or Sequential model.

    The new model shares the layers (and so the weights) of `model`: training
    one trains the other. For subclassed models use `SphereTrainingMixin`.

    Args:
        model: a functional `keras.Model` or a `keras.Sequential` built with an
            `Input` (anything with symbolic `inputs` and `outputs`).
        weight_projection_every, projection_scale, weighted_gradients: as `SphereModel`.
        name: str or None, the new model's name (default: `model.name`).

    Returns:
        A `SphereModel`.

    Raises:
        ValueError: `model` has no symbolic inputs (subclassed or unbuilt Sequential).
    """
    try:
        inputs, outputs = model.inputs, model.outputs
    except (AttributeError, ValueError):
        inputs = outputs = None
    try:
        if inputs and isinstance(model.input, dict):  # named inputs (a `MarginHead` model's images, labels)
            inputs = model.input
    except (AttributeError, ValueError):  # a Sequential has no `input` structure beyond `inputs`
        pass
    if not inputs or not outputs:
        raise validation.invalid_argument(
            "model",
            "a functional model or a Sequential model built with `keras.Input` (subclassed models can "
            "inherit from `sphere_tf.training.SphereTrainingMixin` instead)",
            model,
        )
    if isinstance(inputs, (list, tuple)) and len(inputs) == 1:
        inputs = inputs[0]
    if isinstance(outputs, (list, tuple)) and len(outputs) == 1:
        outputs = outputs[0]
    return SphereModel(
        inputs,
        outputs,
        weight_projection_every=weight_projection_every,
        projection_scale=projection_scale,
        weighted_gradients=weighted_gradients,
        name=name or model.name,
    )
