"""The decoupled operator f = h(‖w‖, ‖x‖)·g(θ) [D-3] as the layers compute it: few memory passes.

A hyperspherical conv layer spends almost all of its time in the main
convolution; what it adds on top is memory-bound elementwise work over the
`(N, H', W', C_out)` output. This module keeps that work small (measurements in
docs/performance.md):

* **Per-position rescale.** The kernel is normalised before the conv (ŵ is tiny),
  so ``dot = x·ŵ`` and ``cos θ = dot / ‖x‖``. ‖x‖ is one number per output
  position, so every quantity of ‖x‖ alone is computed on a one-channel tensor
  and applied with one broadcast multiply: ``f = dot · (h(‖x‖)/‖x‖)`` for cosine g.
* **Norms that cancel are skipped.** LinearConv with cosine g is
  ``α‖x‖·dot/‖x‖ = α·dot``, a plain convolution with ŵ, so the patch norm is never
  computed; SphereConv with cosine g needs only ``dot·α/‖x‖``.
* **Patch energy by shifted slices.** ``Σ_patch x²`` is a box sum of the
  per-pixel channel energy (one EuclideanNorm reduction, no full-size x²);
  summing `kh + kw` strided slices (separable) is exact and cheaper than the
  one-channel ones-kernel conv. Its gradient ``2x·Bᵀ(G)`` is written by hand:
  one full-size multiply instead of autodiff's broadcast and two multiplies.
* **Custom gradients for the tails that need them** (`_angular_of_dot`,
  `_tanh_cosine`). For linear and fixed-k sigmoid g, one function maps
  (dot, 1/‖x‖) to g and stores only the clipped cosine:

  ```
  linear:   g = (2/π)·arcsin c,              dg/dc = (2/π) / √(1 − c²)            [S-2]
  sigmoid:  g = tanh(arcsin(c)/2k)/tanh(π/4k), dg/dc = (1 − tanh²)/(2k·tanh(π/4k)·√(1 − c²))  [S-4]
  ```

  (arcsin c = π/2 − θ), with the gradient set to zero outside the clip range of
  `angles.safe_acos` (|c| ≥ 1 − δ), exactly as the clip's own gradient does, so
  it stays ≤ 1/√(2δ − δ²) ≈ 707. TanhConv with cosine g (the DCNet default)
  gets one function of (dot, ‖x‖, α/‖x‖, 1/(ρ_j E‖x‖)) whose backward is one
  TanhGrad kernel and two matrix-vector products for the one-channel and
  per-filter gradients.

* **One `Path` per layer call** (`training_path(training)`, resolved once from
  `training`, `set_training_fusion`, the XLA context and whether the compiled
  kernels load), and each piece dispatches on it:

  - 'plain': TensorFlow ops. Inference and export (no XLA JIT or custom op
    needed to serve), code that XLA compiles as a whole, and
    `set_training_fusion(False)`.
  - 'xla': while training, the TanhConv tail and its backward terms, the θ
    backward and clipped cosine, the box sums and the conv + patch-energy input
    gradient (`conv_and_patch_energy`) run as small `jit_compile=True`
    functions: fewer full-size passes, a third less activation memory.
  - 'kernels': the compiled kernels (`sphere_tf/backends/tensorflow/kernels/fused_kernels.cc`, built by
    `sphere_tf.backends.tensorflow.kernels.build`) take over the TanhConv, rescale and θ tails and
    the input gradient, one multi-threaded pass each way; the other pieces run
    as on 'xla'.

`decoupled_response_from_dot` is the one implementation of the operator
(`operator.decoupled_response` wraps it in cosine form). Its values agree on
every path to float32 rounding (the forward pass of every angular function is
the registry function itself); the tests compare each path against the NumPy
references of `sphere_tf.testing`.
"""

import concurrent.futures
import dataclasses
import math
import weakref

import numpy as np
import tensorflow as tf
from keras import ops

from sphere_tf import validation
from sphere_tf.backends.tensorflow import conv_norm as conv_norm_lib
from sphere_tf.backends.tensorflow import distribute as tf_distribute
from sphere_tf.backends.tensorflow.kernels import build as kernel_build
from sphere_tf.backends.tensorflow.xla_context import in_xla_context
from sphere_tf.ops import acceleration
from sphere_tf.ops import angles
from sphere_tf.ops import angular as angular_lib
from sphere_tf.ops import conv_geometry
from sphere_tf.ops import magnitude as magnitude_lib
from sphere_tf.ops import response as response_lib

# The process-wide switch lives at the boundary (`sphere_tf.ops.acceleration`); these names stay for callers
# of the plug-in module.
set_training_fusion = acceleration.set_training_fusion
training_fusion_enabled = acceleration.training_fusion_enabled


def use_training_fusion(training):
    """Whether a layer call should fuse (compiled kernels, XLA clusters): training, enabled, not inside XLA."""
    return bool(training) and training_fusion_enabled() and not in_xla_context()


