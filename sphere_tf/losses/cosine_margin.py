"""Angular-margin softmax losses on a model's cosines: CosFace, ArcFace, the combined margin, SphereFace, GA-Softmax.

Every margin loss but L-Softmax depends on the class weights only through the
cosines c_j = cos θ_j between a feature x and the class weights W_j, and on x
only through c_j and a radius r (`sphere_tf.ops.margin.cosine_logits`):

```
plain  f_j = r·g(θ_j)                                   (j ≠ y)
target f_y = (λ·r·g(θ_y) + r·ψ(θ_y)) / (1 + λ)
L      = −log softmax(f)_y
```

So each is a Keras loss on a model that outputs cosines, the `huber` / `Huber`
pattern of `keras.losses`: a pure function returning per-sample losses and a
`keras.losses.Loss` class binding the hyperparameters. The maths is that of
`MarginHead` (both call `sphere_tf.ops.margin`), so a model ending in
`sphere_tf.layers.SphereDense(C)` (cosine g, no bias) trained with `CosFaceLoss`
computes what `MarginHead(C, loss_type="cosface")` trained with a cross-entropy
computes, to rounding (the same ε = 1e-4 inside both norms).

Input contract:

* `y_true`: integer class ids, shape `(N,)` or `(N, 1)` (floats holding integers
  are accepted, as Keras converts `y_true` to the loss dtype).
* `y_pred` with `scale=s` (every loss here can take it): the cosines `(N, C)`,
  values in [-1, 1]; the radius is s (normalised features). This is the only
  form of CosFace, ArcFace and the combined margin.
* `y_pred` with `scale=None` (SphereFace and GA-Softmax only, their papers'
  form): `(N, C + 1)`, the cosines followed by the feature norm ‖x‖ in the last
  column; the radius is ‖x‖. `with_feature_norm(cosines, features)` builds it.

A label outside [0, C) gives that sample a NaN loss (and so a NaN batch loss):
a loss runs inside the compiled train step, where no backend can raise.

λ annealing: `SphereFaceLoss` and `GASoftmaxLoss` take a fixed λ (`lam`), not
the upstream schedule λ_t = max(λ_min, base·(1 + γ·t)^(−power)). A schedule
needs a training-step counter, and a Keras 3 loss holds no state: a variable
made in a loss is neither saved with the model nor carried through JAX's
stateless train step (it would be frozen at its first value there).
`MarginHead(annealing=...)` keeps the counter as a layer weight (saved, and
advanced on every backend); use it for annealed SphereFace / L-Softmax.

L-Softmax is not here: its logits ‖W_j‖‖x‖ψ(θ) need the norm of every class
weight as well as the cosines, i.e. the weights themselves; it stays in
`MarginHead(loss_type="lsoftmax")`.

Keys as in `sphere_tf.ops.margin`: ``[T-2.20]`` Eq. 2.20 of W. Liu's thesis
*Deep Representation Learning on Hypersphere* (2020); ``[CosFace]`` Wang et al.,
*CosFace: Large Margin Cosine Loss for Deep Face Recognition* (CVPR 2018), the LMCL;
``[ArcFace]`` Deng et al., *ArcFace: Additive Angular Margin Loss for Deep Face
Recognition* (CVPR 2019), the ArcFace loss and its combined margin, and
deepinsight/insightface recognition/arcface_torch `losses.py` (`CombinedMarginLoss`).
"""

import keras
from keras import ops

from sphere_tf import saving
from sphere_tf import validation
from sphere_tf.losses import margin_softmax
from sphere_tf.ops import margin as margin_lib

