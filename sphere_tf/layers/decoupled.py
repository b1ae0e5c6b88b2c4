"""Hyperspherical (SphereNet) and decoupled (DCNet) convolution and dense layers.

All four public layers compute ``f = h(‖w‖, ‖x‖)·g(θ)`` through
`sphere_tf.ops.operator.decoupled_response`; they differ only in how a "patch"
is formed (a sliding window for convolutions, the whole vector for dense layers).

```
cos θ = (x · ŵ) / ‖x‖,   ŵ = w / sqrt(‖w‖² + ε),   ‖x‖ = sqrt(Σ_patch x² + ε)
```

Numerics follow the authors' TF code (wy1iu/SphereNet, wy1iu/DCNets):

* ε = 1e-4 inside both square roots;
* the operator radius is ``r = (ρ_raw² + 1e-4) · E{‖x‖}``, ρ_raw a per-output-channel
  variable initialised to √ρ (upstream: ``radius ** 2 + 1e-4`` with ``radius``
  initialised to 1), so the radius is positive by construction;
* E{‖x‖} is the batch mean of the patch norms in training and a moving average
  (momentum 0.999, zero-debiased as TF1's ``ExponentialMovingAverage`` of a
  tensor is) at inference, BN-like;
* a learnable sigmoid k is ``|k_raw| + 0.05`` per filter (upstream), initialised
  to the paper's 0.5 [S §2.5];
* kernels start from N(0, 2/fan_in) (upstream; He initialisation).
"""

import numbers

import keras
from keras import ops

from sphere_tf.layers import _validation
from sphere_tf.ops import angles
from sphere_tf.ops import angular as angular_lib
from sphere_tf.ops import fused
from sphere_tf.ops import magnitude as magnitude_lib
from sphere_tf.ops import operator

# Upstream constants (see module docstring).
RHO_EPSILON = 1e-4
K_MIN = 0.05
DEFAULT_NORM_MOMENTUM = 0.999
DEFAULT_LEARNABLE_K = 0.5
# Floor under the norms' ε: with epsilon=0 an all-zero patch or kernel still gives a finite
# norm (cos θ = 0) instead of 0/0; 1e-30 is below float32 resolution for any non-zero norm.
_MIN_SQRT_EPSILON = 1e-30


def _upstream_kernel_initializer():
    # N(0, sqrt(2 / fan_in)), not truncated: the authors' conv initialiser.
    return keras.initializers.VarianceScaling(
        scale=2.0, mode="fan_in", distribution="untruncated_normal"
    )