class TensorFlowAccelerator(acceleration.Accelerator):
    """The TensorFlow plug-in's hot path: hand-written gradients, XLA clusters and the compiled kernels.

    Handles every operator: the tails it has special code for (TanhConv + cosine, the
    per-position rescale, the θ activations linear and fixed-k sigmoid) run through it,
    anything else through the registry functions with TensorFlow's autodiff, which is the
    reference's own computation.
    """

    name = "tensorflow"

    def num_replicas_in_sync(self):
        return tf_distribute.num_replicas_in_sync()

    def per_replica_update(self, variables, update_fn):
        tf_distribute.per_replica_update(variables, update_fn)

    def all_gather_across_replicas(self, x):
        return tf_distribute.all_gather_across_replicas(x)

    def replicated_updates(self):
        return tf.distribute.has_strategy()

    def update_variables(self, update_fn, variables, inputs):
        if in_xla_context():  # the whole step is compiled by XLA already
            super().update_variables(update_fn, variables, inputs)
        else:
            _compiled_update(update_fn)([v.value for v in variables], [tf.convert_to_tensor(x) for x in inputs])

    def run_eagerly(self, fn):
        if tf.executing_eagerly():
            return fn()
        # Inside a trace: `tf.init_scope` would give concrete tensors but pauses gradient tapes, so run `fn`
        # in a fresh thread, which starts in eager mode outside the trace.
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(fn).result()

    def path(self, training, fusion):
        if not training:
            return INFERENCE
        if fusion and not in_xla_context():
            return _fused_path()
        return PLAIN

    def patch_squared_norm(self, inputs, kernel_size, strides, padding, dilation_rate, path):
        return patch_squared_norm(inputs, kernel_size, strides, padding, dilation_rate, fuse=path)

    def conv_and_patch_squared_norm(self, inputs, kernel, strides, padding, dilation_rate, path):
        if not path.fused or None in inputs.shape[1:3]:
            return NotImplemented  # the reference's conv, then this plug-in's patch energy
        return conv_and_patch_energy(inputs, kernel, strides, padding, dilation_rate, fuse=path)

    def response_from_dot(self, dot, x_norm, inv_norm, w_norm, *, magnitude, angular, alpha, beta, radius, k,
                          weighted, weight_radius, path):
        return decoupled_response_from_dot(
            dot, x_norm, inv_norm, w_norm, magnitude=magnitude, angular=angular, alpha=alpha, beta=beta,
            radius=radius, k=k, weighted=weighted, weight_radius=weight_radius, fuse=path,
        )

    def conv_norm(self, inputs, kernel, normalizer, strides, padding):
        return conv_norm_lib.conv_norm(inputs, kernel, normalizer, strides, padding)


ACCELERATOR = TensorFlowAccelerator()


@dataclasses.dataclass(frozen=True)
class Path(acceleration.Path):
    """Which implementation the hot path of one layer call runs (chosen once, by `training_path`).

    Attributes:
        name: 'inference' (training=False: the fewest plain TensorFlow ops, what a
            SavedModel serves), 'plain' (training: TensorFlow ops with hand-written
            gradients; code that XLA compiles whole, `set_training_fusion(False)`),
            'xla' (training: small `jit_compile=True` clusters) or 'kernels'
            (training: the compiled kernels where a piece has one, its XLA cluster
            otherwise).
        kernels: the op module of `kernels.build.compiled_kernels()` on the
            'kernels' path, else None.
    """

    kernels: object = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def fused(self):
        """True on the training paths ('xla', 'kernels')."""
        return self.name in ("xla", "kernels")


PLAIN = Path("plain", accelerator=ACCELERATOR)
XLA = Path("xla", accelerator=ACCELERATOR)
# Layer calls with training=False: the fewest plain TensorFlow ops per value (no custom-gradient
# wrappers, the patch energy as one ones-kernel convolution); gradients, where asked for (attacks,
# saliency), come from autodiff of the same ops.
INFERENCE = Path("inference", inference=True, accelerator=ACCELERATOR)


# update_fn -> its XLA cluster (`TensorFlowAccelerator.update_variables`), one per optimizer rule.
_COMPILED_UPDATES = weakref.WeakKeyDictionary()


def _compiled_update(update_fn):
    """`update_fn` as one XLA cluster that reads the variables, computes and assigns in place.

    Eager TensorFlow runs each op of an elementwise update as its own pass over
    the variable, with a temporary per op; XLA fuses the rule into a pass per
    output and writes into the variables' buffers (a masked SGD momentum step on a
    512 × 10^6 kernel: 0.32 s against 1.0 s unfused and 0.53 s for Keras's own
    unmasked SGD, this host's 2 CPU cores).
    """
    compiled = _COMPILED_UPDATES.get(update_fn)
    if compiled is None:

        def assign_updates(tf_variables, inputs):
            new_values = update_fn(*[v.read_value() for v in tf_variables], *inputs)
            for variable, value in zip(tf_variables, new_values):
                variable.assign(tf.cast(value, variable.dtype))

        compiled = _COMPILED_UPDATES[update_fn] = tf.function(assign_updates, jit_compile=True, autograph=False)
    return compiled


def _fused_path():
    kernels = kernel_build.compiled_kernels()
    return XLA if kernels is None else Path("kernels", accelerator=ACCELERATOR, kernels=kernels)


def training_path(training):
    """The `Path` of a training-capable call: 'plain' unless `use_training_fusion(training)`, then the
    compiled kernels where they load, else XLA clusters."""
    return _fused_path() if use_training_fusion(training) else PLAIN


def as_path(fuse):
    """A `Path` from a `fuse` argument: a `Path` as is, True the training path, False 'plain'."""
    if isinstance(fuse, acceleration.Path):
        return fuse
    return _fused_path() if fuse else PLAIN


