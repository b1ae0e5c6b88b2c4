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

The maths and the margin ranges are in `sphere_tf.ops.margin`; see docs/losses.md
for the model patterns. The same losses on a model's cosines, without this layer,
are `sphere_tf.losses.CosFaceLoss`, `ArcFaceLoss`, `CombinedMarginLoss`,
`SphereFaceLoss` and `GASoftmaxLoss` (all but L-Softmax, and with a fixed λ).

Saving and loading: `MarginHead` is registered with Keras as
`"sphere_tf>MarginHead"` when `sphere_tf` is imported, so `import sphere_tf`
(or any sphere_tf submodule) before `keras.saving.load_model(path)`; without
it Keras fails with "Could not locate class 'MarginHead'". A SavedModel from
`model.export(path)` serves without the import.

References: W. Liu, *Deep Representation Learning on Hypersphere* (PhD thesis,
2020), ch. 2 and §3.3 (keys ``[T-2.6]`` = Eq. 2.6, ``[T §2.3]`` = section 2.3);
Liu et al., *Large-Margin Softmax Loss for Convolutional Neural Networks* (ICML
2016) and wy1iu/LargeMargin_Softmax_Loss `large_margin_inner_product_layer.cpp`;
Liu et al., *SphereFace: Deep Hypersphere Embedding for Face Recognition* (CVPR
2017) and wy1iu/sphereface `margin_inner_product_layer.cpp`; Wang et al.,
*CosFace* (CVPR 2018); Deng et al., *ArcFace* (CVPR 2019) and
deepinsight/insightface `CombinedMarginLoss`.
"""

import math

import keras
from keras import ops

from sphere_tf import saving
from sphere_tf import validation
from sphere_tf.layers import weight_arguments
from sphere_tf.ops import angles
from sphere_tf.ops import margin as margin_lib
from sphere_tf.ops import runtime_checks
from sphere_tf.regularizers import random_state

# The defaults of every loss type live with the maths (shared with `sphere_tf.losses`); kept here by name.
DEFAULT_MARGINS = margin_lib.DEFAULT_MARGINS
DEFAULT_ANGULAR = margin_lib.DEFAULT_ANGULAR
DEFAULT_SCALES = margin_lib.DEFAULT_SCALES
SCALED_TYPES = frozenset(DEFAULT_SCALES)
ANGULAR_TYPES = frozenset({"wsoftmax", "gasoftmax", "ssoftmax"})


def _resolve_annealing(annealing):
    """Preset name / dict / None -> (identifier to store, dict or None)."""
    if annealing is None:
        return None, None
    expected = f"None, a dict or one of {sorted(margin_lib.ANNEALING_PRESETS)}"
    if isinstance(annealing, str):
        validation.one_of(annealing, "annealing", margin_lib.ANNEALING_PRESETS)
        return annealing, dict(margin_lib.ANNEALING_PRESETS[annealing])
    if not isinstance(annealing, dict):
        raise validation.invalid_argument("annealing", expected, annealing)
    unknown = set(annealing) - set(margin_lib.ANNEALING_KEYS)
    missing = {"base", "gamma", "power"} - set(annealing)
    if unknown or missing:
        raise validation.invalid_argument(
            "annealing",
            f"a dict with keys base, gamma, power and optionally lambda_min (unknown: "
            f"{sorted(unknown)}, missing: {sorted(missing)})",
            annealing,
        )
    resolved = {"lambda_min": 0.0, **annealing}
    for key in margin_lib.ANNEALING_KEYS:
        value = resolved[key]
        if not validation.is_real(value) or not math.isfinite(value) or value < 0:
            raise validation.invalid_argument("annealing", f"{key} to be a finite float >= 0", annealing)
        resolved[key] = float(value)
    return dict(resolved), resolved


def _check_labels(labels, features_shape, num_classes):
    """Static checks of `labels`: integer class ids of shape `(batch,)` or `(batch, 1)`."""
    dtype = keras.backend.standardize_dtype(labels.dtype)
    if "int" not in dtype:
        raise ValueError(
            f"MarginHead expects `labels` as integer class ids in [0, {num_classes}) (e.g. int32). "
            f"Received: labels with dtype={dtype}"
        )
    shape = tuple(labels.shape)
    batch = features_shape[0]
    if not (len(shape) == 1 or (len(shape) == 2 and shape[1] == 1)) or (
        batch is not None and shape[0] is not None and shape[0] != batch
    ):
        raise ValueError(
            "MarginHead expects `labels` of shape (batch,) or (batch, 1) matching the features' batch. "
            f"Received: labels.shape={shape}, features.shape={tuple(features_shape)}"
        )


def _check_features_shape(layer_kind, input_shape):
    """Features must be `(batch, feature_dim)` with a known feature_dim."""
    if len(input_shape) != 2 or input_shape[-1] is None:
        raise ValueError(
            f"{layer_kind} expects features of shape (batch, feature_dim) with a known feature_dim "
            f"(flatten or pool conv features first). Received: input_shape={tuple(input_shape)}"
        )


def _checked_labels(labels, num_classes):
    """`labels` as int32 `(batch,)`, with a run-time check that every id is in [0, num_classes).

    An id out of range raises `ValueError` eagerly (every backend), fails the step
    with the same message under JAX `jit` (a host callback) and raises
    `InvalidArgumentError` in a TensorFlow graph (`sphere_tf.ops.runtime_checks`).
    TensorFlow's XLA (`jit_compile=True`) compiles asserts to nothing; there the
    logits of such a sample are NaN (its loss and the step's gradients become NaN)
    instead of coming from a silently clamped gather.
    """
    labels = ops.reshape(ops.cast(labels, "int32"), (-1,))
    valid = ops.logical_and(labels >= 0, labels < num_classes)
    message = f"MarginHead: every label must be a class id in [0, {num_classes}) (num_classes={num_classes})"

    def describe(values):
        if values is None:
            return message + "; received labels"
        bad = sorted(set(values[(values < 0) | (values >= num_classes)].tolist()))
        return f"{message}. Received: labels out of range {bad}"

    labels = runtime_checks.assert_all(valid, describe, labels)  # before any gather reads a label
    return labels, valid


def _upstream_kernel_initializer():
    # Caffe "msra" filler of the L-Softmax layer: N(0, 2 / fan_in), not truncated.
    return keras.initializers.VarianceScaling(scale=2.0, mode="fan_in", distribution="untruncated_normal")


@saving.register_serializable()
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
    | 'ssoftmax'  | normalised | s (x norm.)| g(mθ)               [T ch. 1]  | s = 30, m = 1     |
    | 'cosface'   | normalised | s (x norm.)| cos θ − m                      | s = 64, m = 0.35  |
    | 'arcface'   | normalised | s (x norm.)| cos(θ + m)                     | s = 64, m = 0.5   |
    | 'combined'  | normalised | s (x norm.)| cos(m1·θ + m2) − m3            | s = 64, (1, .5, 0)|

    Multiplicative ψ uses the Chebyshev form with sign tests for k (no arccos);
    g comes from `sphere_tf.ops.angular`. ψ is continued past π monotonically
    (see `sphere_tf.ops.margin`). Weight normalisation is exact (autodiff through
    W/‖W‖ every call).

    Annealing: the step counter t is a non-trainable integer variable `iteration`
    (Keras's "int", as for optimizer iterations: int64 on TensorFlow and PyTorch,
    int32 on JAX without x64; saved in checkpoints and `.keras` files); each call with `training=True` and
    labels advances it by one *before* computing λ, as upstream does.

    Note: the logits are computed and returned in float32 under every dtype
    policy (inputs are cast up; the layer does not autocast its variables).
    Margin logits reach −(2m − 1)‖W‖‖x‖, beyond float16 range for moderately large
    features, and the Keras mixed-precision guide asks for float32 softmax inputs.

    Note: the Caffe A-Softmax layer renormalises W in place and back-propagates
    normalised pseudo-gradients (wy1iu/sphereface README, "Note 1"); this layer uses exact gradients,
    so learning rates and λ schedules may need retuning, as the upstream README says.

    Margin ranges (`sphere_tf.ops.margin.check_margin`): an int m in [1, 4] for
    L-/A-Softmax and cosine GA-/S-Softmax (the Caffe layers' margin types
    SINGLE..QUADRUPLE), a float in [1, 4] for linear/sigmoid GA-/S-Softmax,
    1 for W-Softmax, [0, 2) for CosFace, [0, π) for ArcFace, and
    m1 in [1, 4], m2 in [0, π), m3 in [0, 2) for 'combined'.

    Args:
        num_classes: int > 0, the number of classes C.
        loss_type: str, one of 'lsoftmax', 'asoftmax', 'wsoftmax', 'gasoftmax',
            'ssoftmax', 'cosface', 'arcface', 'combined'.
        margin: the margin m (int for Chebyshev forms, float for linear/sigmoid
            GA-Softmax, CosFace and ArcFace; `(m1, m2, m3)` for 'combined'),
            inside the ranges above; None takes the default of the table.
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
        `(batch, feature_dim)` features (2-D: flatten or pool conv features
        first); `labels`: integer class ids in [0, num_classes), shape `(batch,)`
        or `(batch, 1)`.

    Output shape:
        `(batch, num_classes)` float32 logits under every dtype policy
        (`compute_output_spec` says so too).

    Raises:
        ValueError: invalid hyperparameters (naming the argument), features that
            are not 2-D, labels that are not integers of shape `(batch,)` or
            `(batch, 1)`.
        ValueError: eagerly, a label outside [0, num_classes) (naming the range).
        tf.errors.InvalidArgumentError: the same in a `tf.function` (e.g.
            `model.fit` on TensorFlow); on JAX a compiled step fails with the
            same message. Under TensorFlow's XLA (`jit_compile=True`) run-time
            asserts compile to nothing; there the logits of such a sample are
            NaN instead, and the head counts the bad labels in a variable
            (`invalid_label_count()`) that `sphere_tf.callbacks.LabelRangeCheck`
            reads after each step, raising this `ValueError` naming the range.
            `SphereModel.fit` adds that callback itself; with a plain
            `keras.Model` and `jit_compile=True` pass
            `callbacks=[sphere_tf.callbacks.LabelRangeCheck()]`.

    Reference:
        W. Liu, Deep Representation Learning on Hypersphere, PhD thesis 2020,
        ch. 2 and §3.3; Liu et al., Large-Margin Softmax Loss for Convolutional
        Neural Networks (ICML 2016), https://arxiv.org/abs/1612.02295; Liu et
        al., SphereFace (CVPR 2017), https://arxiv.org/abs/1704.08063; Wang et
        al., CosFace (CVPR 2018), https://arxiv.org/abs/1801.09414; Deng et al.,
        ArcFace (CVPR 2019), https://arxiv.org/abs/1801.07698.

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
        num_classes = validation.positive_int(num_classes, "num_classes", maximum=validation.MAX_INT32)
        validation.one_of(loss_type, "loss_type", margin_lib.LOSS_TYPES)
        if angular is None:
            angular = DEFAULT_ANGULAR.get(loss_type, "cosine")
        if loss_type in ANGULAR_TYPES:
            if angular not in margin_lib.GA_ANGULAR:
                raise validation.invalid_argument(
                    "angular", f"one of {margin_lib.GA_ANGULAR} for loss_type={loss_type!r}", angular
                )
        elif angular != "cosine":
            raise validation.invalid_argument("angular", f"'cosine' (or None) for loss_type={loss_type!r}", angular)
        k = validation.positive_float(k, "k")
        margin = margin_lib.check_margin(loss_type, DEFAULT_MARGINS[loss_type] if margin is None else margin, angular)
        if loss_type in SCALED_TYPES:
            scale = validation.positive_float(DEFAULT_SCALES[loss_type] if scale is None else scale, "scale")
        elif scale is not None:
            raise validation.invalid_argument(
                "scale", f"None for loss_type={loss_type!r} (its radius is the feature norm)", scale
            )
        if epsilon is None:
            epsilon = margin_lib.default_epsilon(loss_type)
        epsilon = validation.non_negative_float(epsilon, "epsilon")
        if label_penalty is not None and not callable(label_penalty):
            raise validation.invalid_argument(
                "label_penalty", "None or a callable penalty(kernel, labels)", label_penalty
            )
        self.num_classes = num_classes
        self.loss_type = loss_type
        self.margin = margin
        self.angular = angular
        self.k = k
        self.scale = scale
        self.annealing, self._annealing = _resolve_annealing(annealing)
        self.use_bias = validation.boolean(use_bias, "use_bias")
        self.label_penalty = label_penalty
        self.epsilon = epsilon
        if kernel_initializer is None:
            kernel_initializer = _upstream_kernel_initializer()
        for name, value in weight_arguments.resolve(
                kernel_initializer=kernel_initializer, bias_initializer=bias_initializer,
                kernel_regularizer=kernel_regularizer, bias_regularizer=bias_regularizer,
                kernel_constraint=kernel_constraint, bias_constraint=bias_constraint).items():
            setattr(self, name, value)
        self.input_spec = keras.layers.InputSpec(ndim=2)

    def build(self, input_shape):
        _check_features_shape(type(self).__name__, input_shape)
        feature_dim = input_shape[-1]
        with validation.argument_errors("kernel_initializer"):
            self.kernel = self.add_weight(
                name="kernel",
                shape=(feature_dim, self.num_classes),
                initializer=self.kernel_initializer,
                regularizer=self.kernel_regularizer,
                constraint=self.kernel_constraint,
                autocast=False,  # float32 maths under mixed policies (see the class docstring)
            )
        if self.use_bias:
            with validation.argument_errors("bias_initializer"):
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
        self._add_step_state()
        self.input_spec = keras.layers.InputSpec(ndim=2, axes={-1: feature_dim})

    def _add_step_state(self):
        """The annealing step counter `iteration` and the count of out-of-range training labels."""
        self.iteration = self.add_weight(
            name="iteration", shape=(), dtype="int", initializer="zeros", trainable=False
        )
        # Out-of-range labels seen by training calls, read outside the step by
        # `sphere_tf.callbacks.LabelRangeCheck` (XLA compiles in-step asserts to
        # nothing). Layer state like a dropout seed, not a weight: `.keras` files keep
        # their layout; JAX's train step carries it. Summed over replicas, as a
        # Keras metric's count.
        self._invalid_labels = random_state.LayerState(
            # An initializer, not a value: a build inside Keras's stateless scope (a subclassed
            # model built by JAX's first step) may only create lazily initialized variables.
            keras.Variable(
                keras.initializers.Zeros(), shape=(), dtype="float32", trainable=False, aggregation="sum",
                name="invalid_labels",
            )
        )

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
        return angles.normalize(self.kernel, axis=0, epsilon=self.epsilon)[0]

    def _logits(self, features, labels, lam):
        return self._margin_logits(features, self.kernel, self.bias, labels, lam)

    def _margin_logits(self, features, kernel, bias, labels, lam, class_axis=1):
        """`margin_logits` with this head's loss hyperparameters, on the given classes of `kernel` / `bias`."""
        return margin_lib.margin_logits(
            features,
            kernel,
            labels,
            class_axis=class_axis,
            loss_type=self.loss_type,
            margin=self.margin,
            angular=self.angular,
            k=self.k,
            scale=self.scale,
            bias=bias,
            lam=lam,
            epsilon=self.epsilon,
        )

    def invalid_label_count(self):
        """int, how many training labels outside [0, num_classes) this head has seen (0 before build)."""
        state = getattr(self, "_invalid_labels", None)
        return 0 if state is None else int(ops.convert_to_numpy(state.state.value))

    def label_range_error(self, count):
        """The `ValueError` `sphere_tf.callbacks.LabelRangeCheck` raises for `count` bad labels."""
        return ValueError(
            f"MarginHead {self.name!r}: every label must be a class id in [0, {self.num_classes}) "
            f"(num_classes={self.num_classes}); {count} training label(s) outside that range reached a "
            "training step. Under XLA (`jit_compile=True`) the in-step check is compiled away and those "
            "samples' logits and loss are NaN."
        )

    # -- Keras API --------------------------------------------------------------------

    def call(self, inputs, labels=None, training=None):
        if labels is not None:
            labels = ops.convert_to_tensor(labels)  # lists and NumPy arrays keep their integer dtype
            _check_labels(labels, inputs.shape, self.num_classes)
        if labels is None or not training:
            return self._logits(inputs, None, 0.0)
        labels, valid = _checked_labels(labels, self.num_classes)
        self._invalid_labels.state.assign_add(ops.sum(ops.cast(ops.logical_not(valid), "float32")))
        step = self.iteration + 1
        self.iteration.assign(step)
        if self.label_penalty is not None:
            self.add_loss(self.label_penalty(self.kernel, labels))
        logits = self._logits(inputs, labels, self.lambda_at(step))
        return ops.where(valid[:, None], logits, float("nan"))

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.num_classes)

    def compute_output_spec(self, inputs, labels=None, training=None):
        # float32 under every dtype policy (see the class docstring), not the compute dtype.
        if labels is not None:
            _check_labels(labels, inputs.shape, self.num_classes)
        return keras.KerasTensor(self.compute_output_shape(inputs.shape), dtype="float32")

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
