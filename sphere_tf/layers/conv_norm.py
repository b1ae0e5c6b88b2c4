"""ConvNorm: convolutional normalization in the Fourier domain.

Liu et al., "Convolutional Normalization: Improving Deep Convolutional Network
Robustness and Training", NeurIPS 2021 (arXiv:2103.00673). Citation keys:
``[C-6]`` is the paper's Eq. (6), ``[C §3.2]`` its Section 3.2.

`ConvNorm2D` is a drop-in replacement for ``Conv2D`` (+ ``BatchNormalization``):

```
y_k  = Σ_i a_ki ⋆ x_i                 full cross-correlation, padding k − 1, stride 1
ỹ_k  = F⁻¹(V̂_k ⊙ F y_k),   V̂_k = stop_gradient((Σ_i |Â_ki|² + ε)^(−1/2))   [C-6]-[C-7]
ỹ    ← crop/stride(ỹ)                 the samples keras.layers.Conv2D would output
z_k  = r_k ⋆ ỹ_k + b_k                learnable depthwise affine conv (affine=True)
out  = BatchNorm(z)                   (batch_norm=True)
```

The maths is in `sphere_tf.ops.fourier`. Numerics follow the authors' PyTorch
code (shengliu66/ConvNorm `models/prec_conv.py`, `PreConv`): running V̂ with the
cosine ramp-down of the averaging factor over 40k steps (floor 0.01), a
depthwise affine conv of the main kernel size with a bias and PyTorch's default
init ``U(±1/√(kh·kw))``, BatchNorm with PyTorch's momentum 0.1 (Keras 0.9) and
ε 1e-5, and the scalar closed form for 1×1 kernels.
"""

import keras
from keras import ops

from sphere_tf import saving
from sphere_tf import validation
from sphere_tf.ops import acceleration
from sphere_tf.ops import conv_geometry
from sphere_tf.ops import fourier
from sphere_tf.ops import runtime_checks

# PyTorch BatchNorm2d defaults used by upstream `PreConv` (momentum 0.1 == Keras momentum 0.9).
BN_MOMENTUM = 0.9
BN_EPSILON = 1e-5


def _upstream_depthwise_initializer(kernel_size):
    # PyTorch Conv2d default (kaiming_uniform, a=√5) for a depthwise kernel: U(±1/√fan_in), fan_in = kh·kw.
    bound = 1.0 / (kernel_size[0] * kernel_size[1]) ** 0.5
    return keras.initializers.RandomUniform(-bound, bound)


