"""How an OPT rotation acts on the rows of the fixed neuron matrix V (``W = R·V``).

Orthogonal Over-Parameterized Training (Liu et al., "Orthogonal
Over-Parameterized Training", CVPR 2021) learns an orthogonal R and keeps the
neurons V (columns of the flattened kernel, ``(d, n)``) fixed. Besides the full
``d × d`` product, two structured forms replace R by a smaller matrix:

* **PE-OPT** (the paper's parameter-efficient OPT, thesis Appendix F.5):
  R is block diagonal with k blocks of size d/k, each acting on one group of
  C_in/k input channels at every kernel position. Keras' HWIO flattening puts
  row ``((h·kw)+w)·C_in + c`` for tap (h, w) and channel c, so the channels of a
  group are interleaved with the taps; `rotate_channel_groups` permutes the rows
  to (group, h, w, channel-in-group), multiplies block by block and permutes back.
* **S-OPT** (stochastic OPT, wy1iu/OPT `sopt_gs`): an ``m × m`` rotation acts on a
  subset I of m rows, ``W = V`` except ``W[I] = R̃·V[I]`` (`rotate_rows`); the rows
  are redrawn at every episode (`sample_rows`).

All functions are float32 in, float32 out and differentiable in the rotation.
"""

import numpy as np
from keras import ops


def rotate_channel_groups(blocks, v, num_blocks, spatial_size, product=ops.matmul):
    """PE-OPT product ``R·V`` with R block diagonal over groups of input channels.

    Args:
        blocks: float32 tensor ``(b, b)`` (one block shared by every group) or
            ``(num_blocks, b, b)`` (independent blocks), b = d / num_blocks.
        v: float32 tensor ``(d, c)`` whose rows follow the HWIO flattening,
            d = spatial_size · C_in.
        num_blocks: int k, the number of channel groups (C_in divisible by k).
        spatial_size: int, kh·kw (1 for a dense layer).
        product: ``fn(blocks, x) -> blocks·x`` for ``(b, b)`` and ``(b, m)``, or a stack of
            each; `ops.matmul` by default, an orthogonalisation's direct product (such as
            `sphere_tf.ops.orthogonal.cayley_product` of raw blocks) otherwise.

    Returns:
        float32 tensor ``(d, c)``.
    """
    d, c = int(v.shape[0]), ops.shape(v)[-1]
    group = d // (spatial_size * num_blocks)
    b = spatial_size * group
    # Rows are ((h·kw)+w)·C_in + c: bring the channel group to the front.
    grouped = ops.reshape(v, (spatial_size, num_blocks, group, c))
    grouped = ops.reshape(ops.transpose(grouped, (1, 0, 2, 3)), (num_blocks, b, c))
    if len(blocks.shape) == 2:
        # One shared block: the k groups side by side as columns, a single (b, b)·(b, k·c) product.
        columns = ops.reshape(ops.transpose(grouped, (1, 0, 2)), (b, num_blocks * c))
        grouped = ops.transpose(ops.reshape(product(blocks, columns), (b, num_blocks, c)), (1, 0, 2))
    else:
        grouped = product(blocks, grouped)
    grouped = ops.transpose(ops.reshape(grouped, (num_blocks, spatial_size, group, c)), (1, 0, 2, 3))
    return ops.reshape(grouped, (d, c))


def rotate_rows(rotation, v, rows, product=ops.matmul):
    """S-OPT product: ``W = V`` except ``W[rows] = rotation·V[rows]``.

    Args:
        rotation: float32 tensor ``(m, m)``.
        v: float32 tensor ``(d, c)``.
        rows: int tensor ``(m,)`` of distinct row indices.
        product: ``fn(rotation, x) -> rotation·x``, as for `rotate_channel_groups`.

    Returns:
        float32 tensor ``(d, c)``.
    """
    rows = ops.cast(rows, "int32")
    rotated = product(rotation, ops.take(v, rows, axis=0))
    return ops.scatter_update(v, ops.expand_dims(rows, -1), rotated)


def sample_rows(rng, d, m):
    """m distinct rows of d, sorted, drawn from the NumPy generator `rng` (an S-OPT episode's subset)."""
    return np.sort(rng.choice(d, m, replace=False)).astype(np.int32)
