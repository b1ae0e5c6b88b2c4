"""Orthogonal Over-Parameterized Training (OPT) layers  [T-7.3].

A layer's neurons (columns of the flattened kernel) are over-parameterised as

```
W = R·V,   V ∈ R^{d×n} fixed (random, never trained),   R ∈ R^{d×d} orthogonal, learned  [T-7.1]
```

so training only rotates the random neurons jointly and their hyperspherical
energy is unchanged, ``E({R v̂_i}) = E({v̂_i})``  [T-7.2].  For a Conv2D kernel
``(kh, kw, C_in, C_out)`` the flattening is Keras' (and the original TF code's)
row-major HWIO one: d = kh·kw·C_in, n = C_out.

`orthogonalization` chooses how R is produced from its raw trainable matrix P:

| value           | R                                   | raw P init (upstream) |
|-----------------|-------------------------------------|-----------------------|
| 'gram_schmidt'  | row Gram-Schmidt of P (QR, sign-fixed) | N(0, 1)            |
| 'householder'   | Householder Q of P                  | N(0, 1)               |
| 'lowdin'        | polar factor of P (SVD or Newton–Schulz) | N(0, 1)          |
| 'cayley'        | (I + S)(I − S)⁻¹, S = triu(P) − triu(P)ᵀ | N(0, 1)          |
| 'exp'           | expm(S)                             | N(0, 1)               |
| 'ogd'           | P itself, kept orthogonal by `sphere_tf.optimizers.CayleySGD` | I |
| 'soft'          | P itself, penalty β‖PᵀP − I‖_F (β = 0.1, unsquared, as upstream) | N(0, 1) |

Variants from the thesis and the original code:

* **Refined V** [T-7.3.7]: `normalize_fixed_kernel=True` rescales every neuron of V
  to unit norm once; `energy_init='mhe'|'half_space_mhe'` first runs
  `energy_init_steps` projected gradient steps on the hyperspherical energy of V
  (`sphere_tf.energy.hyperspherical_energy`) from the layer's seed, keeping each
  neuron's norm.
* **PE-OPT** [T-F.5]: `num_blocks=k` makes R block diagonal with k blocks of size
  d/k, splitting each neuron along the *input channels* (C_in/k channels per
  group, all kh·kw positions); `share_blocks=True` uses one block for all (R_s,
  d²/k² parameters), otherwise independent blocks (R_u, d²/k).  Keras' HWIO
  flattening interleaves channels (row index ((h·kw)+w)·C_in + c), so the rows are
  permuted to (group, h, w, channel-in-group) before the block product and back.
* **S-OPT** (CVPR'21 code `sopt_gs`): `stochastic_dims=m` learns an m×m R̃ on a
  random subset I of m of the d rows, ``W = V`` except ``W[I] = Orth(R̃)·V[I]``.
  `start_episode()` merges (V ← W), re-initialises R̃ to the identity and samples a
  new I; `sphere_tf.callbacks.SOPTEpisodes` calls it every episode.
  Note: the original declares R̃ as (k·k·10)² while sampling k·k·16 rows (a shape
  mismatch) and resets every variable in the layer's scope (BN included) at each
  episode; here R̃ and I always have the same size m and only R̃ is reset.

After training, `fold()` / `sphere_tf.layers.fold_opt_model` multiply ``W = R·V`` out
into a plain `Conv2D` / `Dense`, so inference costs nothing extra [T-7.4.1].

Upstream numerics (wy1iu/OPT): V ~ N(0, 2/fan_in) (He, untruncated), raw R ~ N(0, 1);
OGD starts at R = I.  Orthogonalisation runs in float32 under any dtype policy and
``R·V`` is cast to the compute dtype for the convolution / matmul.
"""

import concurrent.futures

import keras
import numpy as np
import tensorflow as tf
from keras import ops

from sphere_tf.layers import _validation
from sphere_tf.ops import orthogonal

ORTHOGONALIZATIONS = tuple(sorted(orthogonal.ORTHOGONALIZATION_FNS)) + ("ogd", "soft")
ENERGY_INITS = ("mhe", "half_space_mhe")
# Name of the raw rotation variable of 'ogd' layers; `sphere_tf.optimizers.OPTOptimizer`
# routes variables with this name to its Cayley-SGD rotation optimizer.
OGD_VARIABLE_NAME = "ogd_rotation"
# Upstream soft-OPT coefficient: 0.1·‖RRᵀ − I‖_F (wy1iu/OPT, opt_or).
DEFAULT_SOFT_PENALTY = 0.1
# Energy pre-processing defaults ([T-7.5.3]: 5k iterations; step size not given).
DEFAULT_ENERGY_INIT_STEPS = 5000
DEFAULT_ENERGY_INIT_LR = 1.0
# MHE default power s = 2 [T-5].
DEFAULT_ENERGY_POWER = 2.0