# MarginHead's defaults (`sphere_tf.ops.margin.DEFAULT_MARGINS` / `DEFAULT_SCALES`), the papers'.
COSFACE_SCALE, COSFACE_MARGIN = margin_lib.DEFAULT_SCALES["cosface"], margin_lib.DEFAULT_MARGINS["cosface"]
ARCFACE_SCALE, ARCFACE_MARGIN = margin_lib.DEFAULT_SCALES["arcface"], margin_lib.DEFAULT_MARGINS["arcface"]
COMBINED_SCALE, COMBINED_MARGIN = margin_lib.DEFAULT_SCALES["combined"], margin_lib.DEFAULT_MARGINS["combined"]
SPHEREFACE_MARGIN = margin_lib.DEFAULT_MARGINS["asoftmax"]
GA_MARGIN, GA_ANGULAR = margin_lib.DEFAULT_MARGINS["gasoftmax"], margin_lib.DEFAULT_ANGULAR["gasoftmax"]


def with_feature_norm(cosines, features, epsilon=margin_lib.NORM_EPSILON):
    """`(N, C + 1)`: the cosines followed by ‖x‖ = sqrt(Σx² + ε), the `y_pred` of `scale=None` losses.

    Works on tensors and on symbolic `keras.Input`s (a functional model saves and
    loads with it).

    Args:
        cosines: `(N, C)` cosines.
        features: `(N, d)` the features x whose norm is the radius.
        epsilon: float >= 0 inside the square root (`MarginHead`'s default for A-/GA-Softmax).

    Returns:
        float tensor `(N, C + 1)` in the dtype of `cosines`.
    """
    norm = ops.sqrt(ops.sum(ops.square(ops.cast(features, "float32")), axis=-1, keepdims=True) + epsilon)
    return ops.concatenate([cosines, ops.cast(norm, cosines.dtype)], axis=-1)


def _cosines_and_radius(y_pred, scale):
    """Split `y_pred` per the input contract: (cosines, s) or (cosines, ‖x‖ column)."""
    y_pred = ops.cast(y_pred, "float32")
    if scale is not None:
        return y_pred, scale
    return y_pred[:, :-1], y_pred[:, -1:]


def margin_crossentropy(y_true, y_pred, loss_type, margin, scale=None, angular="cosine", k=0.3, lam=0.0):
    """Per-sample cross-entropy of the margin logits of `loss_type` on `y_pred` (the input contract above).

    The one function every loss of this module calls: margin logits from
    `sphere_tf.ops.margin.cosine_logits`, then `sparse_crossentropy`.

    Args:
        y_true: `(N,)` or `(N, 1)` integer labels.
        y_pred: `(N, C)` cosines (`scale` a float) or `(N, C + 1)` cosines and ‖x‖ (`scale=None`).
        loss_type: one of `sphere_tf.ops.margin.LOSS_TYPES` but 'lsoftmax'.
        margin: the margin of `loss_type` (unchecked here; the classes check it).
        scale: float s, or None to read the radius ‖x‖ from the last column.
        angular, k: g and its sigmoid parameter (W-/GA-/S-Softmax).
        lam: float or scalar tensor, λ >= 0.

    Returns:
        float32 `(N,)` losses; NaN for a label outside [0, C).
    """
    cosines, radius = _cosines_and_radius(y_pred, scale)
    num_classes = ops.shape(cosines)[-1]
    labels = ops.reshape(ops.cast(y_true, "int32"), (-1,))
    valid = ops.logical_and(labels >= 0, labels < num_classes)
    labels = ops.where(valid, labels, 0)  # an in-range id for the gathers; the sample's loss becomes NaN below
    logits = margin_lib.cosine_logits(cosines, labels, loss_type, margin, angular, k, radius, lam=lam)
    return ops.where(valid, margin_softmax.sparse_crossentropy(labels, logits), float("nan"))


def cosface_loss(y_true, y_pred, scale=COSFACE_SCALE, margin=COSFACE_MARGIN):
    """CosFace (large margin cosine) loss per sample: ψ(θ_y) = cos θ_y − m, radius s   [CosFace].

    ```
    L = −log( e^{s(cos θ_y − m)} / (e^{s(cos θ_y − m)} + Σ_{j≠y} e^{s cos θ_j}) )
    ```

    Args:
        y_true: `(N,)` or `(N, 1)` integer labels.
        y_pred: `(N, C)` cosines.
        scale: float > 0, s.
        margin: float in [0, 2), m.

    Returns:
        float32 `(N,)` losses.
    """
    return margin_crossentropy(y_true, y_pred, "cosface", margin, scale=scale)