# -- patch energy ------------------------------------------------------------------------


def _box_sum_axis(energy, axis, kernel, stride, dilation, before, after, out):
    """Σ_k energy_padded[i·stride + k·dilation] along one axis, for i < out."""
    if before or after:
        paddings = [[0, 0]] * len(energy.shape)
        paddings[axis] = [before, after]
        energy = ops.pad(energy, paddings)
    total = None
    for i in range(kernel):
        start = i * dilation
        index = [slice(None)] * len(energy.shape)
        index[axis] = slice(start, start + (out - 1) * stride + 1, stride)
        part = energy[tuple(index)]
        total = part if total is None else total + part
    return total


def _box_sum(energy, kernel_size, strides, dilation_rate, padding):
    """The ones-kernel correlation of a one-channel NHWC tensor, the conv's geometry."""
    for axis in (1, 2):
        k, s, d = kernel_size[axis - 1], strides[axis - 1], dilation_rate[axis - 1]
        before, after, out = conv_geometry.axis_geometry(energy.shape[axis], k, s, d, padding)
        energy = _box_sum_axis(energy, axis, k, s, d, before, after, out)
    return energy


def _box_sum_adjoint(upstream, size, kernel_size, strides, dilation_rate, padding):
    """Transpose of `_box_sum` applied to `upstream`; `size` is the input's (H, W).

    With stride 1 the transpose of a ones-kernel correlation is again one, with
    the padding mirrored (``span − 1 − before`` in front, ``size − out + before``
    behind); with a stride it is the 1→1 transposed convolution (TF's CPU kernel
    has no dilation, but strides > 1 exclude dilation > 1).
    """
    if max(strides) > 1:
        ones = tf.ones(tuple(kernel_size) + (1, 1), upstream.dtype)
        shape = tf.stack([tf.shape(upstream)[0], size[0], size[1], 1])
        return tf.nn.conv2d_transpose(upstream, ones, shape, strides=strides, padding=padding.upper())
    for axis in (1, 2):
        k, d = kernel_size[axis - 1], dilation_rate[axis - 1]
        before, _, out = conv_geometry.axis_geometry(size[axis - 1], k, 1, d, padding)
        span = (k - 1) * d + 1
        upstream = _box_sum_axis(
            upstream, axis, k, 1, d, span - 1 - before, size[axis - 1] - out + before, size[axis - 1]
        )
    return upstream


def _pixel_energy(x):
    """Σ_c x² per pixel, `(N, H, W, 1)`, of a float32 NHWC tensor."""
    if in_xla_context():
        # XLA has no EuclideanNorm kernel, and fuses the square into the sum anyway.
        return ops.sum(ops.square(x), axis=-1, keepdims=True)
    # One reduction kernel (EuclideanNorm) instead of a full-size x² and a sum.
    return ops.square(tf.math.reduce_euclidean_norm(x, axis=-1, keepdims=True))


# The box sum and its adjoint are ~2·(kh + kw) small ops on one-channel tensors;
# as XLA clusters (training path only) each is one loop.
_box_sum_xla = tf.function(_box_sum, jit_compile=True, autograph=False)
_box_sum_adjoint_xla = tf.function(_box_sum_adjoint, jit_compile=True, autograph=False)


def patch_squared_norm(inputs, kernel_size, strides=1, padding="valid", dilation_rate=1, fuse=False):
    """Σ_patch x² per output position, exact, by a separable box sum of shifted slices.

    Same contract as `angles.patch_squared_norm` (float32 `(N, H', W', 1)`, the
    conv's geometry, padded zeros counted); falls back to it when the spatial
    size is not known when the graph is built.

    The gradient is written by hand: ``∂/∂x = 2x · B`` with ``B`` the adjoint of
    the box sum applied to the one-channel upstream gradient (`_box_sum_adjoint`).
    Autodiff of square → channel sum → slices instead broadcasts the upstream
    gradient to the input's full size, multiplies twice and adds one
    strided-slice gradient per kernel row and column.

    Args:
        inputs: NHWC tensor.
        kernel_size: pair `(kh, kw)`.
        strides, dilation_rate: ints or pairs.
        padding: 'valid' or 'same'.
        fuse: a `Path` (or bool, see `as_path`): on a training path the box sum
            and its adjoint run as XLA clusters; same values.

    Returns:
        float32 tensor `(N, H', W', 1)`.
    """
    kernel_size = validation.int_pair(kernel_size, "kernel_size")
    strides = validation.int_pair(strides, "strides")
    dilation_rate = validation.int_pair(dilation_rate, "dilation_rate")
    padding = validation.padding(padding)
    if inputs.shape[1] is None or inputs.shape[2] is None:
        return angles.patch_squared_norm(inputs, kernel_size, strides, padding, dilation_rate)
    path = as_path(fuse)
    if path.inference:
        return _patch_energy_inference(ops.cast(inputs, "float32"), kernel_size, strides, padding, dilation_rate)
    # tf.custom_gradient: keras.ops has no custom-gradient primitive.
    @tf.custom_gradient
    def patch_energy(x):
        pixel_energy = _pixel_energy(x)
        box_sum, box_sum_adjoint = (_box_sum_xla, _box_sum_adjoint_xla) if path.fused else (_box_sum, _box_sum_adjoint)
        out = box_sum(pixel_energy, kernel_size, strides, dilation_rate, padding)

        def grad(upstream):
            # Adjoint of the box sum: every output position's gradient is spread
            # back over its window (zero-padded borders drop out).
            spread = box_sum_adjoint(
                upstream, tuple(pixel_energy.shape[1:3]), kernel_size, strides, dilation_rate, padding
            )
            return x * (2.0 * spread)

        return out, grad

    return patch_energy(ops.cast(inputs, "float32"))