def _fixed_kernel_initializer(seed):
    # N(0, sqrt(2 / fan_in)), untruncated: the original code's initialiser for V.
    return keras.initializers.VarianceScaling(
        scale=2.0, mode="fan_in", distribution="untruncated_normal", seed=seed
    )


def _check_non_negative_float(value, name):
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0 or not np.isfinite(value):
        raise ValueError(
            f"Invalid value for argument `{name}`: expected a finite float >= 0. Received: {name}={value!r}"
        )
    return float(value)


def _identity_initializer(shape, dtype=None):
    eye = ops.eye(shape[-1], dtype=dtype or "float32")
    return ops.broadcast_to(eye, shape)


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


class _OPTLayer(keras.layers.Layer):
    """State and maths shared by `OPTConv2D` and `OPTDense` (private).

    Subclasses provide `_units`, `_spatial_size()`, `_kernel_shape(input_shape)`,
    `_linear(inputs, kernel)`, `_plain_layer_class` and `_plain_config()`.
    """

    def __init__(
        self,
        orthogonalization="gram_schmidt",
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
        energy_init=None,
        energy_init_steps=DEFAULT_ENERGY_INIT_STEPS,
        energy_init_lr=DEFAULT_ENERGY_INIT_LR,
        energy_power=DEFAULT_ENERGY_POWER,
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if orthogonalization not in ORTHOGONALIZATIONS:
            raise ValueError(
                f"Invalid value for argument `orthogonalization`: expected one of {list(ORTHOGONALIZATIONS)}. "
                f"Received: orthogonalization={orthogonalization!r}"
            )
        self.orthogonalization = orthogonalization
        self._orth_fn = orthogonal.ORTHOGONALIZATION_FNS.get(orthogonalization)
        self.activation = keras.activations.get(activation)
        self.use_bias = bool(use_bias)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise ValueError(f"Invalid value for argument `seed`: expected an int or None. Received: seed={seed!r}")
        self.seed = None if seed is None else int(seed)
        self.fixed_kernel_initializer = keras.initializers.get(
            fixed_kernel_initializer or _fixed_kernel_initializer(self.seed)
        )
        self.rotation_initializer = (
            None if rotation_initializer is None else keras.initializers.get(rotation_initializer)
        )
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.rotation_regularizer = keras.regularizers.get(rotation_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.num_blocks = _validation.positive_int(num_blocks, "num_blocks")
        self.share_blocks = bool(share_blocks)
        self.stochastic_dims = _validation.positive_int(stochastic_dims, "stochastic_dims", allow_none=True)
        if self.stochastic_dims is not None and self.num_blocks != 1:
            raise ValueError(
                "Invalid value for argument `stochastic_dims`: S-OPT cannot be combined with PE-OPT blocks "
                f"(num_blocks={self.num_blocks}). Received: stochastic_dims={stochastic_dims!r}"
            )
        self.newton_schulz_iters = _validation.positive_int(newton_schulz_iters, "newton_schulz_iters", allow_none=True)
        if self.newton_schulz_iters is not None and orthogonalization != "lowdin":
            raise ValueError(
                "Invalid value for argument `newton_schulz_iters`: only used with orthogonalization='lowdin'. "
                f"Received: newton_schulz_iters={newton_schulz_iters!r}"
            )
        self.soft_penalty = _check_non_negative_float(soft_penalty, "soft_penalty")
        self.soft_squared = bool(soft_squared)
        self.normalize_fixed_kernel = bool(normalize_fixed_kernel)
        if energy_init is not None and energy_init not in ENERGY_INITS:
            raise ValueError(
                f"Invalid value for argument `energy_init`: expected None or one of {list(ENERGY_INITS)}. "
                f"Received: energy_init={energy_init!r}"
            )
        self.energy_init = energy_init
        self.energy_init_steps = _validation.positive_int(energy_init_steps, "energy_init_steps")
        self.energy_init_lr = _check_non_negative_float(energy_init_lr, "energy_init_lr")
        if self.energy_init_lr == 0:
            raise ValueError(
                f"Invalid value for argument `energy_init_lr`: expected a float > 0. Received: energy_init_lr={energy_init_lr!r}"
            )
        self.energy_power = _check_non_negative_float(energy_power, "energy_power")

    # ---------------------------------------------------------------- build
    def _raw_rotation_shape(self, d):
        if self.stochastic_dims is not None:
            if self.stochastic_dims > d:
                raise ValueError(
                    f"Invalid value for argument `stochastic_dims`: expected at most the neuron dimension d={d}. "
                    f"Received: stochastic_dims={self.stochastic_dims}"
                )
            return (self.stochastic_dims, self.stochastic_dims)
        if self.num_blocks == 1:
            return (d, d)
        in_channels = d // self._spatial_size()
        if in_channels % self.num_blocks:
            raise ValueError(
                f"Invalid value for argument `num_blocks`: the {in_channels} input channels must split into "
                f"equal groups. Received: num_blocks={self.num_blocks}"
            )
        b = d // self.num_blocks
        return (b, b) if self.share_blocks else (self.num_blocks, b, b)

    def build(self, input_shape):
        kernel_shape = self._kernel_shape(input_shape)
        self._d = int(np.prod(kernel_shape[:-1]))
        rotation_shape = self._raw_rotation_shape(self._d)
        self.fixed_kernel = self.add_weight(
            name="fixed_kernel", shape=kernel_shape, initializer=self._fixed_kernel_init(kernel_shape),
            trainable=False,
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
                initializer=keras.initializers.Constant(self._sample_indices(rng)),
                trainable=False,
            )
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias", shape=(self._units,), initializer=self.bias_initializer, regularizer=self.bias_regularizer
            )
        else:
            self.bias = None

    def _sample_indices(self, rng):
        return np.sort(rng.choice(self._d, self.stochastic_dims, replace=False)).astype(np.int32)

    def _fixed_kernel_init(self, kernel_shape):
        """Initialiser of V: the plain one, or its refinement [T-7.3.7] computed now."""
        if self.energy_init is None and not self.normalize_fixed_kernel:
            return self.fixed_kernel_initializer
        if tf.executing_eagerly():
            value = self._refined_fixed_kernel(kernel_shape)
        else:
            # tf: the layer is being built inside a trace. `tf.init_scope` would pause the
            # gradient tape the energy descent needs, so run it eagerly in a worker thread
            # (eager by default, with its own tape stack).
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                value = pool.submit(self._refined_fixed_kernel, kernel_shape).result()

        def initializer(shape, dtype=None):
            return ops.cast(value, dtype or "float32")

        return initializer

    def _refined_fixed_kernel(self, kernel_shape):
        """Energy-minimising pre-processing and/or unit norms of a fresh random V (NumPy)."""
        v = self.fixed_kernel_initializer(kernel_shape, "float32")
        v = ops.reshape(ops.cast(v, "float32"), (self._d, self._units))
        norms = ops.sqrt(ops.sum(ops.square(v), axis=0, keepdims=True))
        if self.energy_init is not None:
            directions = _minimize_energy(
                v / norms,
                steps=self.energy_init_steps,
                lr=self.energy_init_lr,
                power=self.energy_power,
                half_space=self.energy_init == "half_space_mhe",
            )
            v = directions * norms
        if self.normalize_fixed_kernel:
            v = v / ops.sqrt(ops.sum(ops.square(v), axis=0, keepdims=True))
        return ops.convert_to_numpy(ops.reshape(v, kernel_shape))

    # ---------------------------------------------------------------- maths
    def rotation_blocks(self):
        """The orthogonal matrix (or blocks) applied in the forward pass, float32.

        Shape ``(d, d)``; ``(m, m)`` with S-OPT; ``(b, b)`` for shared and
        ``(k, b, b)`` for independent PE-OPT blocks (b = d/k, rows in the
        channel-group order described in the module docstring).
        """
        p = ops.cast(ops.convert_to_tensor(self.rotation_param), "float32")
        if self._orth_fn is None:  # 'ogd' and 'soft' use the raw matrix.
            return p
        if self.orthogonalization == "lowdin":
            return orthogonal.lowdin(p, newton_schulz_iters=self.newton_schulz_iters)
        return self._orth_fn(p)

    def _rotate(self, v):
        """``R·v`` for a ``(d, c)`` float32 matrix whose rows follow the kernel flattening."""
        q = self.rotation_blocks()
        if self.stochastic_dims is not None:
            idx = ops.cast(self.stochastic_indices, "int32")
            rotated = ops.matmul(q, ops.take(v, idx, axis=0))
            return ops.scatter_update(v, ops.expand_dims(idx, -1), rotated)
        if self.num_blocks == 1:
            return ops.matmul(q, v)
        k, spatial, c = self.num_blocks, self._spatial_size(), ops.shape(v)[-1]
        group = self._d // (spatial * k)
        # Rows are ((h·kw)+w)·C_in + c: bring the channel group to the front.
        blocks = ops.reshape(v, (spatial, k, group, c))
        blocks = ops.reshape(ops.transpose(blocks, (1, 0, 2, 3)), (k, spatial * group, c))
        blocks = ops.matmul(q, blocks)  # shared (b, b) broadcasts over the k blocks
        blocks = ops.transpose(ops.reshape(blocks, (k, spatial, group, c)), (1, 0, 2, 3))
        return ops.reshape(blocks, (self._d, c))

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
        kernel = ops.cast(self.effective_kernel(), self.compute_dtype)
        outputs = self._linear(inputs, kernel)
        if self.use_bias:
            outputs = outputs + ops.cast(self.bias, self.compute_dtype)
        if self.activation is not None:
            outputs = self.activation(outputs)
        return outputs

    # ---------------------------------------------------------------- S-OPT / merging
    def _identity_raw(self):
        return _identity_initializer(self.rotation_param.shape, "float32")

    def merge_rotation(self):
        """``V ← R·V`` and reset the raw rotation so that R = I; W is unchanged.

        Every orthogonalisation maps the identity raw matrix to R = I (QR and the
        polar factor of I are I, and triu(I) − triu(I)ᵀ = 0).  This is the S-OPT
        episode merge, and the "progressive" OPT of [T-F.8] for the other variants.
        """
        w = self.effective_kernel()
        self.fixed_kernel.assign(w)
        self.rotation_param.assign(self._identity_raw())

    def resample_stochastic_dims(self, rng=None):
        """Draw a new S-OPT subset of rows (sorted, without replacement)."""
        if self.stochastic_dims is None:
            raise ValueError(f"Layer {self.name!r} is not an S-OPT layer (stochastic_dims=None).")
        rng = rng if rng is not None else np.random.default_rng()
        self.stochastic_indices.assign(self._sample_indices(rng))

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
            "energy_init": self.energy_init,
            "energy_init_steps": self.energy_init_steps,
            "energy_init_lr": self.energy_init_lr,
            "energy_power": self.energy_power,
            "seed": self.seed,
        }