def arcface_loss(y_true, y_pred, scale=ARCFACE_SCALE, margin=ARCFACE_MARGIN):
    """ArcFace (additive angular margin) loss per sample: ψ(θ_y) = cos(θ_y + m), radius s   [ArcFace].

    ```
    L = −log( e^{s cos(θ_y + m)} / (e^{s cos(θ_y + m)} + Σ_{j≠y} e^{s cos θ_j}) )
    ```

    Past θ_y + m = π the target continues as −cos(θ_y + m) − 2 (continuous and
    decreasing; `sphere_tf.ops.margin.additive_target`, which notes how this
    departs from insightface's fallback).

    Args:
        y_true: `(N,)` or `(N, 1)` integer labels.
        y_pred: `(N, C)` cosines.
        scale: float > 0, s.
        margin: float in [0, π), m (radians).

    Returns:
        float32 `(N,)` losses.
    """
    return margin_crossentropy(y_true, y_pred, "arcface", margin, scale=scale)


def combined_margin_loss(y_true, y_pred, scale=COMBINED_SCALE, margin=COMBINED_MARGIN):
    """Combined-margin loss per sample: ψ(θ_y) = cos(m1·θ_y + m2) − m3, radius s   [ArcFace] (insightface).

    (1, 0, m) is CosFace, (1, m, 0) ArcFace, (m, 0, 0) a feature-normalised
    A-Softmax (Chebyshev form, no arccos).

    Args:
        y_true: `(N,)` or `(N, 1)` integer labels.
        y_pred: `(N, C)` cosines.
        scale: float > 0, s.
        margin: (m1, m2, m3).

    Returns:
        float32 `(N,)` losses.
    """
    return margin_crossentropy(y_true, y_pred, "combined", tuple(margin), scale=scale)


def sphereface_loss(y_true, y_pred, margin=SPHEREFACE_MARGIN, scale=None, lam=0.0):
    """A-Softmax (SphereFace) loss per sample: ψ(θ_y) = (−1)^k cos(mθ_y) − 2k, radius ‖x‖ or s   [T-2.20].

    ```
    f_y = (λ·r·cos θ_y + r·ψ(θ_y)) / (1 + λ),   f_j = r·cos θ_j,   r = ‖x‖ (scale=None) or s
    ```

    Args:
        y_true: `(N,)` or `(N, 1)` integer labels.
        y_pred: `(N, C + 1)` cosines and ‖x‖ (`scale=None`), or `(N, C)` cosines.
        margin: int in [1, 4], m.
        scale: None (radius ‖x‖, the paper) or float > 0 (normalised features, radius s).
        lam: float >= 0, λ (fixed; see the module docstring).

    Returns:
        float32 `(N,)` losses.
    """
    return margin_crossentropy(y_true, y_pred, "asoftmax", int(margin), scale=scale, lam=lam)


def ga_softmax_loss(y_true, y_pred, margin=GA_MARGIN, angular=GA_ANGULAR, k=0.3, scale=None, lam=0.0):
    """GA-Softmax loss per sample: f_j = r·g(θ_j), target r·g(mθ_y)   [T-3.11] (W-Softmax [T-3.10] at m = 1).

    `scale=None` is GA-Softmax (radius ‖x‖); a float `scale` is S-Softmax
    (features normalised, radius s; `MarginHead(loss_type="ssoftmax")`).
    Cosine g with an integer m is A-Softmax.

    Args:
        y_true: `(N,)` or `(N, 1)` integer labels.
        y_pred: `(N, C + 1)` cosines and ‖x‖ (`scale=None`), or `(N, C)` cosines.
        margin: float in [1, 4] (an int for cosine g), m.
        angular: 'linear', 'cosine' or 'sigmoid', g.
        k: float > 0, the sigmoid parameter.
        scale: None or float > 0, see above.
        lam: float >= 0, λ (fixed).

    Returns:
        float32 `(N,)` losses.
    """
    loss_type = "gasoftmax" if scale is None else "ssoftmax"
    return margin_crossentropy(y_true, y_pred, loss_type, margin, scale=scale, angular=angular, k=k, lam=lam)


