"""CoMHE: compressive minimum hyperspherical energy [T-6.4], [T-6.6]–[T-6.9].

One regularizer class, four projections:

* 'random' (RP-CoMHE, Eq 6.4/6.5): C Gaussian matrices P_c ∈ R^{k×d}, N(0, 1),
  re-drawn every `resample_every` steps (and cached in between), the energies of
  the projected neurons averaged (or maximised) over c. Draws are *stateless*
  (`standard_normal`, seed = (seed ⊕ key, step // resample_every)):
  with `share_projections=True` the key is the neuron dimension, so layers of
  equal dimension get the very same P in a step (thesis default; the upstream
  code gets the same sharing from equal op seeds). The step comes from a
  counter variable advanced once per train step (see `_step.StepCounter`).
* 'angle_preserving' (AP-CoMHE, Eqs 6.6/6.7, unrolled): a learnable P per layer
  (N(0, 1) init) held by the regularizer as a *non-trainable* variable, so the
  model optimizer never sees it. Each call: the angle loss
  ``L_P = ‖cos(PŴ) − cos(Ŵ)‖_F`` (upstream: cosine Gram matrices, non-squared
  Frobenius norm), one unrolled step ``P' = P − η ∂L_P/∂P`` through a nested
  `tf.GradientTape` (second-order terms reach W), the energy of ``P'Ŵ``; then P
  takes `projection_steps` plain-SGD steps of its own on
  ``L_P + decay·‖P‖²/2`` and is assigned in place. `unroll=False` gives the
  alternating variant (energy at the current P, no second-order term).
* 'adversarial' (Adv-CoMHE, Eq 6.8): the same machinery with ascent: the
  unrolled step is ``P' = P + η ∂E/∂P`` and P's own steps maximise the
  projected energy (upstream: 10 steps).
* 'group' (G-CoMHE, Eq 6.9): P_c are 0/1 diagonal masks selecting groups of
  `group_size` consecutive input channels (8 in the thesis); energies averaged.

Every variant uses half-space MHE with s = 2 by default (thesis §6.6.1), and falls
back to plain (half-space) MHE when the neuron dimension is not larger than the
projection dimension (the upstream code does this for the 27-dimensional first
conv). The output layer should get `MHE(role='output')` (upstream: weight 10).

State and Keras plumbing: the step counter (a `keras.Variable`) and the
learnable P (a `tf.Variable`, since Keras refuses to create its own variables
inside the stateless scope of some internal passes) are created eagerly
(`tf.init_scope`), non-trainable, with aggregation 'only_first_replica', so the regularizer works inside `fit` and under
tf.distribute (build the model inside `strategy.scope()`). They are not model
weights; `get_config()` writes their current values (`step`,
`projection_state`), so a model saved to `.keras` resumes the random stream and
the learned projections.
"""

import math

import keras
import tensorflow as tf  # stateless RNG, nested GradientTape, init_scope: no keras.ops equivalents
from keras import ops

from sphere_tf import energy
from sphere_tf.ops.xla_context import in_xla_context
from sphere_tf.regularizers import _step
from sphere_tf.regularizers import mhe as mhe_lib

PROJECTIONS = ("random", "angle_preserving", "adversarial", "group")
AGGREGATIONS = ("mean", "max")
# Thesis §6.6.1 defaults: projection dimension 30, 5 random projections (1 for AP/Adv).
DEFAULT_NUM_PROJECTIONS = {"random": 5, "angle_preserving": 1, "adversarial": 1, "group": None}
# rmlin/CoMHE `--iters`: 1 extra P step per network step for AP, 10 for adversarial.
DEFAULT_PROJECTION_STEPS = {"angle_preserving": 1, "adversarial": 10}
# rmlin/CoMHE: P's own loss adds 1e-3 · (5e-4 · ‖P‖²/2).
DEFAULT_PROJECTION_DECAY = 1e-3 * 5e-4
_FROBENIUS_EPSILON = 1e-12


