"""Angular-margin target logits, the λ annealing schedule and the margin ranges.

The margin losses of W. Liu's thesis *Deep Representation Learning on Hypersphere*
(2020; ch. 2 and §3.3) differ from softmax only in the target logit. With
``c = cos θ_y`` the angle between a feature and its class weight, the target
"angular score" ψ is:

```
L-/A-Softmax, GA-Softmax (cosine)  ψ(θ) = (−1)^k cos(mθ) − 2k,  θ ∈ [kπ/m, (k+1)π/m]   [T-2.6]
GA-Softmax (linear)                ψ(θ) = 1 − 2mθ/π                                      [T-3.11]
GA-Softmax (sigmoid)               ψ(θ) = g_sigmoid(mθ)                                  [T-3.11]
CosFace                            ψ(θ) = cos θ − m                                      [CosFace]
ArcFace                            ψ(θ) = cos(θ + m)                                     [ArcFace]
combined (insightface)             ψ(θ) = cos(m1·θ + m2) − m3                            [ArcFace]
```

Citation keys: ``[T-2.6]`` is Eq. 2.6 of the thesis, ``[T §2.2.7]`` its section;
``[S-11]`` Eq. 11 of SphereNet (Liu et al., *Deep Hyperspherical Learning*, NIPS
2017); ``[CosFace]`` Wang et al., *CosFace: Large Margin Cosine Loss for Deep Face
Recognition* (CVPR 2018, arXiv:1801.09414); ``[ArcFace]`` Deng et al., *ArcFace:
Additive Angular Margin Loss for Deep Face Recognition* (CVPR 2019,
arXiv:1801.07698), whose combined margin is deepinsight/insightface
`CombinedMarginLoss` (recognition/arcface_torch `losses.py`). Chapter 2 of the
thesis is Liu et al., *Large-Margin Softmax Loss for Convolutional Neural
Networks* (ICML 2016, L-Softmax) and
*SphereFace: Deep Hypersphere Embedding for Face Recognition* (CVPR 2017,
A-Softmax); their Caffe layers are wy1iu/LargeMargin_Softmax_Loss
`large_margin_inner_product_layer.cpp` and wy1iu/sphereface
`margin_inner_product_layer.cpp`.

The multiplicative ψ is evaluated without arccos: cos(mθ) = T_m(c), the
Chebyshev polynomial of Eq. 2.7, and the interval index k comes from comparisons
of c with the thresholds cos(jπ/m) (the Caffe layers' sign tests, generalised to
any m), so ψ is a piecewise polynomial in c with finite derivative everywhere.
Angles that are truly needed (linear/sigmoid g, ArcFace) go through
`angles.safe_acos`; g itself comes from `sphere_tf.ops.angular`, never re-derived.

Logits: `cosine_logits` builds them from the cosines and the radius (every loss
type but L-Softmax); `margin_logits` from features and class weights, through
`cosine_logits`. `MarginHead` calls `margin_logits`; the Keras losses on cosines
(`sphere_tf.losses.CosFaceLoss` and the rest) call `cosine_logits`.

`check_margin` holds the margin ranges of every loss type (the one place they
are written down; `MarginHead` and the losses validate through it).

Every function computes in float32 whatever its input dtype.
"""

import math

from keras import ops

from sphere_tf import validation
from sphere_tf.ops import angles
from sphere_tf.ops import angular as angular_lib

# Upstream L-Softmax/A-Softmax annealing presets (wy1iu/LargeMargin_Softmax_Loss and
# wy1iu/sphereface prototxts): λ = max(λ_min, base·(1 + γ·t)^(−power)).
ANNEALING_PRESETS = {
    "mnist": {"base": 1000.0, "gamma": 2.5e-5, "power": 35.0, "lambda_min": 0.0},
    "cifar10": {"base": 1000.0, "gamma": 2e-5, "power": 45.0, "lambda_min": 0.0},
    "cifar10+": {"base": 1000.0, "gamma": 1e-5, "power": 45.0, "lambda_min": 0.0},
    "sphereface": {"base": 1000.0, "gamma": 0.12, "power": 1.0, "lambda_min": 5.0},
}
ANNEALING_KEYS = ("base", "gamma", "power", "lambda_min")
# Angular functions g with a `*_of_theta` form that GA-Softmax can evaluate at mθ.
GA_ANGULAR = ("linear", "cosine", "sigmoid")