# -- Loss classes -------------------------------------------------------------------------


def _check_scale(scale, allow_none):
    return validation.positive_float(scale, "scale", allow_none=allow_none)


def _check_lam(lam):
    return validation.non_negative_float(lam, "lam")


class _CosineMarginLoss(keras.losses.Loss):
    """A `keras.losses.Loss` whose `call` forwards to the pure function `_fn` with `_hyperparameters()` (private)."""

    def call(self, y_true, y_pred):
        return type(self)._fn(y_true, y_pred, **self._hyperparameters())

    def get_config(self):
        return {**super().get_config(), **self._hyperparameters()}


@saving.register_serializable()
class CosFaceLoss(_CosineMarginLoss):
    """CosFace (large margin cosine) loss on cosines, `cosface_loss` as a `keras.losses.Loss`.

    ```
    L = −log( e^{s(cos θ_y − m)} / (e^{s(cos θ_y − m)} + Σ_{j≠y} e^{s cos θ_j}) )
    ```

    `MarginHead(loss_type="cosface")` with `SparseCategoricalCrossentropy(from_logits=True)`
    computes the same from features and its own class weights.

    Args:
        scale: float > 0, s (CosFace: 64).
        margin: float in [0, 2), m (CosFace: 0.35).
        reduction, name, dtype: as for `keras.losses.Loss`.

    Reference:
        Wang et al., CosFace: Large Margin Cosine Loss for Deep Face Recognition
        (CVPR 2018), https://arxiv.org/abs/1801.09414 (the LMCL).

    Example:

    >>> loss = CosFaceLoss(scale=64.0, margin=0.35)
    >>> round(float(loss([0], [[0.5, 0.5]])), 2)   # logits (64·0.15, 64·0.5): log(1 + e^{22.4})
    22.4
    """

    _fn = staticmethod(cosface_loss)

    def __init__(
        self, scale=COSFACE_SCALE, margin=COSFACE_MARGIN, reduction="sum_over_batch_size", name="cosface_loss",
        dtype=None,
    ):
        super().__init__(**margin_softmax.loss_arguments(reduction, name, dtype))
        self.scale = _check_scale(scale, allow_none=False)
        self.margin = margin_lib.check_margin("cosface", margin)

    def _hyperparameters(self):
        return {"scale": self.scale, "margin": self.margin}


@saving.register_serializable()
class ArcFaceLoss(_CosineMarginLoss):
    """ArcFace (additive angular margin) loss on cosines, `arcface_loss` as a `keras.losses.Loss`.

    ```
    L = −log( e^{s cos(θ_y + m)} / (e^{s cos(θ_y + m)} + Σ_{j≠y} e^{s cos θ_j}) )
    ```

    Note: past θ_y + m = π the target continues monotonically instead of
    insightface's cos θ − m·sin m fallback (`sphere_tf.ops.margin.additive_target`).

    Args:
        scale: float > 0, s (ArcFace: 64).
        margin: float in [0, π), m in radians (ArcFace: 0.5).
        reduction, name, dtype: as for `keras.losses.Loss`.

    Reference:
        Deng et al., ArcFace: Additive Angular Margin Loss for Deep Face
        Recognition (CVPR 2019), https://arxiv.org/abs/1801.07698.

    Example:

    >>> loss = ArcFaceLoss(scale=64.0, margin=0.5)
    >>> round(float(loss([1], [[1.0, 0.0]])), 2)   # logits (64, 64·cos(π/2 + 0.5))
    94.68
    """

    _fn = staticmethod(arcface_loss)

    def __init__(
        self, scale=ARCFACE_SCALE, margin=ARCFACE_MARGIN, reduction="sum_over_batch_size", name="arcface_loss",
        dtype=None,
    ):
        super().__init__(**margin_softmax.loss_arguments(reduction, name, dtype))
        self.scale = _check_scale(scale, allow_none=False)
        self.margin = margin_lib.check_margin("arcface", margin)

    def _hyperparameters(self):
        return {"scale": self.scale, "margin": self.margin}


