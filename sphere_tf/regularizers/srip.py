"""SRIP: the spectral restricted isometry property regularizer (Bansal, Chen and Wang, NeurIPS 2018).

"Can We Gain More from Orthogonality Regularizations in Training Deep CNNs?" (Bansal, Chen, Wang, NeurIPS
2018) penalises the spectral norm of the Gram residual of a layer's neurons,

```
SRIP(W) = λ · σ(WᵀW − I)
```

σ(·) the largest singular value (for the symmetric residual: the largest |eigenvalue|), estimated by power
iteration and differentiated through the iteration. The CoMHE comparison (W. Liu's thesis, 2020, Tables
6.1, 6.6 and 6.7: CNN-9 on CIFAR-100 25.80 %, ResNet-32 on CIFAR-10 / -100 4.75 / 22.08 %, ImageNet
ResNet-18 / 34 / 50 top-1 32.53 / 29.55 / 24.91 %) uses it as a baseline.

Constants (the authors' code, VITA-Group/Orthogonality-in-CNNs):

* **Two matrix-vector products** with A = WᵀW − I from a random start b:
  v = Ab / ‖Ab‖, σ ≈ ‖Av‖ (`power_iterations=2`); `ResNet/resnet_cifar_new.py` (`l2_reg`, Keras) and
  `Wide-Resnet/train_n.py` (`l2_reg_ortho`, PyTorch).
* **Coefficient λ = 0.01, then ×1e-3 after epoch 20, ×1e-4 after 50, ×1e-6 after 70 and 0 after 120** (of
  200 epochs): `decay_schedule` in `ResNet/resnet_cifar_new.py`, `adjust_ortho_decay_rate` with
  `--ortho-decay 1e-2` in `Wide-Resnet/train_n.py`. `AUTHORS_FACTOR` and `AUTHORS_SCHEDULE` hold them;
  `schedule_factor(epoch)` evaluates it. `SRIP(schedule='authors')` (or a list of `[first_epoch,
  multiplier]` pairs) keeps λ in a variable that the `SRIPSchedule` callback sets at the start of every
  epoch (the runner adds the callback; on JAX the variable travels with the layer, `layer_state`).
* The Keras code penalises σ itself (as the paper's formula); the PyTorch code penalises ‖Av‖², i.e. σ²
  (`squared=True`).
* The Keras code forms WᵀW over the output channels (columns); the PyTorch code uses the smaller of WᵀW and
  WWᵀ. For a layer with no more neurons than fan-in (every conv of the CIFAR nets but a 3-channel stem) both
  are WᵀW; for an over-complete layer WᵀW − I has the eigenvalue −1 on the null space of W whatever W is, so
  σ never falls below 1 there and the penalty is blind to the rest. The default is the smaller Gram
  (`gram='smaller'`); `gram='columns'` is the Keras code's.
* The start vector b is drawn once from U[0, 1) (the Keras code draws `np.random.rand` when the regularizer
  is built; the PyTorch code draws a fresh one every step): here a fixed vector seeded by `seed` and the
  Gram's size, so the penalty is a deterministic function of W.
"""

import keras
import numpy as np
from keras import ops

from sphere_tf import energy
from sphere_tf import saving
from sphere_tf import validation

GRAMS = ("smaller", "columns")
# VITA-Group/Orthogonality-in-CNNs, ResNet/resnet_cifar_new.py `decay_schedule` (d_r = 0.01) and
# Wide-Resnet/train_n.py `adjust_ortho_decay_rate` (--ortho-decay 1e-2): (first epoch, multiplier of λ).
AUTHORS_FACTOR = 1e-2
AUTHORS_SCHEDULE = ((1, 1.0), (21, 1e-3), (51, 1e-4), (71, 1e-6), (121, 0.0))
# The authors' power iteration: two products with WᵀW − I.
AUTHORS_POWER_ITERATIONS = 2
# Inside the norms of the iteration: a zero residual (an orthonormal W) stays finite, with finite gradients.
EPSILON = 1e-12


def schedule_factor(epoch, factor=AUTHORS_FACTOR, schedule=AUTHORS_SCHEDULE):
    """λ in (1-based) `epoch` under the authors' schedule: `factor` times the multiplier of the last phase
    whose first epoch is <= `epoch` (their `epoch > 20` with `epoch` counted from 1)."""
    multiplier = schedule[0][1]
    for first, value in schedule:
        if epoch >= first:
            multiplier = value
    return factor * multiplier


