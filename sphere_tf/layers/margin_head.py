"""`MarginHead`: the class-weight layer of the angular-margin softmax family.

One layer covers L-Softmax, A-Softmax (SphereFace), W-/GA-/S-Softmax and the
additive-margin family (CosFace, ArcFace, insightface's combined margin). It owns
the class weights (`head.kernel`, shape `(feature_dim, num_classes)`) and returns
logits for `keras.losses.SparseCategoricalCrossentropy(from_logits=True)`:

* `head(features, labels=labels, training=True)`: the target logit of each sample
  carries the margin (annealed with λ), the other logits are plain;
* `head(features)` (or `training=False`): plain logits, labels ignored, so the
  layer exports with a features-only serving signature and evaluates like the
  Caffe layers' TEST phase (plain inner product, same weights).

The maths is in `sphere_tf.ops.margin`; see docs/losses.md for the model patterns.
"""

import math

import keras
from keras import ops

from sphere_tf.ops import margin as margin_lib

DEFAULT_MARGINS = {
    "lsoftmax": 4,  # thesis Table 2.2 / MNIST prototxt (CIFAR prototxts use 2)
    "asoftmax": 4,  # SphereFace default [T §2.3]
    "wsoftmax": 1,  # no margin [T-3.10]
    "gasoftmax": 4,  # [T §3.4]: m = 4 in all GA-Softmax experiments
    "ssoftmax": 1,  # S-Softmax has no margin in the thesis; m > 1 makes it a GA form
    "cosface": 0.35,  # CosFace paper / insightface
    "arcface": 0.5,  # ArcFace paper / insightface
    "combined": (1.0, 0.5, 0.0),  # insightface default (= ArcFace)
}
DEFAULT_ANGULAR = {"gasoftmax": "linear"}  # the thesis's proposed "linear GA-Softmax"; others cosine
DEFAULT_SCALES = {"ssoftmax": 30.0, "cosface": 64.0, "arcface": 64.0, "combined": 64.0}
SCALED_TYPES = frozenset(DEFAULT_SCALES)
ANGULAR_TYPES = frozenset({"wsoftmax", "gasoftmax", "ssoftmax"})


def _bad(name, expected, value):
    return ValueError(f"Invalid value for argument `{name}`: expected {expected}. Received: {name}={value!r}")


def _is_number(value):
    return not isinstance(value, bool) and isinstance(value, (int, float))


def _resolve_annealing(annealing):
    """Preset name / dict / None -> (identifier to store, dict or None)."""
    if annealing is None:
        return None, None
    if isinstance(annealing, str):
        if annealing not in margin_lib.ANNEALING_PRESETS:
            raise _bad("annealing", f"None, a dict or one of {sorted(margin_lib.ANNEALING_PRESETS)}", annealing)
        return annealing, dict(margin_lib.ANNEALING_PRESETS[annealing])
    if isinstance(annealing, dict):
        unknown = set(annealing) - set(margin_lib.ANNEALING_KEYS)
        missing = {"base", "gamma", "power"} - set(annealing)
        if unknown or missing:
            raise _bad(
                "annealing",
                f"a dict with keys base, gamma, power and optionally lambda_min (unknown: "
                f"{sorted(unknown)}, missing: {sorted(missing)})",
                annealing,
            )
        resolved = {"lambda_min": 0.0, **annealing}
        for key in margin_lib.ANNEALING_KEYS:
            value = resolved[key]
            if not _is_number(value) or not math.isfinite(value) or value < 0:
                raise _bad("annealing", f"{key} to be a finite float >= 0", annealing)
            resolved[key] = float(value)
        return dict(resolved), resolved
    raise _bad("annealing", f"None, a dict or one of {sorted(margin_lib.ANNEALING_PRESETS)}", annealing)