@saving.register_serializable()
class CombinedMarginLoss(_CosineMarginLoss):
    """insightface's combined margin on cosines, ψ(θ_y) = cos(m1·θ_y + m2) − m3, as a `keras.losses.Loss`.

    ```
    L = −log( e^{s·ψ(θ_y)} / (e^{s·ψ(θ_y)} + Σ_{j≠y} e^{s cos θ_j}) )
    ```

    Args:
        scale: float > 0, s.
        margin: (m1, m2, m3) with m1 in [1, 4], m2 in [0, π), m3 in [0, 2)
            (insightface's default (1, 0.5, 0) is ArcFace).
        reduction, name, dtype: as for `keras.losses.Loss`.

    Reference:
        Deng et al., ArcFace (CVPR 2019), the combined margin; deepinsight/insightface
        recognition/arcface_torch `losses.py`, `CombinedMarginLoss`.

    Example:

    >>> loss = CombinedMarginLoss(scale=30.0, margin=(1.0, 0.0, 0.35))   # CosFace
    >>> round(float(loss([0], [[0.5, 0.5]])), 4) == round(float(CosFaceLoss(30.0, 0.35)([0], [[0.5, 0.5]])), 4)
    True
    """

    _fn = staticmethod(combined_margin_loss)

    def __init__(
        self, scale=COMBINED_SCALE, margin=COMBINED_MARGIN, reduction="sum_over_batch_size",
        name="combined_margin_loss", dtype=None,
    ):
        super().__init__(**margin_softmax.loss_arguments(reduction, name, dtype))
        self.scale = _check_scale(scale, allow_none=False)
        self.margin = margin_lib.check_margin("combined", margin)

    def _hyperparameters(self):
        return {"scale": self.scale, "margin": self.margin}

    def get_config(self):
        return {**super().get_config(), "margin": list(self.margin)}  # JSON has no tuples


@saving.register_serializable()
class SphereFaceLoss(_CosineMarginLoss):
    """A-Softmax (SphereFace) loss on cosines and feature norms, `sphereface_loss` as a `keras.losses.Loss`.

    ```
    ψ(θ) = (−1)^k cos(mθ) − 2k,  θ ∈ [kπ/m, (k+1)π/m]                  [T-2.6]
    f_y = (λ·r·cos θ_y + r·ψ(θ_y)) / (1 + λ),   f_j = r·cos θ_j         [T-2.20], [T §2.2.7]
    r = ‖x‖ (scale=None: y_pred is (N, C + 1), ‖x‖ last) or s (y_pred is (N, C))
    ```

    Note: λ is fixed. The upstream schedule λ_t needs a step counter, which a
    Keras loss cannot keep (see the module docstring); `MarginHead(loss_type=
    "asoftmax", annealing=...)` has it.

    Args:
        margin: int in [1, 4], m (SphereFace: 4).
        scale: None (radius ‖x‖ from the last column of y_pred, the paper) or
            float > 0 (normalised features, radius s).
        lam: float >= 0, λ (0: the margin logit alone; SphereFace's schedule
            ends at λ_min = 5).
        reduction, name, dtype: as for `keras.losses.Loss`.

    Reference:
        Liu et al., SphereFace: Deep Hypersphere Embedding for Face Recognition
        (CVPR 2017), https://arxiv.org/abs/1704.08063; W. Liu's thesis Eq. 2.20.

    Example:

    >>> loss = SphereFaceLoss(margin=4)
    >>> float(loss([0], [[1.0, 0.0, 10.0]])) < 1e-4   # θ_y = 0, ‖x‖ = 10: ψ = 1, logits (10, 0)
    True
    """

    _fn = staticmethod(sphereface_loss)

    def __init__(
        self, margin=SPHEREFACE_MARGIN, scale=None, lam=0.0, reduction="sum_over_batch_size", name="sphereface_loss",
        dtype=None,
    ):
        super().__init__(**margin_softmax.loss_arguments(reduction, name, dtype))
        self.margin = margin_lib.check_margin("asoftmax", margin)
        self.scale = _check_scale(scale, allow_none=True)
        self.lam = _check_lam(lam)

    def _hyperparameters(self):
        return {"margin": self.margin, "scale": self.scale, "lam": self.lam}


