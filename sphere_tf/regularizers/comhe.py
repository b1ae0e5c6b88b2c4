"""CoMHE: compressive minimum hyperspherical energy [T-6.4], [T-6.6]–[T-6.9].

One regularizer class, four projections:

* 'random' (RP-CoMHE, Eq 6.4/6.5): C Gaussian matrices P_c ∈ R^{k×d}, N(0, 1),
  re-drawn every `resample_every` steps, the energies of
  the projected neurons averaged (or maximised) over c. Draws are *stateless*
  (`standard_normal`, seed = (seed ⊕ key, step // resample_every)), so a draw
  is recomputed rather than cached when `resample_every` > 1:
  with `share_projections=True` the key is the neuron dimension, so layers of
  equal dimension get the very same P in a step (thesis default; the upstream
  code gets the same sharing from equal op seeds). The step comes from a
  counter variable advanced once per train step (see `random_state.StepCounter`).
* 'angle_preserving' (AP-CoMHE, Eqs 6.6/6.7, unrolled): a learnable P per layer
  (N(0, 1) init) held by the regularizer as a *non-trainable* variable, so the
  model optimizer never sees it. Each call: the angle loss
  ``L_P = ‖cos(PŴ) − cos(Ŵ)‖_F`` (upstream: cosine Gram matrices, non-squared
  Frobenius norm), one unrolled step ``P' = P − η ∂L_P/∂P`` through a nested
  gradient (`sphere_tf.ops.autodiff`; second-order terms reach W), the energy of ``P'Ŵ``; then P
  takes `projection_steps` plain-SGD steps of its own on
  ``L_P + decay·‖P‖²/2`` and is assigned in place. `unroll=False` gives the
  alternating variant (energy at the current P, no second-order term).
* 'adversarial' (Adv-CoMHE, Eq 6.8): the same machinery with ascent: the
  unrolled step is ``P' = P + η ∂E/∂P`` and P's own steps maximise the
  projected energy (upstream: 10 steps).
* 'group' (G-CoMHE, Eq 6.9): P_c are 0/1 diagonal masks selecting groups of
  `group_size` consecutive input channels (8 in the thesis); energies averaged.

Each projection is one small class in `PROJECTIONS` (name -> class); the
regularizer builds one for its `projection` and hands it every kernel.

Every variant uses half-space MHE with s = 2 by default (thesis §6.6.1), and falls
back to plain (half-space) MHE when the neuron dimension is not larger than the
projection dimension (rmlin/CoMHE `architecture.py` does this for the
27-dimensional first conv). The output layer should get `MHE(role='output')` (upstream: weight 10).

State and Keras plumbing: the step counter and the learnable P are
`keras.Variable`s, non-trainable, with aggregation 'only_first_replica', so the
regularizer works inside `fit` and under tf.distribute (build the model inside
`strategy.scope()`). The counter is created with the regularizer; P's initial
value is a NumPy draw (a pure function of `seed` and the kernel's key), so it can
be created on the first call of a TensorFlow step as well as eagerly
(`checkpoint_state(kernels)` creates it before training). They are not model
weights; `get_config()` writes their current values (`step`,
`projection_state`), so a model saved to `.keras` resumes the random stream and
the learned projections. On JAX the model must carry them through its pure train
step: `sphere_tf.regularizers.track_state(model)` before `fit` (see
`random_state`).
"""

import math

import keras
import numpy as np
from keras import ops

from sphere_tf import energy
from sphere_tf import saving
from sphere_tf import validation
from sphere_tf.ops import angles
from sphere_tf.ops import autodiff
from sphere_tf.regularizers import random_state
from sphere_tf.regularizers.mhe import check_energy_regularizer_args

