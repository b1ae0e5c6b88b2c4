"""The PyTorch plug-in: the operator's convolution without layout copies, the patch energy as a window sum, and
the response tails that need θ or a radius as `torch.autograd.Function`s with closed-form gradients.

Keras's PyTorch backend runs a layer eagerly (or under `torch.compile` with `jit_compile=True`), so every
elementwise op of the `keras.ops` reference is one pass over the `(N, H', W', C_out)` output forward and its
autograd formula one or more passes backward. Measured on 2 CPU cores (`bench/bench_backends.py`, docs/performance.md),
SphereConv2D with linear g on a one-channel 28×28 input cost 5.9× Conv2D per forward + backward: arccos's
autograd (`neg`, `rsqrt`, `mul`), the clip's masks (`ge`, `le`, `logical_and`, `where`) and the broadcast
multiplies' reductions were 60 full-size passes. This plug-in keeps what the reference computes and cuts the
passes:

* **Convolution.** Keras's `ops.conv` copies an NHWC input to contiguous NCHW and then to channels-last NCHW
  (two copies forward, two backward). An NHWC tensor permuted to NCHW *is* channels-last NCHW, which oneDNN
  and cuDNN take as it is; the output permuted back is NHWC again, without a copy.
* **Patch energy.** Σ_patch x² is the per-pixel channel energy summed over the conv's window: a sum pool
  (`avg_pool2d` with `divisor_override=1`) of one channel, instead of the reference's one-channel ones-kernel
  convolution (a dilated window, which pooling lacks, keeps that convolution).
* **Angular activations that need θ** (linear, sigmoid) [S-2, S-4] = [D-11, D-13], as one function of
  (dot, 1/‖x‖) that keeps only the clipped cosine and g:

  ```
  linear:   g = 1 − 2θ/π,                     dg/dc = (2/π) / √(1 − c²)
  sigmoid:  g = tanh((π/2 − θ)/2k) / tanh(π/4k), dg/dc = (1 − t²) / (2k·tanh(π/4k)·√(1 − c²)),  t = g·tanh(π/4k)
  ```

  zero outside the clip range of `angles.safe_acos`, as the clip's own gradient is; k's gradient (a learnable
  sigmoid) in closed form too.
* **TanhConv + cosine** (the DCNet default), ``f = dot · tanh(‖x‖·a_j) · v`` with a_j = 1/(ρ_j E‖x‖) and the
  one-channel v = α/‖x‖ [D-6, D-12], keeping only `dot` and recomputing tanh backward (the JAX plug-in's VJP).

Every other case (cosine and square-cosine g, whose reference is already one or two passes) runs on the
reference. Same values as the reference to float32 rounding, gradients included (tests/backends/torch_plugin);
the functions run eagerly and trace into `torch.compile` graphs without breaks. A call the plug-in cannot serve
(a float64 response, a tensor that is not a `torch.Tensor`) runs on the reference after one INFO line naming
the reason. Importing this module registers the accelerator for the PyTorch backend.
"""

import math

import torch
from keras import ops
from torch.nn import functional as F

from sphere_tf.ops import acceleration
from sphere_tf.ops import angles
from sphere_tf.ops import conv_geometry
from sphere_tf.ops import magnitude as magnitude_lib
from sphere_tf.ops import response as response_lib

_fall_back = acceleration.FallBack(__name__, "torch")  # NotImplemented after one INFO line per reason

# The angular activations this plug-in computes with a hand-written gradient.
THETA_ACTIVATIONS = ("linear", "sigmoid")


