"""Hyperspherical (SphereNet) and decoupled (DCNet) convolution and dense layers.

All four public layers compute ``f = h(‖w‖, ‖x‖)·g(θ)`` through
`sphere_tf.ops.response.decoupled_response_from_dot`; they differ only in how a
"patch" is formed (a sliding window for convolutions, the whole vector for dense
layers) and in which arguments they take (SphereConv fixes h to the constant 1).

```
cos θ = (x · ŵ) / ‖x‖,   ŵ = w / sqrt(‖w‖² + ε),   ‖x‖ = sqrt(Σ_patch x² + ε)
```

Numerics follow the authors' TF code (wy1iu/SphereNet `spherenet.py`,
wy1iu/DCNets `dcnet_cifar100/*/architecture.py`):

* ε = 1e-4 inside both square roots;
* the operator radius is ``r = (ρ_raw² + 1e-4) · E{‖x‖}``, ρ_raw a per-output-channel
  variable initialised to √ρ (upstream: ``radius ** 2 + 1e-4`` with ``radius``
  initialised to 1), so the radius is positive by construction;
* E{‖x‖} is the batch mean of the patch norms in training (over the samples whose
  norms are finite), differentiated as upstream differentiates it, and a moving
  average (momentum 0.999) at inference, BN-like; see `DecoupledConv2D` for its
  zero-debiasing and non-finite samples;
* a learnable sigmoid k is ``|k_raw| + 0.05`` per filter (upstream), initialised
  to the paper's 0.5 (Deep Hyperspherical Learning, §2.5);
* kernels start from N(0, 2/fan_in) (upstream; He initialisation).

Layout follows `keras.layers.Conv2D` (`BaseConv`): a private base with the operator
maths and state (`_HypersphericalOperator`), one private subclass per patch geometry
(`_Conv2DOperator`, `_DenseOperator`), and the four public layers, which only spell
out their constructor arguments.
"""

import keras
import numpy as np
from keras import ops

from sphere_tf import saving
from sphere_tf import validation
from sphere_tf.layers import weight_arguments
from sphere_tf.ops import angles
from sphere_tf.ops import angular as angular_lib
from sphere_tf.ops import conv_geometry
from sphere_tf.ops import magnitude as magnitude_lib
from sphere_tf.ops import acceleration
from sphere_tf.ops import operator
from sphere_tf.ops import response

# Upstream constants (see module docstring).
RHO_EPSILON = 1e-4
K_MIN = 0.05
DEFAULT_NORM_MOMENTUM = 0.999
DEFAULT_LEARNABLE_K = 0.5
# Floor under the norms' ε: with epsilon=0 an all-zero patch or kernel still gives a finite
# norm (cos θ = 0) instead of 0/0; 1e-30 is below float32 resolution for any non-zero norm.
_MIN_SQRT_EPSILON = 1e-30
# Constructor arguments of the decoupled layers that the Sphere layers do not take.
_DECOUPLED_ONLY = (
    "magnitude", "alpha", "beta", "rho", "learnable_rho", "weighted", "norm_momentum", "zero_debias",
)


def _upstream_kernel_initializer():
    # N(0, sqrt(2 / fan_in)), not truncated: the authors' conv initialiser.
    return keras.initializers.VarianceScaling(scale=2.0, mode="fan_in", distribution="untruncated_normal")


def _check_beta(beta, magnitude, entry):
    """β of the magnitudes with one ('seg', 'mix': their DCNet default when None); an error for the others."""
    if beta is None:
        return entry.default_beta
    if entry.default_beta is None:
        with_beta = sorted(n for n, m in magnitude_lib.MAGNITUDE_FNS.items() if m.default_beta is not None)
        raise validation.invalid_argument(
            "beta", f"None: magnitude={magnitude!r} has no β (only {with_beta} have one)", beta
        )
    return validation.non_negative_float(beta, "beta")


def _check_angular(angular):
    if not isinstance(angular, str):
        raise validation.invalid_argument(
            "angular",
            f"a registry name (one of {sorted(angular_lib.ANGULAR_FNS)}); register custom functions "
            "with `sphere_tf.ops.angular.register_angular_fn`",
            angular,
        )
    angular_lib.get_angular_fn(angular)  # unknown names fail here, not in call
    return angular


def _reject_decoupled_arguments(cls_name, kwargs):
    """The Sphere layers' answer to a DCNet-only argument (instead of Keras's TypeError)."""
    given = [key for key in _DECOUPLED_ONLY if key in kwargs]
    if given:
        decoupled = cls_name.replace("Sphere", "Decoupled")
        raise ValueError(
            f"Invalid argument for {cls_name}: {', '.join(f'`{k}`' for k in given)}. SphereConv has no "
            f"magnitude function, radius or kernel weighting (its h(‖x‖) is the constant 1); use "
            f"{decoupled}(magnitude=...) for DCNet's decoupled operators ({decoupled}(magnitude='sphere') "
            f"is this layer). Received: {', '.join(f'{k}={kwargs[k]!r}' for k in given)}"
        )


