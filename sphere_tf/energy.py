"""Hyperspherical energies of a layer's neurons: MHE [T-5.1], [T-5.4], [T-5.5], [T-D.10].

A *neuron* is one output unit's full weight vector: for a Keras kernel of any
layout (Conv2D `(kh, kw, C_in, C_out)`, Dense `(in, out)`) the neurons are the
columns of `reshape(kernel, (-1, units))`, exactly as in the authors' TF code.
Biases are not part of a neuron.

```
E_s = 1/(N(N−1)) Σ_i Σ_{j≠i} f_s(‖ŵ_i − ŵ_j‖)                   [T-5.1] / N(N−1) [T-5.4]
f_s(z) = z^{−s}  (s > 0, Riesz),        f_0(z) = log(1/z)        [T-5.1]
angular [T-5.5]:     z = arccos(ŵ_iᵀŵ_j)
half-space [T-5.3.4]: the 2N points {ŵ_k, −ŵ_k}, mean over 2N(2N−1) ordered pairs  [T-E.2]
weighted [T-D.10]:   z = ‖β_i ŵ_i − β_j ŵ_j‖
```

Everything is computed in float32 from the cosine Gram matrix, in the upstream
form C = WᵀW / (‖w‖ᵀ‖w‖) with ``‖w‖ = sqrt(Σ w² + 1e-4)`` (wy1iu/MHE, rmlin/CoMHE), and the
squared chord distance ``2 − 2C`` (``β_i² + β_j² − 2β_iβ_j C`` when weighted).

Numerics:
* The diagonal is removed with `where` selection on the *inputs* of the
  log, never by multiplying infinities with a 0 mask (inf·0 = NaN gradients).
* The squared distance is floored at `distance_epsilon` (1e-6) before the log, so
  duplicate neurons give a large but finite energy and a zero (not NaN) gradient.
* Euclidean s = 1 and 2 (the defaults) are summed directly, 1/z² or rsqrt(z²)
  from the floored z², when ε_d bounds every term and its gradient far below
  the float32 maximum (`_use_direct`); the result is the same up to float32
  rounding and needs a handful of elementwise passes instead of log/exp/shift.
* Other Riesz terms are evaluated in log-space, ``z^{−s} = exp(−s·log z)``, and summed
  with a max shift (log-sum-exp), so the mean is exact up to float32 rounding
  and nothing overflows on the way; the mean itself saturates at
  ``exp(_LOG_ENERGY_MAX) ≈ 5e21`` (reached only by near-duplicate neurons at
  s ≳ 6; the headroom up to the float32 maximum keeps the *gradient* finite).
  For large s, `log_space=True` returns log E_s instead, finite for every s.

The s = 0 (log) term has two forms (`log_form`, `LOG_FORMS`):

* 'thesis' (the default here): ``f_0(z) = log(1/z)`` for every distance [T-5.1];
* 'code': the authors' TF code, wy1iu/MHE `code/architecture.py`
  (`_add_thomson_constraint`, `--power_s 0 / a0`): ``−log(2 − 2C) = −log z²`` for
  the euclidean distance (twice the thesis term) and ``−log(θ/π + 1e-4)`` for the
  angular one (the thesis term itself, no factor 2). So 'code' doubles the
  euclidean log term only; for 'angular' and 'normalized_angular' both forms agree.
  `MHE` and `CoMHE` default to 'code'.

Citation keys: [T-x.y] is equation x.y of W. Liu, "Deep Representation Learning
on Hypersphere" (PhD thesis, 2020; ch. 5 MHE, ch. 6 CoMHE, app. D/E), [T-5.3.4]
a section of it; MHE is Liu et al., "Learning towards Minimum Hyperspherical
Energy" (NeurIPS 2018), code wy1iu/MHE.
"""

import functools
import math

import keras
from keras import ops

from sphere_tf import registry
from sphere_tf import validation
from sphere_tf.ops import angles