@tf.custom_gradient
def _pixel_energy_safe(x):
    """`_pixel_energy` with the gradient 2x written out (EuclideanNorm's own is 0/0 at a zero pixel)."""

    def grad(upstream):
        return upstream * (2.0 * x)

    return _pixel_energy(x), grad


def _patch_energy_inference(x, kernel_size, strides, padding, dilation_rate):
    """Σ_patch x² as the per-pixel energy convolved with a ones kernel: a few ops whatever the kernel size.

    One channel-reduction kernel and a 1→1 convolution replace the box sum's pads,
    slices and adds (measured: 0.30 vs 0.37 ms at batch 1, 6.9 vs 10.5 ms at batch
    64 for 32×32×64 inputs on the 2-core test host); the ones-kernel convolution
    counts padded zeros exactly as the main convolution does.
    """
    ones = tf.ones(tuple(kernel_size) + (1, 1), tf.float32)
    # `tf.nn.convolution`, not `tf.nn.conv2d`: a dilated conv's gradient then runs as space-to-batch + a plain
    # conv, which every CPU has (see `_dilated_conv_gradients`); an undilated one is the same `Conv2D` op.
    return tf.nn.convolution(_pixel_energy_safe(x), ones, strides=tuple(strides), padding=padding.upper(),
                             dilations=tuple(dilation_rate))


def _add_patch_gradient(conv_grad, x, spread):
    """``conv_grad + 2x·spread`` in the dtype of `conv_grad` (spread is one-channel float32)."""
    patch_grad = ops.cast(x, "float32") * (2.0 * spread)
    return conv_grad + ops.cast(patch_grad, conv_grad.dtype)


# One loop for the input gradient's two terms: no separate full-size 2x·spread
# tensor and no AddN of it with the conv's input gradient.
_add_patch_gradient_xla = tf.function(_add_patch_gradient, jit_compile=True, autograph=False)


def _add_patch_gradient_on(path, conv_grad, x, spread):
    """`_add_patch_gradient` on `path`: the compiled kernel (float32), an XLA loop or plain ops."""
    if path.kernels is not None and x.dtype == tf.float32:
        return path.kernels.sphere_tf_add_patch_gradient(conv_grad, x, spread)
    return (_add_patch_gradient_xla if path.fused else _add_patch_gradient)(conv_grad, x, spread)


def _dilated_conv_gradients(x, w, dot_grad, strides, padding, dilation_rate):
    """`(d_x, d_w)` of a dilated conv through `tf.nn.convolution`'s own gradient (space-to-batch, one more conv).

    TensorFlow's CPU `Conv2DBackpropFilter` / `Conv2DBackpropInput` support dilation only where oneDNN serves
    them (AVX-512 hosts); on an AVX2 CPU they fail with "Current CPU implementations do not yet support dilation
    rates larger than 1". `tf.nn.convolution`, what `Conv2D(dilation_rate=...)` runs, rewrites the dilated conv
    as space-to-batch + a plain conv, whose gradients every CPU has: recomputing that forward here costs one conv
    of the dilated layers only.
    """
    with tf.GradientTape() as tape:
        tape.watch([x, w])
        dot = tf.nn.convolution(x, w, strides=strides, padding=padding.upper(), dilations=dilation_rate)
    return tape.gradient(dot, [x, w], output_gradients=dot_grad)


def conv_and_patch_energy(inputs, kernel, strides, padding, dilation_rate, fuse=True):
    """``(conv(x, kernel), Σ_patch x²)`` with one gradient for both: the training path.

    The values are those of `ops.conv` and `patch_squared_norm` (one float32
    one-channel patch energy, the conv's geometry). The backward pass runs the
    conv's own gradient ops (`Conv2DBackpropInput` / `Conv2DBackpropFilter`, what
    autodiff of `Conv2D` runs) and then adds the patch energy's input gradient
    ``2x·Bᵀ(G_sq)`` in one pass (the compiled kernel for float32 where built, else
    an XLA loop): the two input-gradient terms would otherwise be two full-size
    tensors summed by an AddN. Box sums as XLA clusters on the training paths.

    Args:
        inputs: NHWC tensor of static spatial size.
        kernel: `(kh, kw, C_in, C_out)` tensor in the dtype of `inputs`.
        strides, dilation_rate: pairs; padding: 'valid' or 'same'.
        fuse: a `Path` (or bool, see `as_path`); the layers call this on the
            training path only.

    Returns:
        `(dot, patch_sq)`: the conv output in the inputs' dtype and the float32
        `(N, H', W', 1)` patch energy.
    """
    path = as_path(fuse)
    kernel_size = tuple(kernel.shape[:2])
    strides, dilation_rate = tuple(strides), tuple(dilation_rate)
    box_sum, box_sum_adjoint = (_box_sum_xla, _box_sum_adjoint_xla) if path.fused else (_box_sum, _box_sum_adjoint)
    conv_args = {
        "strides": [1, *strides, 1], "padding": padding.upper(), "dilations": [1, *dilation_rate, 1],
    }

    # tf.custom_gradient: keras.ops has no custom-gradient primitive; tf.raw_ops
    # for the conv's gradient ops, which keras.ops does not expose.
    @tf.custom_gradient
    def conv_and_energy(x, w):
        dot = tf.nn.conv2d(x, w, **conv_args)
        pixel_energy = _pixel_energy(ops.cast(x, "float32"))
        energy = box_sum(pixel_energy, kernel_size, strides, dilation_rate, padding)

        def grad(dot_grad, energy_grad):
            if dot_grad is None:
                dot_grad = tf.zeros_like(dot)
            if dilation_rate != (1, 1):
                d_x, d_w = _dilated_conv_gradients(x, w, dot_grad, strides, padding, dilation_rate)
            else:
                d_w = tf.raw_ops.Conv2DBackpropFilter(
                    input=x, filter_sizes=tf.shape(w), out_backprop=dot_grad, **conv_args
                )
                d_x = tf.raw_ops.Conv2DBackpropInput(
                    input_sizes=tf.shape(x), filter=w, out_backprop=dot_grad, **conv_args
                )
            if energy_grad is not None:
                spread = box_sum_adjoint(
                    energy_grad, tuple(x.shape[1:3]), kernel_size, strides, dilation_rate, padding
                )
                d_x = _add_patch_gradient_on(path, d_x, x, spread)
            return d_x, d_w

        return (dot, energy), grad

    return conv_and_energy(inputs, kernel)