AGGREGATIONS = ("mean", "max")
# Thesis §6.6.1 defaults: projection dimension 30, 5 random projections (1 for AP/Adv).
DEFAULT_NUM_PROJECTIONS = {"random": 5, "angle_preserving": 1, "adversarial": 1, "group": None}
# rmlin/CoMHE `--iters`: 1 extra P step per network step for AP, 10 for adversarial.
DEFAULT_PROJECTION_STEPS = {"angle_preserving": 1, "adversarial": 10}
# rmlin/CoMHE: P's own loss adds 1e-3 · (5e-4 · ‖P‖²/2).
DEFAULT_PROJECTION_DECAY = 1e-3 * 5e-4
_FROBENIUS_EPSILON = 1e-12


def standard_normal(shape, seed, draws=None):
    """i.i.d. N(0, 1) float32 samples of `shape`, a pure function of `seed` (int `(2,)`).

    Box–Muller transform of stateless uniforms u₁, u₂ ∈ [0, 1):
    ``z = sqrt(−2 log(1 − u₁)) · (cos 2πu₂, sin 2πu₂)``, both independent N(0, 1)
    (1 − u₁ ∈ (0, 1], so the log is finite). On TensorFlow the uniforms are
    `tf.random.stateless_uniform` (Philox), as in TF's own normal sampler, which does
    the transform one element at a time; these vectorised elementwise passes are
    faster on CPU, where the draw is a large part of RP-CoMHE's cost
    (docs/regularizers.md).

    Args:
        shape: tuple of ints.
        seed: int tensor `(2,)`.
        draws: a `random_state.SeededDraws` (created outside any traced step);
            None makes one, for eager use.
    """
    draws = draws or random_state.SeededDraws()
    total = math.prod(shape)
    half = (total + 1) // 2
    uniforms = draws.uniform((2, half), seed)
    u1, u2 = uniforms[0], uniforms[1]
    radius = ops.sqrt(-2.0 * ops.log1p(-u1))
    angle = (2.0 * math.pi) * u2
    z = ops.concatenate([radius * ops.cos(angle), radius * ops.sin(angle)])
    if 2 * half != total:
        z = z[:total]
    return ops.reshape(z, shape)


def initial_projection(key, seed, k, d):
    """The initial learnable P `(k, d)` of kernel `key`: N(0, 1), a NumPy draw seeded by (seed ⊕ key).

    NumPy, not `keras.random`: the value is a constant whether P is created eagerly
    or on the first trace of a TensorFlow step, and the same on every backend.
    """
    rng = np.random.default_rng([random_state.stable_key(key) ^ seed, 0])
    return rng.standard_normal((k, d)).astype(np.float32)


def draw_projections(reg, key, d, step, draws=None):
    """RP-CoMHE's C projections of regularizer `reg` at `step`, stored transposed side by side: `(d, C·k)`.

    Column c·k + r is row r of P_c. A pure function of `reg.seed`, `key` and the
    block ``step // reg.resample_every``.
    """
    block = ops.cast(step, "int") // reg.resample_every
    seed = ops.stack([ops.cast(random_state.stable_key(key) ^ reg.seed, "int"), block])
    return standard_normal((d, reg.num_projections * reg.projection_dim), seed, draws)


class _Projection:
    """One CoMHE projection algorithm; `__call__(x)` is its energy of kernel `x` (float32 scalar).

    Built from the regularizer `reg` (settings and restored state); holds
    whatever state the algorithm needs and exposes it through `step_variable`,
    `step_value()`, `advance()` and `learned_variables()`.
    """

    step_variable = None

    def __init__(self, reg):
        self.reg = reg

    def learned_variables(self):
        """The learned projection variables, by state key (none for the random and group algorithms)."""
        return {}

    def step_value(self):
        """The current step of the projection draws, a Python int (0 for algorithms without one)."""
        return 0

    def advance(self):
        """Moves the projection draws on by one step (nothing for algorithms without a step)."""

    def __call__(self, x, variable=None):
        """Energy of kernel `x`; `variable` is the Keras variable `x` is (or is the value of), if known."""
        w2d = energy.neuron_matrix(x)
        d, n = w2d.shape
        if d <= self.reg.projection_dim:  # nothing to compress: plain (half-space) MHE
            return self.reg._energy(w2d)
        return self.projected(variable, w2d)

    def projected(self, variable, w2d):
        """The compressed energy of the neuron matrix `w2d` `(d, n)`, d > `projection_dim`, of kernel
        `variable` (None if unknown): the algorithm itself."""
        raise NotImplementedError

    def key(self, variable, d, n):
        """The state key of kernel `variable`: its variable path, else its shape."""
        return random_state.variable_key(variable) or f"dim{d}x{n}"


