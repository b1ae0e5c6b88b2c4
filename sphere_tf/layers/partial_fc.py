"""`PartialFCHead`: the margin head computed on a sampled subset of the classes (Partial FC).

Partial FC (An et al., *Partial FC: Training 10 Million Identities on a Single
Machine*, ICCV-W 2021, arXiv:2010.05222; deepinsight/insightface
`recognition/arcface_torch/partial_fc_v2.py`, v1 `partial_fc.py`) keeps every
class centre but, in each training step, evaluates the margin softmax on the
batch's positive classes plus a uniform sample of negative ones, so the logits
and the gradient of a step have `K ≈ r·C` columns instead of `C`. The sampling
rule is in `sphere_tf.ops.sampling`; the logits are `MarginHead`'s
(`sphere_tf.ops.margin.margin_logits`) on the sampled columns.

Only the sampled columns may change in a step. The gather already gives the
others zero gradient, but Keras optimizers still move them (momentum, Adam's
m/v, weight decay); `sphere_tf.optimizers.PartialFCOptimizer` keeps them as
they were (see its docstring).
"""

import logging
import re
import threading
import weakref

import keras
import numpy as np
from keras import ops

from sphere_tf import saving
from sphere_tf import validation
from sphere_tf.layers import margin_head
from sphere_tf.ops import acceleration
from sphere_tf.ops import angles
from sphere_tf.ops import sampling
from sphere_tf.optimizers import partial_fc as partial_fc_optimizer
from sphere_tf.regularizers import random_state

class _ClassMajorInitializer:
    """`initializer` drawn for the `(d, C)` layout of `MarginHead` and stored transposed, `(C, d)`: the same
    values (and fan-in / fan-out) as a `MarginHead` built with the same initializer and seed. (A class, not a
    closure: Keras jits `initializer.__call__` for a sharded variable, and a function's `__call__` cannot be
    weak-referenced by `jax.jit`.)"""

    def __init__(self, initializer):
        self.initializer = initializer

    def __call__(self, shape, dtype=None):
        return ops.transpose(self.initializer((shape[1], shape[0]), dtype=dtype))


class _PaddedInitializer:
    """`initializer` for the real classes, zeros for the padding entries after them on `axis`."""

    def __init__(self, initializer, num_classes, axis):
        self.initializer, self.num_classes, self.axis = initializer, num_classes, axis

    def __call__(self, shape, dtype=None):
        real_shape, pad_shape = list(shape), list(shape)
        real_shape[self.axis] = self.num_classes
        pad_shape[self.axis] = shape[self.axis] - self.num_classes
        real = self.initializer(tuple(real_shape), dtype=dtype)
        return ops.concatenate([real, ops.zeros(tuple(pad_shape), dtype=real.dtype)], axis=self.axis)


def _mesh_axis_size(device_mesh, axis_name):
    if axis_name not in device_mesh.axis_names:
        raise ValueError(
            f"Invalid value for argument `axis_name`: {axis_name!r} is not an axis of the device mesh "
            f"(axis_names={tuple(device_mesh.axis_names)})."
        )
    return int(device_mesh.shape[list(device_mesh.axis_names).index(axis_name)])


def _check_num_shards(head_name, num_shards, device_mesh, axis_name):
    """Each of the mesh axis's devices must hold whole sampling blocks: `num_shards` a multiple of its size."""
    devices = _mesh_axis_size(device_mesh, axis_name)
    if num_shards % devices:
        raise ValueError(
            f"Invalid value for argument `num_shards` of PartialFCHead {head_name!r}: its class axis is split "
            f"over the {devices} devices of mesh axis {axis_name!r}, so num_shards must be a multiple of "
            f"{devices} (each device then samples its own whole blocks; use num_shards={devices}). "
            f"Received: num_shards={num_shards}"
        )


