"""Class sampling of Partial FC: which class centres one training step uses.

Partial FC (An et al., *Partial FC: Training 10 Million Identities on a Single
Machine*, ICCV-W 2021, arXiv:2010.05222; deepinsight/insightface
`recognition/arcface_torch/partial_fc_v2.py` and v1 `partial_fc.py`) computes the
margin softmax of a step on a subset of the class centres only: every positive
class of the batch plus uniformly drawn negatives. The class axis is split into
`num_shards` contiguous blocks of equal size (upstream: one block per GPU, each
sampling locally); in each block

```
k_block = min(C_block, max(ceil(r·C_block), B))
scores  = U[0, 1) per class;  positives -> 2.0;  padding -> -1.0
index   = sort(top_k(scores, k_block))                     (plus the block's offset)
label'  = searchsorted(index, label)                       (position of the label in the sample)
```

`k_block >= B` (unless the block is smaller than the batch, in which case it is
sampled whole) so every positive of the block fits in the sample with a static
shape; upstream's `int(r·C_block)` instead falls back to the positives alone
(a dynamic shape) when they outnumber it. Positives score 2.0 > any uniform
draw, so they always win `top_k`; padding scores -1.0 < any draw, so a padding
column is only taken when the block has fewer real classes than `k_block`, and
`real_columns` marks it so callers keep it out of the softmax.

`B` and the positives are those of the *global* batch: under data parallelism
upstream all-gathers the labels of every rank before sampling, so every rank
draws the same sample (one seed for all) and it holds every positive of every
rank; `sample_classes(labels, ..., positives=all_labels)` remaps a replica's own
labels into that sample. The uniform scores of a step are a stateless draw from
`(seed, step)` (`step_seed`), the same on every replica and after a reload.

Every function here is a pure `keras.ops` function (TensorFlow, JAX, PyTorch).
`ClassSharding` adds sharding constraints when the class axis is split over
devices by a `keras.distribution` (JAX); without one it changes nothing.
"""

import math
import random

import keras
from keras import ops

from sphere_tf.ops import acceleration

# Sampled logit of a padding column: a finite stand-in for −∞, so that
# exp(MASKED_LOGIT − max) is exactly 0 in float32 and float64 (its softmax
# probability and gradient vanish) without the NaN that −∞ gives in one-hot
# cross-entropies (0·(−∞)) or in a mean of the logits.
MASKED_LOGIT = -1e30
# The score of a positive class (above every U[0, 1) draw) and of a padding column (below).
POSITIVE_SCORE = 2.0
PADDING_SCORE = -1.0


def padded_num_classes(num_classes, num_shards):
    """C_padded: `num_classes` rounded up to a multiple of `num_shards`."""
    return num_shards * math.ceil(num_classes / num_shards)


def rate_sample_size(block_size, sample_rate):
    """ceil(r·C_block), with r·C_block rounded to 9 decimals first (0.1 × 30 gives 3, not 4)."""
    return max(1, math.ceil(round(sample_rate * block_size, 9)))


def block_sample_size(block_size, sample_rate, batch_size):
    """k_block = min(C_block, max(ceil(r·C_block), B)): columns sampled per block.

    Args:
        block_size: int, C_block (classes per block, padding included).
        sample_rate: float in (0, 1], r.
        batch_size: int, or a scalar integer tensor when the batch size is only
            known at run time (a TensorFlow graph with an unknown batch).

    Returns:
        int (a scalar int32 tensor for a tensor `batch_size`).
    """
    by_rate = rate_sample_size(block_size, sample_rate)
    if by_rate >= block_size:  # whole blocks whatever the batch (r = 1): static even for an unknown batch
        return block_size
    if isinstance(batch_size, int):
        return min(block_size, max(by_rate, batch_size))
    batch_size = ops.cast(batch_size, "int32")
    return ops.minimum(block_size, ops.maximum(by_rate, batch_size))