class _HypersphericalOperator(keras.layers.Layer):
    """Shared state and maths of the four operator layers (private).

    Subclasses provide `_units`, `_kernel_shape(input_shape)` and
    `_dot_and_patch_sq(inputs, w_hat, need_patch_sq, composed)`.
    """

    def __init__(
        self,
        magnitude="tanh",
        angular="cosine",
        alpha=1.0,
        beta=None,
        rho=1.0,
        learnable_rho=True,
        weighted=None,
        k=0.3,
        learnable_k=False,
        learnable_k_init=DEFAULT_LEARNABLE_K,
        use_bias=False,
        epsilon=angles.DEFAULT_EPSILON,
        norm_momentum=DEFAULT_NORM_MOMENTUM,
        rescale=False,
        kernel_initializer=None,
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self._magnitude = magnitude_lib.get_magnitude(magnitude)
        self.magnitude = magnitude
        self.angular = angular
        angular_lib.get_angular_fn(angular)  # unknown names fail here, not in call
        if not isinstance(angular, str):
            raise ValueError(
                "Invalid value for argument `angular`: expected a registry name "
                f"(one of {sorted(angular_lib.ANGULAR_FNS)}); register custom functions with "
                f"`sphere_tf.ops.angular.register_angular_fn`. Received: angular={angular!r}"
            )
        self.alpha = _validation.positive_float(alpha, "alpha")
        if beta is None:
            beta = self._magnitude.default_beta
        elif self._magnitude.default_beta is None:
            raise ValueError(
                f"Invalid value for argument `beta`: magnitude={magnitude!r} has no β "
                f"(only 'seg' and 'mix' do). Received: beta={beta!r}"
            )
        else:
            if isinstance(beta, bool) or not isinstance(beta, numbers.Real) or beta < 0:
                raise ValueError(
                    f"Invalid value for argument `beta`: expected a float >= 0. Received: beta={beta!r}"
                )
            beta = float(beta)
        self.beta = beta
        self.rho = _validation.positive_float(rho, "rho")
        self.learnable_rho = bool(learnable_rho)
        if weighted not in operator.WEIGHTINGS:
            raise ValueError(
                f"Invalid value for argument `weighted`: expected one of {operator.WEIGHTINGS}. "
                f"Received: weighted={weighted!r}"
            )
        if weighted in operator.NONLINEAR_WEIGHTINGS and magnitude != "tanh":
            raise ValueError(
                f"Invalid value for argument `weighted`: weighted={weighted!r} is the nonlinearly "
                f"weighted TanhConv (eqs. 15-16) and needs magnitude='tanh'. "
                f"Received: magnitude={magnitude!r}"
            )
        self.weighted = weighted
        self.k = _validation.positive_float(k, "k")
        self.learnable_k = bool(learnable_k)
        if self.learnable_k and angular not in angular_lib.USES_K:
            raise ValueError(
                "Invalid value for argument `learnable_k`: only angular functions with a "
                f"parameter k ({sorted(angular_lib.USES_K)}) can learn it. Received: "
                f"learnable_k=True with angular={angular!r}"
            )
        self.learnable_k_init = _validation.positive_float(learnable_k_init, "learnable_k_init")
        if self.learnable_k and self.learnable_k_init <= K_MIN:
            raise ValueError(
                f"Invalid value for argument `learnable_k_init`: expected a float > {K_MIN} "
                f"(k = |k_raw| + {K_MIN}). Received: learnable_k_init={learnable_k_init!r}"
            )
        self.use_bias = bool(use_bias)
        if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or epsilon < 0:
            raise ValueError(
                f"Invalid value for argument `epsilon`: expected a float >= 0. Received: epsilon={epsilon!r}"
            )
        self.epsilon = float(epsilon)
        if not isinstance(norm_momentum, numbers.Real) or not 0.0 <= norm_momentum < 1.0:
            raise ValueError(
                "Invalid value for argument `norm_momentum`: expected a float in [0, 1). "
                f"Received: norm_momentum={norm_momentum!r}"
            )
        self.norm_momentum = float(norm_momentum)
        self.rescale = bool(rescale)
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer or _upstream_kernel_initializer()
        )
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)

    # -- properties -------------------------------------------------------------------

    @property
    def has_radius(self):
        """Whether the operator has an operator radius ρ·E{‖x‖} (ball, tanh, seg)."""
        return self._magnitude.has_radius or self.weighted == "nonlinear_separate"

    @property
    def _sqrt_epsilon(self):
        # ε inside the norms' square roots, floored so that epsilon=0 stays finite.
        return max(self.epsilon, _MIN_SQRT_EPSILON)

    @property
    def supports_weight_projection(self):
        """True for standard operators, whose output does not depend on ‖w‖ [D §4]."""
        return self.weighted is None

    def effective_rho(self):
        """ρ = ρ_raw² + 1e-4 per output channel (float32), or None without a radius."""
        if not self.has_radius:
            return None
        return ops.square(ops.cast(self.rho_raw, "float32")) + RHO_EPSILON

    def effective_k(self):
        """The sigmoid k: the fixed float, or |k_raw| + 0.05 per filter when learnable."""
        if self.learnable_k:
            return ops.abs(ops.cast(self.k_raw, "float32")) + K_MIN
        return self.k

    def norm_mean(self):
        """Inference estimate of E{‖x‖} (1.0 before any training step)."""
        weight = ops.cast(self.norm_mean_weight, "float32")
        biased = ops.cast(self.norm_mean_biased, "float32")
        return ops.where(weight > 0.0, biased / ops.maximum(weight, 1e-12), 1.0)

    # -- Keras API ----------------------------------------------------------------------

    def build(self, input_shape):
        units = self._units
        self.kernel = self.add_weight(
            name="kernel",
            shape=self._kernel_shape(input_shape),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
            autocast=False,  # the kernel is normalised in float32
        )
        if self.has_radius:
            rho_raw = self.rho**0.5
            self.rho_raw = self.add_weight(
                name="rho",
                shape=(units,),
                initializer=keras.initializers.Constant(rho_raw),
                trainable=self.learnable_rho,
                autocast=False,
            )
            # E{‖x‖}: zero-debiased moving average = biased / weight.
            self.norm_mean_biased = self.add_weight(
                name="norm_mean_biased", shape=(), initializer="zeros", trainable=False,
                autocast=False, aggregation="mean",
            )
            self.norm_mean_weight = self.add_weight(
                name="norm_mean_weight", shape=(), initializer="zeros", trainable=False,
                autocast=False, aggregation="mean",
            )
        if self.learnable_k:
            self.k_raw = self.add_weight(
                name="k",
                shape=(units,),
                initializer=keras.initializers.Constant(self.learnable_k_init - K_MIN),
                autocast=False,
            )
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias", shape=(units,), initializer=self.bias_initializer,
                regularizer=self.bias_regularizer, constraint=self.bias_constraint,
                autocast=False,
            )
        if self.rescale:
            self.rescale_scale = self.add_weight(
                name="rescale_scale", shape=(units,), initializer="ones", autocast=False
            )
            self.rescale_shift = self.add_weight(
                name="rescale_shift", shape=(units,), initializer="zeros", autocast=False
            )
        self.input_spec = keras.layers.InputSpec(min_ndim=2, axes={-1: input_shape[-1]})

    # The fused hot path (`sphere_tf.ops.fused`); False selects the plain composition
    # through `operator.decoupled_response` (same values; kept for benchmarks and tests).
    _use_fused_path = True
    # Whether the fused path may use its training fusions (compiled kernels, XLA
    # clusters; `fused.set_training_fusion` is the global switch); False only for benchmarks.
    _use_training_fusion = True

    def call(self, inputs, training=None):
        if not self._use_fused_path:
            return self._call_composed(inputs, training)
        w_hat, w_norm = angles.normalize_kernel(self.kernel, self._sqrt_epsilon)
        need_norm = not fused.norm_cancels(self._magnitude, self.angular, self.weighted)
        fuse = self._use_training_fusion and fused.use_training_fusion(training)
        dot, x_sq = self._dot_and_patch_sq(
            inputs, ops.cast(w_hat, self.compute_dtype), need_patch_sq=need_norm, fuse=fuse
        )
        dot = ops.cast(dot, "float32")
        x_norm = inv_norm = radius = weight_radius = None
        if need_norm:
            # Everything of ‖x‖ alone lives on a one-channel tensor (cheap).
            x_norm = ops.sqrt(x_sq + self._sqrt_epsilon)
            inv_norm = 1.0 / x_norm
        if self.has_radius:
            rho = self.effective_rho()
            radius = rho * self._norm_mean_for(x_norm, training)
            weight_radius = rho
        out = fused.decoupled_response_from_dot(
            dot, x_norm, inv_norm, w_norm,
            magnitude=self._magnitude, angular=self.angular, alpha=self.alpha, beta=self.beta,
            radius=radius, k=self.effective_k(), weighted=self.weighted,
            weight_radius=weight_radius, fuse=fuse,
        )
        return self._finish(out)

    def _call_composed(self, inputs, training=None):
        w_hat, w_norm = angles.normalize_kernel(self.kernel, self._sqrt_epsilon)
        dot, x_sq = self._dot_and_patch_sq(
            inputs, ops.cast(w_hat, self.compute_dtype), composed=True
        )
        x_norm = ops.sqrt(x_sq + self._sqrt_epsilon)
        cos_theta = ops.cast(dot, "float32") / x_norm
        radius = weight_radius = None
        if self.has_radius:
            rho = self.effective_rho()
            radius = rho * self._norm_mean_for(x_norm, training)
            weight_radius = rho
        out = operator.decoupled_response(
            cos_theta, x_norm, w_norm,
            magnitude=self._magnitude, angular=self.angular, alpha=self.alpha, beta=self.beta,
            radius=radius, k=self.effective_k(), weighted=self.weighted,
            weight_radius=weight_radius,
        )
        return self._finish(out)

    def _finish(self, out):
        if self.rescale:
            out = out * self.rescale_scale + self.rescale_shift
        if self.use_bias:
            out = out + self.bias
        return ops.cast(out, self.compute_dtype)

    def _norm_mean_for(self, x_norm, training):
        if not training:
            return self.norm_mean()
        batch_mean = ops.stop_gradient(ops.mean(x_norm))
        m = self.norm_momentum
        self.norm_mean_biased.assign(m * self.norm_mean_biased + (1.0 - m) * batch_mean)
        self.norm_mean_weight.assign(m * self.norm_mean_weight + (1.0 - m))
        return batch_mean

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "magnitude": self.magnitude,
                "angular": self.angular,
                "alpha": self.alpha,
                "beta": self.beta,
                "rho": self.rho,
                "learnable_rho": self.learnable_rho,
                "weighted": self.weighted,
                "k": self.k,
                "learnable_k": self.learnable_k,
                "learnable_k_init": self.learnable_k_init,
                "use_bias": self.use_bias,
                "epsilon": self.epsilon,
                "norm_momentum": self.norm_momentum,
                "rescale": self.rescale,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
                "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer),
                "kernel_constraint": keras.constraints.serialize(self.kernel_constraint),
                "bias_constraint": keras.constraints.serialize(self.bias_constraint),
            }
        )
        return config


