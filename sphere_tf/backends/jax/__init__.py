"""The JAX plug-in: the patch energy as an XLA reduce-window, θ by a polynomial arccos, and TanhConv + cosine
with a hand-written VJP.

* **Patch energy.** The reference computes Σ_patch x² as the per-pixel channel
  energy convolved with a `(kh, kw, 1, 1)` ones kernel. On a GPU that convolution
  is a cuDNN call with one input and one output channel (poor occupancy, its own
  kernel launch forward and two backward), where `lax.reduce_window` with `add`
  is a windowed sum that XLA fuses with the channel reduction before it; its
  gradient (a padded reduce-window of the upstream) fuses likewise.
* **TanhConv + cosine** (the DCNet default), ``f = dot · tanh(‖x‖·a_j) · v`` with
  the per-filter inverse radius a_j = 1/(ρ_j E‖x‖) and the one-channel v = α/‖x‖
  [D-6, D-12]. Autodiff keeps the full-size tanh as a residual (one more full-size
  write forward and reads backward); `jax.custom_vjp` keeps only `dot` and
  recomputes tanh from the one-channel ‖x‖ and the `(units,)` radius, as the
  TensorFlow plug-in's kernels do:

  ```
  ∂L/∂dot = G·t·v     ∂L/∂v = Σ_j G·dot·t     ∂L/∂‖x‖ = v·Σ_j r·a_j     ∂L/∂a_j = Σ_pos r·v·‖x‖
  ```

  with t = tanh(‖x‖·a_j) and r = G·dot·(1 − t²).
* **ConvNorm2D** (`conv_norm`): the Fourier-domain convolution with JAX's 2-D FFTs and one real block matmul
  per frequency, and the affine depthwise conv as shifted multiply-adds (XLA:CPU's grouped convolution is
  several times slower than the arithmetic needs).
* **θ activations** (linear, sigmoid) [S-2, S-4]: XLA:CPU computes `jnp.arccos` through an `atan2` it does
  not vectorise, 4× the time of a vectorised polynomial on this project's CPUs (`polynomial_acos`: Cephes'
  single-precision arcsine, errors within those of `jnp.arccos` against float64, and the exact derivative).

Same values as the reference to float32 rounding (tests/backends/jax_plugin); every other
case answers `NotImplemented` and runs on the reference. Importing this module
registers the accelerator for the JAX backend.
"""

import functools
import math

import jax
from jax import lax
from jax import numpy as jnp
from keras import ops

from sphere_tf.backends.jax import conv_norm as conv_norm_lib
from sphere_tf.ops import acceleration
from sphere_tf.ops import angles
from sphere_tf.ops import angular as angular_lib
from sphere_tf.ops import conv_geometry
from sphere_tf.ops import magnitude as magnitude_lib
from sphere_tf.ops import response as response_lib
from sphere_tf.ops import sampling


_fall_back = acceleration.FallBack(__name__, "jax")  # NotImplemented after one INFO line per reason

# The angular activations of θ itself, computed here through `polynomial_acos`.
THETA_ACTIVATIONS = ("linear", "sigmoid")


class JaxAccelerator(acceleration.Accelerator):
    """Patch energy by `lax.reduce_window`, θ by `polynomial_acos`, the TanhConv + cosine tail by `tanh_cosine`,
    ConvNorm2D's convolution and affine depthwise conv (`conv_norm`); the rest is the reference."""

    name = "jax"

    def path(self, training, fusion):
        del fusion  # one path: XLA fuses the elementwise work itself
        return TRAINING if training else INFERENCE

    def patch_squared_norm(self, inputs, kernel_size, strides, padding, dilation_rate, path):
        return patch_squared_norm(inputs, kernel_size, strides, padding, dilation_rate)

    def response_from_dot(self, dot, x_norm, inv_norm, w_norm, *, magnitude, angular, alpha, beta, radius, k,
                          weighted, weight_radius, path):
        tanh_cosine_case = (
            magnitude.fn is magnitude_lib.tanh and angular == "cosine" and weighted is None
            and x_norm is not None and radius is not None and len(getattr(radius, "shape", ())) <= 1
            and len(x_norm.shape) == len(dot.shape) and x_norm.shape[-1] == 1
        )
        if angular in THETA_ACTIVATIONS and inv_norm is not None:
            theta = theta_of_dot(dot, inv_norm)
            g = (angular_lib.linear_of_theta(theta) if angular == "linear"
                 else angular_lib.sigmoid_of_theta(theta, k))
            return response_lib.magnitude_times(g, magnitude, x_norm, w_norm, alpha, beta, radius, weighted,
                                                weight_radius)
        if path.inference or not tanh_cosine_case:
            return NotImplemented
        inv_radius = jnp.broadcast_to(1.0 / jnp.asarray(radius, jnp.float32), (dot.shape[-1],))
        factor = inv_norm if isinstance(alpha, (int, float)) and alpha == 1 else alpha * inv_norm
        return tanh_cosine(dot, x_norm, factor, inv_radius)

    def gather_columns(self, values, index, num_shards, axis):
        return gather_columns(values, index, num_shards, axis % len(values.shape))

    def conv_norm(self, inputs, kernel, normalizer, strides, padding):
        return conv_norm_lib.conv_norm(inputs, kernel, normalizer, strides, padding)

    def depthwise_conv(self, inputs, kernel, strides, padding):
        if tuple(strides) != (1, 1):
            return _fall_back(f"depthwise conv with strides {tuple(strides)} (the plug-in's is for strides 1)")
        return conv_norm_lib.depthwise_conv(inputs, kernel, padding)


