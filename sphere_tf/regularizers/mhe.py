"""MHE: minimum hyperspherical energy regularizers [T-5.4], [T-5.8].

`MHE` is a `keras.regularizers.Regularizer` for one kernel (hidden layers, full
or half space, or the output layer, always full space). `DataDependentMHE` is
the label-dependent output-layer form of SphereFace+; it is a serializable
callable `penalty(kernel, labels)` that plugs into
`sphere_tf.layers.MarginHead(label_penalty=...)` (or any custom train step).
"""

import numbers
import zlib

import keras
import tensorflow as tf  # tf.random.stateless_uniform: keras.random has no stateless op
from keras import ops

from sphere_tf import energy
from sphere_tf.regularizers import _step

ROLES = ("hidden", "output")
# wy1iu/MHE: hidden layers `coeff = 1`, output layer `_add_thomson_constraint_final` `coeff = 10`.
DEFAULT_FACTORS = {"hidden": 1.0, "output": 10.0}


def _bad(name, expected, value):
    return ValueError(f"Invalid value for argument `{name}`: expected {expected}. Received: {name}={value!r}")


def _check_common(factor, power, distance, log_form, epsilon):
    if isinstance(factor, bool) or not isinstance(factor, numbers.Real) or factor < 0:
        raise _bad("factor", "a float >= 0", factor)
    if isinstance(power, bool) or not isinstance(power, numbers.Real) or not power >= 0 or power == float("inf"):
        raise _bad("power", "a finite float >= 0", power)
    if distance not in energy.DISTANCES:
        raise _bad("distance", f"one of {energy.DISTANCES}", distance)
    if log_form not in energy.LOG_FORMS:
        raise _bad("log_form", f"one of {energy.LOG_FORMS}", log_form)
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real) or epsilon < 0:
        raise _bad("epsilon", "a float >= 0", epsilon)


def as_number(value):
    """A JSON-friendly Python int (integral values) or float."""
    value = float(value)
    return int(value) if value.is_integer() else value


def stable_key(text):
    """A process-independent 31-bit integer for a string (Python's hash() is salted)."""
    return zlib.crc32(text.encode("utf-8")) & 0x7FFFFFFF


@keras.saving.register_keras_serializable(package="sphere_tf")
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

    Defaults follow the authors' TF code (wy1iu/MHE): norm ``sqrt(Σw² + 1e-4)``,
    mean over ordered pairs, hidden weight 1 and output weight 10, and for s = 0
    the code's ``−log‖ŵ_i − ŵ_j‖²`` (`log_form='code'`; `'thesis'` gives the
    thesis's ``log(1/‖ŵ_i − ŵ_j‖)``, half as large). The thesis prints the reverse
    weights (λ_h = 10 full / 1 half, λ_o = 1); treat `factor` as tunable (the
    ratio output/hidden = 10 is what every released run uses).

    Note: the upstream angular variants (`--power_s a0/a1/a2`) use θ/π + 1e-4;
    that is `distance='normalized_angular'` here, `distance='angular'` is the
    thesis's θ [T-5.5]. Upstream divides their weights by 10 (0.1 hidden, 1
    output); pass `factor` explicitly for those.

    Mini-batch MHE [T-5.3.6]: with `num_samples=k`, each train step uses a fresh
    random subset of k neurons (stateless random keyed by `seed`, the layer and a
    step counter; see `sphere_tf.regularizers._step`).

    Args:
        factor: float >= 0, λ; None gives 1 for hidden and 10 for output layers.
        power: float >= 0, the Riesz exponent s (thesis default 2).
        distance: 'euclidean', 'angular' or 'normalized_angular'.
        half_space: bool, half-space MHE [T-5.3.4] (hidden layers only).
        role: 'hidden' or 'output' (output: always full space).
        log_form: 'code' (default, upstream) or 'thesis'; s = 0 only.
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
        if role not in ROLES:
            raise _bad("role", f"one of {ROLES}", role)
        if factor is None:
            factor = DEFAULT_FACTORS[role]
        _check_common(factor, power, distance, log_form, epsilon)
        if role == "output" and half_space:
            raise _bad("half_space", "False for role='output' (the output layer always uses full-space MHE)", half_space)
        if beta is not None:
            beta = [float(b) for b in beta]
            if not all(b > 0 for b in beta):
                raise _bad("beta", "a list of floats > 0", beta)
            if distance != "euclidean":
                raise _bad("beta", "None unless distance='euclidean'", beta)
        if num_samples is not None and (isinstance(num_samples, bool) or not isinstance(num_samples, int)
                                        or num_samples < 2):
            raise _bad("num_samples", "None or an int >= 2", num_samples)
        if beta is not None and num_samples is not None:
            raise _bad("num_samples", "None when `beta` is given", num_samples)
        self.factor = float(factor)
        self.power = as_number(power)
        self.distance = distance
        self.half_space = bool(half_space)
        self.role = role
        self.log_form = log_form
        self.beta = beta
        self.num_samples = num_samples
        self.seed = int(seed)
        self.epsilon = float(epsilon)
        self._counter = _step.StepCounter(step) if num_samples is not None else None

    def energy(self, x):
        """The unweighted energy term (float32) for kernel `x`."""
        w2d = energy.neuron_matrix(x)
        n = w2d.shape[-1]
        beta = self.beta
        if beta is not None and len(beta) != n:
            raise ValueError(f"`beta` has {len(beta)} entries but the kernel has {n} neurons.")
        if self.num_samples is not None and n > self.num_samples:
            step = self._counter.step_for(x)
            key = _step.variable_key(x) or f"dim{w2d.shape[0]}x{n}"
            seed = ops.stack([ops.cast(stable_key(key) ^ self.seed, "int64"), ops.cast(step, "int64")])
            scores = tf.random.stateless_uniform((n,), seed=seed)
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
            "step": self._counter.numpy_value() if self._counter is not None else 0,
            "epsilon": self.epsilon,
        }


@keras.saving.register_keras_serializable(package="sphere_tf")
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
        _check_common(factor, power, distance, log_form, epsilon)
        self.factor = float(factor)
        self.power = as_number(power)
        self.distance = distance
        self.log_form = log_form
        self.epsilon = float(epsilon)

    def __call__(self, kernel, labels):
        return self.factor * energy.data_dependent_energy(
            kernel, labels, power=self.power, distance=self.distance, log_form=self.log_form, epsilon=self.epsilon
        )

    def get_config(self):
        return {
            "factor": self.factor,
            "power": self.power,
            "distance": self.distance,
            "log_form": self.log_form,
            "epsilon": self.epsilon,
        }

    @classmethod
    def from_config(cls, config):
        return cls(**config)