class _ConvGeometry:
    """Sliding-window patches of a 2-D convolution, `keras.layers.Conv2D` geometry."""

    def _init_conv(self, filters, kernel_size, strides, padding, dilation_rate):
        self.filters = _validation.positive_int(filters, "filters")
        self.kernel_size = _validation.int_pair(kernel_size, "kernel_size")
        self.strides = _validation.int_pair(strides, "strides")
        self.dilation_rate = _validation.int_pair(dilation_rate, "dilation_rate")
        if not isinstance(padding, str) or padding.lower() not in ("valid", "same"):
            raise ValueError(
                "Invalid value for argument `padding`: expected 'valid' or 'same'. "
                f"Received: padding={padding!r}"
            )
        self.padding = padding.lower()
        if max(self.strides) > 1 and max(self.dilation_rate) > 1:
            raise ValueError(
                "`strides > 1` is not compatible with `dilation_rate > 1`. "
                f"Received: strides={self.strides} and dilation_rate={self.dilation_rate}"
            )

    @property
    def _units(self):
        return self.filters

    def _kernel_shape(self, input_shape):
        if len(input_shape) != 4:
            raise ValueError(f"{type(self).__name__} expects NHWC inputs; received shape {input_shape}.")
        if input_shape[-1] is None:
            raise ValueError(f"{type(self).__name__} needs a known channel dimension; received {input_shape}.")
        return self.kernel_size + (input_shape[-1], self.filters)

    def _dot_and_patch_sq(self, inputs, w_hat, need_patch_sq=True, composed=False, fuse=False):
        if fuse and need_patch_sq and not composed and None not in inputs.shape[1:3]:
            # Training: one custom gradient for the conv and the patch energy.
            return fused.conv_and_patch_energy(
                inputs, w_hat, self.strides, self.padding, self.dilation_rate
            )
        dot = ops.conv(
            inputs, w_hat, strides=self.strides, padding=self.padding,
            data_format="channels_last", dilation_rate=self.dilation_rate,
        )
        if not need_patch_sq:
            return dot, None
        # The fused path sums shifted slices; the composed one convolves with ones.
        if composed:
            x_sq = angles.patch_squared_norm(
                inputs, self.kernel_size, self.strides, self.padding, self.dilation_rate
            )
        else:
            x_sq = fused.patch_squared_norm(
                inputs, self.kernel_size, self.strides, self.padding, self.dilation_rate, fuse=fuse
            )
        return dot, x_sq

    def compute_output_shape(self, input_shape):
        out = [input_shape[0]]
        for size, k, s, d in zip(input_shape[1:3], self.kernel_size, self.strides, self.dilation_rate):
            if size is None:
                out.append(None)
            elif self.padding == "same":
                out.append(-(-size // s))
            else:
                out.append((size - d * (k - 1) - 1) // s + 1)
        return tuple(out) + (self.filters,)

    def _conv_config(self):
        return {
            "filters": self.filters,
            "kernel_size": self.kernel_size,
            "strides": self.strides,
            "padding": self.padding,
            "dilation_rate": self.dilation_rate,
        }


class _DenseGeometry:
    """The whole input vector as the patch (fully connected layers)."""

    def _init_dense(self, units):
        self.units = _validation.positive_int(units, "units")

    @property
    def _units(self):
        return self.units

    def _kernel_shape(self, input_shape):
        if input_shape[-1] is None:
            raise ValueError(f"{type(self).__name__} needs a known last dimension; received {input_shape}.")
        return (input_shape[-1], self.units)

    def _dot_and_patch_sq(self, inputs, w_hat, need_patch_sq=True, composed=False, fuse=False):
        del composed, fuse  # no patch geometry: one vector norm
        x_sq = angles.vector_squared_norm(inputs) if need_patch_sq else None
        return ops.matmul(inputs, w_hat), x_sq

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.units,)


# Constructor arguments that only the decoupled layers take (SphereConv fixes them).
_DECOUPLED_ONLY = ("magnitude", "alpha", "beta", "rho", "learnable_rho", "weighted", "norm_momentum")


@keras.saving.register_keras_serializable(package="sphere_tf")
class DecoupledConv2D(_ConvGeometry, _HypersphericalOperator):
    """Decoupled 2-D convolution  f_d(w, x) = h(‖w‖, ‖x‖)·g(θ_(w,x))   [D-3].

    ```
    θ = arccos(ŵᵀx / ‖x‖)                 per output position and filter
    h ∈ {sphere, ball, tanh, linear, seg, log, mix}          [D-4..10]
    g ∈ {linear, cosine, sigmoid, sqcosine}                  [D-11..14]
    r = ρ·E{‖x‖} for ball / tanh / seg                        [D-19..21]
    ```

    Standard operators use the normalised kernel ŵ only, so the output does not
    depend on ‖w‖; `weighted` puts ‖w‖ back (linearly, or eqs. 15/16 for tanh).

    Args:
        filters: int > 0, the number of output channels.
        kernel_size: int or pair of ints.
        strides: int or pair, as `keras.layers.Conv2D`.
        padding: 'valid' or 'same', as `keras.layers.Conv2D`.
        dilation_rate: int or pair, as `keras.layers.Conv2D`.
        magnitude: str, the magnitude function h (`sphere_tf.ops.magnitude.MAGNITUDE_FNS`).
        angular: str, the angular activation g (`sphere_tf.ops.angular.ANGULAR_FNS`).
        alpha: float > 0, α of h (DCNet default 1).
        beta: float >= 0 or None, β of 'seg' (default 0.5) and 'mix' (default 1).
        rho: float > 0, initial operator radius factor ρ (default 1, as upstream).
        learnable_rho: bool, learn ρ per output channel (upstream: yes).
        weighted: None, 'linear', 'nonlinear' (eq. 15) or 'nonlinear_separate' (eq. 16).
        k: float > 0, the sigmoid parameter (0.3, "a good choice" [S App B]).
        learnable_k: bool, learn k per filter (sigmoid only).
        learnable_k_init: float > 0.05, initial learnable k (paper: 0.5).
        use_bias: bool, add a per-channel bias (default off; BN usually follows).
        epsilon: float >= 0, inside the norms' square roots (upstream 1e-4).
        norm_momentum: float in [0, 1), momentum of the E{‖x‖} moving average
            (upstream 0.999).
        rescale: bool, learned per-channel affine β·f + γ (rescaled SphereNorm).
        kernel_initializer: default N(0, 2/fan_in) as upstream.
        bias_initializer, kernel_regularizer, bias_regularizer, kernel_constraint,
        bias_constraint: as `keras.layers.Conv2D`.

    Input shape:
        4-D tensor `(batch, rows, cols, channels)`.

    Output shape:
        4-D tensor `(batch, new_rows, new_cols, filters)`, as `keras.layers.Conv2D`.

    Raises:
        ValueError: unknown names, non-positive α/ρ/k, β for a magnitude without
            one, or a nonlinear weighting on a magnitude other than tanh.

    Reference:
        Liu et al., Decoupled Networks, CVPR 2018, https://arxiv.org/abs/1804.08071

    Example:

    >>> layer = DecoupledConv2D(8, 3, padding="same", magnitude="tanh", angular="cosine")
    >>> layer(keras.random.normal((2, 16, 16, 3))).shape
    (2, 16, 16, 8)
    """

    def __init__(self, filters, kernel_size, strides=1, padding="valid", dilation_rate=1,
                 magnitude="tanh", angular="cosine", alpha=1.0, beta=None, rho=1.0,
                 learnable_rho=True, weighted=None, **kwargs):
        self._init_conv(filters, kernel_size, strides, padding, dilation_rate)
        super().__init__(magnitude=magnitude, angular=angular, alpha=alpha, beta=beta, rho=rho,
                         learnable_rho=learnable_rho, weighted=weighted, **kwargs)

    def get_config(self):
        return {**super().get_config(), **self._conv_config()}


@keras.saving.register_keras_serializable(package="sphere_tf")
class DecoupledDense(_DenseGeometry, _HypersphericalOperator):
    """Decoupled fully connected layer  f_d = h(‖w‖, ‖x‖)·g(θ)   [D-3].

    The patch is the whole input vector. Arguments as `DecoupledConv2D` with
    `units` for `filters` and no conv geometry.

    Input shape:
        N-D tensor `(batch, ..., input_dim)`.

    Output shape:
        `(batch, ..., units)`.

    Example:

    >>> DecoupledDense(4, magnitude="ball")(keras.random.normal((3, 5))).shape
    (3, 4)
    """

    def __init__(self, units, magnitude="tanh", angular="cosine", alpha=1.0, beta=None, rho=1.0,
                 learnable_rho=True, weighted=None, **kwargs):
        self._init_dense(units)
        super().__init__(magnitude=magnitude, angular=angular, alpha=alpha, beta=beta, rho=rho,
                         learnable_rho=learnable_rho, weighted=weighted, **kwargs)

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def _sphere_config(config):
    for key in _DECOUPLED_ONLY:
        config.pop(key, None)
    return config


@keras.saving.register_keras_serializable(package="sphere_tf")
class SphereConv2D(_ConvGeometry, _HypersphericalOperator):
    """Hyperspherical 2-D convolution (SphereNet)  F_s(w, x) = g(θ_(w,x)) + b   [S-1].

    ```
    θ = arccos(wᵀx / (‖w‖‖x‖))                                 [S-6]
    g: linear 1 − 2θ/π [S-2], cosine cos θ [S-3],
       sigmoid tanh((π/2 − θ)/2k)/tanh(π/4k) [S-4], sqcosine c·|c| [D-14]
    ```

    The output lies in [−1, 1] and is invariant to positive scaling of the
    kernel and of the input. With `rescale=True` the output becomes β·F_s + γ with
    learned per-channel β, γ (rescaled SphereNorm, [T-3.2.5]); SphereNorm itself
    is cosine SphereConv used in place of BatchNorm.

    Args:
        filters, kernel_size, strides, padding, dilation_rate: as `keras.layers.Conv2D`.
        angular: str, 'linear', 'cosine', 'sigmoid' or 'sqcosine'.
        k: float > 0, fixed sigmoid parameter (default 0.3).
        learnable_k: bool, learn k per filter, k = |k_raw| + 0.05 (upstream).
        learnable_k_init: float > 0.05, its initial value (paper: 0.5).
        use_bias: bool (default False: "bias terms are usually left out").
        epsilon: float >= 0, inside the norms' square roots (upstream 1e-4).
        rescale: bool, per-channel learned scale and shift.
        kernel_initializer etc.: as `keras.layers.Conv2D`.

    Input shape:
        4-D tensor `(batch, rows, cols, channels)`.

    Output shape:
        4-D tensor `(batch, new_rows, new_cols, filters)`.

    Reference:
        Liu et al., Deep Hyperspherical Learning, NIPS 2017, https://arxiv.org/abs/1711.03189

    Example:

    >>> y = SphereConv2D(4, 3, angular="linear")(keras.random.normal((1, 8, 8, 2)))
    >>> bool(ops.all(ops.abs(y) <= 1.0))
    True
    """

    def __init__(self, filters, kernel_size, strides=1, padding="valid", dilation_rate=1,
                 angular="cosine", **kwargs):
        self._init_conv(filters, kernel_size, strides, padding, dilation_rate)
        super().__init__(magnitude="sphere", angular=angular, **kwargs)

    def get_config(self):
        return _sphere_config({**super().get_config(), **self._conv_config()})


@keras.saving.register_keras_serializable(package="sphere_tf")
class SphereDense(_DenseGeometry, _HypersphericalOperator):
    """Hyperspherical fully connected layer  F_s(w, x) = g(θ_(w,x)) + b   [S §2.4].

    Arguments as `SphereConv2D` with `units` for `filters`.

    Example:

    >>> SphereDense(4, angular="sigmoid")(keras.random.normal((3, 5))).shape
    (3, 4)
    """

    def __init__(self, units, angular="cosine", **kwargs):
        self._init_dense(units)
        super().__init__(magnitude="sphere", angular=angular, **kwargs)

    def get_config(self):
        return _sphere_config({**super().get_config(), "units": self.units})