def samples_everything(sample_size, block_size):
    """True when `sample_size` is known now to cover whole blocks (nothing to draw)."""
    return isinstance(sample_size, int) and sample_size >= block_size


def real_class_mask(num_classes, num_padded):
    """float32 `(C_padded,)`: 1 for the real classes, 0 for the padding columns."""
    return ops.cast(ops.arange(num_padded) < num_classes, "float32")


class ClassSharding:
    """Sharding constraints for a head whose class axis is split over a mesh axis (`keras.distribution`).

    Under a `keras.distribution` (JAX: GSPMD) a `PartialFCHead` kernel laid out
    `(class_axis, None)` holds `C_padded / M` classes per device of the `M`
    devices of `class_axis`. Left alone, GSPMD's propagation may compute the
    class logits data-parallel instead (each device its batch rows against every
    sampled column, the kernel or its gradient all-gathered / all-reduced), so
    the head pins its tensors with `constrain`: features replicated over the
    class axis (all-gathered), kernel columns, logits, sampling scores and mask
    sharded by class. Without a distribution (or without a class axis) every call
    returns its input unchanged, so this is a no-op on TensorFlow and PyTorch.

    Args:
        device_mesh: the `keras.distribution.DeviceMesh` of the kernel, or None.
        class_axis: the mesh axis name of the kernel's class axis, or None.
        batch_axis: the mesh axis name the data's batch is split over, or None.
    """

    def __init__(self, device_mesh=None, class_axis=None, batch_axis=None):
        self.device_mesh = device_mesh
        self.class_axis = class_axis
        self.batch_axis = batch_axis

    @property
    def active(self):
        """True when the class axis is sharded and a `keras.distribution` is set."""
        return self.class_axis is not None and keras.distribution.distribution() is not None

    def constrain(self, tensor, class_dim=None, batch_dim=None):
        """`tensor` with dimension `class_dim` split over the class axis and `batch_dim` over the batch axis.

        Every other dimension (and `batch_dim` when the batch axis *is* the class
        axis: a mesh axis can shard one dimension only) is replicated. A sharding
        constraint (`keras.distribution.distribute_tensor`): values are unchanged.
        """
        if not self.active:
            return tensor
        axes = [None] * len(tensor.shape)
        if class_dim is not None:
            axes[class_dim] = self.class_axis
        if batch_dim is not None and self.batch_axis != self.class_axis:
            axes[batch_dim] = self.batch_axis
        layout = keras.distribution.TensorLayout(tuple(axes), self.device_mesh)
        return keras.distribution.distribute_tensor(tensor, layout)


NO_SHARDING = ClassSharding()


class _SeedTensor(keras.random.SeedGenerator):
    """A `seed` for `keras.random` that is a given `(2,)` integer tensor (`step_seed`).

    `keras.random` takes an int or a `SeedGenerator` as `seed`, and a generator's
    `next()` is what the backend's stateless draw is seeded with (on TensorFlow
    `tf.random.stateless_uniform(shape, seed)`, on JAX the key itself). This one
    returns the tensor it was made with and holds no variable: nothing to update
    in a replica context, nothing for JAX's train step to thread.
    """

    def __init__(self, value):  # not SeedGenerator.__init__, which creates a state variable
        self.name = "step_seed"
        self.backend = None
        self._initial_seed = None
        self._value = value

    def next(self, ordered=True):
        del ordered
        return self._value


def default_seed():
    """A seed for a layer built with `seed=None`: Python's `random` (seeded by `keras.utils.set_random_seed`)."""
    return random.randint(1, int(1e9))