class TorchAccelerator(acceleration.Accelerator):
    """Convolution without layout copies, the sum-pool patch energy and the θ and TanhConv tails."""

    name = "torch"

    def path(self, training, fusion):
        del fusion  # one path: the same functions train eagerly and under torch.compile
        return TRAINING if training else INFERENCE

    def patch_squared_norm(self, inputs, kernel_size, strides, padding, dilation_rate, path):
        if not isinstance(inputs, torch.Tensor) or inputs.ndim != 4:
            return _fall_back("patch energy of an input that is not a 4-D torch.Tensor")
        return patch_squared_norm(inputs, kernel_size, strides, padding, dilation_rate)

    def conv_and_patch_squared_norm(self, inputs, kernel, strides, padding, dilation_rate, path):
        if not (isinstance(inputs, torch.Tensor) and isinstance(kernel, torch.Tensor)) or inputs.ndim != 4:
            return _fall_back("a convolution of tensors that are not 4-D torch.Tensors")
        if inputs.dtype != kernel.dtype:
            return _fall_back(f"a convolution of {inputs.dtype} inputs by a {kernel.dtype} kernel")
        dot = conv_nhwc(inputs, kernel, strides, padding, dilation_rate)
        return dot, patch_squared_norm(inputs, tuple(kernel.shape[:2]), strides, padding, dilation_rate)

    def response_from_dot(self, dot, x_norm, inv_norm, w_norm, *, magnitude, angular, alpha, beta, radius, k,
                          weighted, weight_radius, path):
        theta_case = angular in THETA_ACTIVATIONS and inv_norm is not None
        tanh_case = (
            magnitude.fn is magnitude_lib.tanh and angular == "cosine" and weighted is None
            and x_norm is not None and radius is not None and len(getattr(radius, "shape", ())) <= 1
            and x_norm.shape[-1] == 1 and len(x_norm.shape) == len(dot.shape)
        )
        if not (theta_case or tanh_case):
            return NotImplemented  # the reference is already the fewest passes
        if not isinstance(dot, torch.Tensor) or dot.dtype != torch.float32:
            return _fall_back(f"a response of {getattr(dot, 'dtype', type(dot).__name__)} dot products "
                              "(the tails are float32)")
        if tanh_case:
            inv_radius = torch.broadcast_to(1.0 / ops.convert_to_tensor(radius, "float32"), (dot.shape[-1],))
            factor = inv_norm if isinstance(alpha, (int, float)) and alpha == 1 else alpha * inv_norm
            return TanhCosine.apply(dot, x_norm, factor, inv_radius)
        # The reference's own combination of h and g, with g from the closed-form function.
        g = theta_activation(dot, inv_norm, angular, k)
        return response_lib.magnitude_times(g, magnitude, x_norm, w_norm, alpha, beta, radius, weighted,
                                            weight_radius)


ACCELERATOR = TorchAccelerator()
TRAINING = acceleration.Path("torch", accelerator=ACCELERATOR)
INFERENCE = acceleration.Path("torch_inference", inference=True, accelerator=ACCELERATOR)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _pads(spatial_shape, kernel_size, strides, dilation_rate, padding):
    """`((top, bottom), (left, right))` zero padding of a conv of that geometry (Keras / TF 'same' is
    asymmetric for even windows and strides: the extra row goes after)."""
    return tuple(
        conv_geometry.axis_geometry(spatial_shape[a], kernel_size[a], strides[a], dilation_rate[a],
                                    padding.lower())[:2]
        for a in (0, 1)
    )


def _padded_nchw(x_nchw, pads):
    """`(x, padding)` for torch's conv / pool: symmetric padding passed as an argument, else padded here."""
    (top, bottom), (left, right) = pads
    if top == bottom and left == right:
        return x_nchw, (top, left)
    return F.pad(x_nchw, (left, right, top, bottom)), (0, 0)


def conv_nhwc(inputs, kernel, strides=1, padding="valid", dilation_rate=1):
    """`keras.ops.conv` of an NHWC input by an HWIO kernel (groups = 1), NHWC out, without layout copies."""
    strides, dilation_rate = _pair(strides), _pair(dilation_rate)
    x = inputs.permute(0, 3, 1, 2)  # NCHW view of channels-last memory
    w = kernel.permute(3, 2, 0, 1).contiguous(memory_format=torch.channels_last)
    x, pad = _padded_nchw(x, _pads(inputs.shape[1:3], kernel.shape[:2], strides, dilation_rate, padding))
    out = F.conv2d(x, w, stride=strides, padding=pad, dilation=dilation_rate)
    return out.permute(0, 2, 3, 1)


def patch_squared_norm(inputs, kernel_size, strides=1, padding="valid", dilation_rate=1):
    """Σ_patch x² per output position, float32 `(N, H', W', 1)`: channel energy, then a sum pool."""
    kernel_size, strides, dilation_rate = _pair(kernel_size), _pair(strides), _pair(dilation_rate)
    energy = ChannelEnergy.apply(inputs).permute(0, 3, 1, 2)  # (N, 1, H, W)
    pads = _pads(inputs.shape[1:3], kernel_size, strides, dilation_rate, padding)
    if dilation_rate != (1, 1):  # pooling has no dilation: the reference's ones-kernel convolution
        ones = torch.ones((1, 1) + kernel_size, dtype=torch.float32, device=energy.device)
        energy, pad = _padded_nchw(energy, pads)
        out = F.conv2d(energy, ones, stride=strides, padding=pad, dilation=dilation_rate)
    else:
        # avg_pool2d takes a padding of at most half the window; wider (a 1×1 window 'same' with stride 2
        # has none) or asymmetric padding is done by F.pad.
        (top, bottom), (left, right) = pads
        if top == bottom and left == right and 2 * top <= kernel_size[0] and 2 * left <= kernel_size[1]:
            pad = (top, left)
        else:
            energy, pad = F.pad(energy, (left, right, top, bottom)), (0, 0)
        out = F.avg_pool2d(energy, kernel_size, strides, padding=pad, count_include_pad=True, divisor_override=1)
    return out.permute(0, 2, 3, 1)