@saving.register_serializable()
class GASoftmaxLoss(_CosineMarginLoss):
    """GA-Softmax (and W-/S-Softmax) on cosines, `ga_softmax_loss` as a `keras.losses.Loss`.

    ```
    f_j = r·g(θ_j)  (j ≠ y),   f_y = (λ·r·g(θ_y) + r·g(mθ_y)) / (1 + λ)       [T-3.11]
    g: linear 1 − 2θ/π | cosine cos θ (piecewise ψ, = A-Softmax) | sigmoid [T-3.4]
    r = ‖x‖ (scale=None: y_pred is (N, C + 1), ‖x‖ last) or s (y_pred is (N, C))
    ```

    | MarginHead `loss_type` | this loss |
    |---|---|
    | 'gasoftmax' | `GASoftmaxLoss(margin, angular)` |
    | 'wsoftmax' | `GASoftmaxLoss(margin=1, angular)` [T-3.10] |
    | 'ssoftmax' | `GASoftmaxLoss(margin, angular, scale=s)` |

    The thesis's S-Softmax itself is `GASoftmaxLoss(margin=1, angular="cosine", scale=30)`.

    Args:
        margin: m; float in [1, 4] for linear/sigmoid g, int in [1, 4] for cosine g.
        angular: 'linear' (the thesis's proposal, default), 'cosine' or 'sigmoid', g.
        k: float > 0, the sigmoid parameter (0.3).
        scale: None (radius ‖x‖) or float > 0 (S-Softmax, radius s).
        lam: float >= 0, λ (fixed).
        reduction, name, dtype: as for `keras.losses.Loss`.

    Reference:
        W. Liu, Deep Representation Learning on Hypersphere (PhD thesis, 2020),
        §3.3; Liu et al., Deep Hyperspherical Learning (NIPS 2017), Eq. 11.

    Example:

    >>> loss = GASoftmaxLoss(margin=4, angular="linear")
    >>> round(float(loss([0], [[0.0, 0.0, 2.0]])), 4)   # θ = π/2, ‖x‖ = 2: logits (2·g(2π), 0) = (−6, 0)
    6.0025
    """

    _fn = staticmethod(ga_softmax_loss)

    def __init__(
        self, margin=GA_MARGIN, angular=GA_ANGULAR, k=0.3, scale=None, lam=0.0, reduction="sum_over_batch_size",
        name="ga_softmax_loss", dtype=None,
    ):
        super().__init__(**margin_softmax.loss_arguments(reduction, name, dtype))
        self.angular = validation.one_of(angular, "angular", margin_lib.GA_ANGULAR)
        self.margin = margin_lib.check_margin("gasoftmax", margin, angular)
        self.k = validation.positive_float(k, "k")
        self.scale = _check_scale(scale, allow_none=True)
        self.lam = _check_lam(lam)

    def _hyperparameters(self):
        return {"margin": self.margin, "angular": self.angular, "k": self.k, "scale": self.scale, "lam": self.lam}