def _minimize_energy(directions, steps, lr, power, half_space):
    """Projected gradient descent of the hyperspherical energy of unit columns.

    ``û ← normalize(û − lr·∇E(û))`` for `steps` steps, with E the mean s-energy of
    `sphere_tf.energy.hyperspherical_energy` (half-space if asked)  [T-7.3.7].
    """
    from sphere_tf import energy as energy_lib  # the energy module imports sphere_tf.ops only

    @tf.function(autograph=False)  # tf: compile the step once; the Python loop only dispatches.
    def step(u):
        with tf.GradientTape() as tape:
            tape.watch(u)
            e = energy_lib.hyperspherical_energy(u, power=power, half_space=half_space, epsilon=0.0)
        u = u - lr * tape.gradient(e, u)
        return u / tf.norm(u, axis=0, keepdims=True)

    u = tf.convert_to_tensor(directions, tf.float32)
    for _ in range(steps):
        u = step(u)
    return u


@keras.saving.register_keras_serializable(package="sphere_tf")
class OPTConv2D(_OPTLayer):
    """2-D convolution trained by Orthogonal Over-Parameterization, ``W = R·V``  [T-7.1].

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
        padding: 'valid' or 'same'.
        dilation_rate: int or pair of ints.
        orthogonalization: str, one of 'gram_schmidt' (default), 'householder',
            'lowdin', 'cayley', 'exp', 'ogd', 'soft'.
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
        energy_init: None, 'mhe' or 'half_space_mhe', energy-minimising
            pre-processing of V at build time [T-7.3.7].
        energy_init_steps: int, its number of gradient steps (thesis: 5000).
        energy_init_lr: float > 0, its step size (not given in the sources).
        energy_power: float >= 0, its Riesz power s (MHE default 2).
        seed: None or int, seeds V, the raw rotation and the S-OPT rows.

    Input shape:
        4-D tensor ``(batch, rows, cols, C_in)`` (channels_last).

    Output shape:
        4-D tensor ``(batch, new_rows, new_cols, filters)``.

    Reference:
        Liu et al., "Orthogonal Over-Parameterized Training", CVPR 2021
        (arXiv:2004.04690); W. Liu, PhD thesis (2020), Chapter 7.

    Example:
        >>> layer = OPTConv2D(8, 3, padding="same", seed=0)
        >>> layer(np.zeros((2, 5, 5, 4), "float32")).shape
        (2, 5, 5, 8)
    """

    _plain_layer_class = keras.layers.Conv2D

    def __init__(self, filters, kernel_size, strides=1, padding="valid", dilation_rate=1, **kwargs):
        super().__init__(**kwargs)
        self.filters = _validation.positive_int(filters, "filters")
        self.kernel_size = _validation.int_pair(kernel_size, "kernel_size")
        self.strides = _validation.int_pair(strides, "strides")
        self.dilation_rate = _validation.int_pair(dilation_rate, "dilation_rate")
        if padding not in ("valid", "same"):
            raise ValueError(
                f"Invalid value for argument `padding`: expected 'valid' or 'same'. Received: padding={padding!r}"
            )
        if max(self.strides) > 1 and max(self.dilation_rate) > 1:
            raise ValueError(
                "Invalid value for argument `strides`: strides > 1 cannot be combined with dilation_rate > 1. "
                f"Received: strides={strides!r}, dilation_rate={dilation_rate!r}"
            )
        self.padding = padding
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
        dims = []
        for i, size in enumerate(input_shape[1:3]):
            if size is None:
                dims.append(None)
                continue
            span = (self.kernel_size[i] - 1) * self.dilation_rate[i] + 1
            if self.padding == "same":
                dims.append((size + self.strides[i] - 1) // self.strides[i])
            else:
                dims.append((size - span) // self.strides[i] + 1)
        return (input_shape[0], *dims, self.filters)

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


@keras.saving.register_keras_serializable(package="sphere_tf")
class OPTDense(_OPTLayer):
    """Dense layer trained by Orthogonal Over-Parameterization, ``W = R·V``  [T-7.1].

    ```
    y = x·(R·V) + b,   R ∈ O(d_in),   V ∈ R^{d_in×units} fixed   [T-7.1]
    ```

    Same options as `OPTConv2D` (its Args list them); PE-OPT splits the d_in
    inputs into `num_blocks` contiguous groups.  The thesis applies OPT to every
    hidden layer but not to the final classifier [T-7.3.1].

    Args:
        units: int > 0, output dimension n.
        **kwargs: every `OPTConv2D` option after `dilation_rate`, plus base-layer
            arguments.

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

    def __init__(self, units, **kwargs):
        super().__init__(**kwargs)
        self.units = _validation.positive_int(units, "units")
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
    """All OPT layers of a model or layer, recursing into nested models/layers."""
    found, seen = [], set()

    def visit(layer):
        if id(layer) in seen:
            return
        seen.add(id(layer))
        if isinstance(layer, _OPTLayer):
            found.append(layer)
        for child in getattr(layer, "layers", None) or []:
            visit(child)

    visit(model)
    return found


def fold_opt_model(model):
    """Return a copy of a Sequential/functional model with every OPT layer folded.

    Each `OPTConv2D` / `OPTDense` becomes a `keras.layers.Conv2D` / `Dense` with
    kernel ``W = R·V`` and the same bias and activation; every other layer is
    re-created from its config and gets a copy of its weights.  The result has
    the same outputs (up to float rounding) and no OPT parameters, and exports
    like any plain Keras model.

    Args:
        model: a built Sequential or functional `keras.Model`.

    Returns:
        A new `keras.Model` of the same kind.

    Raises:
        ValueError: for a subclassed model (fold its layers with `layer.fold()`).
    """
    pairs = []

    def clone(layer):
        if isinstance(layer, _OPTLayer):
            new = layer._plain_layer_class.from_config(layer._plain_config())
        elif isinstance(layer, keras.Model):
            new = fold_opt_model(layer)
            return new
        else:
            new = layer.__class__.from_config(layer.get_config())
        pairs.append((layer, new))
        return new

    try:
        folded = keras.models.clone_model(model, clone_function=clone)
    except ValueError as error:
        raise ValueError(
            "Invalid value for argument `model`: `fold_opt_model` needs a Sequential or functional model; "
            f"fold the layers of a subclassed model with `layer.fold()`. Received: {type(model).__name__}"
        ) from error
    for old, new in pairs:
        if isinstance(old, _OPTLayer):
            new.kernel.assign(old.effective_kernel())
            if old.use_bias:
                new.bias.assign(old.bias)
        elif old.weights:
            new.set_weights(old.get_weights())
    return folded
