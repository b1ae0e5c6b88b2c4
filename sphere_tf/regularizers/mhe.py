"""MHE: minimum hyperspherical energy regularizers [T-5.4], [T-5.8].

`MHE` is a `keras.regularizers.Regularizer` for one kernel (hidden layers, full
or half space, or the output layer, always full space). `DataDependentMHE` is
the label-dependent output-layer form of SphereFace+; it is a serializable
callable `penalty(kernel, labels)` that plugs into
`sphere_tf.layers.MarginHead(label_penalty=...)` (or any custom train step).
"""

import keras
from keras import ops

from sphere_tf import energy
from sphere_tf import saving
from sphere_tf import validation
from sphere_tf.regularizers import random_state

ROLES = ("hidden", "output")
# wy1iu/MHE `code/architecture.py`: hidden layers `coeff = 1` (`_add_thomson_constraint`),
# output layer `coeff = 10` (`_add_thomson_constraint_final`).
DEFAULT_FACTORS = {"hidden": 1.0, "output": 10.0}


def check_energy_regularizer_args(factor, power, distance, log_form, epsilon):
    """Validates the arguments `MHE`, `DataDependentMHE` and `CoMHE` share; returns `(factor, power, epsilon)`.

    `power` comes back as a plain int when integral (configs keep `power=2`).
    """
    factor = validation.non_negative_float(factor, "factor")
    energy.check_energy_args(power, distance, log_form)
    epsilon = validation.non_negative_float(epsilon, "epsilon")
    return factor, validation.plain_number(power), epsilon


@saving.register_serializable()
class MHE(keras.regularizers.Regularizer):
    """Minimum hyperspherical energy of a layer's neurons   [T-5.4].

    ```
    hidden:  λ_h · 1/(N(N−1)) Σ_i Σ_{j≠i} f_s(‖ŵ_i − ŵ_j‖)     (half space: over {ŵ_k, −ŵ_k})
    output:  λ_o · the same, always full space
    ```

    Neurons are the columns of `reshape(kernel, (-1, units))` for any Keras
    kernel layout (Conv2D HWIO, Dense, the sphere_tf decoupled layers); only the
    kernel is regularized, never the bias. The network itself is unchanged: MHE
    normalises the neurons inside the regularizer only.

    Defaults follow the authors' TF code (wy1iu/MHE `code/architecture.py`):
    norm ``sqrt(Σw² + 1e-4)``, mean over ordered pairs, hidden weight 1 and
    output weight 10, and for s = 0 the code's log term (`log_form='code'`):
    ``−log‖ŵ_i − ŵ_j‖²`` for the euclidean distance (`'thesis'` gives the
    thesis's ``log(1/‖ŵ_i − ŵ_j‖)``, half as large) and ``−log(θ/π + 1e-4)``
    for `distance='normalized_angular'` (upstream `--power_s a0`; no factor 2,
    so both forms agree for the angular distances). The thesis prints the reverse
    weights (λ_h = 10 full / 1 half, λ_o = 1); treat `factor` as tunable (the
    ratio output/hidden = 10 is what every released run uses).

    Note: the upstream angular variants (`--power_s a0/a1/a2`) use θ/π + 1e-4;
    that is `distance='normalized_angular'` here, `distance='angular'` is the
    thesis's θ [T-5.5]. Upstream divides their weights by 10 (0.1 hidden, 1
    output); pass `factor` explicitly for those.

    Mini-batch MHE [T-5.3.6]: with `num_samples=k`, each train step uses a fresh
    random subset of k neurons (stateless random keyed by `seed`, the layer and a
    step counter; see `sphere_tf.regularizers.random_state`).

    Args:
        factor: float >= 0, λ; None gives 1 for hidden and 10 for output layers.
        power: float >= 0, the Riesz exponent s (thesis default 2).
        distance: 'euclidean', 'angular' or 'normalized_angular'.
        half_space: bool, half-space MHE [T-5.3.4] (hidden layers only).
        role: 'hidden' or 'output' (output: always full space).
        log_form: 'code' (default, upstream) or 'thesis'; s = 0 only (see
            `sphere_tf.energy.log_term_scale`).
        beta: optional list of per-neuron weights β_i (weighted MHE [T-D.10]).
        num_samples: optional int >= 2, neurons per random subset.
        seed: int, seed of the random subsets.
        step: int, initial value of the step counter (restored from configs).
        epsilon: float >= 0 inside the neuron norm (upstream 1e-4).

    Example:

    >>> reg = MHE(power=2, half_space=True)
    >>> layer = keras.layers.Conv2D(8, 3, kernel_regularizer=reg)
    """

    def __init__(
        self,
        factor=None,
        power=2,
        distance="euclidean",
        half_space=False,
        role="hidden",
        log_form="code",
        beta=None,
        num_samples=None,
        seed=0,
        step=0,
        epsilon=energy.DEFAULT_EPSILON,
    ):
        validation.one_of(role, "role", ROLES)
        if factor is None:
            factor = DEFAULT_FACTORS[role]
        factor, power, epsilon = check_energy_regularizer_args(factor, power, distance, log_form, epsilon)
        if role == "output" and half_space:
            raise validation.invalid_argument(
                "half_space", "False for role='output' (the output layer always uses full-space MHE)", half_space
            )
        if beta is not None:
            if not isinstance(beta, (list, tuple)) or not beta:
                raise validation.invalid_argument("beta", "None or a non-empty list of floats > 0 (one per neuron)",
                                                  beta)
            beta = [validation.positive_float(b, "beta") for b in beta]
            if distance != "euclidean":
                raise validation.invalid_argument("beta", "None unless distance='euclidean'", beta)
        num_samples = validation.integer(
            num_samples, "num_samples", minimum=2, allow_none=True, maximum=validation.MAX_INT32)
        if beta is not None and num_samples is not None:
            raise validation.invalid_argument("num_samples", "None when `beta` is given", num_samples)
        self.factor = factor
        self.power = power
        self.distance = distance
        self.half_space = validation.boolean(half_space, "half_space")
        self.role = role
        self.log_form = log_form
        self.beta = beta
        self.num_samples = num_samples
        self.seed = validation.integer(seed, "seed", minimum=0, maximum=validation.MAX_INT32)
        self.epsilon = epsilon
        # Without sampling (`num_samples` None) no counter runs; the config keeps the step it was given.
        self._step = validation.integer(step, "step", minimum=0, maximum=validation.MAX_INT32)
        self._counter = random_state.StepCounter(self._step) if num_samples is not None else None
        self._draws = random_state.SeededDraws() if num_samples is not None else None
        self._kernels = random_state.KernelRegistry()

    def energy(self, x):
        """The unweighted energy term (float32) for kernel `x`."""
        w2d = energy.neuron_matrix(x)
        n = w2d.shape[-1]
        beta = self.beta
        if beta is not None and len(beta) != n:
            raise ValueError(f"`beta` has {len(beta)} entries but the kernel has {n} neurons.")
        if self.num_samples is not None and n > self.num_samples:
            variable = self._kernels.resolve(x, "MHE")
            step = self._counter.step_for(variable)
            key = random_state.variable_key(variable) or f"dim{w2d.shape[0]}x{n}"
            seed = ops.stack([ops.cast(random_state.stable_key(key) ^ self.seed, "int"), ops.cast(step, "int")])
            scores = self._draws.uniform((n,), seed)
            subset = ops.argsort(scores)[: self.num_samples]
            w2d = ops.take(w2d, subset, axis=1)
        return energy.hyperspherical_energy(
            w2d,
            power=self.power,
            distance=self.distance,
            half_space=self.half_space,
            beta=None if beta is None else ops.convert_to_tensor(beta, "float32"),
            log_form=self.log_form,
            epsilon=self.epsilon,
        )

    def __call__(self, x):
        return self.factor * self.energy(x)

    def layer_state(self, kernel):
        """The variables the layer owning `kernel` must carry (`random_state.track_state`).

        The step counter with `num_samples` (shared by every kernel of this
        instance), nothing otherwise; `kernel` is registered so that its value
        is recognised inside a JAX train step.
        """
        if self._counter is None:
            return []
        self._kernels.add(kernel)
        self._counter.claim(kernel)
        return [self._counter.variable]

    def checkpoint_state(self, kernels=()):
        """The variables a training checkpoint must hold to resume this regularizer exactly.

        The step counter of the mini-batch neuron subsets (`num_samples`);
        nothing otherwise. `kernels` is accepted for the common interface
        (`sphere_tf.training.checkpoint.regularizer_states`).

        Returns:
            dict name -> `keras.Variable`.
        """
        del kernels
        return {} if self._counter is None else {"step": self._counter.variable}

    def get_config(self):
        return {
            "factor": self.factor,
            "power": self.power,
            "distance": self.distance,
            "half_space": self.half_space,
            "role": self.role,
            "log_form": self.log_form,
            "beta": self.beta,
            "num_samples": self.num_samples,
            "seed": self.seed,
            "step": self._counter.numpy_value() if self._counter is not None else self._step,
            "epsilon": self.epsilon,
        }