def theta_of_dot(dot, inv_norm):
    """θ = arccos(clip(dot·(1/‖x‖))) as `angles.safe_acos` clips it, through `polynomial_acos`."""
    bound = 1.0 - angles.ACOS_DELTA
    return polynomial_acos(jnp.clip(dot * inv_norm, -bound, bound))


@jax.custom_jvp
def polynomial_acos(c):
    """arccos c for float32 c in [−1, 1] as a polynomial XLA vectorises, with the exact derivative −1/√(1 − c²).

    XLA:CPU lowers `jnp.arccos` to an `atan2` it computes one element at a time; the θ activations (linear,
    sigmoid) spent most of their elementwise time there. This is Cephes' single-precision arcsine (S. Moshier,
    `asinf.c`): asin a = a + a·z·P(z) with z = a² for a ≤ 1/2, and asin a = π/2 − 2·asin √((1 − a)/2) beyond,
    written branch-free; the largest relative error of θ over float32 [−1, 1] is a few ulp (tested against
    NumPy's float64 arccos).
    """
    a = jnp.abs(c)
    big = a > 0.5
    z = jnp.where(big, 0.5 * (1.0 - a), a * a)
    s = jnp.where(big, jnp.sqrt(z), a)
    poly = ((((4.2163199048e-2 * z + 2.4181311049e-2) * z + 4.5470025998e-2) * z + 7.4953002686e-2) * z
            + 1.6666752422e-1)
    p = s + s * z * poly  # asin a (a ≤ 1/2), asin √((1 − a)/2) beyond
    # For |c| > 1/2, arccos c = 2p (c > 0) or π − 2p (c < 0), computed without the cancellation of π/2 − asin c.
    return jnp.where(big, jnp.where(c > 0, 2.0 * p, math.pi - 2.0 * p), math.pi / 2.0 - jnp.where(c < 0, -p, p))


@polynomial_acos.defjvp
def _polynomial_acos_jvp(primals, tangents):
    (c,), (dc,) = primals, tangents
    # (1 − c)(1 + c), not 1 − c²: exact products near |c| = 1, where 1 − c² loses half the digits.
    return polynomial_acos(c), -dc * lax.rsqrt((1.0 - c) * (1.0 + c))


ACCELERATOR = JaxAccelerator()
TRAINING = acceleration.Path("jax", accelerator=ACCELERATOR)
INFERENCE = acceleration.Path("jax_inference", inference=True, accelerator=ACCELERATOR)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def patch_squared_norm(inputs, kernel_size, strides=1, padding="valid", dilation_rate=1):
    """Σ_patch x² per output position, float32 `(N, H', W', 1)`: channel energy, then a windowed sum."""
    kernel_size, strides, dilation_rate = _pair(kernel_size), _pair(strides), _pair(dilation_rate)
    x = ops.cast(inputs, "float32")
    energy = ops.sum(ops.square(x), axis=-1, keepdims=True)
    pads = [(0, 0)]
    for axis in (0, 1):
        before, after, _ = conv_geometry.axis_geometry(
            inputs.shape[axis + 1], kernel_size[axis], strides[axis], dilation_rate[axis], padding.lower()
        )
        pads.append((before, after))
    pads.append((0, 0))
    return lax.reduce_window(
        energy, 0.0, lax.add, window_dimensions=(1, *kernel_size, 1), window_strides=(1, *strides, 1),
        padding=pads, window_dilation=(1, *dilation_rate, 1),
    )


@jax.custom_vjp
def tanh_cosine(dot, x_norm, factor, inv_radius):
    """``dot · tanh(‖x‖·a) · v`` (TanhConv + cosine), keeping only `dot` for the backward pass.

    Args:
        dot: float32 `(..., units)`, x·ŵ.
        x_norm, factor: float32 `(..., 1)`, ‖x‖ and v = α/‖x‖.
        inv_radius: float32 `(units,)`, a = 1/(ρ·E‖x‖).
    """
    return dot * (jnp.tanh(x_norm * inv_radius) * factor)


def _tanh_cosine_forward(dot, x_norm, factor, inv_radius):
    return tanh_cosine(dot, x_norm, factor, inv_radius), (dot, x_norm, factor, inv_radius)