class _HypersphericalOperator(keras.layers.Layer):
    """State and maths shared by the four operator layers (private).

    Subclasses provide `_units`, `_kernel_shape(input_shape)` (which also checks the
    input shape), `_make_input_spec(input_shape)`, `_groups` and
    `_dot_and_patch_sq(inputs, w_hat, need_patch_sq, path)`: ``x·ŵ`` and ``Σ_patch x²``
    per group (last axis `_groups`) of their geometry.
    """

    def __init__(
        self,
        *,
        magnitude,
        angular,
        alpha,
        beta,
        rho,
        learnable_rho,
        weighted,
        k,
        learnable_k,
        learnable_k_init,
        use_bias,
        activation,
        epsilon,
        norm_momentum,
        zero_debias,
        rescale,
        kernel_initializer,
        bias_initializer,
        kernel_regularizer,
        bias_regularizer,
        kernel_constraint,
        bias_constraint,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self._magnitude = magnitude_lib.get_magnitude(magnitude)
        self.magnitude = magnitude
        self.angular = _check_angular(angular)
        self.alpha = validation.positive_float(alpha, "alpha")
        self.beta = _check_beta(beta, magnitude, self._magnitude)
        self.rho = validation.positive_float(rho, "rho")
        self.learnable_rho = validation.boolean(learnable_rho, "learnable_rho")
        self.weighted = validation.one_of(weighted, "weighted", operator.WEIGHTINGS)
        if weighted in operator.NONLINEAR_WEIGHTINGS and magnitude != "tanh":
            raise validation.invalid_argument(
                "weighted",
                f"None or 'linear' with magnitude={magnitude!r} (the nonlinearly weighted operators, "
                "Decoupled Networks eqs. 15-16, are TanhConv's: magnitude='tanh')",
                weighted,
            )
        self.k = validation.positive_float(k, "k")
        self.learnable_k = validation.boolean(learnable_k, "learnable_k")
        if self.learnable_k and angular not in angular_lib.USES_K:
            raise validation.invalid_argument(
                "learnable_k",
                f"False for angular={angular!r} (only {sorted(angular_lib.USES_K)} have a parameter k)",
                learnable_k,
            )
        self.learnable_k_init = validation.real(
            learnable_k_init, "learnable_k_init", low=K_MIN if self.learnable_k else 0.0, low_open=True
        )
        self.use_bias = validation.boolean(use_bias, "use_bias")
        self.activation = validation.keras_object(
            keras.activations.get, activation, "activation", "activation")
        self.epsilon = validation.non_negative_float(epsilon, "epsilon")
        self.norm_momentum = validation.real(norm_momentum, "norm_momentum", low=0.0, high=1.0, high_open=True)
        self.zero_debias = validation.boolean(zero_debias, "zero_debias")
        self.rescale = validation.boolean(rescale, "rescale")
        if kernel_initializer is None:
            kernel_initializer = _upstream_kernel_initializer()
        for name, value in weight_arguments.resolve(
                kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
                kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
                kernel_constraint=kernel_constraint, bias_constraint=bias_constraint).items():
            setattr(self, name, value)

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
    def rescale_folds_into_kernel(self):
        """Whether f is linear in x·ŵ_j for every filter j (cosine g), so a per-filter scale of f is one of ŵ.

        Then ``s_j·f_j(x·ŵ_j) = f_j(x·(s_j ŵ_j))`` exactly: ‖x‖, E{‖x‖}, ρ_j and ‖w_j‖
        do not depend on the scaled kernel. The inference call uses it for `rescale`
        (float32 compute only), and `sphere_tf.export` to fold a following BatchNormalization.
        """
        return self.angular == "cosine"

    @property
    def supports_weight_projection(self):
        """True for standard operators, whose output does not depend on ‖w‖ (Decoupled Networks §4)."""
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
        """Inference estimate of E{‖x‖}: scalar, or one per group of a grouped convolution.

        Zero-debiased (`zero_debias=True`): 1.0 before any training step. Upstream
        (`zero_debias=False`): the raw moving average, 0.0 before any training step.
        """
        biased = ops.cast(self.norm_mean_biased, "float32")
        if not self.zero_debias:
            return biased
        weight = ops.cast(self.norm_mean_weight, "float32")
        return ops.where(weight > 0.0, biased / ops.maximum(weight, 1e-12), 1.0)

    # -- folding for inference (`sphere_tf.layers.folding`) -----------------------------

    def fold_affine(self, scale, shift):
        """A built copy of this layer computing ``scale·F(x) + shift`` per output channel, for inference.

        An operator's part of the folding protocol: a BatchNormalization after the layer
        is, at inference, such a per-channel affine map (scale ``γ/√(σ² + ε)``, shift
        ``β − μ·scale``), and `sphere_tf.export.fold_batch_norm` replaces the pair by
        this copy. The copy has `rescale=True` and no bias: `rescale_scale` is
        ``scale·s_old`` and `rescale_shift` ``scale·(t_old + b) + shift`` (this layer's
        own rescale and bias merged in); its inference call multiplies the scale into
        the normalised kernel (`rescale_folds_into_kernel`), so nothing of the affine
        map is left in the served graph.

        Args:
            scale: array of shape `(units,)`.
            shift: array of shape `(units,)`.

        Returns:
            A built layer of this class with the same name and config (but `rescale`, `use_bias`).

        Raises:
            ValueError: the layer is unbuilt, has an activation (the map would follow it) or a
                response that is not linear in x·ŵ (`rescale_folds_into_kernel` is False).
        """
        units = (self._units,)
        if not self.built or not self.rescale_folds_into_kernel or self.activation not in (
            None, keras.activations.linear
        ):
            raise ValueError(
                f"Layer {self.name!r} cannot fold a per-channel affine map: expected a built layer with a cosine "
                f"angular function and no activation. Received: built={self.built}, angular={self.angular!r}, "
                f"activation={keras.activations.serialize(self.activation)!r}."
            )
        scale = np.broadcast_to(np.asarray(scale, np.float64), units)
        shift = np.broadcast_to(np.asarray(shift, np.float64), units)
        old_scale = self.rescale_scale.numpy() if self.rescale else 1.0
        old_shift = self.rescale_shift.numpy() if self.rescale else 0.0
        bias = self.bias.numpy() if self.use_bias else 0.0
        # scale·(s_old·F + t_old + b) + shift = (scale·s_old)·F + scale·(t_old + b) + shift.
        values = {w.name: w.numpy() for w in self.weights if w.name not in ("bias", "rescale_scale", "rescale_shift")}
        values["rescale_scale"] = (scale * old_scale).astype(np.float32)
        values["rescale_shift"] = (scale * (old_shift + bias) + shift).astype(np.float32)
        folded = self.__class__.from_config(dict(self.get_config(), rescale=True, use_bias=False))
        folded.build_from_config(self.get_build_config())
        for weight in folded.weights:
            weight.assign(values[weight.name])
        return folded

    # -- Keras API ----------------------------------------------------------------------

    def build(self, input_shape):
        units = self._units
        # Creation order fixes the order of the variables in `.keras` files: keep it.
        kernel_shape = self._kernel_shape(input_shape)  # checks the input's shape: its errors name the shape
        with validation.argument_errors("kernel_initializer"):
            self.kernel = self.add_weight(
                name="kernel",
                shape=kernel_shape,
                initializer=self.kernel_initializer,
                regularizer=self.kernel_regularizer,
                constraint=self.kernel_constraint,
                autocast=False,  # the kernel is normalised in float32
            )
        if self.has_radius:
            self.rho_raw = self.add_weight(
                name="rho",
                shape=(units,),
                initializer=keras.initializers.Constant(self.rho**0.5),
                trainable=self.learnable_rho,
                autocast=False,
            )
            # E{‖x‖} per group (a scalar for ungrouped operators): biased moving average and
            # its debiasing weight 1 − m^t.
            stat_shape = () if self._groups == 1 else (self._groups,)
            self.norm_mean_biased = self.add_weight(
                name="norm_mean_biased", shape=stat_shape, initializer="zeros", trainable=False,
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
            with validation.argument_errors("bias_initializer"):
                self.bias = self.add_weight(
                    name="bias", shape=(units,), initializer=self.bias_initializer,
                    regularizer=self.bias_regularizer, constraint=self.bias_constraint, autocast=False,
                )
        if self.rescale:
            self.rescale_scale = self.add_weight(
                name="rescale_scale", shape=(units,), initializer="ones", autocast=False
            )
            self.rescale_shift = self.add_weight(
                name="rescale_shift", shape=(units,), initializer="zeros", autocast=False
            )
        if self.has_radius:
            # Training batches whose E{‖x‖} was not finite, left out of the moving average
            # (`_norm_mean_for`). Created last: files saved before it existed load (`load_own_variables`).
            self.norm_mean_skipped = self.add_weight(
                name="norm_mean_skipped", shape=(), initializer="zeros", trainable=False,
                autocast=False, aggregation="mean",
            )
        self.input_spec = self._make_input_spec(input_shape)

    def load_own_variables(self, store):
        # A `.keras` / `.weights.h5` file written before `norm_mean_skipped` existed lacks only that
        # last variable: load the others and keep the count at zero.
        variables = self._trainable_variables + self._non_trainable_variables
        if self.has_radius and len(store.keys()) == len(variables) - 1 and variables[-1] is self.norm_mean_skipped:
            for i, variable in enumerate(variables[:-1]):
                variable.assign(store[f"{i}"])
            return
        super().load_own_variables(store)

    # Whether this layer's training calls may take an accelerator's fused paths (for TensorFlow: compiled
    # kernels, XLA clusters; `sphere_tf.ops.set_training_fusion` is the global switch); False pins it to
    # the accelerator's plain path.
    _use_training_fusion = True

    def call(self, inputs, training=None):
        # Integer inputs (uint8 pixels) in the layer's float dtype: Keras's autocast converts float inputs only,
        # and a backend's conv of int32 by float32 fails inside the op.
        if not keras.backend.is_float_dtype(inputs.dtype):
            inputs = ops.cast(inputs, self.compute_dtype)
        w_hat, w_norm = angles.normalize_kernel(self.kernel, self._sqrt_epsilon)
        need_norm = not response.norm_cancels(self._magnitude, self.angular, self.weighted)
        # The hot path's implementation (the keras.ops reference, or the backend's accelerator), chosen once.
        path = acceleration.layer_path(training, fusion=self._use_training_fusion)
        # At inference a per-filter rescale of a response linear in x·ŵ rides on the kernel:
        # (ŵ_j·s_j)·x instead of one more full-size multiply (what `export_model`'s BN folding relies on).
        # Only in float32: a float16 conv of x with s_j·ŵ_j overflows where x·ŵ_j (≤ ‖x‖) does not.
        scale_in_kernel = (path.inference and self.rescale and self.rescale_folds_into_kernel
                           and self.compute_dtype == "float32")
        w_conv = w_hat * ops.cast(self.rescale_scale, "float32") if scale_in_kernel else w_hat
        dot, x_sq = self._dot_and_patch_sq(
            inputs, ops.cast(w_conv, self.compute_dtype), need_patch_sq=need_norm, path=path
        )
        dot = ops.cast(dot, "float32")
        # Everything of ‖x‖ alone lives on a one-channel (one per group) tensor.
        x_norm = ops.sqrt(x_sq + self._sqrt_epsilon) if need_norm else None
        norm_mean = self._norm_mean_for(x_norm, training) if self.has_radius else None
        return self._finish(self._response(dot, x_norm, w_norm, norm_mean, path), scale_applied=scale_in_kernel)

    def _response(self, dot, x_norm, w_norm, norm_mean, path):
        """f from ``x·ŵ`` and ‖x‖ (last axis: one per group), float32.

        A grouped operator is `groups` operators side by side, each with its own ‖x‖
        and E{‖x‖}: sliced per group, every tensor keeps the one-channel layout of the
        hot path (`response.decoupled_response_from_dot`).
        """
        rho, k = self.effective_rho(), self.effective_k()
        groups = self._groups
        if groups == 1:
            return self._group_response(dot, x_norm, w_norm, rho, k, norm_mean, path)
        per_group = self._units // groups
        outs = []
        for g in range(groups):
            sl = slice(g * per_group, (g + 1) * per_group)
            outs.append(self._group_response(
                dot[..., sl],
                None if x_norm is None else x_norm[..., g : g + 1],
                w_norm[sl],
                None if rho is None else rho[sl],
                k[sl] if self.learnable_k else k,
                None if norm_mean is None else norm_mean[g],
                path,
            ))
        return ops.concatenate(outs, axis=-1)

    def _group_response(self, dot, x_norm, w_norm, rho, k, norm_mean, path):
        return response.decoupled_response_from_dot(
            dot, x_norm, None if x_norm is None else 1.0 / x_norm, w_norm,
            magnitude=self._magnitude, angular=self.angular, alpha=self.alpha, beta=self.beta,
            radius=None if rho is None else rho * norm_mean, k=k, weighted=self.weighted,
            weight_radius=rho, path=path,
        )

    def _finish(self, out, scale_applied=False):
        """Rescale, bias, activation (float32), then the compute dtype; `scale_applied`: the scale rode on ŵ."""
        if self.rescale:
            out = (out if scale_applied else out * self.rescale_scale) + self.rescale_shift
        if self.use_bias:
            out = out + self.bias
        if self.activation is not None:
            out = self.activation(out)
        return ops.cast(out, self.compute_dtype)

    def _norm_mean_for(self, x_norm, training):
        """E{‖x‖}: the batch mean in training (updating the moving average), else the average.

        The batch mean is differentiated, as in the authors' graph (wy1iu/DCNets
        `architecture.py`: the training branch returns the batch mean itself), so
        the input gradient carries the term through E{‖x‖}.

        The batch mean is taken over the finite samples only (`_finite_sample_mean`),
        so a NaN or inf sample does not reach the other samples' outputs. A batch
        with no finite sample has a NaN mean: it is left out of the moving average and
        of its debiasing weight, which keep their values, and counted in
        `norm_mean_skipped`; it would otherwise make every later inference output NaN.
        With `ops.where`, not Python control flow, so it holds inside compiled train steps.
        """
        if not training:
            return self.norm_mean()
        batch_mean = self._finite_sample_mean(x_norm)  # (groups,)
        if self._groups == 1:
            batch_mean = ops.reshape(batch_mean, ())
        m = self.norm_momentum
        statistic = ops.stop_gradient(batch_mean)
        finite = ops.all(ops.isfinite(statistic))
        biased, weight = ops.convert_to_tensor(self.norm_mean_biased), ops.convert_to_tensor(self.norm_mean_weight)
        self.norm_mean_biased.assign(ops.where(finite, m * biased + (1.0 - m) * statistic, biased))
        self.norm_mean_weight.assign(ops.where(finite, m * weight + (1.0 - m), weight))
        self.norm_mean_skipped.assign(self.norm_mean_skipped + ops.where(finite, 0.0, 1.0))
        return batch_mean

    @staticmethod
    def _finite_sample_mean(x_norm):
        """Mean patch norm per group `(groups,)` over the samples (axis 0) whose patch norms are all finite.

        A sample with a NaN or inf norm (in any group) is left out of every group's mean,
        so each other sample's output is the one of the batch without it; its own
        outputs stay non-finite. NaN when no sample is finite. In the normal case this
        costs one `isfinite` / `where` / count over the `(batch, groups)` per-sample
        means, next to the reduction of ‖x‖ the plain mean needs anyway.
        """
        within_sample = tuple(range(1, len(x_norm.shape) - 1))  # output positions (conv), inner batch axes (dense)
        per_sample = ops.mean(x_norm, axis=within_sample) if within_sample else x_norm  # (batch, groups)
        finite = ops.all(ops.isfinite(per_sample), axis=-1, keepdims=True)  # (batch, 1)
        count = ops.sum(ops.cast(finite, per_sample.dtype))
        # `where`, not a product with the mask: 0·NaN is NaN, and the gradient of the left-out samples is 0.
        return ops.sum(ops.where(finite, per_sample, 0.0), axis=0) / count

    def _operator_config(self):
        """Arguments of every operator layer."""
        return {
            "angular": self.angular,
            "k": self.k,
            "learnable_k": self.learnable_k,
            "learnable_k_init": self.learnable_k_init,
            "use_bias": self.use_bias,
            "activation": keras.activations.serialize(self.activation),
            "epsilon": self.epsilon,
            "rescale": self.rescale,
            "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
            "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer),
            "kernel_constraint": keras.constraints.serialize(self.kernel_constraint),
            "bias_constraint": keras.constraints.serialize(self.bias_constraint),
        }

    def _decoupled_config(self):
        """Arguments of the decoupled layers only (`_DECOUPLED_ONLY`)."""
        return {
            "magnitude": self.magnitude,
            "alpha": self.alpha,
            "beta": self.beta,
            "rho": self.rho,
            "learnable_rho": self.learnable_rho,
            "weighted": self.weighted,
            "norm_momentum": self.norm_momentum,
            "zero_debias": self.zero_debias,
        }


class _Conv2DOperator(_HypersphericalOperator):
    """Sliding-window patches with `keras.layers.Conv2D` geometry (private)."""

    def __init__(self, filters, kernel_size, strides, padding, data_format, dilation_rate, groups, **kwargs):
        super().__init__(**kwargs)
        self.filters = validation.positive_int(filters, "filters", maximum=validation.MAX_INT32)
        self.kernel_size = validation.int_pair(kernel_size, "kernel_size")
        self.strides = validation.int_pair(strides, "strides")
        self.padding = validation.padding(padding)
        self.data_format = validation.one_of(
            data_format or keras.config.image_data_format(), "data_format", ("channels_last", "channels_first")
        )
        self.dilation_rate = validation.int_pair(dilation_rate, "dilation_rate")
        self.groups = validation.positive_int(groups, "groups", maximum=validation.MAX_INT32)
        if self.filters % self.groups:
            raise validation.invalid_argument(
                "groups", f"a divisor of filters={self.filters}", groups
            )
        if max(self.strides) > 1 and max(self.dilation_rate) > 1:
            raise ValueError(
                "`strides > 1` is not compatible with `dilation_rate > 1`. "
                f"Received: strides={self.strides} and dilation_rate={self.dilation_rate}"
            )

    @property
    def _units(self):
        return self.filters

    @property
    def _groups(self):
        return self.groups

    @property
    def _channel_axis(self):
        return -1 if self.data_format == "channels_last" else 1

    def _nhwc(self, shape):
        shape = tuple(shape)
        return shape if self.data_format == "channels_last" else (shape[0], *shape[2:], shape[1])

    def _kernel_shape(self, input_shape):
        if len(input_shape) != 4:
            raise ValueError(
                f"{type(self).__name__} expects 4-D inputs ({self.data_format}). Received: "
                f"input_shape={tuple(input_shape)}"
            )
        channels = input_shape[self._channel_axis]
        if channels is None:
            raise ValueError(
                f"{type(self).__name__} needs a known channel dimension. Received: input_shape={tuple(input_shape)}"
            )
        if channels % self.groups:
            raise ValueError(
                f"The number of input channels must be evenly divisible by the number of groups. "
                f"Received: groups={self.groups}, but the input has {channels} channels "
                f"(full input shape is {tuple(input_shape)})."
            )
        self.compute_output_shape(input_shape)  # a window larger than the input fails here
        return self.kernel_size + (channels // self.groups, self.filters)

    def _make_input_spec(self, input_shape):
        return keras.layers.InputSpec(ndim=4, axes={self._channel_axis: input_shape[self._channel_axis]})

    def call(self, inputs, training=None):
        # The input spec checks the rank and channels only: a later input smaller than the window would fail
        # inside the backend's conv ("Computed output size would be negative"), without its shape.
        output_shape = self.compute_output_shape(tuple(inputs.shape))
        if inputs.shape[0] == 0:
            # An empty batch: nothing to convolve, and no statistic (E{‖x‖}) is updated from no samples. TensorFlow
            # 2.21's oneDNN convolution returns its input for one instead of an empty output (tensorflow/tensorflow
            # PR 112639), so the backend's conv is not asked.
            return ops.zeros(output_shape, self.compute_dtype)
        if self.data_format == "channels_first":
            out = super().call(ops.transpose(inputs, (0, 2, 3, 1)), training=training)
            return ops.transpose(out, (0, 3, 1, 2))
        return super().call(inputs, training=training)

    def _dot_and_patch_sq(self, inputs, w_hat, need_patch_sq=True, path=acceleration.REFERENCE):
        if self.groups == 1:
            return response.conv_and_patch_squared_norm(
                inputs, w_hat, self.strides, self.padding, self.dilation_rate, need_patch_sq, path
            )
        dot = ops.conv(
            inputs, w_hat, strides=self.strides, padding=self.padding, data_format="channels_last",
            dilation_rate=self.dilation_rate,
        )
        if not need_patch_sq:
            return dot, None
        geometry = (self.kernel_size, self.strides, self.padding, self.dilation_rate)
        return dot, angles.patch_squared_norm(inputs, *geometry, groups=self.groups)

    def compute_output_shape(self, input_shape):
        shape = conv_geometry.output_shape(
            self._nhwc(input_shape), self.filters, self.kernel_size, self.strides, self.padding,
            self.dilation_rate,
        )
        return shape if self.data_format == "channels_last" else (shape[0], shape[3], shape[1], shape[2])

    def _conv_config(self):
        return {
            "filters": self.filters,
            "kernel_size": self.kernel_size,
            "strides": self.strides,
            "padding": self.padding,
            "data_format": self.data_format,
            "dilation_rate": self.dilation_rate,
            "groups": self.groups,
        }


class _DenseOperator(_HypersphericalOperator):
    """The whole input vector (last axis) as the patch (private)."""

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = validation.positive_int(units, "units", maximum=validation.MAX_INT32)

    @property
    def _units(self):
        return self.units

    _groups = 1

    def _kernel_shape(self, input_shape):
        if len(input_shape) < 2 or input_shape[-1] is None:
            raise ValueError(
                f"{type(self).__name__} needs inputs of rank >= 2 with a known last dimension. "
                f"Received: input_shape={tuple(input_shape)}"
            )
        return (input_shape[-1], self.units)

    def _make_input_spec(self, input_shape):
        return keras.layers.InputSpec(min_ndim=2, axes={-1: input_shape[-1]})

    def _dot_and_patch_sq(self, inputs, w_hat, need_patch_sq=True, path=acceleration.REFERENCE):
        del path  # no patch geometry: one vector norm
        x_sq = angles.vector_squared_norm(inputs) if need_patch_sq else None
        return ops.matmul(inputs, w_hat), x_sq

    def compute_output_shape(self, input_shape):
        return tuple(input_shape[:-1]) + (self.units,)


_CONV_ARGS_DOC = """
        filters: int > 0, the number of output channels.
        kernel_size: int or pair of ints, as `keras.layers.Conv2D`.
        strides: int or pair of ints, as `keras.layers.Conv2D`.
        padding: 'valid' or 'same', as `keras.layers.Conv2D`.
        data_format: 'channels_last', 'channels_first' or None (the value of
            `keras.config.image_data_format()`).
        dilation_rate: int or pair of ints, as `keras.layers.Conv2D`.
        groups: int > 0 dividing `filters` and the input channels: a grouped
            operator, each group of `filters // groups` filters sees only its group
            of input channels, so the patch norm ‖x‖ (and E{‖x‖}) is per group."""


@saving.register_serializable()
class DecoupledConv2D(_Conv2DOperator):
    """Decoupled 2-D convolution  f_d(w, x) = h(‖w‖, ‖x‖)·g(θ_(w,x))   [D-3].

    ```
    θ = arccos(ŵᵀx / ‖x‖)                 per output position and filter
    h ∈ {sphere, ball, tanh, linear, seg, log, mix}          [D-4..10]
    g ∈ {linear, cosine, sigmoid, sqcosine}                  [D-11..14]
    r = ρ·E{‖x‖} for ball / tanh / seg                        [D-19..21]
    ```

    Standard operators use the normalised kernel ŵ only, so the output does not
    depend on ‖w‖; `weighted` puts ‖w‖ back (linearly, or eqs. 15/16 for tanh).

    E{‖x‖} is the mean patch norm: the batch mean while training, through which
    the gradient flows as in the authors' graph (wy1iu/DCNets `architecture.py`),
    and an exponential moving average of it (momentum `norm_momentum`) at inference.

    Note:
        The moving average is zero-debiased by default (`zero_debias=True`): it is
        ``b_t / (1 − m^t)`` with ``b_t = m·b_{t−1} + (1 − m)·E_batch``, ``b_0 = 0``,
        so it equals the batch mean after one step and is 1.0 before any. This is a
        deliberate deviation from the authors' code, whose
        `tf.train.ExponentialMovingAverage(0.999)` of the batch-mean tensor keeps a
        shadow that starts at 0 and is not debiased: there, after t steps the
        inference radius is ``(1 − 0.999^t)`` times the data's (250x too small after
        4 steps, still 37 % short after 1000), so a briefly trained or fine-tuned
        model infers with a radius far from the one it trained with.
        `zero_debias=False` reproduces the upstream average exactly: 0.0 before
        any training step, so an untrained layer then infers with a zero radius
        (h saturates: tanh and ball give α, seg gives β‖x‖), as upstream does.
        No option keeps the gradient out of the batch mean: upstream
        differentiates it, and doing so costs one reduction of the one-channel ‖x‖.

    Note:
        The training batch mean ‖x‖ is taken over the samples whose patch norms are
        all finite: a sample with a NaN or inf input (or a float16 overflow) keeps
        its own non-finite outputs, and every other sample's output is the one of
        the batch without it (`keras.layers.BatchNormalization` instead makes the
        whole batch NaN). A batch with no finite sample has no finite mean: it is
        left out of the moving average (and of the debiasing weight), and counted
        in the non-trainable weight `norm_mean_skipped` instead: upstream's average,
        like BatchNormalization's, would keep the NaN and make every later inference
        output NaN. The count is a variable because
        the skip happens inside compiled train steps; the callback
        `sphere_tf.callbacks.WarnOnSkippedNormMean` (added by the classifier runner)
        reads it on the host after each epoch and warns once per layer.

    Args:{conv_args}
        activation: activation applied after the bias / rescale (name or
            callable, `keras.activations.get`); None for none.
        magnitude: str, the magnitude function h (`sphere_tf.ops.magnitude.MAGNITUDE_FNS`).
        angular: str, the angular activation g (`sphere_tf.ops.angular.ANGULAR_FNS`).
        alpha: float > 0, α of h (DCNet default 1).
        beta: float >= 0 or None, β of 'seg' (default 0.5) and 'mix' (default 1).
        rho: float > 0, initial operator radius factor ρ (default 1, as upstream).
        learnable_rho: bool, learn ρ per output channel (upstream: yes).
        weighted: None, 'linear', 'nonlinear' (eq. 15) or 'nonlinear_separate' (eq. 16).
        k: float > 0, the sigmoid parameter (0.3, "a good choice", Deep
            Hyperspherical Learning, Appendix B).
        learnable_k: bool, learn k per filter (sigmoid only).
        learnable_k_init: float > 0.05, initial learnable k (paper: 0.5).
        use_bias: bool, add a per-channel bias (default off; BN usually follows).
        epsilon: float >= 0, inside the norms' square roots (upstream 1e-4).
        norm_momentum: float in [0, 1), momentum of the E{‖x‖} moving average
            (upstream 0.999).
        zero_debias: bool, debias the E{‖x‖} moving average (default; see the note);
            False is the upstream average.
        rescale: bool, learned per-channel affine β·f + γ (rescaled SphereNorm);
            with cosine g the inference call multiplies β into the normalised kernel.
        kernel_initializer: default N(0, 2/fan_in) as upstream.
        bias_initializer, kernel_regularizer, bias_regularizer, kernel_constraint,
        bias_constraint: as `keras.layers.Conv2D`.
        **kwargs: base-layer arguments (`name`, `dtype`, `trainable`, ...).

    Input shape:
        4-D tensor `(batch, rows, cols, channels)` (channels_last) or
        `(batch, channels, rows, cols)` (channels_first).

    Output shape:
        4-D tensor `(batch, new_rows, new_cols, filters)` (or channels first), as
        `keras.layers.Conv2D`.

    Raises:
        ValueError: unknown names, non-positive α/ρ/k, β for a magnitude without
            one, a nonlinear weighting on a magnitude other than tanh, `groups` not
            dividing `filters` or the input channels, or an input smaller than the
            kernel window with 'valid' padding.

    Reference:
        Liu et al., Decoupled Networks, CVPR 2018, https://arxiv.org/abs/1804.08071

    Example:

    >>> layer = DecoupledConv2D(8, 3, padding="same", magnitude="tanh", angular="cosine")
    >>> layer(keras.random.normal((2, 16, 16, 3))).shape
    (2, 16, 16, 8)
    """

    def __init__(
        self,
        filters,
        kernel_size,
        strides=1,
        padding="valid",
        data_format=None,
        dilation_rate=1,
        groups=1,
        activation=None,
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
        zero_debias=True,
        rescale=False,
        kernel_initializer=None,
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        super().__init__(
            filters, kernel_size, strides, padding, data_format, dilation_rate, groups,
            activation=activation, magnitude=magnitude, angular=angular, alpha=alpha, beta=beta, rho=rho,
            learnable_rho=learnable_rho, weighted=weighted, k=k, learnable_k=learnable_k,
            learnable_k_init=learnable_k_init, use_bias=use_bias, epsilon=epsilon,
            norm_momentum=norm_momentum, zero_debias=zero_debias, rescale=rescale,
            kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint, bias_constraint=bias_constraint, **kwargs,
        )

    def get_config(self):
        return {**super().get_config(), **self._decoupled_config(), **self._operator_config(), **self._conv_config()}


@saving.register_serializable()
class DecoupledDense(_DenseOperator):
    """Decoupled fully connected layer  f_d = h(‖w‖, ‖x‖)·g(θ)   [D-3].

    The patch is the whole input vector (the last axis). See `DecoupledConv2D` for
    the operator and the E{‖x‖} moving average (and its zero-debiasing note).

    Args:
        units: int > 0, the output dimension.
        activation, magnitude, angular, alpha, beta, rho, learnable_rho, weighted,
        k, learnable_k, learnable_k_init, use_bias, epsilon, norm_momentum,
        zero_debias, rescale, kernel_initializer, bias_initializer,
        kernel_regularizer, bias_regularizer, kernel_constraint, bias_constraint:
            as `DecoupledConv2D`.
        **kwargs: base-layer arguments (`name`, `dtype`, `trainable`, ...).

    Input shape:
        N-D tensor `(batch, ..., input_dim)`.

    Output shape:
        `(batch, ..., units)`.

    Example:

    >>> DecoupledDense(4, magnitude="ball")(keras.random.normal((3, 5))).shape
    (3, 4)
    """

    def __init__(
        self,
        units,
        activation=None,
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
        zero_debias=True,
        rescale=False,
        kernel_initializer=None,
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        super().__init__(
            units,
            activation=activation, magnitude=magnitude, angular=angular, alpha=alpha, beta=beta, rho=rho,
            learnable_rho=learnable_rho, weighted=weighted, k=k, learnable_k=learnable_k,
            learnable_k_init=learnable_k_init, use_bias=use_bias, epsilon=epsilon,
            norm_momentum=norm_momentum, zero_debias=zero_debias, rescale=rescale,
            kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint, bias_constraint=bias_constraint, **kwargs,
        )

    def get_config(self):
        return {**super().get_config(), **self._decoupled_config(), **self._operator_config(), "units": self.units}


# SphereConv is the decoupled operator with h = 1: no radius, so these never matter.
_SPHERE_FIXED = dict(
    magnitude="sphere", alpha=1.0, beta=None, rho=1.0, learnable_rho=True, weighted=None,
    norm_momentum=DEFAULT_NORM_MOMENTUM, zero_debias=True,
)


@saving.register_serializable()
class SphereConv2D(_Conv2DOperator):
    """Hyperspherical 2-D convolution (SphereNet)  F_s(w, x) = g(θ_(w,x)) + b   [S-1].

    ```
    θ = arccos(wᵀx / (‖w‖‖x‖))                                 [S-6]
    g: linear 1 − 2θ/π [S-2], cosine cos θ [S-3],
       sigmoid tanh((π/2 − θ)/2k)/tanh(π/4k) [S-4], sqcosine c·|c| [D-14]
    ```

    The output lies in [−1, 1] (before `rescale`, bias and activation) and is
    invariant to positive scaling of the kernel and of the input. With
    `rescale=True` the output becomes β·F_s + γ with learned per-channel β, γ
    (rescaled SphereNorm, [T-3.2.5]); SphereNorm itself is cosine SphereConv used
    in place of BatchNorm. SphereConv has no magnitude function: DCNet's
    decoupled operators (`magnitude=...`) are `DecoupledConv2D`.

    Args:{conv_args}
        activation: activation applied after the bias / rescale (name or
            callable); None for none.
        angular: str, 'linear', 'cosine', 'sigmoid' or 'sqcosine'.
        k: float > 0, fixed sigmoid parameter (default 0.3).
        learnable_k: bool, learn k per filter, k = |k_raw| + 0.05 (upstream).
        learnable_k_init: float > 0.05, its initial value (paper: 0.5).
        use_bias: bool (default False: "bias terms are usually left out").
        epsilon: float >= 0, inside the norms' square roots (upstream 1e-4).
        rescale: bool, per-channel learned scale and shift; with cosine g the
            inference call multiplies the scale into the normalised kernel.
        kernel_initializer: default N(0, 2/fan_in) as upstream.
        bias_initializer, kernel_regularizer, bias_regularizer, kernel_constraint,
        bias_constraint: as `keras.layers.Conv2D`.
        **kwargs: base-layer arguments (`name`, `dtype`, `trainable`, ...).

    Input shape:
        4-D tensor `(batch, rows, cols, channels)` (or channels first).

    Output shape:
        4-D tensor `(batch, new_rows, new_cols, filters)` (or channels first).

    Raises:
        ValueError: as `DecoupledConv2D`, and for any DCNet-only argument
            (`magnitude`, `alpha`, `beta`, `rho`, `learnable_rho`, `weighted`,
            `norm_momentum`, `zero_debias`).

    Reference:
        Liu et al., Deep Hyperspherical Learning, NIPS 2017, https://arxiv.org/abs/1711.03189

    Example:

    >>> y = SphereConv2D(4, 3, angular="linear")(keras.random.normal((1, 8, 8, 2)))
    >>> bool(ops.all(ops.abs(y) <= 1.0))
    True
    """

    def __init__(
        self,
        filters,
        kernel_size,
        strides=1,
        padding="valid",
        data_format=None,
        dilation_rate=1,
        groups=1,
        activation=None,
        angular="cosine",
        k=0.3,
        learnable_k=False,
        learnable_k_init=DEFAULT_LEARNABLE_K,
        use_bias=False,
        epsilon=angles.DEFAULT_EPSILON,
        rescale=False,
        kernel_initializer=None,
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        _reject_decoupled_arguments(type(self).__name__, kwargs)
        super().__init__(
            filters, kernel_size, strides, padding, data_format, dilation_rate, groups,
            activation=activation, angular=angular, k=k, learnable_k=learnable_k,
            learnable_k_init=learnable_k_init, use_bias=use_bias, epsilon=epsilon, rescale=rescale,
            kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint, bias_constraint=bias_constraint, **_SPHERE_FIXED, **kwargs,
        )

    def get_config(self):
        return {**super().get_config(), **self._operator_config(), **self._conv_config()}


@saving.register_serializable()
class SphereDense(_DenseOperator):
    """Hyperspherical fully connected layer  F_s(w, x) = g(θ_(w,x)) + b   (Deep Hyperspherical Learning §2.4).

    The patch is the whole input vector (the last axis).

    Args:
        units: int > 0, the output dimension.
        activation, angular, k, learnable_k, learnable_k_init, use_bias, epsilon,
        rescale, kernel_initializer, bias_initializer, kernel_regularizer,
        bias_regularizer, kernel_constraint, bias_constraint: as `SphereConv2D`.
        **kwargs: base-layer arguments (`name`, `dtype`, `trainable`, ...).

    Input shape:
        N-D tensor `(batch, ..., input_dim)`.

    Output shape:
        `(batch, ..., units)`.

    Example:

    >>> SphereDense(4, angular="sigmoid")(keras.random.normal((3, 5))).shape
    (3, 4)
    """

    def __init__(
        self,
        units,
        activation=None,
        angular="cosine",
        k=0.3,
        learnable_k=False,
        learnable_k_init=DEFAULT_LEARNABLE_K,
        use_bias=False,
        epsilon=angles.DEFAULT_EPSILON,
        rescale=False,
        kernel_initializer=None,
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        _reject_decoupled_arguments(type(self).__name__, kwargs)
        super().__init__(
            units,
            activation=activation, angular=angular, k=k, learnable_k=learnable_k,
            learnable_k_init=learnable_k_init, use_bias=use_bias, epsilon=epsilon, rescale=rescale,
            kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
            kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
            kernel_constraint=kernel_constraint, bias_constraint=bias_constraint, **_SPHERE_FIXED, **kwargs,
        )

    def get_config(self):
        return {**super().get_config(), **self._operator_config(), "units": self.units}


for _cls in (DecoupledConv2D, SphereConv2D):
    _cls.__doc__ = _cls.__doc__.replace("{conv_args}", _CONV_ARGS_DOC)
