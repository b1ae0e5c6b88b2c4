"""Cayley SGD with momentum: orthogonality-preserving updates for OPT ('ogd')  [T-7.5], [T-7.6].

The update of an orthogonal X (the OPT rotation R) follows the original code
(wy1iu/OPT, `opt_ogd`), itself Li, Li & Todorovic's Cayley SGD (ICLR 2020):

```
M ← μ·M − G                                         (momentum of the descent direction)
Ŵ ← M Xᵀ − ½ X (Xᵀ M Xᵀ),   W ← Ŵ − Ŵᵀ              (skew-symmetric, [T-7.5])
M ← W X                                             (momentum projected to the tangent space)
α ← min(lr, 1 / (‖W‖_F + 1e-8))
Y ← X + α M
Y ← X + (α/2) W (X + Y)                             (fixed-point iterations of
X ← X + (α/2) W (X + Y)                              the Cayley transform, [T-7.6])
```

The Cayley curve ``Y(α) = (I − α/2 W)⁻¹(I + α/2 W) X`` is orthogonal for every α;
two fixed-point iterations approximate it with an error that grows like
(α‖W‖)³, so X drifts away from orthogonality.  Measured (float32, tests and
docs/opt.md): with typical OPT step sizes (α‖W‖_F ≲ 0.2) ‖XᵀX − I‖_max stays below
1e-5 over 1,000 steps; at the step cap (α‖W‖_F = 1, i.e. very large gradients)
the drift reaches O(0.1–1) within a few hundred steps.  Two safeguards, both
deviations from the original and off by default: `reorthogonalize_every` snaps X
back to its polar factor periodically, and ``fixed_point_iters=None`` uses the
exact Cayley transform (a linear solve) instead of the iterations.

Note: W is built from the momentum of the *negative* gradient (the descent
direction) as in the original code; Eq. (7.5) as typeset uses +∇f.  Variables
of rank 3 are treated as stacks of independent square blocks (PE-OPT), each with
its own step size α.
"""

import keras
from keras import ops

from sphere_tf import saving
from sphere_tf import validation
from sphere_tf.ops import orthogonal
from sphere_tf.ops import runtime_checks

# Upstream constants (wy1iu/OPT, opt_ogd): lr 0.02, momentum 0.9, eps 1e-8, 2 iterations.
DEFAULT_LEARNING_RATE = 0.02
DEFAULT_MOMENTUM = 0.9
NORM_EPSILON = 1e-8
DEFAULT_FIXED_POINT_ITERS = 2


def cayley_sgd_update(x, grad, momentum_buffer, learning_rate, momentum=DEFAULT_MOMENTUM,
                      fixed_point_iters=DEFAULT_FIXED_POINT_ITERS):
    """One Cayley-SGD step (pure function).

    Args:
        x: float tensor ``(..., n, n)``, the current (orthogonal) matrix.
        grad: float tensor like `x`, ∂L/∂x.
        momentum_buffer: float tensor like `x`, M before the step.
        learning_rate: float scalar, the cap on α.
        momentum: float in [0, 1), μ.
        fixed_point_iters: int >= 1, iterations of [T-7.6] (upstream 2), or None
            for the exact Cayley transform by a linear solve.

    Returns:
        ``(new_x, new_momentum_buffer)``.
    """
    m = momentum * momentum_buffer - grad
    x_t = orthogonal.matrix_transpose(x)
    w_hat = ops.matmul(m, x_t) - 0.5 * ops.matmul(x, ops.matmul(ops.matmul(x_t, m), x_t))
    w = w_hat - orthogonal.matrix_transpose(w_hat)
    m = ops.matmul(w, x)
    w_norm = ops.sqrt(ops.sum(ops.square(w), axis=(-2, -1), keepdims=True))
    alpha = ops.minimum(learning_rate, 1.0 / (w_norm + NORM_EPSILON))
    if fixed_point_iters is None:
        # Exact Cayley retraction Y = (I − α/2 W)⁻¹ (I + α/2 W) X (orthogonal up to rounding).
        eye = orthogonal.identity_blocks(ops.shape(w), w.dtype)
        half = 0.5 * alpha * w
        return ops.solve(eye - half, ops.matmul(eye + half, x)), m
    y = x + alpha * m
    for _ in range(int(fixed_point_iters)):
        y = x + 0.5 * alpha * ops.matmul(w, x + y)
    return y, m