def chebyshev_cos(cos_theta, m):
    """cos(mθ) as the Chebyshev polynomial T_m(cos θ)   [T-2.7].

    ```
    cos(mθ) = Σ_{n=0}^{⌊m/2⌋} (−1)^n C(m, 2n) c^{m−2n} (1 − c²)^n = T_m(c)
    T_0 = 1,  T_1 = c,  T_{n+1} = 2c·T_n − T_{n−1}
    ```

    (m = 2: 2c² − 1; m = 3: 4c³ − 3c; m = 4: 8c⁴ − 8c² + 1.) The three-term
    recurrence is the same polynomial as the binomial sum of Eq. 2.7 and is
    stable for |c| ≤ 1.

    Args:
        cos_theta: tensor of cosines c, any float dtype.
        m: int >= 0, the multiple.

    Returns:
        float32 tensor of the shape of `cos_theta`.
    """
    c = ops.cast(cos_theta, "float32")
    if m == 0:
        return ops.ones_like(c)
    t_prev, t = ops.ones_like(c), c
    for _ in range(m - 1):
        t_prev, t = t, 2.0 * c * t - t_prev
    return t


def margin_k(cos_theta, m):
    """Interval index k = #{j ∈ 1..m−1 : c ≤ cos(jπ/m)} = min(⌊mθ/π⌋, m − 1)   [T-2.6].

    Computed from comparisons only (piecewise constant, no gradient), like the
    sign tests of the Caffe layer. At a threshold c = cos(jπ/m) exactly both
    neighbouring k give the same ψ (ψ is continuous), so the tie rule is harmless.

    Returns:
        float32 tensor of the shape of `cos_theta`, values in {0, …, m − 1}.
    """
    c = ops.stop_gradient(ops.cast(cos_theta, "float32"))
    k = ops.zeros_like(c)
    for j in range(1, m):
        k = k + ops.cast(c <= math.cos(j * math.pi / m), "float32")
    return k


def psi(cos_theta, m):
    """Multiplicative-margin score ψ(θ) = (−1)^k cos(mθ) − 2k of L-/A-Softmax   [T-2.6].

    Continuous and strictly decreasing on [0, π] from ψ(0) = 1 to ψ(π) = 1 − 2m;
    m = 1 gives cos θ (plain softmax). No arccos: cos(mθ) = T_m(c) (`chebyshev_cos`)
    and k from comparisons (`margin_k`).

    Args:
        cos_theta: tensor of cosines c = cos θ, any float dtype.
        m: int >= 1, the margin.

    Returns:
        float32 tensor of the shape of `cos_theta`.
    """
    k = margin_k(cos_theta, m)
    sign = 1.0 - 2.0 * ops.mod(k, 2.0)
    return sign * chebyshev_cos(cos_theta, m) - 2.0 * k


def ga_target(cos_theta, m, angular="linear", k=0.3):
    """GA-Softmax target score g(mθ)   [T-3.11] = [S-11].

    * cosine: g(mθ) continued monotonically as the piecewise ψ of Eq. 2.6, i.e.
      GA-Softmax with cosine g *is* A-Softmax (Chebyshev form, no arccos);
    * linear: g(mθ) = 1 − 2mθ/π (monotone on all of [0, π], no saddle points);
    * sigmoid: Eq. 3.4 evaluated at mθ; its tanh form is strictly decreasing for
      every argument, so it needs no piecewise extension.

    Note: the thesis does not say how sigmoid GA-Softmax treats mθ > π; evaluating
    the (monotone) sigmoid there is our choice (it saturates near −1/tanh(π/4k)).

    Args:
        cos_theta: tensor of cosines.
        m: margin; int >= 1 for 'cosine', float >= 1 for 'linear' and 'sigmoid'.
        angular: one of 'linear', 'cosine', 'sigmoid'.
        k: float > 0, the sigmoid parameter (ignored otherwise).

    Returns:
        float32 tensor of the shape of `cos_theta`.
    """
    if angular == "cosine":
        return psi(cos_theta, int(m))
    if angular == "linear":
        return angular_lib.linear_of_theta(float(m) * angles.safe_acos(cos_theta))
    if angular == "sigmoid":
        return angular_lib.sigmoid_of_theta(float(m) * angles.safe_acos(cos_theta), k)
    raise ValueError(f"Unknown angular function {angular!r} for GA-Softmax; expected one of {GA_ANGULAR}.")


