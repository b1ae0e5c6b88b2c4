"""Orthogonal Over-Parameterized Training (OPT) layers.

Liu, Lin, Liu, Yu, Yu, Weller, Rehg, Song, Schölkopf, "Orthogonal
Over-Parameterized Training", CVPR 2021 (arXiv:2004.04690), and W. Liu's PhD
thesis (2020), Chapter 7; the authors' code is wy1iu/OPT. Citation keys:
``[T-7.1]`` is thesis equation or section 7.1, ``[T-F.5]`` thesis Appendix F.5.

A layer's neurons (columns of the flattened kernel) are over-parameterised as

```
W = R·V,   V ∈ R^{d×n} fixed (random, never trained),   R ∈ R^{d×d} orthogonal, learned  [T-7.1]
```

so training only rotates the random neurons jointly and their hyperspherical
energy is unchanged, ``E({R v̂_i}) = E({v̂_i})``  [T-7.2].  For a Conv2D kernel
``(kh, kw, C_in, C_out)`` the flattening is Keras' (and the original TF code's)
row-major HWIO one: d = kh·kw·C_in, n = C_out.

`orthogonalization` chooses how R is produced from its raw trainable matrix P
(the maps live in `sphere_tf.ops.orthogonal`):

| value           | R                                   | raw P init (upstream) |
|-----------------|-------------------------------------|-----------------------|
| 'cayley' (default) | (I + S)(I − S)⁻¹, S = triu(P) − triu(P)ᵀ; W = R·V by one solve | N(0, 1)    |
| 'gram_schmidt'  | row Gram-Schmidt of P (QR, sign-fixed) | N(0, 1)            |
| 'householder'   | Householder Q of P                  | N(0, 1)               |
| 'lowdin'        | polar factor of P (SVD or Newton–Schulz) | N(0, 1)          |
| 'exp'           | expm(S)                             | N(0, 1)               |
| 'ogd'           | P itself, kept orthogonal by `sphere_tf.optimizers.CayleySGD` | I |
| 'soft'          | P itself, penalty β‖PᵀP − I‖_F (β = 0.1, unsquared, as upstream) | N(0, 1) |

Variants from the thesis and the original code:

* **Refined V** [T-7.3.7]: `normalize_fixed_kernel=True` rescales every neuron of V
  to unit norm once; `energy_init='mhe'|'half_space_mhe'` first runs
  `energy_init_steps` projected gradient steps on the hyperspherical energy of V
  from the layer's seed, keeping each neuron's norm (`sphere_tf.initializers`).
* **PE-OPT** [T-F.5]: `num_blocks=k` makes R block diagonal with k blocks of size
  d/k, splitting each neuron along the *input channels* (C_in/k channels per
  group, all kh·kw positions); `share_blocks=True` uses one block for all (R_s,
  d²/k² parameters), otherwise independent blocks (R_u, d²/k). The row
  permutation this needs is in `sphere_tf.ops.rotation`.
* **S-OPT** (wy1iu/OPT `sopt_gs`): `stochastic_dims=m` learns an m×m R̃ on a
  random subset I of m of the d rows, ``W = V`` except ``W[I] = Orth(R̃)·V[I]``.
  `start_episode()` merges (V ← W), re-initialises R̃ to the identity and samples a
  new I; `sphere_tf.callbacks.SOPTEpisodes` calls it every episode.
  Note: the original declares R̃ as (k·k·10)² while sampling k·k·16 rows (a shape
  mismatch) and resets every variable in the layer's scope (BN included) at each
  episode; here R̃ and I always have the same size m and only R̃ is reset.

After training, `fold()` / `sphere_tf.export.fold_opt_model` multiply ``W = R·V`` out
into a plain `Conv2D` / `Dense`, so inference costs nothing extra [T-7.4.1].

Upstream numerics (wy1iu/OPT): V ~ N(0, 2/fan_in) (He, untruncated), raw R ~ N(0, 1);
OGD starts at R = I.  Orthogonalisation runs in float32 under any dtype policy and
``R·V`` is cast to the compute dtype for the convolution / matmul.
"""