class RandomProjection(_Projection):
    """RP-CoMHE [T-6.4], [T-6.5]: C fresh Gaussian projections, energies averaged (or maximised)."""

    def __init__(self, reg):
        super().__init__(reg)
        self.counter = random_state.StepCounter(reg._initial_step)
        self.step_variable = self.counter.variable
        self.draws = random_state.SeededDraws()

    def step_value(self):
        return self.counter.numpy_value()

    def advance(self):
        self.counter.advance()

    def key(self, variable, d, n):
        return f"dim{d}" if self.reg.share_projections else super().key(variable, d, n)

    def projected(self, variable, w2d):
        d, n = w2d.shape
        step = self.counter.step_for(variable)
        return self.reg._projected_energy(w2d, self.projections_at(self.key(variable, d, n), d, step),
                                          self.reg.num_projections)

    def projections_at(self, key, d, step):
        """`draw_projections(reg, key, d, step)`, the same draw for every step of a block.

        The draw is a pure function of seed, key and ``step // resample_every``,
        so with `resample_every` > 1 it is simply redrawn (no cache variable to
        keep in step with the counter, nothing to save).
        """
        return draw_projections(self.reg, key, d, step, self.draws)


class _LearnedProjection(_Projection):
    """A learnable P per layer with an unrolled step and its own SGD steps (AP- and Adv-CoMHE).

    ``P' = P + sign·η·∂J/∂P`` (unrolled, second-order terms reach W) and P's own
    steps descend ``−sign·J + decay·‖P‖²/2``; sign = −1 minimises the objective J
    (angle preserving), +1 maximises it (adversarial).
    """

    sign = -1.0

    def __init__(self, reg):
        super().__init__(reg)
        self.initial_state = reg._initial_state
        self.variables = {}

    def learned_variables(self):
        return dict(self.variables)

    def objective(self, p, w_hat, cos_w):
        """The scalar J(P) that P's steps minimise (`sign` −1) or maximise (+1), from the projection `p`
        `(k, d)`, the unit neurons `w_hat` `(d, n)` and their cosine Gram matrix `cos_w` `(n, n)`."""
        raise NotImplementedError

    def variable_for(self, key, d):
        if key not in self.variables:
            reg = self.reg
            init = self.initial_state.get(key)

            if init is None:
                value = initial_projection(key, reg.seed, reg.projection_dim, d)
            else:
                value = np.asarray(init, np.float32)
            try:
                self.variables[key] = keras.Variable(
                    value, trainable=False, aggregation="only_first_replica", name="comhe_projection"
                )
            except ValueError:
                # Keras forbids new variables inside a stateless scope (its symbolic
                # passes, JAX's stateless train step): evaluate at the initial P
                # there; the variable is made on the next ordinary call or by
                # `checkpoint_state(kernels)`.
                return ops.convert_to_tensor(value)
        return self.variables[key]

    def projected(self, variable, w2d):
        reg = self.reg
        d, n = w2d.shape
        var = self.variable_for(self.key(variable, d, n), d)
        can_assign = isinstance(var, keras.Variable)
        p = ops.convert_to_tensor(var)
        if can_assign and reg.projection_steps:
            # A copy of P's value: the energy below is differentiated through P, and P's own step assigns
            # the variable before that backward pass runs. On PyTorch a variable's tensor is its storage,
            # so the assignment would overwrite the P autograd saved ("modified by an inplace operation").
            p = ops.copy(p)
        w_hat = energy.normalized_neurons(w2d, reg.epsilon)
        cos_w = energy.cosine_gram(w2d, reg.epsilon)
        if reg.unroll:
            # The gradient stays a function of W (second-order terms reach the kernel).
            _, inner_grad = autodiff.value_and_grad(lambda q: self.objective(q, w_hat, cos_w), p)
            p_used = p + self.sign * reg.inner_lr * inner_grad
        else:
            p_used = ops.stop_gradient(p)
        value = reg._energy(ops.matmul(p_used, w_hat))
        # P's own optimisation (separate from the model optimizer), on frozen W.
        if reg.projection_steps:
            new_p = ops.stop_gradient(p)
            w_frozen, cos_frozen = ops.stop_gradient(w_hat), ops.stop_gradient(cos_w)

            def own_loss(q):
                loss = -self.sign * self.objective(q, w_frozen, cos_frozen)
                return loss + 0.5 * reg.projection_decay * ops.sum(ops.square(q))

            for _ in range(reg.projection_steps):
                _, own_grad = autodiff.value_and_grad(own_loss, new_p)
                new_p = ops.stop_gradient(new_p - reg.projection_lr * own_grad)
            if can_assign:
                var.assign(ops.stop_gradient(new_p))
        return value