def additive_target(cos_theta, m1=1.0, m2=0.0, m3=0.0):
    """Combined-margin score cos(m1·θ + m2) − m3   [ArcFace] (CosFace, ArcFace as special cases).

    ```
    φ = m1·θ + m2,  κ = ⌊φ/π⌋ (no gradient)
    ψ(θ) = (−1)^κ cos φ − 2κ − m3
    ```

    For φ ≤ π this is exactly cos(m1θ + m2) − m3. Beyond π the piecewise
    continuation of Eq. 2.6 keeps ψ continuous and decreasing.

    * m1 = 1, m2 = 0: CosFace, ψ = c − m3, computed without arccos;
    * integer m1, m2 = 0: the A-Softmax ψ, computed with `psi` (no arccos);
    * otherwise θ = `safe_acos(c)`.

    Note: insightface replaces cos(θ + m) by cos θ − m·sin m once θ > π − m (its
    `th`/`mm` fallback), which jumps at θ = π − m; the continuation above is
    continuous instead. The two differ only for θ > π − m2.

    Returns:
        float32 tensor of the shape of `cos_theta`.
    """
    c = ops.cast(cos_theta, "float32")
    if m1 == 1.0 and m2 == 0.0:
        return c - m3
    if m2 == 0.0 and float(m1).is_integer():
        return psi(c, int(m1)) - m3
    phi = m1 * angles.safe_acos(c) + m2
    kappa = ops.stop_gradient(ops.floor(phi / math.pi))
    sign = 1.0 - 2.0 * ops.mod(kappa, 2.0)
    return sign * ops.cos(phi) - 2.0 * kappa - m3


def annealing_lambda(step, base, gamma, power, lambda_min=0.0):
    """Annealing weight λ_t = max(λ_min, base·(1 + γ·t)^(−power)) (upstream Caffe layers).

    Upstream increments the iteration counter before using it, so the first
    training step has t = 1.

    Args:
        step: int or integer/float tensor, the training step t >= 0.
        base, gamma, power, lambda_min: floats >= 0 (see `ANNEALING_PRESETS`).

    Returns:
        float32 scalar tensor (or of the shape of `step`).
    """
    t = ops.cast(step, "float32")
    decayed = base * ops.exp(-power * ops.log1p(gamma * t))
    return ops.maximum(ops.cast(lambda_min, "float32"), decayed)


def anneal(plain, target, lam):
    """Annealed target logit (λ·plain + target) / (1 + λ)   [T §2.2.7], [T §A.7].

    λ = 0 gives the margin logit, λ → ∞ the plain one.
    """
    lam = ops.cast(lam, "float32")
    return (lam * ops.cast(plain, "float32") + ops.cast(target, "float32")) / (1.0 + lam)


def gather_target(values, labels):
    """values[i, labels[i]] as a column `(N, 1)`; `values` is `(N, C)` or broadcasts to it."""
    labels = ops.reshape(ops.cast(labels, "int32"), (-1, 1))
    return ops.take_along_axis(values, labels, axis=-1)


def replace_target(logits, labels, target):
    """Logits with logits[i, labels[i]] replaced by target[i] (target `(N, 1)`)."""
    labels = ops.reshape(ops.cast(labels, "int32"), (-1,))
    mask = ops.cast(ops.one_hot(labels, ops.shape(logits)[-1]), "bool")
    return ops.where(mask, target, logits)


# ----------------------------------------------------------------------------------------
# Full logits of the margin family.