def check_schedule(schedule):
    """`schedule` as None or a tuple of `(first_epoch, multiplier)` pairs ('authors': `AUTHORS_SCHEDULE`).

    Raises:
        ValueError: not None, 'authors' or a list of [int first_epoch, float multiplier >= 0] pairs whose first
            epochs increase from 1 or below.
    """
    if schedule is None:
        return None
    if isinstance(schedule, str) and schedule == "authors":
        return AUTHORS_SCHEDULE
    expected = "None, 'authors' or a list of [first_epoch, multiplier >= 0] pairs, first epochs increasing from 1"
    ok = isinstance(schedule, (list, tuple)) and len(schedule) > 0 and all(
        isinstance(pair, (list, tuple)) and len(pair) == 2 and validation.is_int(pair[0])
        and validation.is_real(pair[1]) and pair[1] >= 0 for pair in schedule)
    if ok:
        firsts = [int(pair[0]) for pair in schedule]
        ok = firsts[0] <= 1 and all(a < b for a, b in zip(firsts, firsts[1:]))
    if not ok:
        raise validation.invalid_argument("schedule", expected, schedule)
    return tuple((int(first), float(value)) for first, value in schedule)


def start_vector(size, seed=0):
    """The fixed power-iteration start b ~ U[0, 1)^size (float32 NumPy), seeded by `seed` and `size`."""
    return np.random.default_rng([int(seed), int(size)]).uniform(size=size).astype(np.float32)


def gram_residual(w2d, gram="smaller"):
    """A = WᵀW − I (or WWᵀ − I, the smaller Gram, when W has more columns than rows) in float32.

    Args:
        w2d: `(d, n)` float tensor, neurons in columns (`energy.neuron_matrix`).
        gram: 'smaller' or 'columns' (always WᵀW).

    Returns:
        float32 `(m, m)`, m = n or min(d, n).
    """
    w = ops.cast(w2d, "float32")
    d, n = w.shape
    if gram == "smaller" and n > d:
        g = ops.matmul(w, ops.transpose(w))
    else:
        g = ops.matmul(ops.transpose(w), w)
    return g - ops.eye(g.shape[0], dtype="float32")


def power_iteration_norm(a, start, power_iterations=AUTHORS_POWER_ITERATIONS, squared=False, epsilon=EPSILON):
    """Power-iteration estimate of σ(A) for a symmetric A, differentiable in A.

    ```
    v₀ = b;  v_t = A v_{t−1} / ‖A v_{t−1}‖  (t < k);  σ̂ = ‖A v_{k−1}‖
    ```

    with k = `power_iterations` products (v₀ = b/‖b‖ so that k = 1 is ‖Ab‖/‖b‖). As k grows σ̂ → σ(A) unless
    b is orthogonal to the top eigenvector.

    Args:
        a: `(m, m)` float32 symmetric tensor.
        start: `(m,)` float start vector b.
        power_iterations: int >= 1, k.
        squared: bool, return σ̂² (the authors' PyTorch code) instead of σ̂.
        epsilon: float >= 0 inside each norm, √(‖u‖² + ε).

    Returns:
        float32 scalar.
    """
    v = ops.reshape(ops.cast(start, "float32"), (-1, 1))
    v = v / ops.sqrt(ops.sum(ops.square(v)) + epsilon)
    u = ops.matmul(a, v)
    for _ in range(power_iterations - 1):
        v = u / ops.sqrt(ops.sum(ops.square(u)) + epsilon)
        u = ops.matmul(a, v)
    square = ops.sum(ops.square(u))
    return square if squared else ops.sqrt(square + epsilon)