def class_sharding_layout(layout_map, head, axis_name=None):
    """Adds the class-sharded layout of a `PartialFCHead` to `layout_map` (`keras.distribution`, JAX).

    Sets, for the head's variables (matched by path: `<name>/kernel`, optionally
    under outer models' scopes):

    ```
    <head>/kernel   (axis_name, None)   (C_padded, d): C_padded / M classes per device
    <head>/bias     (axis_name,)
    <head>/sampled  (axis_name,)        the per-step mask of sampled classes
    ```

    where M is the size of mesh axis `axis_name`. Use it with
    `keras.distribution.ModelParallel(layout_map=..., batch_dim_name=...)`; the
    batch may be split over the same axis (a 1-D mesh: the backbone data
    parallel, the head class parallel) or over another one. The head must be
    created and built under that distribution. Inside the head, GSPMD then
    all-gathers the features, computes each device's logits columns against its
    own kernel columns and reduces the softmax max/sum across devices (see
    docs/partial_fc.md, "Sharded class centres (JAX)").

    Args:
        layout_map: a `keras.distribution.LayoutMap` (its device mesh is used).
        head: an unbuilt `PartialFCHead` (its `num_shards` is checked now) or the
            head's layer name, str (checked when the head is built).
        axis_name: the mesh axis to split the classes over; None for the only
            axis of a 1-D mesh.

    Returns:
        `layout_map`.

    Raises:
        ValueError: `num_shards` is not a multiple of the size of `axis_name`
            (naming `num_shards`), `axis_name` is not a mesh axis or is needed,
            `head` is built already or is neither a `PartialFCHead` nor a str.

    Example:

    ```python
    mesh = keras.distribution.DeviceMesh((4,), ("devices",), keras.distribution.list_devices())
    layout_map = class_sharding_layout(keras.distribution.LayoutMap(mesh), "head", "devices")
    keras.distribution.set_distribution(
        keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="devices")
    )
    head = PartialFCHead(num_classes, sample_rate=0.1, num_shards=4, name="head")
    ```
    """
    mesh = layout_map.device_mesh
    if axis_name is None:
        if len(mesh.axis_names) != 1:
            raise ValueError(
                "Invalid value for argument `axis_name`: None is only allowed with a 1-D device mesh; name the "
                f"axis to split the classes over (axis_names={tuple(mesh.axis_names)})."
            )
        axis_name = mesh.axis_names[0]
    if isinstance(head, PartialFCHead):
        if head.built:
            raise ValueError(
                f"Invalid value for argument `head`: PartialFCHead {head.name!r} is built already; its variables "
                "keep their layout. Make the layout and set the distribution before building the model."
            )
        _check_num_shards(head.name, head.num_shards, mesh, axis_name)
        name = head.name
    elif isinstance(head, str):
        _mesh_axis_size(mesh, axis_name)
        name = head
    else:
        raise ValueError(f"Invalid value for argument `head`: expected a PartialFCHead or its name. Received: {head!r}")
    prefix = "(?:.*/)?" + re.escape(name)
    layout_map[prefix + "/kernel"] = (axis_name, None)
    layout_map[prefix + "/bias"] = (axis_name,)
    layout_map[prefix + "/sampled"] = (axis_name,)
    return layout_map


class _PerThreadLosses:
    """The list Keras keeps a layer's `add_loss` terms in (`Layer._losses`), one list per thread.

    `tf.distribute.MirroredStrategy` runs the replicas of a train step in threads of
    their own, one at a time, switching at every cross-replica synchronisation
    (the labels' all-gather and the state updates of this head). Keras keeps a
    layer's `add_loss` terms in one Python list, cleared when a replica's model
    call starts, so with a synchronisation inside the head a replica's
    `compute_loss` would also read the terms the other replicas added meanwhile
    (the logged loss came out multiplied by the replica count; the gradients were
    right, as a replica's tape records its own term only). A per-thread list keeps
    each replica's terms its own; with one thread (JAX, PyTorch, no strategy)
    nothing changes. Keras uses `extend`, `clear` and slicing.
    """

    def __init__(self):
        self._local = threading.local()

    def _items(self):
        items = getattr(self._local, "items", None)
        if items is None:
            items = self._local.items = []
        return items

    def append(self, value):
        self._items().append(value)

    def extend(self, values):
        self._items().extend(values)

    def clear(self):
        self._items().clear()

    def __getitem__(self, key):
        return self._items()[key]

    def __iter__(self):
        return iter(self._items())

    def __len__(self):
        return len(self._items())

    def __reduce__(self):  # copies and pickles start empty, like a fresh layer's list
        return (_PerThreadLosses, ())


class _PendingMask:
    """The sampled mask of the most recent training call, as the tensor that call computed (JAX, see
    `PartialFCHead.update_mask`). A plain holder, so Keras's attribute tracking leaves it alone."""

    value = None