LOSS_TYPES = (
    "lsoftmax", "asoftmax", "wsoftmax", "gasoftmax", "ssoftmax", "cosface", "arcface", "combined",
)
# Loss types whose class weights are normalised (all but L-Softmax) and whose features are.
NORMALIZED_WEIGHTS = frozenset(LOSS_TYPES) - {"lsoftmax"}
NORMALIZED_FEATURES = frozenset({"ssoftmax", "cosface", "arcface", "combined"})
# The defaults of each loss type (MarginHead and the losses of `sphere_tf.losses`).
DEFAULT_MARGINS = {
    "lsoftmax": 4,  # thesis Table 2.2 / MNIST prototxt (CIFAR prototxts use 2)
    "asoftmax": 4,  # SphereFace default [T §2.3]
    "wsoftmax": 1,  # no margin [T-3.10]
    "gasoftmax": 4,  # [T §3.4]: m = 4 in all GA-Softmax experiments
    "ssoftmax": 1,  # S-Softmax has no margin in the thesis; m > 1 makes it a GA form
    "cosface": 0.35,  # CosFace paper (Wang et al., CVPR 2018) / insightface
    "arcface": 0.5,  # ArcFace paper (Deng et al., CVPR 2019) / insightface
    "combined": (1.0, 0.5, 0.0),  # insightface default (= ArcFace)
}
DEFAULT_ANGULAR = {"gasoftmax": "linear"}  # the thesis's proposed "linear GA-Softmax"; others cosine
DEFAULT_SCALES = {"ssoftmax": 30.0, "cosface": 64.0, "arcface": 64.0, "combined": 64.0}
# ε inside the square roots of ‖x‖ and ‖W_j‖: keeps zero features / zero columns finite.
# Note: the Caffe layers add 1e-9 to the denominator ‖x‖‖w‖ instead; with autodiff the
# ε must sit inside the root so that d‖x‖/dx is finite at x = 0.
NORM_EPSILON = 1e-12
# With normalised features the gradient at x = 0 is s/√ε: ε = 1e-4 (the project-wide
# upstream SphereNet/DCNet epsilon) bounds it by 100·s, inside float16 range for s <= 650.
NORMALIZED_FEATURE_EPSILON = 1e-4


# The multiplicative margin m of the Caffe layers: LargeMarginInnerProduct and MarginInnerProduct take
# `type: SINGLE | DOUBLE | TRIPLE | QUADRUPLE`, i.e. m = 1..4, and hard-code ψ for each (Chebyshev T_1..T_4
# with sign tests for k). The thesis's experiments use m <= 4 too [T Table 2.1, Table 3.1].
MULTIPLICATIVE_MARGINS = (1, 4)


def check_margin(loss_type, margin, angular="cosine"):
    """The margin `margin` of `loss_type`, validated and normalised (the ranges of every loss type).

    ```
    lsoftmax, asoftmax, cosine ga-/ssoftmax  int m in [1, 4]    the Caffe layers' `type` SINGLE..QUADRUPLE
    linear/sigmoid gasoftmax, ssoftmax       float m in [1, 4]  the same range (cosine GA-Softmax is A-Softmax)
    wsoftmax                                 1                  W-Softmax has no margin [T-3.10]
    cosface                                  float m in [0, 2)  m >= 2 puts ψ(0) = 1 − m below every cos θ_j
    arcface                                  float m in [0, π)  m >= π puts ψ(0) at or below −1
    combined       (m1, m2, m3): m1 in [1, 4], m2 in [0, π), m3 in [0, 2)   the three rows above
    ```

    Args:
        loss_type: one of `LOSS_TYPES`.
        margin: the margin (a triple for 'combined').
        angular: the g of GA-/S-Softmax ('linear', 'cosine', 'sigmoid').

    Returns:
        int for the Chebyshev forms, float for the others, a tuple of three floats for 'combined'.

    Raises:
        ValueError: the margin is outside its range, naming `margin` and the range.
    """
    low, high = MULTIPLICATIVE_MARGINS
    chebyshev = loss_type in ("lsoftmax", "asoftmax") or (
        loss_type in ("gasoftmax", "ssoftmax") and angular == "cosine"
    )
    if chebyshev:
        if not validation.is_int(margin) or not low <= margin <= high:
            raise validation.invalid_argument(
                "margin",
                f"an int in [{low}, {high}] for loss_type={loss_type!r} with cosine g (the Caffe layers' "
                "margin types SINGLE..QUADRUPLE)",
                margin,
            )
        return int(margin)
    if loss_type == "wsoftmax":
        if margin != 1:
            raise validation.invalid_argument(
                "margin", "1 (W-Softmax has no margin; use loss_type='gasoftmax')", margin
            )
        return 1
    if loss_type in ("gasoftmax", "ssoftmax"):
        return validation.real(margin, "margin", low=low, high=high)
    if loss_type == "cosface":
        return validation.real(margin, "margin", low=0.0, high=2.0, high_open=True)
    if loss_type == "arcface":
        return validation.real(margin, "margin", low=0.0, high=math.pi, high_open=True)
    if loss_type == "combined":
        ok = isinstance(margin, (tuple, list)) and len(margin) == 3 and all(validation.is_real(v) for v in margin)
        if ok:
            m1, m2, m3 = (float(v) for v in margin)
            ok = low <= m1 <= high and 0.0 <= m2 < math.pi and 0.0 <= m3 < 2.0
        if not ok:
            raise validation.invalid_argument(
                "margin", f"a triple (m1, m2, m3) with m1 in [{low}, {high}], m2 in [0, π), m3 in [0, 2)", margin
            )
        return (m1, m2, m3)
    raise validation.invalid_argument("loss_type", f"one of {LOSS_TYPES}", loss_type)