# Upstream constant: `sqrt(sum(w^2) + 1e-4)` in wy1iu/MHE and rmlin/CoMHE.
DEFAULT_EPSILON = angles.DEFAULT_EPSILON
# Floor on the squared chord distance: keeps duplicate neurons finite (not in the upstream
# code, which only adds the identity to the diagonal).
DEFAULT_DISTANCE_EPSILON = 1e-6
# Upstream A-MHE: θ/π + 1e-4 (wy1iu/MHE `--power_s=a0/a1/a2`).
NORMALIZED_ANGLE_EPSILON = 1e-4
# Saturation point of the returned mean energy (log scale); see the module docstring.
_LOG_ENERGY_MAX = 50.0
# Bound on (number of terms) × (largest term derivative) for the direct s = 1, 2 sum.
_DIRECT_LIMIT = 1e30

DISTANCES = ("euclidean", "angular", "normalized_angular")
LOG_FORMS = ("thesis", "code")
REDUCTIONS = ("mean", "sum")


def check_energy_args(power, distance, log_form="thesis", reduction="mean", beta=None, log_space=False):
    """Validates the arguments every energy entry point shares (`hyperspherical_energy` and its callers).

    Args:
        power: finite float >= 0, the Riesz exponent s.
        distance: one of `DISTANCES`.
        log_form: one of `LOG_FORMS`.
        reduction: one of `REDUCTIONS`.
        beta: None or per-neuron weights (euclidean distance only, [T-D.10]).
        log_space: bool, only for power > 0.

    Raises:
        ValueError: naming the first invalid argument.
    """
    validation.non_negative_float(power, "power")
    validation.one_of(distance, "distance", DISTANCES)
    validation.one_of(log_form, "log_form", LOG_FORMS)
    validation.one_of(reduction, "reduction", REDUCTIONS)
    if beta is not None and distance != "euclidean":
        raise validation.invalid_argument(
            "beta", f"None for distance={distance!r} (weighted MHE [T-D.10] is euclidean only)", beta
        )
    if log_space and power == 0:
        raise validation.invalid_argument(
            "log_space", "False for power=0 (log E_s needs E_s > 0, and E_0 can be negative)", log_space
        )


def neuron_matrix(weights):
    """Neurons as columns: `reshape(weights, (-1, units))` in float32.

    Args:
        weights: kernel tensor of rank >= 2, last axis = units (Keras layouts), or
            a rank-1 tensor is rejected.

    Returns:
        float32 tensor `(d, N)`.
    """
    w = ops.cast(weights, "float32")
    if len(w.shape) < 2:
        raise ValueError(
            "Invalid value for argument `weights`: expected a kernel of rank >= 2 with neurons along the last "
            f"axis. Received: weights with shape {tuple(w.shape)}"
        )
    return ops.reshape(w, (-1, w.shape[-1]))


def normalized_neurons(weights, epsilon=DEFAULT_EPSILON):
    """Columns ŵ = w / sqrt(‖w‖² + ε) of the neuron matrix, float32 `(d, N)`."""
    return angles.normalize(neuron_matrix(weights), axis=0, epsilon=epsilon)[0]