import contextlib
import inspect

import keras
import numpy as np
from keras import ops

from sphere_tf import initializers
from sphere_tf import saving
from sphere_tf import validation
from sphere_tf.ops import conv_geometry
from sphere_tf.ops import orthogonal
from sphere_tf.ops import rotation as rotation_lib
from sphere_tf.optimizers.routing import OGD_VARIABLE_NAME
from sphere_tf.walk import find_layers

ORTHOGONALIZATIONS = tuple(sorted(orthogonal.ORTHOGONALIZATION_FNS)) + ("ogd", "soft")
ENERGY_INITS = initializers.ENERGY_INITS
# Upstream soft-OPT coefficient: 0.1·‖RRᵀ − I‖_F (wy1iu/OPT, opt_or).
DEFAULT_SOFT_PENALTY = 0.1
# Energy pre-processing defaults ([T-7.5.3]: 5k iterations; step size not given).
DEFAULT_ENERGY_INIT_STEPS = 5000
DEFAULT_ENERGY_INIT_LR = 1.0
# MHE default power s = 2 (thesis Chapter 5).
DEFAULT_ENERGY_POWER = 2.0


def _fixed_kernel_initializer(seed):
    # N(0, sqrt(2 / fan_in)), untruncated: the original code's initialiser for V.
    return keras.initializers.VarianceScaling(
        scale=2.0, mode="fan_in", distribution="untruncated_normal", seed=seed
    )


def _identity_initializer(shape, dtype=None):
    return orthogonal.identity_blocks(shape, dtype or "float32")


class _RotationPenalty:
    """Regulariser of the raw rotation: optional soft-OPT penalty plus a user regulariser."""

    def __init__(self, beta, squared, extra):
        self.beta, self.squared, self.extra = beta, squared, extra

    def __call__(self, x):
        loss = ops.zeros((), "float32")
        if self.beta:
            loss = loss + self.beta * orthogonal.orthogonality_penalty(x, squared=self.squared)
        if self.extra is not None:
            loss = loss + ops.cast(self.extra(x), "float32")
        return loss