def default_epsilon(loss_type):
    """ε inside the norms for `loss_type`: 1e-4 with normalised features, else 1e-12."""
    return NORMALIZED_FEATURE_EPSILON if loss_type in NORMALIZED_FEATURES else NORM_EPSILON


def target_score(cos_theta, loss_type, margin, angular="cosine", k=0.3):
    """ψ(θ_y) of one loss type (see the module docstring), float32."""
    if loss_type in ("lsoftmax", "asoftmax"):
        return psi(cos_theta, int(margin))
    if loss_type == "wsoftmax" or (loss_type in ("gasoftmax", "ssoftmax") and margin == 1):
        return angular_lib.get_angular_fn(angular)(cos_theta, k)
    if loss_type in ("gasoftmax", "ssoftmax"):
        return ga_target(cos_theta, margin, angular, k)
    if loss_type == "cosface":
        return additive_target(cos_theta, 1.0, 0.0, margin)
    if loss_type == "arcface":
        return additive_target(cos_theta, 1.0, margin, 0.0)
    if loss_type == "combined":
        m1, m2, m3 = margin
        return additive_target(cos_theta, m1, m2, m3)
    raise ValueError(f"Unknown loss type {loss_type!r}; expected one of {LOSS_TYPES}.")


def cosine_logits(
    cos_theta,
    labels=None,
    loss_type="cosface",
    margin=0.35,
    angular="cosine",
    k=0.3,
    radius=1.0,
    bias=None,
    lam=0.0,
):
    """Logits of the margin-softmax family from the cosines c_j and the radius r (all types but L-Softmax).

    ```
    plain  f_j = r·g(θ_j) + b_j
    target f_y = (λ·plain_y + r·ψ(θ_y) + b_y) / (1 + λ)    ψ from `target_score`
    ```

    The whole loss needs only c_j = cos θ_j and r: r = s for the types with
    normalised features (`NORMALIZED_FEATURES`), r = ‖x‖ for A-/W-/GA-Softmax.
    `margin_logits` computes c_j and r from features and class weights and calls
    this; the losses of `sphere_tf.losses` call it on a model's cosines.
    L-Softmax needs ‖W_j‖ per class and x·W_j itself, so it is `margin_logits` only.

    Args:
        cos_theta: `(N, C)` cosines in [-1, 1], any float dtype.
        labels: `(N,)` or `(N, 1)` integer labels, or None for plain logits.
        loss_type: one of `LOSS_TYPES` but 'lsoftmax'.
        margin: m (int or float, or `(m1, m2, m3)` for 'combined').
        angular: g for wsoftmax/gasoftmax/ssoftmax ('linear', 'cosine', 'sigmoid').
        k: float > 0, sigmoid parameter.
        radius: float s, or a tensor broadcasting to `(N, 1)` (the feature norms ‖x‖).
        bias: optional `(C,)` bias.
        lam: float or scalar tensor, the annealing weight λ >= 0.

    Returns:
        float32 logits `(N, C)`.
    """
    if loss_type == "lsoftmax":
        raise ValueError("L-Softmax logits need the class weights (radius ‖W_j‖‖x‖); use `margin_logits`.")
    cos = ops.cast(cos_theta, "float32")
    radius = ops.cast(radius, "float32")
    plain = radius * angular_lib.get_angular_fn(angular)(cos, k)
    if bias is not None:
        plain = plain + ops.cast(bias, "float32")
    if labels is None:
        return plain
    return _with_target(plain, cos, labels, radius, loss_type, margin, angular, k, bias, lam)