@saving.register_serializable()
class CayleySGD(keras.optimizers.Optimizer):
    """Orthogonality-preserving SGD with momentum on the Stiefel manifold  [T-7.5], [T-7.6].

    Meant for the rotation matrices of OPT layers with
    ``orthogonalization='ogd'`` (start at R = I); usually used through
    `sphere_tf.optimizers.OPTOptimizer`, which gives it the rotations and the
    user's optimizer everything else.  Every variable must be a square matrix or
    a stack of square matrices.  No weight decay: upstream R gets the data loss only.

    Args:
        learning_rate: float or schedule, the cap on the step α (upstream 0.02,
            ×0.2 at each decay of the main learning rate).
        momentum: float in [0, 1), upstream 0.9.
        fixed_point_iters: int >= 1, Cayley fixed-point iterations (upstream 2), or
            None for the exact Cayley transform (one d×d solve per step; a
            deviation from upstream that removes the drift).
        reorthogonalize_every: None or int > 0; every that many steps replace X by
            its polar factor (deviation from upstream, which never does; off by default).
        name: str.
        **kwargs: base optimizer arguments (clipnorm, ...).

    Reference:
        Li, Li & Todorovic, "Efficient Riemannian optimization on the Stiefel
        manifold via the Cayley transform", ICLR 2020; W. Liu, thesis §7.3.5.
    """

    def __init__(self, learning_rate=DEFAULT_LEARNING_RATE, momentum=DEFAULT_MOMENTUM,
                 fixed_point_iters=DEFAULT_FIXED_POINT_ITERS, reorthogonalize_every=None,
                 name="cayley_sgd", **kwargs):
        if not (isinstance(learning_rate, keras.optimizers.schedules.LearningRateSchedule) or callable(learning_rate)):
            learning_rate = validation.positive_float(learning_rate, "learning_rate")
        validation.text(name, "name")
        momentum = validation.real(momentum, "momentum", low=0.0, high=1.0, high_open=True)
        fixed_point_iters = validation.positive_int(
            fixed_point_iters, "fixed_point_iters", allow_none=True, maximum=validation.MAX_INT32)
        reorthogonalize_every = validation.positive_int(
            reorthogonalize_every, "reorthogonalize_every", allow_none=True, maximum=validation.MAX_INT32)
        if kwargs.get("weight_decay"):  # decay would pull the variables off the orthogonal group
            raise validation.invalid_argument("weight_decay", "None or 0 for CayleySGD", kwargs["weight_decay"])
        super().__init__(learning_rate=learning_rate, name=name, **kwargs)
        self.momentum = momentum
        self.fixed_point_iters = fixed_point_iters
        self.reorthogonalize_every = reorthogonalize_every

    def build(self, variables):
        if self.built:
            return
        for v in variables:
            shape = tuple(v.shape)
            if len(shape) not in (2, 3) or shape[-1] != shape[-2]:
                raise ValueError(
                    f"CayleySGD needs square matrices (or stacks of them); variable {v.path!r} has shape {shape}."
                )
        super().build(variables)
        self.momentums = self.add_optimizer_variables(variables, "momentum")

    def update_step(self, gradient, variable, learning_rate):
        # The TF backend hands update_step tf.Variables: read them as tensors.
        x = orthogonal.read_float32(variable)
        g = ops.cast(gradient, "float32")
        index = self._get_variable_index(variable)  # the base class's slot lookup
        buffer = self.momentums[index]
        new_x, new_m = cayley_sgd_update(
            x, g, orthogonal.read_float32(buffer), ops.cast(learning_rate, "float32"),
            self.momentum, self.fixed_point_iters,
        )
        if self.reorthogonalize_every is not None:
            due = ops.equal(ops.mod(self.iterations + 1, self.reorthogonalize_every), 0)
            new_x = runtime_checks.cond(due, lambda: orthogonal.lowdin(new_x), lambda: new_x)
        self.assign(buffer, ops.cast(new_m, buffer.dtype))
        self.assign(variable, ops.cast(new_x, variable.dtype))

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "momentum": self.momentum,
                "fixed_point_iters": self.fixed_point_iters,
                "reorthogonalize_every": self.reorthogonalize_every,
            }
        )
        return config