def gram(w, scale=1.0):
    """G = scale·WᵀW for `w` of shape `(..., d, N)` (leading axes batch), with a one-matmul gradient.

    ```
    forward   G = (scale·W)ᵀW
    backward  ∂L/∂W = (scale·W)·(Ḡ + Ḡᵀ),   Ḡ = ∂L/∂G
    ```

    The backward formula is exact for any upstream Ḡ (dG = s(dWᵀW + WᵀdW) gives
    ∂L/∂W = s(WḠᵀ + WḠ)); the generic product gradient evaluates those two
    (d, N)×(N, N) products separately and adds them, here the small N×N Ḡ is
    symmetrised first and one product remains. Same values up to float32
    rounding. `scale` (a Python float; 2 gives the exact 2·C the direct energy
    sum consumes) multiplies the (d, N) operand, not the (N, N) result. The
    gradient is written in differentiable `keras.ops`, so nested gradients (the
    unrolled AP/Adv-CoMHE steps) differentiate through it as through the plain
    product. The products are einsums, which contract over d without a
    transposed copy of W.

    Note: on the torch backend `keras.ops.custom_gradient` is a
    `torch.autograd.Function` whose backward cannot be differentiated again, so
    there the plain product (and autograd's two-product gradient) is used.

    Args:
        w: float tensor `(..., d, N)`.
        scale: Python float multiplying the result.

    Returns:
        `(..., N, N)` tensor, `scale·WᵀW`.
    """
    batch = "..." if len(w.shape) > 2 else ""

    def product(a, b):  # a_cᵀ b_c for every batch entry c
        return ops.einsum(f"{batch}kn,{batch}km->{batch}nm", a, b)

    def scaled(w):
        return w if scale == 1.0 else float(scale) * w

    if keras.backend.backend() == "torch":
        return product(scaled(w), w)

    @ops.custom_gradient
    def scaled_gram(w):
        scaled_w = scaled(w)

        # Keras's calling convention for every backend: the upstream gradient comes
        # positionally (TF, JAX) or as the `upstream` keyword.
        def grad(*args, upstream=None):
            if upstream is None:
                (upstream,) = args
            # TensorFlow hands a gathered product's gradient (a label-indexed subset of the Gram) as
            # IndexedSlices, which keras.ops passes through: a sum with zeros densifies it on every backend.
            if hasattr(upstream, "dense_shape"):
                upstream = ops.zeros(tuple(scaled_w.shape[:-2]) + (w.shape[-1], w.shape[-1]), "float32") + upstream
            symmetric = upstream + ops.swapaxes(upstream, -1, -2)
            return ops.einsum(f"{batch}kn,{batch}nm->{batch}km", scaled_w, symmetric)

        return product(scaled_w, w), grad

    return scaled_gram(w)


def cosine_gram(weights, epsilon=DEFAULT_EPSILON):
    """C = ŴᵀŴ, the (N, N) cosine matrix of a layer's neurons (float32).

    Matches the upstream ``(WᵀW) / (‖w‖ᵀ‖w‖)`` with ``‖w‖ = sqrt(Σw² + ε)``, so
    C_ii = ‖w_i‖²/(‖w_i‖² + ε) < 1. The product uses `gram` (one-matmul gradient).
    """
    return gram(normalized_neurons(weights, epsilon))


def _doubled_cosines(weights, epsilon=DEFAULT_EPSILON):
    """2·C in the upstream form ``2·(WᵀW) / (‖w‖ᵀ‖w‖)``, `(N, N)` float32.

    wy1iu/MHE divides the raw Gram matrix by the outer product of the norms
    rather than normalising W first; the squared norms Σw² are the Gram's
    diagonal, so no (d, N) elementwise pass (or its gradient) is needed, only
    (N, N) ones. Equal to `2·cosine_gram(weights, epsilon)` up to float32
    rounding; the factor 2 rides on one norm factor (exact). Not
    `angles.normalize`: the norms come from the Gram's diagonal on purpose.
    """
    # `gram`: WᵀW without a transposed copy, gradient W·(Ḡ + Ḡᵀ) in one matmul.
    raw = gram(neuron_matrix(weights))
    inv_norm = ops.rsqrt(ops.diagonal(raw) + epsilon)
    return raw * (ops.reshape(2.0 * inv_norm, (-1, 1)) * ops.reshape(inv_norm, (1, -1)))


def _log_distance(cos, beta_i, beta_j, distance, distance_epsilon):
    """log z for a matrix of cosines (float32); z is the chord or geodesic distance."""
    if distance == "euclidean":
        if beta_i is None:
            d2 = 2.0 - 2.0 * cos
        else:
            d2 = ops.square(beta_i) + ops.square(beta_j) - 2.0 * beta_i * beta_j * cos
        return 0.5 * ops.log(ops.maximum(d2, distance_epsilon))
    theta = angles.safe_acos(cos)
    if distance == "angular":
        return ops.log(theta)
    return ops.log(theta / math.pi + NORMALIZED_ANGLE_EPSILON)