# -- angular functions of θ with a hand-written gradient ----------------------------------

# The clip bound 1 − δ of `angles.safe_acos`.
_CLIP = 1.0 - angles.ACOS_DELTA
# 1 − c² at the clip bound as float32 computes it, with 1 % margin: rounding can
# put the clipped value a hair above the exact 2δ − δ², while the next float32
# cosine inside the range (6e-8 closer to 0) already has 1 − c² larger by ~6 %.
_OUTSIDE_CLIP = float(np.float32(1.0) - np.square(np.float32(_CLIP))) * 1.01


def _theta_activation(angular, k):
    """`(g_of_clipped_c, dg_dc_from(G·1/sinθ, stored))` for linear / fixed-k sigmoid g.

    Both are written with arcsin, since π/2 − θ = arcsin(c):

    ```
    linear:   g = 1 − 2θ/π = (2/π)·arcsin c,           dg/dc = (2/π) / √(1 − c²)      [S-2]
    sigmoid:  g = tanh(arcsin(c)/2k) / tanh(π/4k),
              dg/dc = (1 − tanh²(arcsin(c)/2k)) / (2k·tanh(π/4k)·√(1 − c²))          [S-4]
    ```

    Returns `(forward, backward, constant)`: `forward(c) -> (g, saved)`,
    `backward(upstream_over_sin, saved)` the gradient without the constant
    factor, which the caller folds into the one-channel 1/‖x‖.
    """
    if angular == "linear":
        def forward(c):
            return (2.0 / math.pi) * ops.arcsin(c), None

        def backward(upstream_over_sin, saved):
            del saved
            return upstream_over_sin

        return forward, backward, 2.0 / math.pi
    k = float(k)
    t = math.tanh(math.pi / (4.0 * k))

    def forward(c):
        tanh_u = ops.tanh(ops.arcsin(c) * (0.5 / k))
        return tanh_u * (1.0 / t), tanh_u

    def backward(upstream_over_sin, tanh_u):
        # TanhGrad(y, dy) = dy·(1 − y²) in one kernel.
        return tf.raw_ops.TanhGrad(y=tanh_u, dy=upstream_over_sin)

    return forward, backward, 1.0 / (2.0 * k * t)


def _clipped_cosine(dot, inv_norm):
    """cos θ = dot·(1/‖x‖) clipped to `safe_acos`'s range [−1 + δ, 1 − δ]."""
    return ops.clip(dot * inv_norm, -_CLIP, _CLIP)


# One loop instead of three full-size passes (product, minimum, maximum).
_clipped_cosine_xla = tf.function(_clipped_cosine, jit_compile=True, autograph=False)


def _theta_gradient(upstream, c, saved, inv_norm, backward, constant):
    """∂L/∂dot and ∂L/∂(1/‖x‖) of `_angular_of_dot` from the stored clipped cosine c."""
    one_minus_c2 = 1.0 - ops.square(c)
    over_sin = ops.where(one_minus_c2 > _OUTSIDE_CLIP, upstream * ops.rsqrt(one_minus_c2), 0.0)
    dg = backward(over_sin, saved)
    d_dot = dg * (constant * inv_norm)
    # Σ_j dg·dot = Σ_j dg·c / (1/‖x‖): dg is 0 wherever the clip changed c, so
    # `dot` itself need not be kept for the backward pass (one full tensor less).
    d_inv = (constant / inv_norm) * ops.sum(dg * c, axis=-1, keepdims=True)
    return d_dot, d_inv


# One XLA cluster per (activation, k) for `_theta_gradient`: its ~8 elementwise
# passes and the row reduction become one loop (no transcendental function in it,
# so XLA's slow CPU arcsin/arccos never runs).
_THETA_GRADIENT_XLA = {}