def step_seed(seed, step):
    """The `keras.random` seed of step `step` for an int `seed`: the stateless key `(seed, step)`.

    Args:
        seed: int in [0, 2^31).
        step: int scalar (or integer tensor, e.g. a layer's step counter).

    Returns:
        An object to pass as `seed=` to `keras.random` functions: their draws are
        a pure function of `(seed, step)` on the backend (the same on every replica
        of a step, and again after a reload restores the counter).
    """
    dtype = "uint32" if keras.backend.backend() == "jax" else "int32"  # JAX's raw key; TF/PyTorch seeds
    value = ops.stack([ops.convert_to_tensor(seed, dtype=dtype), ops.cast(step, dtype)])
    return _SeedTensor(value)


def sample_classes(labels, num_classes, num_shards, sample_size, seed, positives=None, sharding=NO_SHARDING):
    """One Partial FC sample: every positive class plus uniform negatives, per block.

    Args:
        labels: integer `(B,)` class ids in [0, num_classes), the labels to remap.
        num_classes: int, C (real classes).
        num_shards: int, the number of blocks S; the class axis is padded to
            `padded_num_classes(C, S)` columns, the padding at its end.
        sample_size: k_block, from `block_sample_size` (int or scalar tensor) for
            the number of `positives`.
        seed: a `keras.random.SeedGenerator` (stateless-safe on JAX), an int, or
            a `step_seed(seed, step)`.
        positives: integer `(B_all,)`, the classes the sample must hold, or None
            for `labels`. Under data parallelism: the labels of every replica
            (`sphere_tf.ops.acceleration.all_gather_across_replicas`), so that
            every replica, drawing with the same seed, gets the same sample.
        sharding: a `ClassSharding`: under a class-sharded layout the scores,
            the blocks' top-k and the mask stay split by block (each device draws
            its own blocks); the values are the same either way.

    Returns:
        `(index, labels, sampled, real_columns)`:
        * `index`: int32 `(S·k_block,)`, the sampled columns, sorted ascending
          (block by block; within a block sorted as upstream);
        * `labels`: int32 `(B,)`, each label's position in `index` (of `labels`,
          not of `positives`);
        * `sampled`: float32 `(C_padded,)`, 1 for the real classes in `index`;
        * `real_columns`: bool `(S·k_block,)`, False where `index` holds a padding column.
        With `samples_everything(sample_size, C_padded / S)` nothing is drawn:
        `index` is `arange(C_padded)` and the labels are unchanged.
    """
    num_padded = padded_num_classes(num_classes, num_shards)
    block_size = num_padded // num_shards
    labels = ops.reshape(ops.cast(labels, "int32"), (-1,))
    positives = labels if positives is None else ops.reshape(ops.cast(positives, "int32"), (-1,))
    real = real_class_mask(num_classes, num_padded)
    if samples_everything(sample_size, block_size):
        index = ops.arange(num_padded, dtype="int32")
        return index, labels, sharding.constrain(real, class_dim=0), ops.arange(num_padded) < num_classes
    scores = sharding.constrain(keras.random.uniform((num_padded,), dtype="float32", seed=seed), class_dim=0)
    scores = ops.scatter_update(
        scores, ops.reshape(positives, (-1, 1)), ops.full(ops.shape(positives), POSITIVE_SCORE, dtype="float32")
    )
    scores = ops.where(real > 0, scores, PADDING_SCORE)
    scores = sharding.constrain(ops.reshape(scores, (num_shards, block_size)), class_dim=0)
    if sharding.active:
        # XLA's SPMD partitioner replicates a TopK whose batch (block) dimension is sharded (every device would
        # gather and rank all C_padded scores); a sort along the block stays on the block's device. The same
        # columns: a stable descending sort breaks ties by index, as top_k does.
        top = ops.argsort(-scores, axis=-1)[:, :sample_size]
    else:
        _, top = ops.top_k(scores, sample_size, sorted=False)
    offsets = ops.arange(num_shards, dtype="int32")[:, None] * block_size
    index = ops.reshape(ops.sort(ops.cast(top, "int32"), axis=-1) + offsets, (-1,))
    remapped = ops.cast(ops.searchsorted(index, labels), "int32")
    sampled = ops.scatter_update(
        ops.zeros((num_padded,), "float32"), ops.reshape(index, (-1, 1)), ops.ones(ops.shape(index), "float32")
    )
    return index, remapped, sharding.constrain(sampled * real, class_dim=0), index < num_classes