def log_term_scale(distance, log_form):
    """The factor c of the s = 0 term ``−c·log z``.

    ```
    thesis [T-5.1]:            f_0(z) = log(1/z)                  c = 1
    code, euclidean:           −log(2 − 2C) = −log z²             c = 2   (wy1iu/MHE `--power_s 0`)
    code, normalized_angular:  −log(θ/π + 1e-4)                   c = 1   (wy1iu/MHE `--power_s a0`)
    code, angular:             −log θ (the a0 form without /π)    c = 1
    ```
    """
    return 2.0 if log_form == "code" and distance == "euclidean" else 1.0


def _masked_terms(log_z_blocks, power, distance, log_form):
    """Per-pair energy exponents (power > 0) or log terms (power = 0) for each (log_z, mask) block."""
    factor = log_term_scale(distance, log_form) if power == 0 else float(power)
    return [(-factor * log_z, mask) for log_z, mask in log_z_blocks]


def _reduce(blocks, power, count, reduction, log_space):
    """Sum (or mean) over the selected entries of every block, per batch entry.

    Each block is `(x, mask)` with x of shape `(..., M, N)`; the last two axes
    are reduced, leading (batch) axes are kept. For power > 0 the blocks hold
    exponents x = −s log z and the result is Σ exp(x), computed with a max
    shift taken separately for every batch entry so nothing overflows. `count`
    (the mean's divisor) may be a Python number or a float32 scalar tensor.
    """
    divisor = count if reduction == "mean" else 1.0
    pair_axes = (-2, -1)
    if power == 0:
        total = 0.0
        for term, mask in blocks:
            total = total + ops.sum(ops.where(mask, term, 0.0), axis=pair_axes)
        return total / divisor
    neg_inf = float("-inf")
    shift = None
    for x, mask in blocks:
        block_max = ops.max(ops.where(mask, x, neg_inf), axis=pair_axes, keepdims=True)
        shift = block_max if shift is None else ops.maximum(shift, block_max)
    # The shift cancels exactly; stop_gradient keeps it out of the backward pass.
    shift = ops.stop_gradient(shift)
    total = 0.0
    for x, mask in blocks:
        # where() before exp(): masked entries become exp(-inf) = 0 with zero gradient.
        total = total + ops.sum(ops.exp(ops.where(mask, x - shift, neg_inf)), axis=pair_axes)
    log_divisor = math.log(divisor) if isinstance(divisor, (int, float)) else ops.log(divisor)
    log_value = ops.log(total) + ops.squeeze(shift, axis=pair_axes) - log_divisor
    if log_space:
        return log_value
    return ops.exp(ops.minimum(log_value, _LOG_ENERGY_MAX))


def _use_direct(power, distance, log_space, distance_epsilon, count):
    """Whether the Riesz sum may be evaluated directly (no log/exp, no max shift).

    Only for the euclidean distance with s = 1 or 2 (the defaults everywhere).
    Every squared distance is floored at `distance_epsilon`, so each term is at
    most ε_d^{−s/2} and its derivative in z² at most (s/2)·ε_d^{−s/2−1}; the
    direct path is taken when `count` times the latter stays below
    `_DIRECT_LIMIT` (1e30, far under the float32 maximum 3.4e38). With the
    default ε_d = 1e-6 and s = 2 that is ~1e12 per term, i.e. any N < 1e8.
    """
    if distance != "euclidean" or log_space or power not in (1, 2):
        return False
    return count * float(distance_epsilon) ** (-(power / 2.0 + 1.0)) <= _DIRECT_LIMIT