def standard_normal(shape, seed):
    """i.i.d. N(0, 1) float32 samples of `shape`, a pure function of `seed` (int64 `(2,)`).

    Box–Muller transform of stateless Philox uniforms u₁, u₂ ∈ [0, 1):
    ``z = sqrt(−2 log(1 − u₁)) · (cos 2πu₂, sin 2πu₂)``, both independent N(0, 1)
    (1 − u₁ ∈ (0, 1], so the log is finite; tails reach ±5.6σ, as in TF's own
    sampler, which uses the same transform with the same 23-bit uniforms).
    Note: `tf.random.stateless_normal` does the transform one element at a
    time; these four vectorised elementwise passes are ~1.5× faster on CPU
    (the draw is ~40% of RP-CoMHE's cost on a (2048, 256) kernel).
    """
    total = math.prod(shape)
    half = (total + 1) // 2
    u1, u2 = tf.unstack(tf.random.stateless_uniform((2, half), seed=seed, dtype=tf.float32))
    radius = ops.sqrt(-2.0 * ops.log1p(-u1))
    angle = (2.0 * math.pi) * u2
    z = ops.concatenate([radius * ops.cos(angle), radius * ops.sin(angle)])
    if 2 * half != total:
        z = z[:total]
    return ops.reshape(z, shape)


def _energy_from_cosines(doubled_cos, power, half_space, log_form):
    return energy._energy_from_cosines(
        doubled_cos=doubled_cos, power=power, half_space=half_space, log_form=log_form
    )


_energy_from_cosines_xla = tf.function(_energy_from_cosines, jit_compile=True, autograph=False)


def _bad(name, expected, value):
    return mhe_lib._bad(name, expected, value)


def _is_int(value, minimum):
    return not isinstance(value, bool) and isinstance(value, int) and value >= minimum