class AnglePreservingProjection(_LearnedProjection):
    """AP-CoMHE [T-6.6], [T-6.7]: P minimises ``L_P = ‖cos(PŴ) − cos(Ŵ)‖_F``.

    As rmlin/CoMHE `angle_projection/architecture.py`: cosine Gram matrices, non-squared Frobenius norm.
    """

    sign = -1.0

    def objective(self, p, w_hat, cos_w):
        cos_p = energy.cosine_gram(ops.matmul(p, w_hat), self.reg.epsilon)
        return ops.sqrt(ops.sum(ops.square(cos_p - cos_w)) + _FROBENIUS_EPSILON)


class AdversarialProjection(_LearnedProjection):
    """Adv-CoMHE [T-6.8]: P maximises the projected energy (rmlin/CoMHE `adversarial_projection/`)."""

    sign = 1.0

    def objective(self, p, w_hat, cos_w):
        del cos_w
        # rmlin/CoMHE ascends the projected *full-space* energy.
        return self.reg._energy(ops.matmul(p, w_hat), half_space=False)


class GroupProjection(_Projection):
    """G-CoMHE [T-6.9]: energies of groups of `group_size` consecutive input channels, averaged."""

    def __call__(self, x, variable=None):
        del variable
        reg = self.reg
        w = ops.cast(x, "float32")
        if len(w.shape) < 2:
            energy.neuron_matrix(w)  # raises the standard error
        n = w.shape[-1]
        channels = w.shape[-2] if len(w.shape) > 2 else w.shape[0]
        w3 = ops.reshape(w, (-1, channels, n))
        if channels <= reg.group_size:
            return reg._energy(ops.reshape(w3, (-1, n)))
        energies = []
        for start in range(0, channels, reg.group_size):
            group = w3[:, start : start + reg.group_size, :]
            energies.append(reg._energy(ops.reshape(group, (-1, n))))
        return ops.mean(ops.stack(energies))


# Projection name -> algorithm class.
PROJECTIONS = {
    "random": RandomProjection,
    "angle_preserving": AnglePreservingProjection,
    "adversarial": AdversarialProjection,
    "group": GroupProjection,
}