@saving.register_serializable()
class SRIP(keras.regularizers.Regularizer):
    """Spectral restricted isometry property regularizer λ·σ(WᵀW − I) (Bansal et al., NeurIPS 2018).

    Neurons are the columns of `reshape(kernel, (-1, units))` (any Keras kernel layout); σ is estimated by
    `power_iteration_norm` on `gram_residual`. See the module docstring for the authors' constants and the
    choices here.

    Args:
        factor: float >= 0, λ (authors: 0.01 at the start of training, `schedule_factor`).
        power_iterations: int >= 1, products with WᵀW − I (authors: 2).
        squared: bool, penalise σ̂² (authors' PyTorch code) instead of σ̂ (paper, authors' Keras code).
        gram: 'smaller' (authors' PyTorch code) or 'columns' (authors' Keras code).
        seed: int, seed of the fixed start vector.
        schedule: None (λ constant), 'authors' (`AUTHORS_SCHEDULE`: λ × 1, 1e-3, 1e-4, 1e-6, 0 from epochs
            1, 21, 51, 71, 121) or a list of `[first_epoch, multiplier]` pairs (epochs counted from 1); applied
            by the `SRIPSchedule` callback at the start of each epoch.

    Reference:
        N. Bansal, X. Chen, Z. Wang, "Can We Gain More from Orthogonality Regularizations in Training Deep
        CNNs?", NeurIPS 2018, https://arxiv.org/abs/1810.09102; code VITA-Group/Orthogonality-in-CNNs.

    Example:

    >>> reg = SRIP(factor=0.01)
    >>> layer = keras.layers.Conv2D(8, 3, kernel_regularizer=reg)
    """

    def __init__(self, factor=AUTHORS_FACTOR, power_iterations=AUTHORS_POWER_ITERATIONS, squared=False,
                 gram="smaller", seed=0, schedule=None):
        self.factor = validation.non_negative_float(factor, "factor")
        self.schedule = check_schedule(schedule)
        self.power_iterations = validation.positive_int(
            power_iterations, "power_iterations", maximum=validation.MAX_INT32)
        self.squared = bool(validation.one_of(squared, "squared", (True, False)))
        self.gram = validation.one_of(gram, "gram", GRAMS)
        self.seed = validation.integer(seed, "seed", minimum=0, maximum=validation.MAX_INT32)
        # λ of the current epoch under a schedule, set by `SRIPSchedule` (created with the regularizer).
        self._factor_variable = None
        if self.schedule is not None:
            self._factor_variable = keras.Variable(
                self.factor, dtype="float32", trainable=False, aggregation="only_first_replica", name="srip_factor")

    @property
    def current_factor(self):
        """λ now: the scheduled variable's value, or `factor`."""
        if self._factor_variable is None:
            return self.factor
        return float(keras.ops.convert_to_numpy(self._factor_variable.value))

    def set_epoch(self, epoch):
        """Sets λ for (1-based) `epoch` from the schedule; no-op without one."""
        if self._factor_variable is not None:
            self._factor_variable.assign(schedule_factor(epoch, self.factor, self.schedule))

    def layer_state(self, kernel):
        """The variables the layer owning `kernel` must carry (`random_state.track_state`): the scheduled λ."""
        del kernel
        return [] if self._factor_variable is None else [self._factor_variable]

    def spectral_norm(self, x):
        """σ̂(WᵀW − I) (or σ̂² with `squared`) of kernel `x`, unweighted, float32."""
        a = gram_residual(energy.neuron_matrix(x), self.gram)
        start = start_vector(a.shape[0], self.seed)
        return power_iteration_norm(a, start, self.power_iterations, self.squared)

    def __call__(self, x):
        factor = self.factor if self._factor_variable is None else self._factor_variable.value
        return factor * self.spectral_norm(x)

    def get_config(self):
        return {
            "factor": self.factor,
            "power_iterations": self.power_iterations,
            "squared": self.squared,
            "gram": self.gram,
            "seed": self.seed,
            "schedule": None if self.schedule is None else [list(pair) for pair in self.schedule],
        }


def srip_regularizers(model):
    """The distinct scheduled `SRIP` instances on `model`'s weights (terms of summed regularizers included)."""
    found = []
    for variable in model.weights:
        regularizer = getattr(variable, "regularizer", None)
        for part in getattr(regularizer, "parts", None) or [regularizer]:
            if isinstance(part, SRIP) and part.schedule is not None and not any(part is f for f in found):
                found.append(part)
    return found


class SRIPSchedule(keras.callbacks.Callback):
    """Sets λ of every scheduled `SRIP` on the model at the start of each epoch (epoch e + 1 of Keras's e),
    as the authors' `DecayRate_Controller.on_epoch_begin` (VITA-Group/Orthogonality-in-CNNs,
    `ResNet/resnet_cifar_new.py`), and logs it as `srip_factor`."""

    def on_epoch_begin(self, epoch, logs=None):
        for regularizer in srip_regularizers(self.model):
            regularizer.set_epoch(epoch + 1)

    def on_epoch_end(self, epoch, logs=None):
        regularizers = srip_regularizers(self.model)
        if logs is not None and regularizers:
            logs["srip_factor"] = regularizers[0].current_factor