@saving.register_serializable()
class PartialFCHead(margin_head.MarginHead):
    """`MarginHead` whose training logits and loss use sampled classes only (Partial FC).

    Every `MarginHead` argument and loss type works the same way (L-/A-Softmax
    with λ annealing, W-/GA-/S-Softmax, CosFace, ArcFace, combined); the class
    weights are `head.kernel`, stored class-major, `(C_padded, feature_dim)`
    (classes on axis 0, as upstream's `weight` of `num_local × embedding_size`;
    `real_kernel()` gives `MarginHead`'s `(feature_dim, num_classes)` view). A
    sampled class is then one contiguous row, gathered and normalised without a
    strided pass or a transposed copy of the sampled weights (docs/partial_fc.md,
    "Step time"). `.keras` files written with the earlier `(feature_dim,
    C_padded)` layout load (transposed on load).

    A training call with labels, `head(features, labels=labels, training=True)`:

    1. splits the class axis into `num_shards` contiguous blocks of
       `C_block = C_padded / num_shards` columns and, in each block, takes the
       block's positive classes (the labels of the batch falling in it) plus
       uniformly drawn negatives, `k_block = min(C_block, max(ceil(r·C_block), B))`
       columns in all, so every positive fits with a static shape (upstream takes
       `int(r·C_block)` and falls back to the positives alone when they are more);
       the draw is upstream's: uniform scores, positives set to 2.0, `top_k`,
       indices sorted, labels remapped with `searchsorted`
       (`sphere_tf.ops.sampling.sample_classes`); the scores of step t are a
       stateless draw keyed by `(seed, t)`;
    2. gathers those columns of the kernel (and bias), computes
       `margin_logits` on them with the remapped labels (margin on the target
       logit only, λ from the `iteration` counter exactly as `MarginHead`);
    3. adds the batch mean of the softmax cross-entropy of those sampled logits
       with `add_loss` (upstream's `PartialFC` also returns the loss) and returns
       the sampled logits, float32 `(B, num_shards·k_block)`, columns in the order
       of the sampled class ids; padding columns hold `sampling.MASKED_LOGIT`.

    So the model is compiled **without a loss for this output**
    (`model.compile(optimizer, loss=None)`); `fit` minimises the head's loss (plus
    any other `add_loss` and regularizer terms). Don't attach metrics to the
    training output: its columns are the sampled classes, not the class ids.
    `sample_weight` does not reach an `add_loss` term. With `sample_rate=1` every
    column is used (nothing is drawn) and the loss is `MarginHead`'s softmax
    cross-entropy.

    Called with labels and `training=False` (e.g. `model.evaluate` of the training
    model), the head returns the full plain logits and adds their mean softmax
    cross-entropy as the loss; without labels it only returns the plain logits,
    `(B, num_classes)`, exactly like `MarginHead` (the padding is sliced off).

    Data parallelism (TensorFlow's `tf.distribute.MirroredStrategy`, the head
    replicated): as upstream all-gathers the labels of every rank, the head
    samples from the labels of every replica
    (`sphere_tf.ops.acceleration.all_gather_across_replicas`), B being the global
    batch, with the same key on every replica. Every replica therefore uses the
    same columns, holding every positive of the global batch, and computes the
    logits and loss of its own samples on them; with Keras's loss scaling and the
    summed gradients a step equals the same step on one device with the global
    batch, and `PartialFCOptimizer` restores the same columns on every copy. (The
    returned logits' width follows the global batch.) Build the model under
    `strategy.scope()`. On JAX and PyTorch there is no replica engine here.

    Padding: when `num_shards` does not divide `num_classes`, the kernel gets
    `C_padded − C < num_shards` extra zero rows at its end (and the bias zero
    entries), so every block has the same width for a later sharded layout (the
    constructor logs it). A padding column is never a label (labels are checked
    against `num_classes`), never wins the sampling (its score is below every
    draw; it is taken only when a block has fewer real classes than `k_block`)
    and never enters the softmax (its sampled logit is `MASKED_LOGIT`, so its
    probability and gradient are exactly 0). Zero columns cost no L1/L2
    regularisation and stay zero under the usual optimizers.

    The sampled set: after each training call the non-trainable layer state
    `sampled_mask()` is a float32 `(C_padded,)` mask, 1 for the real classes that
    call used (all of them after a training call without labels, whose plain
    logits touch every column); `sampled_classes()` gives their ids. It is layer
    state like a dropout seed: JAX's train step threads it, `.keras` weight files
    do not store it.

    Sharded class centres (JAX, `keras.distribution`): under a `ModelParallel`
    whose layout splits the kernel's class axis over a mesh axis of M devices
    (`class_sharding_layout`), each device holds `C_padded / M` columns (with
    their bias, optimizer slots and sampled mask) and `num_shards` must be a
    multiple of M (checked at build: a `ValueError` naming `num_shards`), so
    every block is sampled on the device that holds it. The head then pins its
    tensors with sharding constraints (`sampling.ClassSharding`): the features
    are replicated over the class axis (GSPMD all-gathers them), the sampled
    columns, logits and their gradients stay on their device, and the softmax
    max and sum are all-reduced. Same values as unsharded; see
    docs/partial_fc.md, "Sharded class centres (JAX)".

    Optimizer state of the unsampled classes: insightface's v1 `partial_fc.py`
    gathers the sampled rows of the weight *and of its momentum buffer*
    (`sub_weight`, `sub_weight_mom`), lets SGD update those, and scatters both
    back, so an unsampled centre and its momentum are frozen; v2
    (`partial_fc_v2.py`) gathers only the weight and leaves the optimizer to plain
    torch SGD, under which the momentum of a centre with zero gradient keeps
    decaying and moving it. This library follows v1: wrap the optimizer in
    `sphere_tf.optimizers.PartialFCOptimizer`, which restores the unsampled
    columns of this head's kernel and bias and of every optimizer slot created
    for them (momentum, Adam m and v) after each update. A plain optimizer gives
    v2-like behaviour (unsampled columns still decay and move).

    Args:
        num_classes: int > 0, the number of classes C.
        *args, **kwargs: the other `MarginHead` arguments (`loss_type`,
            `margin`, `angular`, `k`, `scale`, `annealing`, `use_bias`,
            `label_penalty`, `epsilon`, initializers, regularizers, constraints).
            `label_penalty` receives the real `(d, C)` kernel and the original labels.
        sample_rate: float in (0, 1], r, the fraction of each block's classes to
            sample (before the batch-size floor); upstream's default 1.0 uses every class.
        num_shards: int in [1, num_classes], the number of contiguous class blocks
            sampled separately (upstream: one per GPU).
        seed: None or int >= 0. The uniform scores of training step t are a
            stateless draw keyed by `(seed, t)` (t the `iteration` counter), so
            they are the same on every replica of a step and continue where they
            stopped after a reload; None draws a seed when the layer is made
            (Python's `random`, which `keras.utils.set_random_seed` seeds).

    Input shape:
        `(batch, feature_dim)` features; `labels` integer class ids in
        [0, num_classes) of shape `(batch,)` or `(batch, 1)`.

    Output shape:
        Training with labels: float32 `(batch, num_shards·k_block)` sampled
        logits. Otherwise: float32 `(batch, num_classes)` plain logits.

    Raises:
        ValueError: invalid arguments, naming the argument (those of
            `MarginHead`, `sample_rate`, `num_shards`, `seed`); labels outside
            [0, num_classes), exactly as `MarginHead` (eagerly a `ValueError`, in a
            `tf.function` an `InvalidArgumentError`, under XLA NaN logits and loss
            for that sample).

    Example:

    >>> head = PartialFCHead(1000, loss_type="arcface", sample_rate=0.1, seed=0)
    >>> features = keras.ops.ones((4, 8))
    >>> tuple(head(features, labels=keras.ops.arange(4), training=True).shape)
    (4, 100)
    >>> tuple(head(features).shape)
    (4, 1000)

    Reference:
        X. An et al., Partial FC: Training 10 Million Identities on a Single
        Machine, ICCV Workshops 2021, https://arxiv.org/abs/2010.05222;
        deepinsight/insightface `recognition/arcface_torch/partial_fc.py` (v1)
        and `partial_fc_v2.py`.
    """

    def __init__(self, num_classes, *args, sample_rate=1.0, num_shards=1, seed=None, **kwargs):
        super().__init__(num_classes, *args, **kwargs)
        self.sample_rate = validation.unit_interval(sample_rate, "sample_rate")
        num_shards = validation.positive_int(num_shards, "num_shards", maximum=validation.MAX_INT32)
        if num_shards > self.num_classes:
            raise validation.invalid_argument(
                "num_shards", f"an int in [1, num_classes={self.num_classes}]", num_shards
            )
        self.num_shards = num_shards
        self.seed = validation.integer(seed, "seed", minimum=0, allow_none=True, maximum=validation.MAX_INT32)
        self.num_padded_classes = sampling.padded_num_classes(self.num_classes, num_shards)
        self.block_size = self.num_padded_classes // num_shards
        if self.num_padded_classes != self.num_classes:
            logging.getLogger(__name__).info(
                "PartialFCHead %r: num_classes=%d is not divisible by num_shards=%d; the kernel gets %d zero "
                "padding column(s) at its end (%d columns, %d blocks of %d). Padding columns are never a label, "
                "never sampled ahead of a real class and never enter the softmax.",
                self.name, self.num_classes, num_shards, self.num_padded_classes - self.num_classes,
                self.num_padded_classes, num_shards, self.block_size,
            )
        # The seed of the per-step draws (`sampling.step_seed`): no generator state, so nothing to keep in step
        # across replicas or to thread through JAX's train step.
        self._draw_seed = sampling.default_seed() if self.seed is None else self.seed
        self._pending = _PendingMask()
        self._sharding = sampling.NO_SHARDING
        self._losses = _PerThreadLosses()

    def build(self, input_shape):
        # MarginHead.build with C_padded class columns (padding zero-initialised) and the sampled mask.
        margin_head._check_features_shape(type(self).__name__, input_shape)
        feature_dim = input_shape[-1]
        self._sharding = self._class_sharding()
        padded = self.num_padded_classes != self.num_classes
        kernel_initializer, bias_initializer = self.kernel_initializer, self.bias_initializer
        if padded:
            kernel_initializer = _PaddedInitializer(kernel_initializer, self.num_classes, axis=1)
            bias_initializer = _PaddedInitializer(bias_initializer, self.num_classes, axis=0)
        with validation.argument_errors("kernel_initializer"):
            self.kernel = self.add_weight(
                name="kernel",
                shape=(self.num_padded_classes, feature_dim),
                initializer=_ClassMajorInitializer(kernel_initializer),
                regularizer=self.kernel_regularizer,
                constraint=self.kernel_constraint,
                autocast=False,
            )
        setattr(self.kernel, partial_fc_optimizer.COLUMNS_ATTRIBUTE, (weakref.ref(self), 0))
        if self.use_bias:
            with validation.argument_errors("bias_initializer"):
                self.bias = self.add_weight(
                    name="bias",
                    shape=(self.num_padded_classes,),
                    initializer=bias_initializer,
                    regularizer=self.bias_regularizer,
                    constraint=self.bias_constraint,
                    autocast=False,
                )
            setattr(self.bias, partial_fc_optimizer.COLUMNS_ATTRIBUTE, (weakref.ref(self), 0))
        else:
            self.bias = None
        self._add_step_state()
        # Per-step layer state (see the class docstring), not a weight.
        self._sampled = random_state.LayerState(
            keras.Variable(
                keras.initializers.Zeros(), shape=(self.num_padded_classes,), dtype="float32", trainable=False,
                aggregation="only_first_replica", name="sampled",
            )
        )
        self.input_spec = keras.layers.InputSpec(ndim=2, axes={-1: feature_dim})

    # -- class sharding (keras.distribution) ------------------------------------------

    def _class_sharding(self):
        """The `sampling.ClassSharding` of the active distribution's layout for this head's kernel (at build).

        Raises the `num_shards` error before any variable is made (an uneven split
        would otherwise fail inside JAX with a less helpful message).
        """
        distribution = keras.distribution.distribution()
        if distribution is None:
            return sampling.NO_SHARDING
        path = f"{self.path}/kernel" if self.path else "kernel"
        try:
            layout = distribution.get_tensor_layout(path)
        except NotImplementedError:
            layout = None
        if layout is None or layout.axes[:1] in ((), (None,)):
            if layout is not None and any(axis is not None for axis in layout.axes):
                raise ValueError(
                    f"PartialFCHead {self.name!r}: the layout {layout.axes} of {path!r} shards the feature axis; "
                    "only the class axis (axis 0 of the class-major kernel) can be sharded. Use "
                    "`class_sharding_layout`."
                )
            return sampling.NO_SHARDING
        if len(layout.axes) != 2 or layout.axes[1] is not None:
            raise ValueError(
                f"PartialFCHead {self.name!r}: expected the layout (<mesh axis>, None) for {path!r} (the class "
                f"axis of the class-major kernel sharded, the feature axis whole). Received: {layout.axes}"
            )
        mesh = layout.device_mesh or distribution.device_mesh
        axis = layout.axes[0]
        _check_num_shards(self.name, self.num_shards, mesh, axis)
        return sampling.ClassSharding(mesh, axis, distribution.batch_dim_name)

    # -- helpers ----------------------------------------------------------------------

    def _real_rows(self):
        """The stored class weights of the real classes, `(num_classes, feature_dim)` (padding sliced off)."""
        if self.num_padded_classes == self.num_classes:
            return self.kernel.value
        return self.kernel.value[: self.num_classes]

    def real_kernel(self):
        """The class weights of the real classes in `MarginHead`'s layout, `(feature_dim, num_classes)`."""
        return ops.transpose(self._real_rows())

    # The kernel's rows are the classes (`sphere_tf.training.regularization` refuses neuron-wise regularizers).
    class_major_kernel = True

    def effective_kernel(self):
        """The neurons in the Keras kernel layout, `(feature_dim, num_classes)` (`sphere_tf.layers.kernels`)."""
        return self.real_kernel()

    def _real_bias(self):
        if self.bias is None or self.num_padded_classes == self.num_classes:
            return None if self.bias is None else self.bias.value
        return self.bias.value[: self.num_classes]

    def normalized_kernel(self):
        """Unit-norm class weights of the real classes, float32 `(d, num_classes)`."""
        return ops.transpose(angles.normalize(self._real_rows(), axis=1, epsilon=self.epsilon)[0])

    def _logits(self, features, labels, lam):
        return self._margin_logits(features, self._real_rows(), self._real_bias(), labels, lam, class_axis=0)

    def sample_size(self, batch_size):
        """k_block for a batch of `batch_size` (an int, or a scalar tensor in a graph with unknown batch)."""
        return sampling.block_sample_size(self.block_size, self.sample_rate, batch_size)

    def sampled_mask(self):
        """float32 `(C_padded,)`: 1 for the real classes of the most recent training call (the layer state)."""
        return self._sampled.state.value

    def sampled_classes(self):
        """int NumPy array: the class ids of the most recent training call, ascending (eager only)."""
        mask = ops.convert_to_numpy(self._sampled.state.value)
        return mask.nonzero()[0]

    def update_mask(self):
        """The sampled mask an optimizer step must use (`PartialFCOptimizer`), float32 `(C_padded,)`.

        The layer state `sampled_mask()` on TensorFlow and PyTorch (the forward pass
        assigns it before the update reads it). Keras's JAX train step passes its
        optimizer neither the layer state nor the forward pass's updates of it
        (`stateless_apply` sees the trainable and optimizer variables only), so on
        JAX this is the mask tensor the most recent training call computed, which
        inside `fit` is a value of the same traced step. On JAX the forward pass
        and the update must therefore run in the same trace (as in `fit`), or the
        forward eagerly before an eager update.
        """
        if keras.backend.backend() == "jax" and self._pending.value is not None:
            return self._pending.value
        return self._sampled.state.value

    def _record_sample(self, mask):
        self._sampled.state.assign(mask)
        self._pending.value = mask

    # -- Keras API --------------------------------------------------------------------

    def call(self, inputs, labels=None, training=None):
        if labels is not None:
            labels = ops.convert_to_tensor(labels)
            margin_head._check_labels(labels, inputs.shape, self.num_classes)
        sharding = self._sharding if self._sharding.active else None
        if sharding is not None:  # features replicated over the class axis (all-gathered when the batch is split on it)
            inputs = sharding.constrain(inputs, batch_dim=0)
        if labels is None or not training:
            if sharding is None:
                logits = self._logits(inputs, None, 0.0)
            else:  # class-sharded: the padded kernel as it lies, the padding's columns sliced off the logits
                logits = self._margin_logits(
                    inputs, self.kernel.value, None if self.bias is None else self.bias.value, None, 0.0,
                    class_axis=0,
                )
                logits = sharding.constrain(logits, class_dim=1, batch_dim=0)[:, : self.num_classes]
            if training:  # plain logits in training: every real column takes part
                self._record_sample(sampling.real_class_mask(self.num_classes, self.num_padded_classes))
            if labels is not None:  # evaluation of the training model: the full plain cross-entropy
                checked, valid = margin_head._checked_labels(labels, self.num_classes)
                losses = sampling.softmax_cross_entropy(logits, ops.where(valid, checked, 0))
                self.add_loss(ops.mean(ops.where(valid, losses, float("nan"))))
            return logits
        labels, valid = margin_head._checked_labels(labels, self.num_classes)
        self._invalid_labels.state.assign_add(ops.sum(ops.cast(ops.logical_not(valid), "float32")))
        step = self.iteration + 1
        self.iteration.assign(step)
        if self.label_penalty is not None:
            self.add_loss(self.label_penalty(self.real_kernel(), labels))
        # An out-of-range label (possible only under XLA, where the check compiles away) samples as class 0;
        # its row is NaN below, as MarginHead's.
        labels = ops.where(valid, labels, 0)
        # Data parallelism (tf.distribute): sample from the labels of every replica, as upstream's all-gather, with
        # one key for all, so every replica takes the same columns and every positive of the global batch.
        all_labels = acceleration.all_gather_across_replicas(labels)
        batch_size = all_labels.shape[0] if all_labels.shape[0] is not None else ops.shape(all_labels)[0]
        sample_size = self.sample_size(batch_size)
        shard = sharding or sampling.NO_SHARDING
        index, labels, mask, real_columns = sampling.sample_classes(
            labels, self.num_classes, self.num_shards, sample_size, sampling.step_seed(self._draw_seed, step),
            positives=all_labels, sharding=shard,
        )
        kernel, bias = self.kernel.value, None if self.bias is None else self.bias.value
        if not sampling.samples_everything(sample_size, self.block_size):
            kernel = sampling.gather_columns(kernel, index, self.num_shards, axis=0, sharding=shard)
            bias = None if bias is None else sampling.gather_columns(
                bias, index, self.num_shards, axis=0, sharding=shard
            )
        kernel = shard.constrain(kernel, class_dim=0)
        bias = None if bias is None else shard.constrain(bias, class_dim=0)
        padded = self.num_padded_classes != self.num_classes
        if padded:
            # A fixed unit row in place of padding: finite even with epsilon=0 and a zero row, and the
            # select passes no gradient to the padding.
            kernel = ops.where(real_columns[:, None], kernel, ops.ones_like(kernel))
        logits = self._margin_logits(inputs, kernel, bias, labels, self.lambda_at(step), class_axis=0)
        logits = shard.constrain(logits, class_dim=1, batch_dim=0)  # per-device columns: no full (B, K) anywhere
        if padded:
            logits = ops.where(real_columns[None, :], logits, sampling.MASKED_LOGIT)
        logits = ops.where(valid[:, None], logits, float("nan"))
        self.add_loss(ops.mean(sampling.softmax_cross_entropy(logits, labels)))
        self._record_sample(mask)
        return logits

    def compute_output_spec(self, inputs, labels=None, training=None):
        if labels is not None:
            margin_head._check_labels(labels, inputs.shape, self.num_classes)
        if labels is None or training is False:
            return keras.KerasTensor(self.compute_output_shape(inputs.shape), dtype="float32")
        batch = inputs.shape[0]
        width = None  # training unknown, or a batch size known only at run time
        if training and batch is not None:
            width = self.num_shards * self.sample_size(batch)
        return keras.KerasTensor((batch, width), dtype="float32")

    def load_own_variables(self, store):
        # Files written before the kernel became class-major hold it as (feature_dim, C_padded): transposed here.
        variables = self._trainable_variables + self._non_trainable_variables
        index = next((str(i) for i, v in enumerate(variables) if v is self.kernel), None)
        if index is not None and index in store.keys():
            stored_shape = tuple(store[index].shape)
            legacy_shape = tuple(reversed(self.kernel.shape))
            if stored_shape != tuple(self.kernel.shape) and stored_shape == legacy_shape:
                store = {key: store[key] for key in store.keys()}
                store[index] = np.transpose(np.asarray(store[index]))
        super().load_own_variables(store)

    def get_config(self):
        config = super().get_config()
        config.update({"sample_rate": self.sample_rate, "num_shards": self.num_shards, "seed": self.seed})
        return config