def gather_columns(values, index, num_shards, axis, sharding=NO_SHARDING):
    """The `index` columns of `values` on `axis`: the accelerator's gather, `take`, or the block-wise gather.

    Without a class-sharded layout the current accelerator's version runs where
    it has one (the JAX plug-in differentiates the gather without a scatter: the
    `(…, C_padded, …)` gradient is read from the gathered columns' gradient
    through the inverse map of `index`, an elementwise expression XLA fuses into
    the optimizer update that consumes it, so no zero-filled class-sized
    gradient is written), else a plain `take` (on TensorFlow its gradient costs a
    quarter of `take_along_axis`'s at d = 512, C = 10^6, K = 10^5). Under a
    class-sharded layout (`sharding` active) `reference_gather_columns` keeps
    every block's gather on its device. The same values and gradient on every
    path.

    Args:
        values, index, num_shards, axis: as `reference_gather_columns`; `index`
            sorted ascending and distinct within each block, as `sample_classes`
            returns it.
        sharding: the head's `ClassSharding`.
    """
    if sharding.active:
        return reference_gather_columns(values, index, num_shards, axis)
    backend_accelerator = acceleration.accelerator()
    if backend_accelerator is not None:
        gathered = backend_accelerator.gather_columns(values, index, num_shards, axis)
        if gathered is not NotImplemented:
            return gathered
    return ops.take(values, ops.cast(index, "int32"), axis=axis)


def reference_gather_columns(values, index, num_shards, axis):
    """`take(values, index, axis)` for an `index` from `sample_classes`, block by block.

    `values` has `C_padded` entries on `axis` (`axis` 0 of `PartialFCHead`'s
    class-major `(C_padded, d)` kernel and of a `(C_padded,)` bias; 1 of a
    `(d, C_padded)` one); `index` is `(S·k_block,)`, block `s`'s
    `k_block` columns lying in block `s`. Gathers within each block
    (`take_along_axis` on `(…, S, C_block)` with block-local indices), the same
    values as `ops.take`, but with the block dimension a batch dimension of the
    gather: when the class axis is split over devices by block, every device
    gathers its own columns (a plain `take` with global indices lets GSPMD
    replicate the gathered `(d, K)` columns on every device).

    Returns:
        `values` with `S·k_block` entries on `axis`, in the order of `index`.
    """
    axis = axis % len(values.shape)
    shape = tuple(values.shape)
    block_size = shape[axis] // num_shards
    blocked = ops.reshape(values, shape[:axis] + (num_shards, block_size) + shape[axis + 1 :])
    local = ops.reshape(ops.cast(index, "int32"), (num_shards, -1))
    local = local - ops.arange(num_shards, dtype="int32")[:, None] * block_size
    local = ops.reshape(local, (1,) * axis + (num_shards, -1) + (1,) * (len(shape) - axis - 1))
    gathered = ops.take_along_axis(blocked, local, axis=axis + 1)
    return ops.reshape(gathered, shape[:axis] + (-1,) + shape[axis + 1 :])


def softmax_cross_entropy(logits, labels):
    """Per-sample softmax cross-entropy logsumexp(f_i) − f_{i, y_i}, float32 `(B,)`.

    Gathers the target logit instead of multiplying by a one-hot, so masked
    columns (`MASKED_LOGIT`, or −∞) contribute exactly 0 and no 0·(−∞).
    """
    logits = ops.cast(logits, "float32")
    labels = ops.reshape(ops.cast(labels, "int32"), (-1, 1))
    target = ops.take_along_axis(logits, labels, axis=-1)[:, 0]
    return ops.logsumexp(logits, axis=-1) - target