def _tanh_cosine_backward(residuals, upstream):
    dot, x_norm, factor, inv_radius = residuals
    t = jnp.tanh(x_norm * inv_radius)
    q = upstream * dot
    r = q * (1.0 - t * t)
    reduce_axes = tuple(range(dot.ndim - 1))
    d_dot = upstream * (t * factor)
    d_factor = jnp.sum(q * t, axis=-1, keepdims=True)
    d_x_norm = factor * jnp.sum(r * inv_radius, axis=-1, keepdims=True)
    d_inv_radius = jnp.sum(r * (factor * x_norm), axis=reduce_axes)
    return d_dot, d_x_norm, d_factor, d_inv_radius


tanh_cosine.defvjp(_tanh_cosine_forward, _tanh_cosine_backward)

acceleration.register_accelerator("jax", ACCELERATOR)


def gather_columns(values, index, num_shards, axis):
    """`sampling.reference_gather_columns` whose gradient is a fused gather instead of a scatter.

    JAX differentiates a gather of K columns into a zero-filled `(…, C, …)` array
    with the K columns scattered in: a class-sized buffer written every step
    (d = 512, C = 10^6: 2 GB, about 1.5 s of this host's 2 CPU cores). Here the
    gradient of column c is instead read from the gathered gradient through the
    inverse map of `index` (its position in the block's sample, a cumulative sum
    of the block's membership mask), zero where c was not sampled: an
    elementwise expression XLA fuses into whatever consumes the gradient (the
    masked optimizer update of `PartialFCOptimizer` reads it once and never
    writes it). Needs `index` sorted ascending and distinct within each block,
    as `sampling.sample_classes` returns it. The same values as the scatter,
    bit for bit (each column receives one value or zero).
    """
    return _gather_columns(values, index, num_shards, axis, values.shape[axis])


def _take_in_bounds(values, indices, axis):
    """`take_along_axis` for indices known to lie in [0, size): no negative-index wrap and no out-of-bounds
    fill. JAX's default fills out-of-bounds entries with NaN through a select over the whole gathered array,
    a second pass over the `(d, K)` columns (0.26 of the sampled step's 2.1 s at d = 512, K = 10^5 on 2 CPU
    cores, docs/partial_fc.md)."""
    return jnp.take_along_axis(values, indices, axis=axis, mode="promise_in_bounds", wrap_negative_indices=False)


def _block_gather(values, index, num_shards, axis):
    """`sampling.reference_gather_columns` (the same block-wise gather) through `_take_in_bounds`."""
    shape = values.shape
    block_size = shape[axis] // num_shards
    blocked = jnp.reshape(values, shape[:axis] + (num_shards, block_size) + shape[axis + 1:])
    local = jnp.reshape(index.astype(jnp.int32), (num_shards, -1))
    local = local - jnp.arange(num_shards, dtype=jnp.int32)[:, None] * block_size
    local = jnp.reshape(local, (1,) * axis + (num_shards, -1) + (1,) * (len(shape) - axis - 1))
    gathered = _take_in_bounds(blocked, local, axis + 1)
    return jnp.reshape(gathered, shape[:axis] + (-1,) + shape[axis + 1:])


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _gather_columns(values, index, num_shards, axis, num_columns):
    del num_columns
    return _block_gather(values, index, num_shards, axis)


def _gather_columns_forward(values, index, num_shards, axis, num_columns):
    del num_columns
    gathered = _block_gather(values, index, num_shards, axis)
    return gathered, (index, jnp.zeros((0,), values.dtype))


def _gather_columns_backward(num_shards, axis, num_columns, residuals, upstream):
    index, dtype_of = residuals
    block_size = num_columns // num_shards
    blocks = jnp.arange(num_shards, dtype=jnp.int32)[:, None]
    local = jnp.reshape(index.astype(jnp.int32), (num_shards, -1)) - blocks * block_size
    member = jnp.zeros((num_shards, block_size), bool).at[blocks, local].set(True)
    position = jnp.maximum(jnp.cumsum(member, axis=1, dtype=jnp.int32) - 1, 0)  # column -> its place in the sample
    shape = upstream.shape
    blocked = jnp.reshape(upstream, shape[:axis] + (num_shards, -1) + shape[axis + 1:])
    expand = (1,) * axis + (num_shards, block_size) + (1,) * (len(shape) - axis - 1)
    target = shape[:axis] + (num_shards, block_size) + shape[axis + 1:]
    dense = jnp.take_along_axis(blocked, jnp.broadcast_to(jnp.reshape(position, expand), target), axis=axis + 1)
    dense = jnp.where(jnp.reshape(member, expand), dense, jnp.zeros((), dense.dtype))
    return jnp.reshape(dense, shape[:axis] + (num_columns,) + shape[axis + 1:]).astype(dtype_of.dtype), None


_gather_columns.defvjp(_gather_columns_forward, _gather_columns_backward)