def _direct_riesz_sum(doubled_cos, power, half_space, beta, distance_epsilon):
    """Σ z^{−s} over the pairs of every batch entry, s ∈ {1, 2}, straight from 2·cos.

    ```
    z²_ij = max(β_i² + β_j² − β_iβ_j·(2C_ij), ε_d)     (β ≡ 1 unweighted)
    half-space pairs (ŵ_i, −ŵ_j): z² = max(β_i² + β_j² + β_iβ_j·(2C_ij), ε_d), all i, j
    s = 2: 1/z²,   s = 1: rsqrt(z²)
    ```

    The diagonal of the first block (a neuron with itself) is excluded without
    a mask: its squared distance is floored at D = 2·max β² (2 unweighted)
    instead of ε_d. Since C_ii ≥ 0 for a Gram matrix, z²_ii ≤ 2β_i² ≤ D, so
    every diagonal entry is exactly D^{−s/2}, its gradient goes to the constant
    floor (never to C_ii), and N·D^{−s/2} is subtracted from the sum. Every
    off-diagonal term is at least (4·max β²)^{−s/2}, i.e. ≥ 2^{−s/2} times a
    diagonal one, so the subtraction cancels no significant digits.
    Same values as the masked log-space path up to float32 rounding.
    """
    n = doubled_cos.shape[-1]
    if beta is None:
        base = 2.0
        scaled = doubled_cos
        diag_floor = ops.convert_to_tensor(2.0, "float32")
    else:
        beta_sq = ops.square(beta)
        base = ops.reshape(beta_sq, (n, 1)) + ops.reshape(beta_sq, (1, n))
        scaled = doubled_cos * (ops.reshape(beta, (n, 1)) * ops.reshape(beta, (1, n)))
        diag_floor = 2.0 * ops.max(beta_sq)
    eye = ops.cast(ops.eye(n), "bool")
    floor = ops.where(eye, diag_floor, distance_epsilon)
    # maximum(floor, ·): on a tie the gradient goes to the first argument, the constant floor.
    sq_plus = ops.maximum(floor, base - scaled)
    term = ops.reciprocal if power == 2 else ops.rsqrt
    pair_axes = (-2, -1)
    total = ops.sum(term(sq_plus), axis=pair_axes) - float(n) * term(diag_floor)
    if half_space:
        sq_minus = ops.maximum(base + scaled, distance_epsilon)
        total = total + ops.sum(term(sq_minus), axis=pair_axes)
    return total


def energy_from_cosines(
    cos=None,
    power=2,
    distance="euclidean",
    half_space=False,
    beta=None,
    log_form="thesis",
    distance_epsilon=DEFAULT_DISTANCE_EPSILON,
    reduction="mean",
    log_space=False,
    doubled_cos=None,
):
    """The energy reduction of `hyperspherical_energy` on cosine Gram matrices `(..., N, N)`.

    Pass either `cos` or `doubled_cos` = 2·cos (what the direct s = 1, 2 path
    consumes; callers can get it for free by scaling one factor of the Gram
    by 2, which is exact). Leading axes are batch axes (e.g. the C projections
    of RP-CoMHE [T-6.4]); every batch entry is reduced on its own and one
    float32 value per entry is returned (shape `cos.shape[:-2]`). Arguments are
    not validated here (the public callers do it); N must be static and >= 2
    unless `half_space`; the diagonal must be that of a Gram matrix (C_ii >= 0).

    Euclidean s = 1, 2 is summed directly (`_direct_riesz_sum`) when that
    cannot overflow (`_use_direct`); everything else goes through log-space
    terms with a max shift per batch entry (`_reduce`).
    """
    if (cos is None) == (doubled_cos is None):
        raise ValueError("Pass exactly one of `cos` and `doubled_cos`.")
    some_cos = cos if cos is not None else doubled_cos
    n = some_cos.shape[-1]
    count = n * (2 * n - 1) if half_space else n * (n - 1)
    if beta is not None:
        beta = ops.reshape(ops.cast(beta, "float32"), (n,))
    if _use_direct(power, distance, log_space, distance_epsilon, 2 * n * n):
        if doubled_cos is None:
            doubled_cos = 2.0 * cos
        total = _direct_riesz_sum(doubled_cos, power, half_space, beta, distance_epsilon)
        if half_space and reduction == "sum":
            total = 2.0 * total
        return ops.cast(total / float(count) if reduction == "mean" else total, "float32")
    if cos is None:
        cos = 0.5 * doubled_cos  # exact
    if beta is not None:
        beta_i, beta_j = ops.reshape(beta, (n, 1)), ops.reshape(beta, (1, n))
    else:
        beta_i = beta_j = None
    off_diagonal = ops.logical_not(ops.cast(ops.eye(n), "bool"))
    # Replace the diagonal by a harmless cosine *before* the log: masking infinities
    # afterwards (inf·0) would give NaN gradients.
    cos_off = ops.where(off_diagonal, cos, 0.0)
    blocks = [(_log_distance(cos_off, beta_i, beta_j, distance, distance_epsilon), off_diagonal)]
    if half_space:
        # Pairs (ŵ_i, −ŵ_j) for all i, j, including the virtual antipode j = i.
        everything = ops.ones((n, n), "bool")
        blocks.append((_log_distance(-cos, beta_i, beta_j, distance, distance_epsilon), everything))
        # The 2N points give each of these two blocks twice; the factor 2 cancels
        # in the mean: [2 S_+ + 2 S_-] / (2N(2N−1)) = (S_+ + S_-) / (N(2N−1)).
    terms = _masked_terms(blocks, power, distance, log_form)
    result = _reduce(terms, power, count, reduction, log_space)
    if half_space and reduction == "sum":
        result = result + math.log(2.0) if log_space else 2.0 * result
    return ops.cast(result, "float32")