def _with_target(plain, cos, labels, radius_y, loss_type, margin, angular, k, bias, lam):
    """`plain` with each label's logit replaced by the margin logit (λ·plain_y + r_y·ψ(θ_y) + b_y) / (1 + λ)."""
    cos_y = gather_target(cos, labels)
    plain_y = gather_target(plain, labels)
    target = radius_y * target_score(cos_y, loss_type, margin, angular, k)
    if bias is not None:
        bias_y = ops.take(ops.cast(bias, "float32"), ops.reshape(ops.cast(labels, "int32"), (-1,)))
        target = target + ops.reshape(bias_y, (-1, 1))
    target = anneal(plain_y, target, lam)
    return replace_target(plain, labels, target)


def margin_logits(
    features,
    kernel,
    labels=None,
    loss_type="asoftmax",
    margin=4,
    angular="cosine",
    k=0.3,
    scale=None,
    bias=None,
    lam=0.0,
    epsilon=None,
    class_axis=1,
):
    """Logits of the margin-softmax family; the margin touches the target logit only.

    ```
    c_j = x·W_j / (‖x‖‖W_j‖),   ‖v‖ = sqrt(Σv² + ε)
    radius r_j:  ‖W_j‖‖x‖ (lsoftmax) | ‖x‖ (asoftmax, wsoftmax, gasoftmax) | s (others)
    plain f_j = r_j·g(θ_j) + b_j            (= x·W_j + b_j for lsoftmax)
    target f_y = (λ·plain_y + r_y·ψ(θ_y) + b_y) / (1 + λ)    ψ from `target_score`
    ```

    [T-2.4, T-2.8] (L-Softmax), [T-2.20] (A-Softmax), [T-3.10, T-3.11]
    (W-/GA-Softmax), [T ch. 1] (S-Softmax), [CosFace], [ArcFace] (CosFace,
    ArcFace and the combined margin). Every type but L-Softmax goes through
    `cosine_logits` once c_j and r are known.

    Args:
        features: `(N, d)` tensor, any float dtype.
        kernel: `(d, C)` class weights (columns are classes), or `(C, d)` with
            `class_axis=0`.
        labels: `(N,)` or `(N, 1)` integer labels, or None for plain logits.
        loss_type: one of `LOSS_TYPES`.
        margin: m (int or float, or `(m1, m2, m3)` for 'combined').
        angular: g for wsoftmax/gasoftmax/ssoftmax ('linear', 'cosine', 'sigmoid').
        k: float > 0, sigmoid parameter.
        scale: float s for ssoftmax/cosface/arcface/combined.
        bias: optional `(C,)` bias.
        lam: float or scalar tensor, the annealing weight λ >= 0.
        epsilon: float >= 0 inside the norms, or None for `default_epsilon(loss_type)`.
        class_axis: 1 when `kernel`'s columns are the classes (Keras's Dense
            layout), 0 when its rows are (class-major, as `PartialFCHead`
            stores it: a gathered class is then a contiguous row and its norm a
            contiguous reduction).

    Returns:
        float32 logits `(N, C)`.
    """
    if class_axis not in (0, 1):
        raise ValueError(f"class_axis must be 0 or 1. Received: class_axis={class_axis!r}")
    if epsilon is None:
        epsilon = default_epsilon(loss_type)
    x_unit, x_norm = angles.normalize(features, axis=-1, epsilon=epsilon)  # (N, 1) norms
    w_unit, w_norm = angles.normalize(kernel, axis=1 - class_axis, epsilon=epsilon)
    # x·W with the classes on either axis of W. An einsum contracts a (C, d) kernel's rows directly (TensorFlow's
    # MatMul with transpose_b, XLA's dot_general), where a transposed copy of the kernel would cost a pass over it.
    product = (lambda a, b: ops.einsum("nd,cd->nc", a, b)) if class_axis == 0 else ops.matmul
    w_norm = ops.reshape(w_norm, (1, -1))  # (1, C) norms
    cos = product(x_unit, w_unit)
    if loss_type != "lsoftmax":
        radius = scale if loss_type in NORMALIZED_FEATURES else x_norm
        return cosine_logits(cos, labels, loss_type, margin, angular, k, radius, bias, lam)
    plain = product(ops.cast(features, "float32"), ops.cast(kernel, "float32"))  # x·W_j exactly
    if bias is not None:
        plain = plain + ops.cast(bias, "float32")
    if labels is None:
        return plain
    radius_y = gather_target(x_norm * w_norm, labels)  # ‖x‖‖W_y‖
    return _with_target(plain, cos, labels, radius_y, loss_type, margin, angular, k, bias, lam)