@saving.register_serializable()
class ConvNorm2D(keras.layers.Layer):
    """2-D convolution with convolutional normalization (ConvNorm), optional BN.

    Each output channel of the convolution is filtered by ``v_k`` with spectrum
    ``V̂_k = (Σ_i |Â_ki|² + ε)^(−1/2)`` so that the channel operator is a tight
    frame (spectral norm 1, in the circular model) [C §3.2]. The filter is applied
    on the full-convolution grid ``(H + kh − 1) × (W + kw − 1)`` (circular there,
    as in the original), then the output is cropped and subsampled to exactly the
    shape and sampling grid of ``keras.layers.Conv2D(filters, kernel_size,
    strides, padding)``. A learnable depthwise convolution with bias (``affine``)
    and a BatchNormalization (``batch_norm``) follow.

    ```
    out = BN( r ⋆_depthwise crop_stride( F⁻¹(V̂ ⊙ F(a ⋆ x)) ) + b )    Algorithm 1 of [C]
    ```

    Training uses V̂ of the current kernel and updates a running average
    ``V̄ ← α V̂ + (1 − α) V̄`` (non-trainable weight ``running_v``, float32); inference
    uses ``V̄``. With ``momentum=None`` α follows the upstream cosine ramp-down
    ``α(t) = max(½(cos(π·min(t, 40000)/40000) + 1), 0.01)``, t = training step
    counted from 1 (weight ``num_batches_tracked``).

    Note: ``running_v`` has shape ``(filters, H + kh − 1, (W + kw − 1)//2 + 1)`` and
    is created in `build` from the static input shape, so it is saved, loaded and
    exported with the model (upstream creates it lazily, which breaks checkpoint
    loading). Kernels larger than 1×1 therefore need a static spatial input
    size, and the layer only accepts that size afterwards (`InputSpec`); 1×1
    kernels (V̂ is a per-channel scalar) accept any size.

    Note: before the first training step (``num_batches_tracked == 0``) inference
    uses V̂ of the current kernel instead of the all-zero buffer (upstream would
    output zeros), and with a fixed ``momentum`` the first update copies V̂
    (α = 1) instead of averaging with the zero initial buffer.

    Note: ``epsilon`` (default 1e-4, the first upstream commit) is added to
    ``Σ|Â|²``; the final upstream code has none and returns inf/NaN at spectral
    zeros (taps summing to zero, dead channels). See `sphere_tf.ops.fourier`.

    Note: for 'same' padding with stride 2 on even sizes the sampling grid is
    Keras's (TF pads only after), one row/column off PyTorch's ``padding=1`` grid;
    see `sphere_tf.ops.fourier.output_geometry`. The affine conv uses 'same'
    padding (upstream ``padding=(k−1)//2`` shrinks even-sized kernels' outputs).
    Upstream takes the scalar path whenever one kernel side is 1, which is wrong
    for 1×k kernels; here only 1×1 does. Dilation and groups are not supported
    (upstream ignores dilation when building V̂).

    Args:
        filters: int > 0, number of output channels C_out.
        kernel_size: int or pair of ints, (kh, kw).
        strides: int or pair of ints; the output is subsampled after normalization.
        padding: 'valid' or 'same', any case (Keras geometry).
        affine: bool, learnable depthwise kernel-size conv with bias after the
            normalization (also BN's center/scale, as upstream). Without it and
            without BN the layer has no bias.
        batch_norm: bool, BatchNormalization after the affine conv ("ConvNorm + BN";
            upstream default on).
        epsilon: float > 0, added to Σ|Â|² (and to Σa² for 1×1).
        momentum: None (upstream cosine ramp-down of α) or float in (0, 1], a fixed
            averaging factor α for the running V̂.
        rampdown_steps: int > 0, length T of the cosine ramp-down (upstream 40000).
        bn_momentum, bn_epsilon: BatchNormalization momentum (Keras convention) and ε;
            defaults are PyTorch's (0.1 → 0.9, 1e-5) as used upstream.
        kernel_initializer: initializer of the main kernel (paper: Xavier uniform).
        affine_initializer, affine_bias_initializer: initializers of the depthwise
            affine kernel and bias; None gives PyTorch's default ``U(±1/√(kh·kw))``
            (upstream; not a delta/identity init).
        kernel_regularizer, affine_regularizer: optional regularizers.
        kernel_constraint: optional constraint on the main kernel.
        **kwargs: base `keras.layers.Layer` arguments (name, dtype, ...).

    Input shape:
        4-D tensor `(batch, H, W, C_in)`; H and W static unless kernel_size is 1×1.

    Output shape:
        4-D tensor `(batch, out_h, out_w, filters)`, as `keras.layers.Conv2D`.

    Raises:
        ValueError: invalid arguments (at construction), or at build an input
            without a static spatial size (kernels larger than 1×1) or smaller than
            the kernel with 'valid' padding (the error of `keras.layers.Conv2D`).

    Reference:
        Liu et al., "Convolutional Normalization: Improving Deep Convolutional
        Network Robustness and Training", NeurIPS 2021, https://arxiv.org/abs/2103.00673

    Example:

    >>> layer = ConvNorm2D(8, 3, strides=2, padding="same")
    >>> layer(keras.ops.ones((2, 28, 28, 3))).shape
    (2, 14, 14, 8)
    """

    def __init__(
        self,
        filters,
        kernel_size,
        strides=1,
        padding="valid",
        affine=True,
        batch_norm=True,
        epsilon=fourier.DEFAULT_EPSILON,
        momentum=None,
        rampdown_steps=fourier.RAMPDOWN_STEPS,
        bn_momentum=BN_MOMENTUM,
        bn_epsilon=BN_EPSILON,
        kernel_initializer="glorot_uniform",
        affine_initializer=None,
        affine_bias_initializer=None,
        kernel_regularizer=None,
        affine_regularizer=None,
        kernel_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.filters = validation.positive_int(filters, "filters", maximum=validation.MAX_INT32)
        self.kernel_size = validation.int_pair(kernel_size, "kernel_size")
        self.strides = validation.int_pair(strides, "strides")
        self.padding = validation.padding(padding)
        self.affine = validation.boolean(affine, "affine")
        self.batch_norm = validation.boolean(batch_norm, "batch_norm")
        self.epsilon = validation.positive_float(epsilon, "epsilon")
        self.momentum = validation.unit_interval(momentum, "momentum", allow_none=True)
        self.rampdown_steps = validation.positive_int(rampdown_steps, "rampdown_steps", maximum=validation.MAX_INT32)
        self.bn_momentum = validation.real(bn_momentum, "bn_momentum", low=0.0, high=1.0, low_open=True, high_open=True)
        self.bn_epsilon = validation.positive_float(bn_epsilon, "bn_epsilon")
        self.kernel_initializer = validation.keras_object(
            keras.initializers.get, kernel_initializer, "kernel_initializer", "initializer")
        upstream_init = _upstream_depthwise_initializer(self.kernel_size)
        self.affine_initializer = validation.keras_object(
            keras.initializers.get, upstream_init if affine_initializer is None else affine_initializer,
            "affine_initializer", "initializer")
        self.affine_bias_initializer = validation.keras_object(
            keras.initializers.get, upstream_init if affine_bias_initializer is None else affine_bias_initializer,
            "affine_bias_initializer", "initializer")
        self.kernel_regularizer = validation.keras_object(
            keras.regularizers.get, kernel_regularizer, "kernel_regularizer", "regularizer")
        self.affine_regularizer = validation.keras_object(
            keras.regularizers.get, affine_regularizer, "affine_regularizer", "regularizer")
        self.kernel_constraint = validation.keras_object(
            keras.constraints.get, kernel_constraint, "kernel_constraint", "constraint")
        self._is_1x1 = self.kernel_size == (1, 1)
        if self.batch_norm:
            self.bn = keras.layers.BatchNormalization(
                axis=-1,
                momentum=self.bn_momentum,
                epsilon=self.bn_epsilon,
                center=self.affine,
                scale=self.affine,
                dtype=self.dtype_policy,
                name="batch_norm",
            )
        else:
            self.bn = None

    def build(self, input_shape):
        if len(input_shape) != 4:
            raise ValueError(
                f"ConvNorm2D expects 4-D inputs (batch, H, W, C). Received: input_shape={input_shape}"
            )
        self.compute_output_shape(input_shape)  # Conv2D's error when the window does not fit
        in_channels = input_shape[-1]
        if in_channels is None:
            raise ValueError(
                f"ConvNorm2D needs a known channel dimension. Received: input_shape={input_shape}"
            )
        spatial = (input_shape[1], input_shape[2])
        if not self._is_1x1:
            if None in spatial:
                raise ValueError(
                    "ConvNorm2D with a kernel larger than 1x1 needs a static spatial input size: the "
                    "normaliser V̂ and its running average live on the (H + kh - 1) x (W + kw - 1) "
                    "Fourier grid, which is fixed at build time. Give the size in keras.Input(shape="
                    f"(H, W, C)). Received: input_shape={input_shape}"
                )
            self._input_size = (int(spatial[0]), int(spatial[1]))
            self._grid = fourier.full_size(self._input_size, self.kernel_size)
            running_shape = (self.filters, self._grid[0], self._grid[1] // 2 + 1)
        else:
            self._input_size = None
            running_shape = (self.filters,)
        with validation.argument_errors("kernel_initializer"):
            self.kernel = self.add_weight(
                name="kernel",
                shape=(*self.kernel_size, in_channels, self.filters),
                initializer=self.kernel_initializer,
                regularizer=self.kernel_regularizer,
                constraint=self.kernel_constraint,
            )
        if self.affine:
            with validation.argument_errors("affine_initializer"):
                self.affine_kernel = self.add_weight(
                    name="affine_kernel",
                    shape=(*self.kernel_size, self.filters, 1),
                    initializer=self.affine_initializer,
                    regularizer=self.affine_regularizer,
                )
            with validation.argument_errors("affine_bias_initializer"):
                self.affine_bias = self.add_weight(
                    name="affine_bias", shape=(self.filters,), initializer=self.affine_bias_initializer
                )
        # autocast=False: under mixed policies Keras would read these float32 buffers in the compute dtype,
        # so inference's `ops.cond` would mix float16 and float32 branches, the running average would lose
        # precision, and the step counter would stop at 2048 (float16) or 256 (bfloat16): n + 1 rounds to n.
        self.running_v = self.add_weight(
            name="running_v", shape=running_shape, initializer="zeros", trainable=False, dtype="float32",
            autocast=False,
        )
        self.num_batches_tracked = self.add_weight(
            name="num_batches_tracked", shape=(), initializer="zeros", trainable=False, dtype="float32",
            autocast=False,
        )
        if self.bn is not None:
            self.bn.build(self.compute_output_shape(input_shape))
        axes = {3: in_channels} if self._is_1x1 else {1: spatial[0], 2: spatial[1], 3: in_channels}
        self.input_spec = keras.layers.InputSpec(ndim=4, axes=axes)

    def current_normalizer(self):
        """V̂ of the current kernel (float32, gradient stopped): `(filters,)` for 1×1, else the
        one-sided spectrum `(filters, H', W'//2 + 1)`."""
        # The kernel is read in the compute dtype under mixed policies; V̂ (and its average) stay float32.
        if self._is_1x1:
            return ops.cast(fourier.normalizer_1x1(self.kernel, self.epsilon), "float32")
        return ops.cast(fourier.spectral_normalizer(self.kernel, self._grid, self.epsilon), "float32")

    def _normalizer(self, training):
        if training:
            v = self.current_normalizer()
            step = self.num_batches_tracked + 1.0  # upstream increments before computing α
            alpha = fourier.averaging_factor(step, self.momentum, self.rampdown_steps)
            if self.momentum is not None:
                alpha = ops.where(step <= 1.0, 1.0, alpha)  # first update copies (class Note)
            self.running_v.assign(alpha * v + (1.0 - alpha) * self.running_v)
            self.num_batches_tracked.assign(step)
            return v
        return runtime_checks.cond(
            self.num_batches_tracked > 0.0,
            lambda: ops.convert_to_tensor(self.running_v),
            self.current_normalizer,
        )

    def call(self, inputs, training=None):
        # Integer inputs (uint8 pixels) in the layer's float dtype: the kernel below takes the inputs' dtype, and an
        # int kernel would round the weights to 0.
        if not keras.backend.is_float_dtype(inputs.dtype):
            inputs = ops.cast(inputs, self.compute_dtype)
        if inputs.shape[0] == 0:
            # An empty batch: nothing to convolve (an FFT of no images fails on PyTorch's MKL), and no statistic
            # (the running averages, BatchNormalization's moments) is updated from no samples.
            return ops.zeros(self.compute_output_shape(tuple(inputs.shape)), self.compute_dtype)
        kernel = ops.cast(self.kernel, inputs.dtype)
        v = self._normalizer(bool(training))
        if self._is_1x1:
            y = ops.conv(inputs, kernel, strides=self.strides, padding=self.padding)
            y = ops.cast(y, "float32") * v
        else:
            # The backend's plug-in where it has one (TensorFlow: the spatial conv and an FFT filter; JAX: its 2-D
            # FFTs), else the whole convolution in the Fourier domain with keras.ops; all float32, same values.
            y = acceleration.conv_norm(inputs, self.kernel, v, self.strides, self.padding)
            if y is NotImplemented:
                y = fourier.fourier_conv_norm(inputs, self.kernel, v, self.strides, self.padding)
        y = ops.cast(y, self.compute_dtype)
        if self.affine:
            affine_kernel = ops.cast(self.affine_kernel, y.dtype)
            # The plug-in's where it has one (JAX: shifted multiply-adds instead of XLA:CPU's grouped conv).
            z = acceleration.depthwise_conv(y, affine_kernel, (1, 1), "same")
            y = ops.depthwise_conv(y, affine_kernel, strides=1, padding="same") if z is NotImplemented else z
            y = y + ops.cast(self.affine_bias, y.dtype)
        if self.bn is not None:
            y = self.bn(y, training=training)
        return y

    def compute_output_shape(self, input_shape):
        return conv_geometry.output_shape(input_shape, self.filters, self.kernel_size, self.strides, self.padding)

    def get_config(self):
        return {
            **super().get_config(),
            "filters": self.filters,
            "kernel_size": self.kernel_size,
            "strides": self.strides,
            "padding": self.padding,
            "affine": self.affine,
            "batch_norm": self.batch_norm,
            "epsilon": self.epsilon,
            "momentum": self.momentum,
            "rampdown_steps": self.rampdown_steps,
            "bn_momentum": self.bn_momentum,
            "bn_epsilon": self.bn_epsilon,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "affine_initializer": keras.initializers.serialize(self.affine_initializer),
            "affine_bias_initializer": keras.initializers.serialize(self.affine_bias_initializer),
            "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            "affine_regularizer": keras.regularizers.serialize(self.affine_regularizer),
            "kernel_constraint": keras.constraints.serialize(self.kernel_constraint),
        }