@saving.register_serializable()
class DataDependentMHE:
    """SphereFace+ output-layer MHE over the classes present in the batch   [T-5.8].

    ```
    λ_M · 1/(m(N−1)) Σ_{i=1}^m Σ_{j≠y_i} f_s(‖ŵ^out_{y_i} − ŵ^out_j‖)
    ```

    A serializable callable `penalty(kernel, labels) -> scalar`. It needs the
    labels, so it is not a weight regularizer; use it as the margin head's
    label penalty, which adds it with `add_loss` during training:

    >>> head = sphere_tf.layers.MarginHead(10, label_penalty=DataDependentMHE(factor=1.0))  # doctest: +SKIP
    >>> logits = head(features, labels=labels, training=True)  # doctest: +SKIP

    or call it in a custom train step. Thesis settings: full space, euclidean,
    s = 2, output layer only, fine-tuning a trained SphereFace model.

    Note: the Caffe `InterClass` layer (wy1iu/sphereface-plus) uses λ_M = 10 at
    batch 256 (notes: 0.1–2 at batch 128) and a mean-based surrogate; this is
    Eq 5.8 itself, so `factor` defaults to 1.

    Args:
        factor: float >= 0, λ_M.
        power, distance, log_form, epsilon: as for `MHE` (`log_form` defaults to
            the code form for s = 0).
    """

    def __init__(self, factor=1.0, power=2, distance="euclidean", log_form="code", epsilon=energy.DEFAULT_EPSILON):
        self.factor, self.power, self.epsilon = check_energy_regularizer_args(
            factor, power, distance, log_form, epsilon
        )
        self.distance = distance
        self.log_form = log_form

    def __call__(self, kernel, labels):
        return self.factor * energy.data_dependent_energy(
            kernel, labels, power=self.power, distance=self.distance, log_form=self.log_form, epsilon=self.epsilon
        )

    def get_config(self):
        """The constructor arguments, for Keras serialization."""
        return {
            "factor": self.factor,
            "power": self.power,
            "distance": self.distance,
            "log_form": self.log_form,
            "epsilon": self.epsilon,
        }

    @classmethod
    def from_config(cls, config):
        """The penalty of a `get_config` dict."""
        return cls(**config)