def _theta_gradient_xla(angular, k):
    key = (angular, float(k) if k is not None else None)
    if key not in _THETA_GRADIENT_XLA:
        _, backward, constant = _theta_activation(angular, k)

        def gradient(upstream, c, saved, inv_norm):
            return _theta_gradient(upstream, c, saved, inv_norm, backward, constant)

        _THETA_GRADIENT_XLA[key] = tf.function(gradient, jit_compile=True, autograph=False)
    return _THETA_GRADIENT_XLA[key]


def _theta_compiled(kernels, dot, inv_norm, angular, k):
    """`_angular_of_dot` through the compiled kernels: one pass forward (g and the
    clipped cosine, plus tanh for sigmoid), one pass backward."""
    units = dot.shape[-1]
    one_channel = ops.shape(inv_norm)
    attrs = {"sigmoid": angular == "sigmoid", "k": float(k) if angular == "sigmoid" else 0.3}

    # tf.custom_gradient: keras.ops has no custom-gradient primitive.
    @tf.custom_gradient
    def g_of_dot(dot, inv_norm):
        rows, inv = ops.reshape(dot, (-1, units)), ops.reshape(inv_norm, (-1,))
        g, c, saved = kernels.sphere_tf_theta_activation(rows, inv, clip=_CLIP, **attrs)

        def grad(upstream):
            d_dot, d_inv = kernels.sphere_tf_theta_activation_grad(
                ops.reshape(upstream, (-1, units)), c, saved, inv, outside=_OUTSIDE_CLIP, **attrs
            )
            return ops.reshape(d_dot, ops.shape(dot)), ops.reshape(d_inv, one_channel)

        return ops.reshape(g, ops.shape(dot)), grad

    return g_of_dot(dot, inv_norm)


def _angular_of_dot(dot, inv_norm, angular, k, path=PLAIN):
    """g(θ) with cos θ = dot·(1/‖x‖), one custom gradient for the θ-based activations.

    The forward value equals the registry function (`safe_acos`'s clip to
    [−1 + δ, 1 − δ], then g); the gradient with respect to `dot` and the
    one-channel `inv_norm` is written by hand from the stored clipped cosine
    alone (`dot` is not kept):
    ``G·g'(c)`` inside the clip range and exactly 0 outside it (the clip's own
    gradient), so it stays ≤ 1/√(2δ − δ²) ≈ 707 times g's slope factor. Autodiff
    of product → clip → arccos → affine keeps three full-size intermediates and
    runs about twice as many kernels. On the 'kernels' `Path` the compiled
    kernels run it; on 'xla' (and 'kernels' where they do not apply) the clipped
    cosine and the backward pass are one XLA cluster each (arcsin stays
    TensorFlow's: it is much faster than XLA's on CPU). Other activations
    (cosine, sqcosine, a learnable k, user-registered functions) use autodiff of
    the registry function.
    """
    if not (angular == "linear" or (angular == "sigmoid" and isinstance(k, (int, float)))):
        return angular_lib.get_angular_fn(angular)(dot * inv_norm, k)
    if path.inference:
        c = tf.raw_ops.ClipByValue(t=dot * inv_norm, clip_value_min=-_CLIP, clip_value_max=_CLIP)
        return _theta_activation(angular, k)[0](c)[0]
    if path.kernels is not None and _one_channel_like(inv_norm, dot):
        return _theta_compiled(path.kernels, dot, inv_norm, angular, k)
    forward, backward, constant = _theta_activation(angular, k)

    # tf.custom_gradient: keras.ops has no custom-gradient primitive.
    @tf.custom_gradient
    def g_of_dot(dot, inv_norm):
        c = (_clipped_cosine_xla if path.fused else _clipped_cosine)(dot, inv_norm)
        g, saved = forward(c)

        def grad(upstream):
            if path.fused:
                if saved is None:
                    saved_value = ops.zeros((), "float32")  # tf.function needs a tensor
                else:
                    saved_value = saved
                return _theta_gradient_xla(angular, k)(upstream, c, saved_value, inv_norm)
            return _theta_gradient(upstream, c, saved, inv_norm, backward, constant)

        return g, grad

    return g_of_dot(dot, inv_norm)


def _tanh_cosine_terms(upstream, dot, x_norm, factor, inv_radius):
    """The full-size part of `_tanh_cosine`'s backward pass (tanh recomputed, not stored).

    Returns ``(∂L/∂dot, r, ∂L/∂v)`` with ``r = G·dot·(1 − tanh²)``; the caller
    reduces r to the one-channel and per-filter gradients.
    """
    t = ops.tanh(x_norm * inv_radius)
    q = upstream * dot
    return upstream * (t * factor), q * (1.0 - t * t), ops.sum(q * t, axis=-1, keepdims=True)


def _tanh_cosine_value(dot, x_norm, factor, inv_radius):
    return dot * (ops.tanh(x_norm * inv_radius) * factor)


# XLA clusters for the training path of `_tanh_cosine`: the forward value in one
# fused pass, the backward's full-size terms in one multi-output fusion.
_tanh_cosine_value_xla = tf.function(_tanh_cosine_value, jit_compile=True, autograph=False)
_tanh_cosine_terms_xla = tf.function(_tanh_cosine_terms, jit_compile=True, autograph=False)