class OPTLayer(keras.layers.Layer):
    """Base of `OPTConv2D` and `OPTDense`: the rotation, V and their product ``W = R·V``.

    Not registered for serialization and not meant to be built directly; use it
    to recognise OPT layers (`isinstance(layer, OPTLayer)`). Subclasses provide
    `_units`, `_spatial_size()`, `_kernel_shape(input_shape)`, `_linear(inputs,
    kernel)`, `_plain_layer_class`, `_plain_config()` and `_plain_build_shape()`.
    The arguments are documented on `OPTConv2D`.
    """

    def __init__(
        self,
        orthogonalization="cayley",
        activation=None,
        use_bias=True,
        fixed_kernel_initializer=None,
        rotation_initializer=None,
        bias_initializer="zeros",
        rotation_regularizer=None,
        bias_regularizer=None,
        num_blocks=1,
        share_blocks=False,
        stochastic_dims=None,
        newton_schulz_iters=None,
        soft_penalty=DEFAULT_SOFT_PENALTY,
        soft_squared=False,
        normalize_fixed_kernel=False,
        learnable_fixed_kernel=False,
        energy_init=None,
        energy_init_steps=DEFAULT_ENERGY_INIT_STEPS,
        energy_init_lr=DEFAULT_ENERGY_INIT_LR,
        energy_power=DEFAULT_ENERGY_POWER,
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.orthogonalization = validation.one_of(orthogonalization, "orthogonalization", ORTHOGONALIZATIONS)
        self._orth_fn = orthogonal.ORTHOGONALIZATION_FNS.get(orthogonalization)
        # R·v straight from the raw matrix where the map has such a product (Cayley: one solve, no d×d R).
        self._direct_product = orthogonal.ORTHOGONAL_PRODUCT_FNS.get(orthogonalization)
        self.activation = validation.keras_object(
            keras.activations.get, activation, "activation", "activation")
        self.use_bias = validation.boolean(use_bias, "use_bias")
        self.seed = validation.integer(seed, "seed", minimum=0, allow_none=True, maximum=validation.MAX_INT32)
        self.fixed_kernel_initializer = validation.keras_object(
            keras.initializers.get,
            _fixed_kernel_initializer(self.seed) if fixed_kernel_initializer is None else fixed_kernel_initializer,
            "fixed_kernel_initializer", "initializer")
        self.rotation_initializer = None if rotation_initializer is None else validation.keras_object(
            keras.initializers.get, rotation_initializer, "rotation_initializer", "initializer")
        self.bias_initializer = validation.keras_object(
            keras.initializers.get, bias_initializer, "bias_initializer", "initializer")
        self.rotation_regularizer = validation.keras_object(
            keras.regularizers.get, rotation_regularizer, "rotation_regularizer", "regularizer")
        self.bias_regularizer = validation.keras_object(
            keras.regularizers.get, bias_regularizer, "bias_regularizer", "regularizer")
        self.num_blocks = validation.positive_int(num_blocks, "num_blocks", maximum=validation.MAX_INT32)
        self.share_blocks = validation.boolean(share_blocks, "share_blocks")
        self.stochastic_dims = validation.positive_int(
            stochastic_dims, "stochastic_dims", allow_none=True, maximum=validation.MAX_INT32)
        if self.stochastic_dims is not None and self.num_blocks != 1:
            raise validation.invalid_argument(
                "stochastic_dims", f"None when PE-OPT blocks are used (num_blocks={self.num_blocks})", stochastic_dims
            )
        self.newton_schulz_iters = validation.positive_int(
            newton_schulz_iters, "newton_schulz_iters", allow_none=True, maximum=validation.MAX_INT32)
        if self.newton_schulz_iters is not None and orthogonalization != "lowdin":
            raise validation.invalid_argument(
                "newton_schulz_iters", "None unless orthogonalization='lowdin'", newton_schulz_iters
            )
        self.soft_penalty = validation.non_negative_float(soft_penalty, "soft_penalty")
        self.soft_squared = validation.boolean(soft_squared, "soft_squared")
        self.normalize_fixed_kernel = validation.boolean(normalize_fixed_kernel, "normalize_fixed_kernel")
        self.learnable_fixed_kernel = validation.one_of(learnable_fixed_kernel, "learnable_fixed_kernel",
                                                        (True, False))
        self.energy_init = validation.one_of(energy_init, "energy_init", (None,) + ENERGY_INITS)
        self.energy_init_steps = validation.positive_int(
            energy_init_steps, "energy_init_steps", maximum=validation.MAX_INT32)
        self.energy_init_lr = validation.positive_float(energy_init_lr, "energy_init_lr")
        self.energy_power = validation.non_negative_float(energy_power, "energy_power")

    # ---------------------------------------------------------------- build
    def _raw_rotation_shape(self, d):
        if self.stochastic_dims is not None:
            if self.stochastic_dims > d:
                raise validation.invalid_argument(
                    "stochastic_dims", f"at most the neuron dimension d={d}", self.stochastic_dims
                )
            return (self.stochastic_dims, self.stochastic_dims)
        if self.num_blocks == 1:
            return (d, d)
        in_channels = d // self._spatial_size()
        if in_channels % self.num_blocks:
            raise validation.invalid_argument(
                "num_blocks", f"a divisor of the {in_channels} input channels", self.num_blocks
            )
        b = d // self.num_blocks
        return (b, b) if self.share_blocks else (self.num_blocks, b, b)

    def build(self, input_shape):
        kernel_shape = self._kernel_shape(input_shape)
        self._d = int(np.prod(kernel_shape[:-1]))
        rotation_shape = self._raw_rotation_shape(self._d)
        with validation.argument_errors("fixed_kernel_initializer"):
            self.fixed_kernel = self.add_weight(
                name="fixed_kernel", shape=kernel_shape, initializer=self._fixed_kernel_init(kernel_shape),
                trainable=self.learnable_fixed_kernel,
            )
        if self.rotation_initializer is not None:
            rotation_init = self.rotation_initializer
        elif self.orthogonalization == "ogd" or self.stochastic_dims is not None:
            rotation_init = _identity_initializer
        else:
            # Offset the seed: V and P must not be drawn from the same stream.
            seed = None if self.seed is None else self.seed + 1
            rotation_init = keras.initializers.RandomNormal(0.0, 1.0, seed=seed)
        beta = self.soft_penalty if self.orthogonalization == "soft" else 0.0
        regularizer = None
        if beta or self.rotation_regularizer is not None:
            regularizer = _RotationPenalty(beta, self.soft_squared, self.rotation_regularizer)
        # A given `rotation_initializer` that cannot fill the rotation's shape is named (not the package's own).
        with (validation.argument_errors("rotation_initializer") if self.rotation_initializer is not None
              else contextlib.nullcontext()):
            self.rotation_param = self.add_weight(
                name=OGD_VARIABLE_NAME if self.orthogonalization == "ogd" else "rotation",
                shape=rotation_shape,
                initializer=rotation_init,
                regularizer=regularizer,
            )
        if self.stochastic_dims is not None:
            rng = np.random.default_rng(self.seed)
            self.stochastic_indices = self.add_weight(
                name="stochastic_indices",
                shape=(self.stochastic_dims,),
                dtype="int32",
                initializer=keras.initializers.Constant(rotation_lib.sample_rows(rng, self._d, self.stochastic_dims)),
                trainable=False,
            )
        if self.use_bias:
            with validation.argument_errors("bias_initializer"):
                self.bias = self.add_weight(
                    name="bias", shape=(self._units,), initializer=self.bias_initializer,
                    regularizer=self.bias_regularizer,
                )
        else:
            self.bias = None

    def _fixed_kernel_init(self, kernel_shape):
        """Initialiser of V: the plain one, or its refinement [T-7.3.7] computed now."""
        if self.energy_init is None and not self.normalize_fixed_kernel:
            return self.fixed_kernel_initializer
        return initializers.refined_initializer(
            self.fixed_kernel_initializer,
            kernel_shape,
            energy_init=self.energy_init,
            steps=self.energy_init_steps,
            lr=self.energy_init_lr,
            power=self.energy_power,
            normalize=self.normalize_fixed_kernel,
        )

    # ---------------------------------------------------------------- maths
    def _raw_rotation(self):
        return ops.cast(ops.convert_to_tensor(self.rotation_param), "float32")

    def rotation_blocks(self):
        """The orthogonal matrix (or blocks) applied in the forward pass, float32.

        Shape ``(d, d)``; ``(m, m)`` with S-OPT; ``(b, b)`` for shared and
        ``(k, b, b)`` for independent PE-OPT blocks (b = d/k, rows in the
        channel-group order of `sphere_tf.ops.rotation.rotate_channel_groups`).
        """
        p = self._raw_rotation()
        if self._orth_fn is None:  # 'ogd' and 'soft' use the raw matrix.
            return p
        if self.orthogonalization == "lowdin":
            return orthogonal.lowdin(p, newton_schulz_iters=self.newton_schulz_iters)
        return self._orth_fn(p)

    def _rotate(self, v):
        """``R·v`` for a ``(d, c)`` float32 matrix whose rows follow the kernel flattening."""
        if self._direct_product is not None:
            q, product = self._raw_rotation(), self._direct_product
        else:
            q, product = self.rotation_blocks(), ops.matmul
        if self.stochastic_dims is not None:
            return rotation_lib.rotate_rows(q, v, self.stochastic_indices, product)
        if self.num_blocks == 1:
            return product(q, v)
        return rotation_lib.rotate_channel_groups(q, v, self.num_blocks, self._spatial_size(), product)

    def rotation(self):
        """The full ``(d, d)`` orthogonal matrix R with ``W = R·V`` (float32).

        For PE-OPT this is the block-diagonal matrix expressed in the Keras row
        order, for S-OPT the identity with Orth(R̃) on the sampled rows.
        """
        return self._rotate(ops.eye(self._d, dtype="float32"))

    def _fixed_matrix(self):
        return ops.reshape(ops.cast(ops.convert_to_tensor(self.fixed_kernel), "float32"), (self._d, self._units))

    def effective_kernel(self):
        """``W = R·V`` in the layer's kernel shape, float32."""
        return ops.reshape(self._rotate(self._fixed_matrix()), self.fixed_kernel.shape)

    def call(self, inputs):
        # Integer inputs (uint8 pixels) in the layer's float dtype, as the operator layers take them.
        if not keras.backend.is_float_dtype(inputs.dtype):
            inputs = ops.cast(inputs, self.compute_dtype)
        output_shape = self.compute_output_shape(tuple(inputs.shape))  # an input smaller than the window: named
        if inputs.shape[0] == 0:
            # An empty batch: no orthogonalisation to pay for, and TensorFlow 2.21's oneDNN convolution returns its
            # input for one instead of an empty output (tensorflow/tensorflow PR 112639).
            return ops.zeros(output_shape, self.compute_dtype)
        kernel = ops.cast(self.effective_kernel(), self.compute_dtype)
        outputs = self._linear(inputs, kernel)
        if self.use_bias:
            outputs = outputs + ops.cast(self.bias, self.compute_dtype)
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs

    # ---------------------------------------------------------------- S-OPT / merging
    def merge_rotation(self):
        """``V ← R·V`` and reset the raw rotation so that R = I; W is unchanged.

        Every orthogonalisation maps the identity raw matrix to R = I (QR and the
        polar factor of I are I, and triu(I) − triu(I)ᵀ = 0).  This is the S-OPT
        episode merge, and the "progressive" OPT of [T-F.8] for the other variants.
        """
        w = self.effective_kernel()
        self.fixed_kernel.assign(w)
        self.rotation_param.assign(orthogonal.identity_blocks(self.rotation_param.shape))

    def resample_stochastic_dims(self, rng=None):
        """Draw a new S-OPT subset of rows (sorted, without replacement)."""
        if self.stochastic_dims is None:
            raise ValueError(f"Layer {self.name!r} is not an S-OPT layer (stochastic_dims=None).")
        rng = rng if rng is not None else np.random.default_rng()
        self.stochastic_indices.assign(rotation_lib.sample_rows(rng, self._d, self.stochastic_dims))

    def start_episode(self, rng=None):
        """S-OPT episode boundary: merge R̃ into V, reset R̃ = I, sample new rows."""
        self.merge_rotation()
        self.resample_stochastic_dims(rng)

    # ---------------------------------------------------------------- folding
    def fold(self):
        """A built plain `Conv2D` / `Dense` whose kernel is W = R·V (same outputs)."""
        layer = self._plain_layer_class.from_config(self._plain_config())
        layer.build(self._plain_build_shape())
        layer.kernel.assign(self.effective_kernel())
        if self.use_bias:
            layer.bias.assign(self.bias)
        return layer

    def _plain_common_config(self):
        return {
            "name": self.name,
            "activation": keras.activations.serialize(self.activation),
            "use_bias": self.use_bias,
            "dtype": self.dtype_policy,
        }

    def get_config(self):
        return {
            **super().get_config(),
            "orthogonalization": self.orthogonalization,
            "activation": keras.activations.serialize(self.activation),
            "use_bias": self.use_bias,
            "fixed_kernel_initializer": keras.initializers.serialize(self.fixed_kernel_initializer),
            "rotation_initializer": (
                None if self.rotation_initializer is None else keras.initializers.serialize(self.rotation_initializer)
            ),
            "bias_initializer": keras.initializers.serialize(self.bias_initializer),
            "rotation_regularizer": keras.regularizers.serialize(self.rotation_regularizer),
            "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer),
            "num_blocks": self.num_blocks,
            "share_blocks": self.share_blocks,
            "stochastic_dims": self.stochastic_dims,
            "newton_schulz_iters": self.newton_schulz_iters,
            "soft_penalty": self.soft_penalty,
            "soft_squared": self.soft_squared,
            "normalize_fixed_kernel": self.normalize_fixed_kernel,
            "learnable_fixed_kernel": self.learnable_fixed_kernel,
            "energy_init": self.energy_init,
            "energy_init_steps": self.energy_init_steps,
            "energy_init_lr": self.energy_init_lr,
            "energy_power": self.energy_power,
            "seed": self.seed,
        }



# The `OPTLayer` options, in order; `OPTConv2D` and `OPTDense` repeat them in their signatures (for help()
# and IDEs) and forward them with `_opt_options(locals())`.
_OPT_OPTIONS = tuple(inspect.signature(OPTLayer.__init__).parameters)[1:-1]


def _opt_options(arguments):
    return {name: arguments[name] for name in _OPT_OPTIONS}


_OPT_ARGS_DOC = """
        orthogonalization: str, one of 'cayley' (default: the cheapest exact map,
            docs/opt.md "Cost of each orthogonalisation"), 'gram_schmidt',
            'householder', 'lowdin', 'exp', 'ogd', 'soft'.
        activation: activation name or callable, or None.
        use_bias: bool.
        fixed_kernel_initializer: initializer of V (default: upstream He normal,
            N(0, 2/fan_in), seeded by `seed`).
        rotation_initializer: initializer of the raw rotation (default: N(0, 1) as
            upstream; identity for 'ogd' and S-OPT).
        bias_initializer: bias initializer.
        rotation_regularizer: regularizer of the raw rotation (e.g. the upstream
            wd 5e-4 is `keras.regularizers.L2(2.5e-4)`).
        bias_regularizer: bias regularizer.
        num_blocks: int >= 1, PE-OPT blocks along the input channels.
        share_blocks: bool, PE-OPT with one shared block (R_s) instead of
            independent ones (R_u).
        stochastic_dims: None or int m, S-OPT on m sampled rows.
        newton_schulz_iters: None or int, 'lowdin' by Newton–Schulz instead of SVD.
        soft_penalty: float >= 0, β of the 'soft' penalty (upstream 0.1).
        soft_squared: bool, squared penalty β‖RᵀR − I‖²_F ([T-7.7]) instead of the
            upstream unsquared norm.
        normalize_fixed_kernel: bool, unit-norm neurons in V [T-7.3.7].
        learnable_fixed_kernel: bool, V trained too (the "FN = N" rows of Table 7.1
            of Liu's thesis, which show that fixing V is better); default False (OPT).
        energy_init: None, 'mhe' or 'half_space_mhe', energy-minimising
            pre-processing of V at build time [T-7.3.7].
        energy_init_steps: int, its number of gradient steps (thesis: 5000).
        energy_init_lr: float > 0, its step size (not given in the sources).
        energy_power: float >= 0, its Riesz power s (MHE default 2).
        seed: None or int, seeds V, the raw rotation and the S-OPT rows.
        **kwargs: base-layer arguments (name, dtype, trainable)."""


@saving.register_serializable()
class OPTConv2D(OPTLayer):
    __doc__ = """2-D convolution trained by Orthogonal Over-Parameterization, ``W = R·V``  [T-7.1].

    ```
    y = conv(x, reshape(R·V, (kh, kw, C_in, C_out))) + b,   RᵀR = I,   V fixed   [T-7.1], [T-7.2]
    ```

    V (`fixed_kernel`, non-trainable, saved with the model) is drawn once from
    N(0, 2/fan_in); only R (through its raw matrix `rotation_param`), the bias and
    the rest of the model train.  See the module docstring for the
    orthogonalisations, PE-OPT, S-OPT and the refined initialisations.

    Args:
        filters: int > 0, number of output channels n.
        kernel_size: int or pair of ints.
        strides: int or pair of ints.
        padding: 'valid' or 'same' (any case).
        dilation_rate: int or pair of ints.""" + _OPT_ARGS_DOC + """

    Input shape:
        4-D tensor ``(batch, rows, cols, C_in)`` (channels_last).

    Output shape:
        4-D tensor ``(batch, new_rows, new_cols, filters)``, as `keras.layers.Conv2D`.

    Raises:
        ValueError: an invalid argument (at construction), or an input smaller than
            the kernel window with 'valid' padding (at build).

    Reference:
        Liu et al., "Orthogonal Over-Parameterized Training", CVPR 2021
        (arXiv:2004.04690); W. Liu, PhD thesis (2020), Chapter 7.

    Example:
        >>> layer = OPTConv2D(8, 3, padding="same", seed=0)
        >>> layer(np.zeros((2, 5, 5, 4), "float32")).shape
        (2, 5, 5, 8)
    """

    _plain_layer_class = keras.layers.Conv2D

    def __init__(
        self,
        filters,
        kernel_size,
        strides=1,
        padding="valid",
        dilation_rate=1,
        orthogonalization="cayley",
        activation=None,
        use_bias=True,
        fixed_kernel_initializer=None,
        rotation_initializer=None,
        bias_initializer="zeros",
        rotation_regularizer=None,
        bias_regularizer=None,
        num_blocks=1,
        share_blocks=False,
        stochastic_dims=None,
        newton_schulz_iters=None,
        soft_penalty=DEFAULT_SOFT_PENALTY,
        soft_squared=False,
        normalize_fixed_kernel=False,
        learnable_fixed_kernel=False,
        energy_init=None,
        energy_init_steps=DEFAULT_ENERGY_INIT_STEPS,
        energy_init_lr=DEFAULT_ENERGY_INIT_LR,
        energy_power=DEFAULT_ENERGY_POWER,
        seed=None,
        **kwargs,
    ):
        super().__init__(**_opt_options(locals()), **kwargs)
        self.filters = validation.positive_int(filters, "filters", maximum=validation.MAX_INT32)
        self.kernel_size = validation.int_pair(kernel_size, "kernel_size")
        self.strides = validation.int_pair(strides, "strides")
        self.dilation_rate = validation.int_pair(dilation_rate, "dilation_rate")
        self.padding = validation.padding(padding)
        if max(self.strides) > 1 and max(self.dilation_rate) > 1:
            raise validation.invalid_argument(
                "strides", f"1 when dilation_rate > 1 (dilation_rate={dilation_rate!r})", strides
            )
        self.input_spec = keras.layers.InputSpec(ndim=4)

    @property
    def _units(self):
        return self.filters

    def _spatial_size(self):
        return self.kernel_size[0] * self.kernel_size[1]

    def _kernel_shape(self, input_shape):
        channels = input_shape[-1]
        if channels is None:
            raise ValueError("The channel dimension of the inputs to `OPTConv2D` must be defined.")
        self.compute_output_shape(input_shape)  # raises when the window does not fit
        self.input_spec = keras.layers.InputSpec(ndim=4, axes={-1: channels})
        return (*self.kernel_size, int(channels), self.filters)

    def _linear(self, inputs, kernel):
        return ops.conv(
            inputs,
            kernel,
            strides=self.strides,
            padding=self.padding,
            data_format="channels_last",
            dilation_rate=self.dilation_rate,
        )

    def compute_output_shape(self, input_shape):
        return conv_geometry.output_shape(
            input_shape, self.filters, self.kernel_size, self.strides, self.padding, self.dilation_rate
        )

    def _plain_build_shape(self):
        return (None, None, None, self.fixed_kernel.shape[-2])

    def _plain_config(self):
        return {
            **self._plain_common_config(),
            "filters": self.filters,
            "kernel_size": self.kernel_size,
            "strides": self.strides,
            "padding": self.padding,
            "dilation_rate": self.dilation_rate,
        }

    def get_config(self):
        return {
            **super().get_config(),
            "filters": self.filters,
            "kernel_size": self.kernel_size,
            "strides": self.strides,
            "padding": self.padding,
            "dilation_rate": self.dilation_rate,
        }


@saving.register_serializable()
class OPTDense(OPTLayer):
    __doc__ = """Dense layer trained by Orthogonal Over-Parameterization, ``W = R·V``  [T-7.1].

    ```
    y = x·(R·V) + b,   R ∈ O(d_in),   V ∈ R^{d_in×units} fixed   [T-7.1]
    ```

    PE-OPT splits the d_in inputs into `num_blocks` contiguous groups.  The thesis
    applies OPT to every hidden layer but not to the final classifier [T-7.3.1].

    Args:
        units: int > 0, output dimension n.""" + _OPT_ARGS_DOC + """

    Input shape:
        N-D tensor ``(..., d_in)``.

    Output shape:
        N-D tensor ``(..., units)``.

    Example:
        >>> layer = OPTDense(4, orthogonalization="cayley", seed=0)
        >>> layer(np.zeros((2, 6), "float32")).shape
        (2, 4)
    """

    _plain_layer_class = keras.layers.Dense

    def __init__(
        self,
        units,
        orthogonalization="cayley",
        activation=None,
        use_bias=True,
        fixed_kernel_initializer=None,
        rotation_initializer=None,
        bias_initializer="zeros",
        rotation_regularizer=None,
        bias_regularizer=None,
        num_blocks=1,
        share_blocks=False,
        stochastic_dims=None,
        newton_schulz_iters=None,
        soft_penalty=DEFAULT_SOFT_PENALTY,
        soft_squared=False,
        normalize_fixed_kernel=False,
        learnable_fixed_kernel=False,
        energy_init=None,
        energy_init_steps=DEFAULT_ENERGY_INIT_STEPS,
        energy_init_lr=DEFAULT_ENERGY_INIT_LR,
        energy_power=DEFAULT_ENERGY_POWER,
        seed=None,
        **kwargs,
    ):
        super().__init__(**_opt_options(locals()), **kwargs)
        self.units = validation.positive_int(units, "units", maximum=validation.MAX_INT32)
        self.input_spec = keras.layers.InputSpec(min_ndim=2)

    @property
    def _units(self):
        return self.units

    def _spatial_size(self):
        return 1

    def _kernel_shape(self, input_shape):
        d = input_shape[-1]
        if d is None:
            raise ValueError("The last dimension of the inputs to `OPTDense` must be defined.")
        self.input_spec = keras.layers.InputSpec(min_ndim=2, axes={-1: d})
        return (int(d), self.units)

    def _linear(self, inputs, kernel):
        return ops.matmul(inputs, kernel)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.units)

    def _plain_build_shape(self):
        return (None, self.fixed_kernel.shape[0])

    def _plain_config(self):
        return {**self._plain_common_config(), "units": self.units}

    def get_config(self):
        return {**super().get_config(), "units": self.units}


def opt_layers(model):
    """All OPT layers of a model or layer (nested models and attribute-held sublayers included)."""
    return find_layers(model, lambda layer: isinstance(layer, OPTLayer))