def _check_margin(loss_type, margin, angular):
    if loss_type in ("lsoftmax", "asoftmax") or (loss_type in ("gasoftmax", "ssoftmax") and angular == "cosine"):
        if isinstance(margin, bool) or not isinstance(margin, int) or margin < 1:
            raise _bad("margin", f"an int >= 1 for loss_type={loss_type!r} with cosine g", margin)
        return margin
    if loss_type == "wsoftmax":
        if margin != 1:
            raise _bad("margin", "1 (W-Softmax has no margin; use loss_type='gasoftmax')", margin)
        return 1
    if loss_type in ("gasoftmax", "ssoftmax"):
        if not _is_number(margin) or not margin >= 1 or not math.isfinite(margin):
            raise _bad("margin", f"a float >= 1 for loss_type={loss_type!r}", margin)
        return margin
    if loss_type == "cosface":
        if not _is_number(margin) or not 0 <= margin < 2:
            raise _bad("margin", "a float in [0, 2) (CosFace subtracts m from cos θ)", margin)
        return float(margin)
    if loss_type == "arcface":
        if not _is_number(margin) or not 0 <= margin < math.pi:
            raise _bad("margin", "a float in [0, π) (ArcFace adds m to θ)", margin)
        return float(margin)
    # combined
    if (
        not isinstance(margin, (tuple, list))
        or len(margin) != 3
        or not all(_is_number(v) and math.isfinite(v) for v in margin)
        or not (margin[0] >= 1 and 0 <= margin[1] < math.pi and margin[2] >= 0)
    ):
        raise _bad("margin", "a triple (m1, m2, m3) with m1 >= 1, 0 <= m2 < π, m3 >= 0", margin)
    return tuple(float(v) for v in margin)


def _upstream_kernel_initializer():
    # Caffe "msra" filler of the L-Softmax layer: N(0, 2 / fan_in), not truncated.
    return keras.initializers.VarianceScaling(scale=2.0, mode="fan_in", distribution="untruncated_normal")