def _tanh_cosine_compiled(kernel, dot, x_norm, factor, inv_radius, squared=False):
    """`_tanh_cosine` through the compiled kernel (`kernels/fused_kernels.cc`): one pass each way.

    The kernel works on the `(positions, units)` view; the forward pass writes only
    f, the backward pass reads G and dot once and writes ∂L/∂dot plus the
    one-channel and per-filter reductions (tanh recomputed, nothing else kept).
    `squared=True` is TanhConv with square cosine: dot·|dot| in place of dot and
    `factor` = α/‖x‖² (g = c·|c| [D-14]).
    """
    units = dot.shape[-1]
    one_channel = ops.shape(x_norm)

    # tf.custom_gradient: keras.ops has no custom-gradient primitive.
    @tf.custom_gradient
    def response(dot, x_norm, factor, inv_radius):
        rows = ops.reshape(dot, (-1, units))
        n, v = ops.reshape(x_norm, (-1,)), ops.reshape(factor, (-1,))
        value = ops.reshape(
            kernel.sphere_tf_tanh_cosine(rows, n, v, inv_radius, squared=squared), ops.shape(dot)
        )

        def grad(upstream):
            d_dot, d_n, d_v, d_a = kernel.sphere_tf_tanh_cosine_grad(
                ops.reshape(upstream, (-1, units)), rows, n, v, inv_radius, squared=squared
            )
            return (ops.reshape(d_dot, ops.shape(dot)), ops.reshape(d_n, one_channel),
                    ops.reshape(d_v, one_channel), d_a)

        return value, grad

    return response(dot, x_norm, factor, inv_radius)


def _rescale_compiled(kernel, dot, factor, squared=False):
    """``u·v`` with u = dot (cosine) or dot·|dot| (square cosine) and a one-channel v, compiled.

    The backward pass is one loop: ∂L/∂dot = G·v·du/ddot and ∂L/∂v = Σ_j G·u,
    where TensorFlow's broadcast gradient writes G·u in full and then sums it.
    """
    units = dot.shape[-1]
    one_channel = ops.shape(factor)

    # tf.custom_gradient: keras.ops has no custom-gradient primitive.
    @tf.custom_gradient
    def rescale(dot, factor):
        rows, v = ops.reshape(dot, (-1, units)), ops.reshape(factor, (-1,))
        value = ops.reshape(kernel.sphere_tf_rescale(rows, v, squared=squared), ops.shape(dot))

        def grad(upstream):
            d_dot, d_v = kernel.sphere_tf_rescale_grad(
                ops.reshape(upstream, (-1, units)), rows, v, squared=squared
            )
            return ops.reshape(d_dot, ops.shape(dot)), ops.reshape(d_v, one_channel)

        return value, grad

    return rescale(dot, factor)


def _one_channel_like(tensor, dot):
    return (
        tensor is not None and dot.shape[-1] is not None and len(tensor.shape) == len(dot.shape)
        and tensor.shape[-1] == 1
    )


def _tanh_cosine(dot, x_norm, factor, inv_radius, path=PLAIN):
    """TanhConv with cosine g,  ``f = dot · tanh(‖x‖·a_j) · v``,  with a hand-written gradient.

    ``a_j = 1/(ρ_j·E{‖x‖})`` is the per-filter inverse radius `(units,)` and
    ``v = α/‖x‖`` the one-channel factor, so f = α·tanh(‖x‖/(ρ_j E‖x‖))·cos θ  [D-8, D-12].
    With ``q = G·dot`` and ``r = q·(1 − tanh²)``:

    ```
    ∂L/∂dot = G·tanh·v        ∂L/∂v   = Σ_j q·tanh
    ∂L/∂‖x‖ = v · Σ_j r·a_j   ∂L/∂a_j = Σ_positions r·v·‖x‖
    ```

    the two last as matrix-vector products over the `(positions, units)` view.
    Autodiff of the same expression runs a full-size division gradient and
    broadcast reductions for each factor instead.

    On the 'kernels' `Path` the compiled kernel runs both directions; on 'xla'
    the value and the full-size backward terms each run as one XLA cluster: the forward
    writes only f and the backward recomputes tanh from the one-channel ‖x‖ and
    the `(units,)` radius, so no full-size tanh is kept between the passes
    (fewer memory passes and a smaller activation footprint). Otherwise plain
    TensorFlow ops, which keep tanh and tanh·v for the backward pass.
    """
    units = dot.shape[-1]

    def reduce_terms(r, d_factor):
        rows = ops.reshape(r, (-1, units))
        d_x_norm = factor * ops.reshape(
            ops.matmul(rows, ops.reshape(inv_radius, (units, 1))), ops.shape(x_norm)
        )
        d_inv_radius = ops.reshape(ops.matmul(ops.reshape(factor * x_norm, (1, -1)), rows), (units,))
        return d_x_norm, d_factor, d_inv_radius

    if path.inference:
        return _tanh_cosine_value(dot, x_norm, factor, inv_radius)
    if path.kernels is not None:
        return _tanh_cosine_compiled(path.kernels, dot, x_norm, factor, inv_radius)
    if path.fused:
        # tf.custom_gradient: keras.ops has no custom-gradient primitive.
        @tf.custom_gradient
        def response_xla(dot, x_norm, factor, inv_radius):
            def grad(upstream):
                d_dot, r, d_factor = _tanh_cosine_terms_xla(upstream, dot, x_norm, factor, inv_radius)
                return (d_dot,) + reduce_terms(r, d_factor)

            return _tanh_cosine_value_xla(dot, x_norm, factor, inv_radius), grad

        return response_xla(dot, x_norm, factor, inv_radius)

    @tf.custom_gradient
    def response(dot, x_norm, factor, inv_radius):
        t = ops.tanh(x_norm * inv_radius)
        s = t * factor

        def grad(upstream):
            q = upstream * dot
            r = tf.raw_ops.TanhGrad(y=t, dy=q)  # q·(1 − t²) in one kernel
            return (upstream * s,) + reduce_terms(r, ops.sum(q * t, axis=-1, keepdims=True))

        return dot * s, grad

    return response(dot, x_norm, factor, inv_radius)