def theta_activation(dot, inv_norm, angular, k=None):
    """g(θ) of `angular` ('linear' or 'sigmoid') at cos θ = clip(dot·(1/‖x‖)), with the closed-form gradient.

    Args:
        dot: float32 `(..., units)`; inv_norm: float32 broadcastable to it (`(..., 1)`).
        angular: 'linear' or 'sigmoid'.
        k: the sigmoid's curvature: a float or a float32 tensor broadcastable to `dot` (`(units,)`), trainable
            or not.
    """
    if angular == "linear":
        return AngularOfDot.apply(dot, inv_norm, None)
    if angular != "sigmoid":
        raise ValueError(f"theta_activation: `angular` must be one of {THETA_ACTIVATIONS}. Received: {angular!r}")
    return AngularOfDot.apply(dot, inv_norm, ops.convert_to_tensor(k, "float32"))


def _sum_to_shape(grad, shape):
    """`grad` summed over the axes it was broadcast along to reach its shape from `shape`."""
    shape = tuple(shape)
    extra = grad.ndim - len(shape)
    axes = tuple(range(extra)) + tuple(
        extra + i for i, size in enumerate(shape) if size == 1 and grad.shape[extra + i] != 1
    )
    out = torch.sum(grad, dim=axes, keepdim=True) if axes else grad
    return out.reshape(shape)


def _rsqrt_one_minus_square(c):
    """1/√(1 − c²) = 1/sin θ, in two passes."""
    return torch.addcmul(torch.ones((), dtype=c.dtype, device=c.device), c, c, value=-1.0).rsqrt_()


# Why so few passes: in eager PyTorch every op is one pass over the full-size `(N, H', W', units)` tensor (and
# on a CPU, tanh and acos cost more than their memory traffic). The functions below save what the backward needs
# rather than recompute transcendental functions, fold per-unit constants into one multiply, take the clip's
# mask from the clipped cosine itself (`hardtanh_backward`, one pass: zero where |c| = 1 − δ) and reduce the
# per-unit gradients with a matrix-vector product instead of a full-size product and a sum.


class ChannelEnergy(torch.autograd.Function):
    """Σ_c x² per pixel, float32 `(N, H, W, 1)`, with the gradient 2x·G in one pass over the input (autograd of
    `sum(x * x)` expands G to the input's size and multiplies twice)."""

    @staticmethod
    def forward(ctx, inputs):
        ctx.save_for_backward(inputs)
        x = inputs.to(torch.float32)
        return torch.sum(x * x, dim=-1, keepdim=True)

    @staticmethod
    def backward(ctx, upstream):
        (inputs,) = ctx.saved_tensors
        # In float32, as the reference's cast: a float16 product 2x·G could overflow where its float32 value,
        # cast once at the end, does not.
        return (inputs.to(torch.float32) * (2.0 * upstream)).to(inputs.dtype)