@keras.saving.register_keras_serializable(package="sphere_tf")
class MarginHead(keras.layers.Layer):
    """Classification head of the angular-margin softmax family (margin on the target only).

    ```
    c_j = x·W_j / (‖x‖‖W_j‖)
    plain  f_j = r_j·g(θ_j) + b_j,   r_j = ‖W_j‖‖x‖ | ‖x‖ | s
    target f_y = (λ·plain_y + r_y·ψ(θ_y) + b_y) / (1 + λ)          (training only)
    λ_t = max(λ_min, base·(1 + γ·t)^(−power)),  t = 1, 2, … training steps
    ```

    | loss_type   | weights    | radius r   | ψ(θ_y)                         | defaults          |
    |-------------|------------|------------|--------------------------------|-------------------|
    | 'lsoftmax'  | raw        | ‖W_j‖‖x‖   | (−1)^k cos mθ − 2k  [T-2.6]    | m = 4             |
    | 'asoftmax'  | normalised | ‖x‖        | (−1)^k cos mθ − 2k  [T-2.20]   | m = 4             |
    | 'wsoftmax'  | normalised | ‖x‖        | g(θ)                [T-3.10]   | g = cosine        |
    | 'gasoftmax' | normalised | ‖x‖        | g(mθ)               [T-3.11]   | g = linear, m = 4 |
    | 'ssoftmax'  | normalised | s (x norm.)| g(mθ)               [T-ch1]    | s = 30, m = 1     |
    | 'cosface'   | normalised | s (x norm.)| cos θ − m                      | s = 64, m = 0.35  |
    | 'arcface'   | normalised | s (x norm.)| cos(θ + m)                     | s = 64, m = 0.5   |
    | 'combined'  | normalised | s (x norm.)| cos(m1·θ + m2) − m3            | s = 64, (1, .5, 0)|

    Multiplicative ψ uses the Chebyshev form with sign tests for k (no arccos);
    g comes from `sphere_tf.ops.angular`. ψ is continued past π monotonically
    (see `sphere_tf.ops.margin`). Weight normalisation is exact (autodiff through
    W/‖W‖ every call).

    Annealing: the step counter t is a non-trainable int64 variable `iteration`
    (saved in checkpoints and `.keras` files); each call with `training=True` and
    labels advances it by one *before* computing λ, as upstream does.

    Note: the logits are computed and returned in float32 under every dtype
    policy (inputs are cast up; the layer does not autocast its variables).
    Margin logits reach −(2m − 1)‖W‖‖x‖, beyond float16 range for moderately large
    features, and the Keras mixed-precision guide asks for float32 softmax inputs.

    Note: the Caffe A-Softmax layer renormalises W in place and back-propagates
    normalised pseudo-gradients (README "Note 1"); this layer uses exact gradients,
    so learning rates and λ schedules may need retuning, as the upstream README says.

    Args:
        num_classes: int > 0, the number of classes C.
        loss_type: str, one of 'lsoftmax', 'asoftmax', 'wsoftmax', 'gasoftmax',
            'ssoftmax', 'cosface', 'arcface', 'combined'.
        margin: the margin m (int for Chebyshev forms, float for linear/sigmoid
            GA-Softmax, CosFace and ArcFace; `(m1, m2, m3)` for 'combined');
            None takes the default of the table.
        angular: None or one of 'linear', 'cosine', 'sigmoid': g for 'wsoftmax',
            'gasoftmax', 'ssoftmax' (the other types need 'cosine').
        k: float > 0, the sigmoid parameter (thesis recommends 0.3).
        scale: float > 0, s for 'ssoftmax', 'cosface', 'arcface', 'combined'
            (None = default); must be None for the other types.
        annealing: None (λ = 0), one of 'mnist', 'cifar10', 'cifar10+',
            'sphereface' (upstream prototxts), or a dict with `base`, `gamma`,
            `power` and optionally `lambda_min`.
        use_bias: bool, add a class bias (the thesis allows it for imbalanced data).
        label_penalty: None or a callable `penalty(kernel, labels) -> scalar`,
            added with `add_loss` whenever the head is called with labels in
            training (e.g. SphereFace+'s data-dependent output-layer MHE); it must
            be Keras-serializable to survive `.keras` round trips.
        epsilon: float >= 0, inside the square roots of ‖x‖ and ‖W_j‖; None gives
            1e-4 for the types with normalised features (bounds the gradient at a
            zero feature by 100·s, float16-safe) and 1e-12 otherwise.
        kernel_initializer, bias_initializer, kernel_regularizer, bias_regularizer,
        kernel_constraint, bias_constraint: as for `keras.layers.Dense`. The kernel
            default is the Caffe "msra" filler N(0, 2/fan_in) of the L-Softmax layer.

    Input shape:
        `(batch, feature_dim)` features; `labels`: `(batch,)` or `(batch, 1)` ints.

    Output shape:
        `(batch, num_classes)` float32 logits.

    Raises:
        ValueError: invalid hyperparameters, naming the argument.

    Reference:
        W. Liu, Deep Representation Learning on Hypersphere, PhD thesis 2020,
        ch. 2 and §3.3; Liu et al., Large-Margin Softmax Loss (ICML 2016),
        https://arxiv.org/abs/1612.02295; SphereFace (CVPR 2017),
        https://arxiv.org/abs/1704.08063.

    Example:

    >>> head = MarginHead(10, loss_type="asoftmax", margin=4, annealing="sphereface")
    >>> features = keras.ops.ones((2, 3))
    >>> tuple(head(features).shape)
    (2, 10)
    """

    def __init__(
        self,
        num_classes,
        loss_type="asoftmax",
        margin=None,
        angular=None,
        k=0.3,
        scale=None,
        annealing=None,
        use_bias=False,
        label_penalty=None,
        epsilon=None,
        kernel_initializer=None,
        bias_initializer="zeros",
        kernel_regularizer=None,
        bias_regularizer=None,
        kernel_constraint=None,
        bias_constraint=None,
        **kwargs,
    ):
        kwargs["autocast"] = False  # inputs are not cast down; the maths is float32
        super().__init__(**kwargs)
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise _bad("num_classes", "a positive int", num_classes)
        if loss_type not in margin_lib.LOSS_TYPES:
            raise _bad("loss_type", f"one of {margin_lib.LOSS_TYPES}", loss_type)
        if angular is None:
            angular = DEFAULT_ANGULAR.get(loss_type, "cosine")
        if loss_type in ANGULAR_TYPES:
            if angular not in margin_lib.GA_ANGULAR:
                raise _bad("angular", f"one of {margin_lib.GA_ANGULAR} for loss_type={loss_type!r}", angular)
        elif angular != "cosine":
            raise _bad("angular", f"'cosine' (or None) for loss_type={loss_type!r}", angular)
        if not _is_number(k) or not k > 0:
            raise _bad("k", "a float > 0", k)
        if margin is None:
            margin = DEFAULT_MARGINS[loss_type]
        margin = _check_margin(loss_type, margin, angular)
        if loss_type in SCALED_TYPES:
            if scale is None:
                scale = DEFAULT_SCALES[loss_type]
            if not _is_number(scale) or not scale > 0 or not math.isfinite(scale):
                raise _bad("scale", "a float > 0", scale)
            scale = float(scale)
        elif scale is not None:
            raise _bad("scale", f"None for loss_type={loss_type!r} (its radius is the feature norm)", scale)
        if epsilon is None:
            epsilon = margin_lib.default_epsilon(loss_type)
        if not _is_number(epsilon) or epsilon < 0:
            raise _bad("epsilon", "a float >= 0", epsilon)
        if label_penalty is not None and not callable(label_penalty):
            raise _bad("label_penalty", "None or a callable penalty(kernel, labels)", label_penalty)
        self.num_classes = num_classes
        self.loss_type = loss_type
        self.margin = margin
        self.angular = angular
        self.k = float(k)
        self.scale = scale
        self.annealing, self._annealing = _resolve_annealing(annealing)
        self.use_bias = bool(use_bias)
        self.label_penalty = label_penalty
        self.epsilon = float(epsilon)
        self.kernel_initializer = keras.initializers.get(kernel_initializer or _upstream_kernel_initializer())
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.kernel_constraint = keras.constraints.get(kernel_constraint)
        self.bias_constraint = keras.constraints.get(bias_constraint)
        self.input_spec = keras.layers.InputSpec(min_ndim=2)

    def build(self, input_shape):
        feature_dim = input_shape[-1]
        if feature_dim is None:
            raise ValueError(f"MarginHead needs a known feature dimension. Received: input_shape={input_shape}")
        self.kernel = self.add_weight(
            name="kernel",
            shape=(feature_dim, self.num_classes),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
            constraint=self.kernel_constraint,
            autocast=False,  # float32 maths under mixed policies (see the class docstring)
        )
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias",
                shape=(self.num_classes,),
                initializer=self.bias_initializer,
                regularizer=self.bias_regularizer,
                constraint=self.bias_constraint,
                autocast=False,
            )
        else:
            self.bias = None
        self.iteration = self.add_weight(
            name="iteration", shape=(), dtype="int64", initializer="zeros", trainable=False
        )
        self.input_spec = keras.layers.InputSpec(min_ndim=2, axes={-1: feature_dim})

    # -- helpers ----------------------------------------------------------------------

    @property
    def annealing_params(self):
        """The resolved schedule dict (base, gamma, power, lambda_min), or None."""
        return None if self._annealing is None else dict(self._annealing)

    def lambda_at(self, step):
        """λ at training step `step` (float32); 0 without annealing."""
        if self._annealing is None:
            return ops.zeros((), "float32")
        return margin_lib.annealing_lambda(step, **self._annealing)

    def current_lambda(self):
        """λ used by the most recent training step (t = `iteration`)."""
        return self.lambda_at(self.iteration)

    def normalized_kernel(self):
        """Unit-norm class weights Ŵ_j = W_j / sqrt(‖W_j‖² + ε), float32 `(d, C)`."""
        w = ops.cast(self.kernel, "float32")
        return w / ops.sqrt(ops.sum(ops.square(w), axis=0, keepdims=True) + self.epsilon)

    def _logits(self, features, labels, lam):
        return margin_lib.margin_logits(
            features,
            self.kernel,
            labels,
            loss_type=self.loss_type,
            margin=self.margin,
            angular=self.angular,
            k=self.k,
            scale=self.scale,
            bias=self.bias,
            lam=lam,
            epsilon=self.epsilon,
        )

    # -- Keras API --------------------------------------------------------------------

    def call(self, inputs, labels=None, training=None):
        if labels is None or not training:
            return self._logits(inputs, None, 0.0)
        step = self.iteration + 1
        self.iteration.assign(step)
        if self.label_penalty is not None:
            self.add_loss(self.label_penalty(self.kernel, labels))
        return self._logits(inputs, labels, self.lambda_at(step))

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.num_classes)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_classes": self.num_classes,
                "loss_type": self.loss_type,
                "margin": list(self.margin) if isinstance(self.margin, tuple) else self.margin,
                "angular": self.angular,
                "k": self.k,
                "scale": self.scale,
                "annealing": self.annealing,
                "use_bias": self.use_bias,
                "label_penalty": keras.saving.serialize_keras_object(self.label_penalty),
                "epsilon": self.epsilon,
                "kernel_initializer": keras.initializers.serialize(self.kernel_initializer),
                "bias_initializer": keras.initializers.serialize(self.bias_initializer),
                "kernel_regularizer": keras.regularizers.serialize(self.kernel_regularizer),
                "bias_regularizer": keras.regularizers.serialize(self.bias_regularizer),
                "kernel_constraint": keras.constraints.serialize(self.kernel_constraint),
                "bias_constraint": keras.constraints.serialize(self.bias_constraint),
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config = dict(config)
        if isinstance(config.get("margin"), list):
            config["margin"] = tuple(config["margin"])
        if config.get("label_penalty") is not None:
            config["label_penalty"] = keras.saving.deserialize_keras_object(config["label_penalty"])
        return cls(**config)
