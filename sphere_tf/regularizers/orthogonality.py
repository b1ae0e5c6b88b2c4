"""Orthonormality (SphereNet) and orthogonality (DCNet) regularizers [T-3.2.4], [D-§5].

Coefficient conventions (read this before porting a number):

* The authors' TF1 code uses ``coeff · tf.nn.l2_loss(A)`` and ``l2_loss(A) = Σ A² / 2``:
  SphereNet ``2e-4 · l2_loss(WᵀW − I)`` on the raw kernel, DCNets
  ``1e-5 · l2_loss(ŴᵀŴ − I)`` on the normalised kernel (CIFAR); the thesis's MHE
  baseline uses 1e-5.
* `Orthogonality(factor=f)` computes ``f · ‖A‖²_F`` with no halving, like Keras's
  own `l2(f)`. So the upstream ``c · l2_loss`` is `factor=c/2`, or pass
  `l2_loss_convention=True` to keep the upstream numbers unchanged
  (`factor=2e-4, l2_loss_convention=True` is SphereNet's term exactly).
"""

import keras
from keras import ops

from sphere_tf import energy
from sphere_tf import saving
from sphere_tf import validation

MODES = ("orthonormal", "orthogonal")


@saving.register_serializable()
class Orthogonality(keras.regularizers.Regularizer):
    """Soft orthogonality of a layer's neurons (columns of `reshape(kernel, (-1, N))`).

    ```
    orthonormal (SphereNet, [T-3.2.4]):  f · ‖WᵀW − I‖²_F
    orthogonal  (DCNet):                 f · ‖WᵀW − diag(WᵀW)‖²_F
    ```

    with W the raw neuron matrix, or Ŵ (columns w/sqrt(‖w‖² + ε)) when
    `normalized=True`. Multiplied by ½ when `l2_loss_convention=True` (TF1
    `tf.nn.l2_loss`, see the module docstring).

    Args:
        factor: float >= 0, the coefficient f.
        mode: 'orthonormal' or 'orthogonal'.
        normalized: bool, use unit-norm neurons (DCNets CIFAR code) instead of
            the raw kernel (SphereNet code).
        l2_loss_convention: bool, halve like TF1 `l2_loss`.
        epsilon: float >= 0 inside the neuron norm when normalized (upstream 1e-4).
    """

    def __init__(self, factor=1e-5, mode="orthonormal", normalized=False, l2_loss_convention=False,
                 epsilon=energy.DEFAULT_EPSILON):
        self.factor = validation.non_negative_float(factor, "factor")
        self.mode = validation.one_of(mode, "mode", MODES)
        self.normalized = validation.boolean(normalized, "normalized")
        self.l2_loss_convention = validation.boolean(l2_loss_convention, "l2_loss_convention")
        self.epsilon = validation.non_negative_float(epsilon, "epsilon")

    def __call__(self, x):
        if self.normalized:
            w = energy.normalized_neurons(x, self.epsilon)
        else:
            w = energy.neuron_matrix(x)
        gram = energy.gram(w)
        n = gram.shape[-1]
        eye = ops.eye(n, dtype="float32")
        if self.mode == "orthonormal":
            residual = gram - eye
        else:
            residual = gram * (1.0 - eye)
        value = ops.sum(ops.square(residual))
        if self.l2_loss_convention:
            value = 0.5 * value
        return self.factor * value

    def get_config(self):
        return {
            "factor": self.factor,
            "mode": self.mode,
            "normalized": self.normalized,
            "l2_loss_convention": self.l2_loss_convention,
            "epsilon": self.epsilon,
        }