@keras.saving.register_keras_serializable(package="sphere_tf")
class CoMHE(keras.regularizers.Regularizer):
    """Compressive MHE: hyperspherical energy of projected neurons   [T-6.4].

    ```
    random      E^R = 1/C Σ_c E_s({P_c ŵ_i/‖P_c ŵ_i‖})   (or max_c)              [T-6.4], [T-6.5]
    angle-pres. E^A = E_s({P'ŵ_i/‖P'ŵ_i‖}),  P' = P − η ∂L_P/∂P,
                L_P = ‖cos(PŴ) − cos(Ŵ)‖_F                                        [T-6.6], [T-6.7]
    adversarial min_W max_P E_s({Pŵ_i/‖Pŵ_i‖})                                    [T-6.8]
    group       1/C Σ_c E_s({P_c ŵ_i/‖P_c ŵ_i‖}),  P_c = 0/1 channel-group mask   [T-6.9]
    ```

    See the module docstring for how state is kept.

    Args:
        factor: float >= 0, λ (thesis/upstream 1 for hidden layers).
        projection: 'random', 'angle_preserving', 'adversarial' or 'group'.
        projection_dim: int >= 1, k (thesis default 30; upstream RP repo 40).
        num_projections: int >= 1, C (default 5 for random, 1 for AP/Adv).
        aggregation: 'mean' or 'max' over the C projections (random only).
        resample_every: int >= 1, steps between random draws (1 = every step;
            the thesis finds ≤ 1000 fine, a fixed P harmful).
        share_projections: bool, same P for layers of equal neuron dimension.
        power: float >= 0, s (2 for images, 1 for point clouds).
        half_space: bool, build on half-space MHE (thesis default True).
        group_size: int >= 1, input channels per group ('group').
        inner_lr: float > 0, η of the unrolled step (upstream: the network LR).
        projection_lr: float > 0, LR of P's own SGD steps (default `inner_lr`).
        projection_steps: int >= 0, P's own steps per call (1 AP, 10 Adv).
        projection_decay: float >= 0, weight decay in P's own loss.
        unroll: bool, AP/Adv: unrolled (True) or alternating (False).
        seed: int, seed of every random draw.
        step: int, initial value of the step counter (restored from configs).
        projection_state: dict key -> nested list, learned P values (restored
            from configs; leave None).
        log_form: 'code' or 'thesis' (s = 0 only).
        epsilon: float >= 0 inside the neuron norm (upstream 1e-4).
    """

    def __init__(
        self,
        factor=1.0,
        projection="random",
        projection_dim=30,
        num_projections=None,
        aggregation="mean",
        resample_every=1,
        share_projections=True,
        power=2,
        half_space=True,
        group_size=8,
        inner_lr=0.1,
        projection_lr=None,
        projection_steps=None,
        projection_decay=DEFAULT_PROJECTION_DECAY,
        unroll=True,
        seed=0,
        step=0,
        projection_state=None,
        log_form="code",
        epsilon=energy.DEFAULT_EPSILON,
    ):
        mhe_lib._check_common(factor, power, "euclidean", log_form, epsilon)
        if projection not in PROJECTIONS:
            raise _bad("projection", f"one of {PROJECTIONS}", projection)
        if not _is_int(projection_dim, 1):
            raise _bad("projection_dim", "an int >= 1", projection_dim)
        if num_projections is None:
            num_projections = DEFAULT_NUM_PROJECTIONS[projection]
        if projection != "group" and not _is_int(num_projections, 1):
            raise _bad("num_projections", "an int >= 1", num_projections)
        if aggregation not in AGGREGATIONS:
            raise _bad("aggregation", f"one of {AGGREGATIONS}", aggregation)
        if not _is_int(resample_every, 1):
            raise _bad("resample_every", "an int >= 1", resample_every)
        if not _is_int(group_size, 1):
            raise _bad("group_size", "an int >= 1", group_size)
        for name, value in (("inner_lr", inner_lr), ("projection_lr", projection_lr)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
                raise _bad(name, "a float > 0", value)
        if projection_steps is None:
            projection_steps = DEFAULT_PROJECTION_STEPS.get(projection, 0)
        if not _is_int(projection_steps, 0):
            raise _bad("projection_steps", "an int >= 0", projection_steps)
        if isinstance(projection_decay, bool) or not isinstance(projection_decay, (int, float)) or projection_decay < 0:
            raise _bad("projection_decay", "a float >= 0", projection_decay)
        self.factor = float(factor)
        self.projection = projection
        self.projection_dim = projection_dim
        self.num_projections = num_projections
        self.aggregation = aggregation
        self.resample_every = resample_every
        self.share_projections = bool(share_projections)
        self.power = mhe_lib.as_number(power)
        self.half_space = bool(half_space)
        self.group_size = group_size
        self.inner_lr = float(inner_lr)
        self.projection_lr = float(projection_lr if projection_lr is not None else inner_lr)
        self.projection_steps = projection_steps
        self.projection_decay = float(projection_decay)
        self.unroll = bool(unroll)
        self.seed = int(seed)
        self.log_form = log_form
        self.epsilon = float(epsilon)
        self._initial_state = dict(projection_state or {})
        self._projections = {}
        self._draw_cache = {}
        self._counter = _step.StepCounter(step) if projection == "random" else None

    # -- helpers ----------------------------------------------------------------

    def _energy(self, w2d, half_space=None):
        return energy.hyperspherical_energy(
            w2d,
            power=self.power,
            half_space=self.half_space if half_space is None else half_space,
            log_form=self.log_form,
            epsilon=self.epsilon,
        )

    def _key(self, x, d, n):
        if self.share_projections and self.projection == "random":
            return f"dim{d}"
        return _step.variable_key(x) or f"dim{d}x{n}"

    def random_projections(self, dim, step, key=None):
        """The C Gaussian matrices `(C, k, dim)` drawn at `step` (key defaults to the shared `dim<d>`)."""
        stacked = self._draw(key or f"dim{dim}", dim, step)  # (d, C·k)
        return ops.transpose(ops.reshape(stacked, (dim, self.num_projections, self.projection_dim)), (1, 2, 0))

    def _draw(self, key, d, step):
        """All C projections at `step`, stored transposed and side by side: `(d, C·k)`, column c·k + r = row r of P_c."""
        block = ops.cast(step, "int64") // self.resample_every
        seed = ops.stack([ops.cast(mhe_lib.stable_key(key) ^ self.seed, "int64"), block])
        return standard_normal((d, self.num_projections * self.projection_dim), seed)

    def _projections_at(self, key, d, step):
        """`_draw(key, d, step)`, drawn only when `step // resample_every` changes.

        With `resample_every` > 1 the draw of a block is kept in a non-model
        variable and reused until the block ends (the same numbers `_draw` gives:
        the draw is a pure function of seed, key and block, so the cache needs no
        saving and a reloaded model redraws the same P). Every step draws anew
        when `resample_every` is 1 (the default, as upstream).
        """
        if self.resample_every == 1:
            return self._draw(key, d, step)
        block_var, p_var = self._draw_cache_for(key, d)
        block = ops.cast(step, "int64") // self.resample_every
        # Only the draw sits in the branch: assigning a tf.distribute variable inside
        # control flow would need a cross-replica sync there, which TF does not allow.
        p = ops.cond(
            ops.equal(block, ops.convert_to_tensor(block_var)),
            lambda: ops.convert_to_tensor(p_var),
            lambda: self._draw(key, d, step),
        )
        with tf.control_dependencies([p_var.assign(p), block_var.assign(block)]):
            return tf.identity(p)

    def _draw_cache_for(self, key, d):
        if key not in self._draw_cache:
            with tf.init_scope():
                # tf.Variable, not keras.Variable: see `_variable_for`. Block −1 = empty.
                self._draw_cache[key] = (
                    tf.Variable(tf.constant(-1, tf.int64), trainable=False,
                                aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA, name="comhe_block"),
                    tf.Variable(tf.zeros((d, self.num_projections * self.projection_dim), tf.float32),
                                trainable=False, aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
                                name="comhe_projection_cache"),
                )
        return self._draw_cache[key]

    def projected_energy(self, x, projections):
        """Aggregated energy of the neurons of `x` projected by `projections` `(C, k, d)`.

        As in rmlin/CoMHE (spec §3.3), P multiplies the *raw* neuron matrix and
        the projected columns are normalised afterwards, ``P_c w_i / sqrt(‖P_c w_i‖² + ε)``;
        this equals Eq 6.4's ``P_c ŵ_i / ‖P_c ŵ_i‖`` since the scale of ŵ_i cancels
        (up to where ε sits), and it skips normalising the (d, N) kernel and its gradient.
        With orthonormal P columns (k ≥ d) it is MHE on W exactly (same ε).
        """
        projections = ops.cast(projections, "float32")
        c, k, d = projections.shape
        stacked = ops.reshape(ops.transpose(projections, (2, 0, 1)), (d, c * k))
        return self._projected_energy(energy.neuron_matrix(x), stacked, c)

    def _projected_energy(self, w2d, stacked, c):
        """`projected_energy` for P given as `_draw` returns it, `(d, C·k)`."""
        d, n = w2d.shape
        k = stacked.shape[-1] // c
        # All C projections at once: (C·k, d) x (d, N) -> (C, k, N), the column
        # normalisation on the small (C, k, N) tensor, one batched Gram (C, N, N).
        # tf.linalg.matmul: keras.ops.matmul has no transpose flags; with P stored
        # (d, C·k) neither this product nor its gradient P·g needs a transpose copy,
        # and it was the fastest layout on CPU.
        projected = ops.reshape(tf.linalg.matmul(stacked, w2d, transpose_a=True), (c, k, n))
        unit = projected * ops.rsqrt(ops.sum(ops.square(projected), axis=-2, keepdims=True) + self.epsilon)
        if n < 2 and not self.half_space:
            return ops.zeros((), "float32")
        # 2·cos (exact doubling: 2·unit scales every product and sum by 2), the form
        # the energy reduction consumes; one value per projection, each reduced on
        # its own (finite for 'max'). `energy._gram`: one batched product forward and
        # one backward (symmetrised upstream gradient) instead of TF's two.
        doubled_cos = energy._gram(unit, scale=2.0)
        # The C·N² pair terms are ~10 elementwise passes over (C, N, N) small tensors
        # plus their gradients; one XLA cluster runs them as a few loops (0.84 → 0.56 ms
        # for (5, 256, 256) on CPU, value + gradient).
        reduce = _energy_from_cosines if in_xla_context() else _energy_from_cosines_xla
        energies = reduce(doubled_cos, self.power, self.half_space, self.log_form)
        return ops.max(energies) if self.aggregation == "max" else ops.mean(energies)

    def _variable_for(self, key, d):
        if key not in self._projections:
            init = self._initial_state.get(key)
            with tf.init_scope():
                if init is None:
                    init = tf.random.stateless_normal(
                        (self.projection_dim, d), seed=[mhe_lib.stable_key(key) ^ self.seed, 0]
                    )
                # A tf.Variable, not keras.Variable: Keras forbids creating the latter
                # inside the stateless scope some of its internal passes use.
                self._projections[key] = tf.Variable(
                    tf.convert_to_tensor(init, tf.float32),
                    trainable=False,
                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA,
                    name="comhe_projection",
                )
        return self._projections[key]

    def projection_variables(self):
        """Dict key -> the learnable projection variable (AP/Adv), for inspection."""
        return dict(self._projections)

    def _angle_loss(self, p, w_hat, cos_w):
        cos_p = energy.cosine_gram(ops.matmul(p, w_hat), self.epsilon)
        return ops.sqrt(ops.sum(ops.square(cos_p - cos_w)) + _FROBENIUS_EPSILON)

    def _learned(self, x, w2d):
        d, n = w2d.shape
        var = self._variable_for(self._key(x, d, n), d)
        p = tf.convert_to_tensor(var)
        w_hat = energy.normalized_neurons(w2d, self.epsilon)
        adversarial = self.projection == "adversarial"

        def objective(p_value, w_value, cos_w):
            if adversarial:
                # rmlin/CoMHE ascends the projected *full-space* energy.
                return self._energy(ops.matmul(p_value, w_value), half_space=False)
            return self._angle_loss(p_value, w_value, cos_w)

        cos_w = energy.cosine_gram(w2d, self.epsilon)
        if self.unroll:
            with tf.GradientTape() as inner:
                inner.watch(p)
                inner_loss = objective(p, w_hat, cos_w)
            grad = inner.gradient(inner_loss, p)
            sign = 1.0 if adversarial else -1.0
            p_used = p + sign * self.inner_lr * grad
        else:
            p_used = ops.stop_gradient(p)
        value = self._energy(ops.matmul(p_used, w_hat))
        # P's own optimisation (separate from the model optimizer), on frozen W.
        if self.projection_steps:
            new_p = ops.stop_gradient(p)
            w_frozen, cos_frozen = ops.stop_gradient(w_hat), ops.stop_gradient(cos_w)
            for _ in range(self.projection_steps):
                with tf.GradientTape() as own:
                    own.watch(new_p)
                    own_loss = objective(new_p, w_frozen, cos_frozen)
                    decay = 0.5 * self.projection_decay * ops.sum(ops.square(new_p))
                    own_loss = -own_loss + decay if adversarial else own_loss + decay
                new_p = new_p - self.projection_lr * own.gradient(own_loss, new_p)
            var.assign(ops.stop_gradient(new_p))
        return value

    def _group(self, x):
        w = ops.cast(x, "float32")
        if len(w.shape) < 2:
            energy.neuron_matrix(w)  # raises the standard error
        n = w.shape[-1]
        channels = w.shape[-2] if len(w.shape) > 2 else w.shape[0]
        w3 = ops.reshape(w, (-1, channels, n))
        if channels <= self.group_size:
            return self._energy(ops.reshape(w3, (-1, n)))
        energies = []
        for start in range(0, channels, self.group_size):
            group = w3[:, start : start + self.group_size, :]
            energies.append(self._energy(ops.reshape(group, (-1, n))))
        return ops.mean(ops.stack(energies))

    # -- Keras API --------------------------------------------------------------

    def energy(self, x):
        """The unweighted CoMHE term (float32) for kernel `x`."""
        if self.projection == "group":
            return self._group(x)
        w2d = energy.neuron_matrix(x)
        d, n = w2d.shape
        if d <= self.projection_dim:
            return self._energy(w2d)
        if self.projection == "random":
            step = self._counter.step_for(x)
            return self._projected_energy(w2d, self._projections_at(self._key(x, d, n), d, step), self.num_projections)
        return self._learned(x, w2d)

    def __call__(self, x):
        return self.factor * self.energy(x)

    def resample(self):
        """Advances the random-projection step by one (for custom loops on plain tensors)."""
        if self._counter is not None:
            self._counter.advance()

    @property
    def step(self):
        return None if self._counter is None else self._counter.variable

    def get_config(self):
        state = dict(self._initial_state)
        for key, var in self._projections.items():
            try:
                state[key] = var.numpy().tolist()
            except Exception:  # called inside a trace: keep the last known values
                pass
        return {
            "factor": self.factor,
            "projection": self.projection,
            "projection_dim": self.projection_dim,
            "num_projections": self.num_projections,
            "aggregation": self.aggregation,
            "resample_every": self.resample_every,
            "share_projections": self.share_projections,
            "power": self.power,
            "half_space": self.half_space,
            "group_size": self.group_size,
            "inner_lr": self.inner_lr,
            "projection_lr": self.projection_lr,
            "projection_steps": self.projection_steps,
            "projection_decay": self.projection_decay,
            "unroll": self.unroll,
            "seed": self.seed,
            "step": self._counter.numpy_value() if self._counter is not None else 0,
            "projection_state": state or None,
            "log_form": self.log_form,
            "epsilon": self.epsilon,
        }