# -- the response ---------------------------------------------------------------------------


norm_cancels = response_lib.norm_cancels


def decoupled_response_from_dot(
    dot,
    x_norm=None,
    inv_norm=None,
    w_norm=None,
    magnitude="tanh",
    angular="cosine",
    alpha=1.0,
    beta=None,
    radius=None,
    k=None,
    weighted=None,
    weight_radius=None,
    fuse=False,
):
    """``f = h(‖w‖, ‖x‖)·g(θ)`` from ``dot = x·ŵ`` and the patch norm, float32   [D-3].

    The one implementation of the decoupled operator (SphereNet, DCNet), with
    cos θ = dot·(1/‖x‖); `operator.decoupled_response` is its cosine-form
    wrapper and lists the four kernel weightings [D-3, D §3.5, D-15, D-16]. The
    cosine is never formed as a full tensor when g is the cosine, and
    linear/sigmoid g use the custom gradient of `_angular_of_dot`.

    Args:
        dot: float32 tensor `(..., units)`, ``x·ŵ`` with the unit-norm kernel.
        x_norm: float32 tensor broadcastable to `dot` (`(..., 1)`), ‖x‖ = √(Σx² + ε);
            may be None when `norm_cancels(...)`.
        inv_norm: float32 tensor like `x_norm`, 1/‖x‖.
        w_norm: float32 `(units,)`, the kernel norms; needed when `weighted`.
        magnitude: registry name or `magnitude.Magnitude`.
        angular: registry name or callable `g(cos_theta, k)`.
        alpha, beta: floats, the magnitude hyperparameters.
        radius: float32 tensor broadcastable to `dot`, r = ρ·E{‖x‖}, for
            magnitudes with a radius.
        k: float or float32 tensor `(units,)`, the sigmoid parameter.
        weighted: one of `operator.WEIGHTINGS`.
        weight_radius: float32 tensor `(units,)`, ρ_w of [D-16].
        fuse: the layer call's `Path` (`training_path(training)`), or a bool
            (`as_path`: True is the training path); same values on every path.

    Returns:
        float32 tensor of the shape of `dot`.
    """
    path = as_path(fuse)
    mag = magnitude_lib.get_magnitude(magnitude)
    if norm_cancels(mag, angular, weighted):
        # α‖x‖ · dot/‖x‖ = α·dot  [D-7 with D-12].
        return dot * (alpha if weighted is None else alpha * w_norm)
    # h = α·h₁ for these magnitudes: α then joins the one-channel factor (or vanishes
    # for α = 1) instead of costing a full-size multiply.
    alpha_linear = mag.alpha_factor
    scale = alpha if alpha_linear else 1.0
    factor = inv_norm if scale == 1.0 else scale * inv_norm  # α/‖x‖, one channel
    squared = angular == "sqcosine"
    if (mag is magnitude_lib.MAGNITUDE_FNS["tanh"] and weighted is None and _one_channel_like(x_norm, dot)
            and _per_unit(radius) and (angular == "cosine" or (squared and path.kernels is not None))):
        # The DCNet default (TanhConv + cosine), and TanhConv + square cosine when
        # compiled: one custom-gradient tail.
        inv_radius = ops.broadcast_to(1.0 / ops.cast(radius, "float32"), (dot.shape[-1],))
        if squared:  # α·tanh·c|c| = tanh·dot|dot|·(α/‖x‖²)
            return _tanh_cosine_compiled(path.kernels, dot, x_norm, factor * inv_norm, inv_radius, squared=True)
        return _tanh_cosine(dot, x_norm, factor, inv_radius, path)
    h = response_lib.weighted_magnitude(mag, x_norm, w_norm, 1.0 if alpha_linear else alpha, beta, radius, weighted,
                            weight_radius)
    if angular == "cosine" or (squared and path.kernels is not None and (h is None or _one_channel_like(h, dot))):
        # α·h₁·dot/‖x‖ (or α·h₁·dot|dot|/‖x‖²): the per-position factors meet on the
        # one-channel tensor first.
        factor = factor * inv_norm if squared else factor
        return _rescale(dot, factor if h is None else h * factor, squared, path)
    g = _angular_of_dot(dot, inv_norm, angular, k, path)
    if h is not None:
        g = h * g
    return g if scale == 1.0 else scale * g


def _per_unit(radius):
    """Whether `radius` is a scalar or one value per filter (the tanh tail's `(units,)` inverse radius)."""
    return radius is not None and len(getattr(radius, "shape", ())) <= 1


def _rescale(dot, factor, squared, path):
    """``u·factor`` with u = dot (cosine) or dot·|dot| (square cosine); compiled on the 'kernels' path."""
    if path.kernels is not None and _one_channel_like(factor, dot):
        return _rescale_compiled(path.kernels, dot, factor, squared=squared)
    return (dot * ops.abs(dot) if squared else dot) * factor