def hyperspherical_energy(
    weights,
    power=2,
    distance="euclidean",
    half_space=False,
    beta=None,
    log_form="thesis",
    epsilon=DEFAULT_EPSILON,
    distance_epsilon=DEFAULT_DISTANCE_EPSILON,
    reduction="mean",
    log_space=False,
):
    """Hyperspherical energy of a layer's neurons  [T-5.1] normalised as in [T-5.4].

    ```
    E_s = 1/(N(N−1)) Σ_i Σ_{j≠i} f_s(z_ij),   f_s(z) = z^{−s} (s > 0),  f_0(z) = log(1/z)
    euclidean  z_ij = ‖ŵ_i − ŵ_j‖ = sqrt(2 − 2 ŵ_iᵀŵ_j)                        [T-5.1]
    angular    z_ij = arccos(ŵ_iᵀŵ_j)                                          [T-5.5]
    normalized_angular  z_ij = arccos(ŵ_iᵀŵ_j)/π + 1e-4   (upstream a0/a1/a2)
    weighted   z_ij = ‖β_i ŵ_i − β_j ŵ_j‖                                      [T-D.10]
    half-space: the same over the 2N points {ŵ_k, −ŵ_k}, divided by 2N(2N−1)   [T-E.2]
    ```

    The half-space energy is evaluated from the N×N Gram matrix without
    concatenating (the pair (ŵ_i, −ŵ_j) has cosine −C_ij), at half the cost.

    Args:
        weights: kernel of any Keras layout; neurons along the last axis.
        power: float >= 0, the Riesz exponent s (0 = log energy).
        distance: str, 'euclidean', 'angular' (thesis [T-5.5], radians) or
            'normalized_angular' (the upstream code's θ/π + 1e-4).
        half_space: bool, add the virtual neurons −ŵ_k (hidden layers only).
        beta: optional float tensor `(N,)` of positive per-neuron weights β_i
            (euclidean distance only). Virtual half-space neurons share β.
        log_form: 'thesis' (f_0 = log(1/z), default) or 'code' (wy1iu/MHE:
            −log z² = 2× the thesis term for the euclidean distance, the
            thesis term itself for the angular ones; see `log_term_scale`).
            Only used when power = 0.
        epsilon: float >= 0 inside the neuron norm sqrt (upstream 1e-4).
        distance_epsilon: float > 0, floor on the squared chord distance.
        reduction: 'mean' (over ordered pairs, [T-5.4]) or 'sum' (Eq 5.1 itself,
            ordered pairs, i.e. twice the sum over i < j).
        log_space: bool, return log E_s (power > 0 only); finite for any s.

    Returns:
        float32 scalar. For N = 1 without half-space there are no pairs and the
        energy is 0.

    Raises:
        ValueError: on an invalid argument.
    """
    check_energy_args(power, distance, log_form, reduction, beta, log_space)
    validation.non_negative_float(epsilon, "epsilon")
    validation.positive_float(distance_epsilon, "distance_epsilon")
    doubled_cos = _doubled_cosines(weights, epsilon)
    n = doubled_cos.shape[-1]
    if n is None:
        raise ValueError("Invalid value for argument `weights`: the number of neurons must be static.")
    if n < 2 and not half_space:
        return ops.zeros((), "float32")
    return energy_from_cosines(
        doubled_cos=doubled_cos,
        power=power,
        distance=distance,
        half_space=half_space,
        beta=beta,
        log_form=log_form,
        distance_epsilon=distance_epsilon,
        reduction=reduction,
        log_space=log_space,
    )