@saving.register_serializable()
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
        log_form: 'code' or 'thesis' (s = 0 only; the euclidean energy, so
            'code' is ``−log z²``, twice the thesis term, as in `MHE`).
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
        factor, power, epsilon = check_energy_regularizer_args(factor, power, "euclidean", log_form, epsilon)
        validation.one_of(projection, "projection", PROJECTIONS)
        projection_dim = validation.integer(
            projection_dim, "projection_dim", minimum=1, maximum=validation.MAX_INT32)
        if num_projections is None:
            num_projections = DEFAULT_NUM_PROJECTIONS[projection]
        if projection != "group":
            num_projections = validation.integer(
                num_projections, "num_projections", minimum=1, maximum=validation.MAX_INT32)
        validation.one_of(aggregation, "aggregation", AGGREGATIONS)
        resample_every = validation.integer(
            resample_every, "resample_every", minimum=1, maximum=validation.MAX_INT32)
        group_size = validation.integer(group_size, "group_size", minimum=1, maximum=validation.MAX_INT32)
        inner_lr = validation.positive_float(inner_lr, "inner_lr")
        projection_lr = validation.positive_float(projection_lr, "projection_lr", allow_none=True)
        if projection_steps is None:
            projection_steps = DEFAULT_PROJECTION_STEPS.get(projection, 0)
        projection_steps = validation.integer(
            projection_steps, "projection_steps", minimum=0, maximum=validation.MAX_INT32)
        projection_decay = validation.non_negative_float(projection_decay, "projection_decay")
        self.factor = factor
        self.projection = projection
        self.projection_dim = projection_dim
        self.num_projections = num_projections
        self.aggregation = aggregation
        self.resample_every = resample_every
        self.share_projections = validation.boolean(share_projections, "share_projections")
        self.power = power
        self.half_space = validation.boolean(half_space, "half_space")
        self.group_size = group_size
        self.inner_lr = inner_lr
        self.projection_lr = projection_lr if projection_lr is not None else inner_lr
        self.projection_steps = projection_steps
        self.projection_decay = projection_decay
        self.unroll = validation.boolean(unroll, "unroll")
        self.seed = validation.integer(seed, "seed", minimum=0, maximum=validation.MAX_INT32)
        self.log_form = log_form
        self.epsilon = epsilon
        self._initial_step = validation.integer(step, "step", minimum=0, maximum=validation.MAX_INT32)
        if projection_state is not None and not (
                isinstance(projection_state, dict) and all(isinstance(k, str) for k in projection_state)):
            raise validation.invalid_argument(
                "projection_state", "None or a dict of learned projections by key (a config's own)", projection_state)
        self._initial_state = dict(projection_state or {})
        self._algorithm = PROJECTIONS[projection](self)
        self._kernels = random_state.KernelRegistry()

    # -- shared by the projections ------------------------------------------------

    def _energy(self, w2d, half_space=None):
        """Energy of the neurons (columns) of `w2d` with this regularizer's settings."""
        return energy.hyperspherical_energy(
            w2d,
            power=self.power,
            half_space=self.half_space if half_space is None else half_space,
            log_form=self.log_form,
            epsilon=self.epsilon,
        )

    def random_projections(self, dim, step, key=None):
        """The C Gaussian matrices `(C, k, dim)` drawn at `step` (key defaults to the shared `dim<d>`).

        The draw of RP-CoMHE; valid for any `projection` (it depends on `seed`,
        `num_projections`, `projection_dim` and `resample_every` only).
        """
        stacked = draw_projections(self, key or f"dim{dim}", dim, step)  # (d, C·k)
        return ops.transpose(ops.reshape(stacked, (dim, self.num_projections, self.projection_dim)), (1, 2, 0))

    def projected_energy(self, x, projections):
        """Aggregated energy of the neurons of `x` projected by `projections` `(C, k, d)`.

        As in rmlin/CoMHE (`random_projection/architecture.py`), P multiplies the
        *raw* neuron matrix and the projected columns are normalised afterwards,
        ``P_c w_i / sqrt(‖P_c w_i‖² + ε)``; this equals Eq 6.4's
        ``P_c ŵ_i / ‖P_c ŵ_i‖`` since the scale of ŵ_i cancels (up to where ε
        sits), and it skips normalising the (d, N) kernel and its gradient.
        With orthonormal P columns (k ≥ d) it is MHE on W exactly (same ε).
        """
        projections = ops.cast(projections, "float32")
        c, k, d = projections.shape
        stacked = ops.reshape(ops.transpose(projections, (2, 0, 1)), (d, c * k))
        return self._projected_energy(energy.neuron_matrix(x), stacked, c)

    def _projected_energy(self, w2d, stacked, c):
        """`projected_energy` for P given as `draw_projections` returns it, `(d, C·k)`."""
        d, n = w2d.shape
        k = stacked.shape[-1] // c
        # All C projections at once: (C·k, d) x (d, N) -> (C, k, N), the column
        # normalisation on the small (C, k, N) tensor, one batched Gram (C, N, N).
        # An einsum contracting over d: with P stored (d, C·k) neither this product
        # nor its gradient P·g needs a transposed copy.
        projected = ops.reshape(ops.einsum("dk,dn->kn", stacked, w2d), (c, k, n))
        unit, _ = angles.normalize(projected, axis=-2, epsilon=self.epsilon)
        if n < 2 and not self.half_space:
            return ops.zeros((), "float32")
        # 2·cos (exact doubling: 2·unit scales every product and sum by 2), the form
        # the energy reduction consumes; one value per projection, each reduced on
        # its own (finite for 'max'). `energy.gram`: one batched product forward and
        # one backward (symmetrised upstream gradient) instead of TF's two.
        doubled_cos = energy.gram(unit, scale=2.0)
        # The C·N² pair terms are ~10 elementwise passes over (C, N, N) small tensors
        # plus their gradients, which the compiled train step (Keras `jit_compile`)
        # fuses into a few loops (docs/regularizers.md).
        energies = energy.energy_from_cosines(
            doubled_cos=doubled_cos, power=self.power, half_space=self.half_space, log_form=self.log_form
        )
        return ops.max(energies) if self.aggregation == "max" else ops.mean(energies)

    def projection_variables(self):
        """Dict key -> the learnable projection variable (AP/Adv), for inspection."""
        return self._algorithm.learned_variables()

    def layer_state(self, kernel):
        """The variables the layer owning `kernel` must carry (`random_state.track_state`).

        The step counter ('random', shared by every kernel of this instance) or
        the learned P of `kernel` ('angle_preserving', 'adversarial'); `kernel`
        is registered so that its value is recognised inside a JAX train step.
        """
        self._kernels.add(kernel)
        if self._algorithm.step_variable is not None:
            self._algorithm.counter.claim(kernel)
        return list(self.checkpoint_state([kernel]).values())

    def checkpoint_state(self, kernels=()):
        """The variables a training checkpoint must hold to resume this regularizer exactly.

        The step counter of the random draws ('random') and the learned P of
        each kernel in `kernels` ('angle_preserving', 'adversarial'). P is
        otherwise created on the first train step; creating it here (with the
        same initial value) lets a checkpoint restore it before training.
        Call under the model's distribution strategy scope.

        Args:
            kernels: the kernel variables this regularizer is attached to.

        Returns:
            dict name -> `keras.Variable`.
        """
        algorithm = self._algorithm
        state = {}
        if algorithm.step_variable is not None:
            state["step"] = algorithm.step_variable
        if isinstance(algorithm, _LearnedProjection):
            for x in kernels:
                d, n = energy.neuron_matrix(x).shape
                if d > self.projection_dim:  # smaller kernels use plain MHE: no P
                    key = algorithm.key(x, d, n)
                    state[f"projection/{key}"] = algorithm.variable_for(key, d)
        return state

    # -- Keras API --------------------------------------------------------------

    def energy(self, x):
        """The unweighted CoMHE term (float32) for kernel `x`."""
        return self._algorithm(x, self._kernels.resolve(x, "CoMHE"))

    def __call__(self, x):
        return self.factor * self.energy(x)

    def resample(self):
        """Advances the random-projection step by one (for custom loops on plain tensors)."""
        self._algorithm.advance()

    @property
    def step(self):
        """The random projections' step-counter variable, or None for the algorithms without one."""
        return self._algorithm.step_variable

    def get_config(self):
        state = dict(self._initial_state)
        for key, var in self.projection_variables().items():
            try:
                state[key] = ops.convert_to_numpy(var.value).tolist()
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
            "step": self._algorithm.step_value(),
            "projection_state": state or None,
            "log_form": self.log_form,
            "epsilon": self.epsilon,
        }