class AngularOfDot(torch.autograd.Function):
    """g(θ) from (dot, 1/‖x‖[, k]): linear when `k` is None, else sigmoid [S-2, S-4].

    Forward is the registry functions' own expression; saved: dot, 1/‖x‖, the clipped cosine c and (sigmoid)
    t = tanh((π/2 − θ)/2k). Backward: ∂L/∂c = G·dg/dc where the clip did not bind, then ∂L/∂dot = ∂L/∂c / ‖x‖,
    ∂L/∂(1/‖x‖) = Σ_j ∂L/∂c·dot, and for the sigmoid ∂L/∂k = Σ_pos G·∂g/∂k.
    """

    @staticmethod
    def forward(ctx, dot, inv_norm, k):
        bound = 1.0 - angles.ACOS_DELTA
        c = torch.clamp_(dot * inv_norm, -bound, bound)  # safe_acos's clip
        theta = torch.acos(c)
        if k is None:
            g = torch.rsub(theta, 1.0, alpha=2.0 / math.pi)  # linear_of_theta: 1 − 2θ/π
            t = half_t = None
        else:
            half_t = torch.tanh(math.pi / (4.0 * k))  # tanh(π/4k), per unit
            # (π/2 − θ)/2k as one fused multiply-add with the per-unit constants.
            t = torch.tanh_(torch.addcmul(math.pi / (4.0 * k), theta, -0.5 / k))
            g = t / half_t  # sigmoid_of_theta
        ctx.save_for_backward(dot, inv_norm, c, t, k, half_t)
        return g

    @staticmethod
    def backward(ctx, upstream):
        dot, inv_norm, c, t, k, half_t = ctx.saved_tensors
        bound = 1.0 - angles.ACOS_DELTA
        grad_c = upstream * _rsqrt_one_minus_square(c)  # G / sin θ
        if k is None:
            slope = 2.0 / math.pi  # dg/dc = (2/π)/sin θ: the constant rides on the one-channel 1/‖x‖
        else:
            # dg/dc = (1 − t²)/(2k·tanh(π/4k)·sin θ): (1 − t²) fused into the multiply, the rest per unit.
            grad_c = torch.ops.aten.tanh_backward(grad_c, t).mul_(0.5 / (k * half_t))
            slope = 1.0
        grad_c = torch.ops.aten.hardtanh_backward(grad_c, c, -bound, bound)  # the clip's mask
        d_dot = d_inv = d_k = None
        if ctx.needs_input_grad[0]:
            d_dot = _sum_to_shape(grad_c * (inv_norm * slope if slope != 1.0 else inv_norm), dot.shape)
        if ctx.needs_input_grad[1]:
            d_inv = _sum_to_shape(grad_c * dot, inv_norm.shape)
            if slope != 1.0:
                d_inv = d_inv * slope
        if k is not None and ctx.needs_input_grad[2]:
            # g = t/T with t = tanh(a/2k), a = π/2 − θ, T = tanh(π/4k):
            # ∂g/∂k = −(1 − t²)·a/(2k²·T) + t·(1 − T²)·π/(4k²·T²)
            a = torch.asin(c)  # π/2 − θ
            dg_dk = torch.ops.aten.tanh_backward(a, t).mul_(-0.5 / (k * k * half_t))
            dg_dk = torch.addcmul(dg_dk, t, (1.0 - half_t * half_t) * math.pi / (4.0 * k * k * half_t * half_t))
            d_k = _sum_to_shape(upstream * dg_dk, k.shape)
        return d_dot, d_inv, d_k


class TanhCosine(torch.autograd.Function):
    """``dot · tanh(‖x‖·a) · v`` (TanhConv + cosine) [D-6, D-12]; saves t = tanh(‖x‖·a).

    ```
    ∂L/∂dot = G·t·v     ∂L/∂v = Σ_j G·dot·t     ∂L/∂‖x‖ = v·Σ_j r·a_j     ∂L/∂a_j = Σ_pos r·v·‖x‖
    ```
    with r = G·dot·(1 − t²); the last two are matrix-vector products of r.
    """

    @staticmethod
    def forward(ctx, dot, x_norm, factor, inv_radius):
        t = torch.tanh_(x_norm * inv_radius)
        ctx.save_for_backward(dot, x_norm, factor, inv_radius, t)
        return (dot * t).mul_(factor)

    @staticmethod
    def backward(ctx, upstream):
        dot, x_norm, factor, inv_radius, t = ctx.saved_tensors
        units = dot.shape[-1]
        q = upstream * dot
        d_dot = d_x_norm = d_factor = d_inv_radius = None
        if ctx.needs_input_grad[0]:
            d_dot = (upstream * t).mul_(factor)
        if ctx.needs_input_grad[2]:
            d_factor = torch.sum(q * t, dim=-1, keepdim=True)
        r = torch.ops.aten.tanh_backward(q, t).reshape(-1, units)  # G·dot·(1 − t²), (positions, units)
        if ctx.needs_input_grad[1]:
            d_x_norm = factor * torch.mv(r, inv_radius).reshape(x_norm.shape)
        if ctx.needs_input_grad[3]:
            d_inv_radius = torch.mv(r.t(), (factor * x_norm).reshape(-1))
        return d_dot, d_x_norm, d_factor, d_inv_radius


acceleration.register_accelerator("torch", ACCELERATOR)