def data_dependent_energy(
    kernel,
    labels,
    power=2,
    distance="euclidean",
    log_form="thesis",
    epsilon=DEFAULT_EPSILON,
    distance_epsilon=DEFAULT_DISTANCE_EPSILON,
):
    """Mini-batch output-layer energy of SphereFace+ [T-5.8], classes of the batch only.

    ```
    E = 1/(m(N−1)) Σ_{i=1}^m Σ_{j≠y_i} f_s(‖ŵ_{y_i} − ŵ_j‖)
    ```

    with m the batch size and N the number of classifier neurons (columns of
    `kernel`, Keras `(feature_dim, num_classes)`). Full space, as the thesis uses it.

    Note: the Caffe `InterClass` layer of wy1iu/sphereface-plus implements a
    mean-based surrogate with a hand-written gradient; we implement Eq 5.8 itself.

    Args:
        kernel: classifier kernel `(..., N)`.
        labels: int tensor `(m,)` (or `(m, 1)`) of class ids in [0, N).
        power, distance, log_form, epsilon, distance_epsilon: as in
            `hyperspherical_energy` (no half-space, no β).

    Returns:
        float32 scalar.
    """
    check_energy_args(power, distance, log_form)
    cos = cosine_gram(kernel, epsilon)
    n = cos.shape[-1]
    if n < 2:
        return ops.zeros((), "float32")
    labels = ops.reshape(ops.cast(labels, "int32"), (-1,))
    rows = ops.take(cos, labels, axis=0)  # (m, N): cos(ŵ_{y_i}, ŵ_j)
    mask = ops.logical_not(ops.cast(ops.one_hot(labels, n), "bool"))
    rows = ops.where(mask, rows, 0.0)
    log_z = _log_distance(rows, None, None, distance, distance_epsilon)
    count = ops.cast(ops.shape(labels)[0], "float32") * float(n - 1)
    terms = _masked_terms([(log_z, mask)], power, distance, log_form)
    return ops.cast(_reduce(terms, power, count, "mean", False), "float32")


# Registry of named energies, named after the upstream `--power_s` flag
# (wy1iu/MHE `code/train.py`: 0, 1, 2 euclidean; a0, a1, a2 angular) but in the
# thesis forms: log(1/z) for s = 0 and θ in radians [T-5.5] for 'a*' (upstream's
# θ/π + 1e-4 is distance='normalized_angular', its −log z² log_form='code').
# Each entry is `fn(weights, **kwargs) -> scalar`; general s is
# `hyperspherical_energy(power=s)`.
ENERGY_FNS = {
    "s0": functools.partial(hyperspherical_energy, power=0, distance="euclidean"),
    "s1": functools.partial(hyperspherical_energy, power=1, distance="euclidean"),
    "s2": functools.partial(hyperspherical_energy, power=2, distance="euclidean"),
    "a0": functools.partial(hyperspherical_energy, power=0, distance="angular"),
    "a1": functools.partial(hyperspherical_energy, power=1, distance="angular"),
    "a2": functools.partial(hyperspherical_energy, power=2, distance="angular"),
}


def register_energy_fn(name, fn):
    """Adds `fn(weights, **kwargs) -> scalar` to `ENERGY_FNS`; a taken name raises."""
    if not callable(fn):
        raise validation.invalid_argument("fn", "a callable", fn)
    return registry.register(ENERGY_FNS, name, fn, "Energy")


def get_energy_fn(identifier):
    """Resolves a registry name (or a callable, returned as is) to an energy function."""
    if callable(identifier):
        return identifier
    return registry.lookup(ENERGY_FNS, identifier, "energy")

