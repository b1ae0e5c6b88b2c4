"""FGSM adversarial training in a Keras `train_step` on every backend (DCNet §6.2, App. A.3; Goodfellow et al., 2015).

Each step crafts FGSM examples from the *current* weights and trains on

```
x̃ = Clip_range(x + ε·sign(∇ₓJ(θ, x, y)))          (constants: no gradient flows through x̃)
L = (1 − mix)·J(θ, x, y) + mix·J(θ, x̃, y)            mix = 0.5 by default (Goodfellow et al.)
```

DCNet trains its adversarial CNN-9 this way with ε = 8 (pixels); the mixing
ratio is not stated, Goodfellow et al.'s 0.5 is the default here. Standard
gradients: no weight projection, no weighted gradients, as the paper's
adversarial experiments. Clean and adversarial halves go through the network as
one batch of 2B (one forward/backward; with decoupled operators the batch mean
E‖x‖ is taken over both halves); the loss weights the halves 2(1 − mix) and
2·mix, so the Keras mean over 2B equals L. Examples are crafted in inference mode
(`training=False`, the model an attacker sees). Metrics (accuracy) are those of
the clean half.

The step is the backend's own: `train_step` crafts x̃ (`gradient_attacks.fgsm`, the operations of cleverhans'
`fast_gradient_method`, to the last bit on TensorFlow) and hands the 2B batch with its per-example weights
2(1 − mix)·w, 2·mix·w (w the sample weights, 1 without) to Keras's `train_step` of the backend, which computes the
loss (`compute_loss`: the compiled loss and the regularisation losses), the gradients and the optimizer update.
TensorFlow and PyTorch call it as `train_step(data)` on the model's variables; JAX as `train_step(state, data)`, a
pure function of `state = (trainable, non_trainable, optimizer, metrics variables)`, where x̃ is crafted from the
state's weights (`stateless_call` inside `jax.grad` with respect to x). The metrics are updated on the clean half
only (`compute_metrics`, which every backend's step calls once); the loss tracker weighs each step by the 2B
batch rather than B, which leaves its mean unchanged (every step's weight is doubled).
"""


import contextlib

import keras
import numpy as np
from keras import ops

from sphere_tf import saving
from sphere_tf import validation
from sphere_tf.adversarial import gradient_attacks
from sphere_tf.adversarial import pixels as pixels_lib

DEFAULT_MIX = 0.5


def _bound(value, name):
    if isinstance(value, (list, tuple)):
        return [validation.real(v, f"{name}[{i}]") for i, v in enumerate(value)]
    return validation.real(value, name)


class _CleanHalf:
    """What `compute_metrics` reads during a train step: the clean half's size and sample weights (a plain object,
    not tracked by Keras: it holds tensors of one trace only)."""

    def __init__(self):
        self.batch = None
        self.sample_weight = None


@saving.register_serializable()
class FGSMAdversarialModel(keras.Model):
    """A functional `keras.Model` whose `fit` does FGSM adversarial training, on every Keras backend.

    Args:
        inputs, outputs: as `keras.Model(inputs, outputs)`; the outputs are logits.
        epsilon: float >= 0, ε in *input* units (`PixelSpace.epsilon(8)` for the paper's 8/255).
        clip_min, clip_max: float or per-channel list, the valid input range.
        mix: float in [0, 1], the weight of the adversarial loss.
        **kwargs: `name` and other `keras.Model` arguments.

    Raises:
        ValueError: bad ε, mix or range (named).

    Reference:
        Goodfellow et al., Explaining and Harnessing Adversarial Examples, ICLR 2015, eq. 6;
        Liu et al., Decoupled Networks, CVPR 2018, §6.2.
    """

    def __init__(self, *args, epsilon, clip_min, clip_max, mix=DEFAULT_MIX, **kwargs):
        super().__init__(*args, **kwargs)
        self.epsilon = validation.non_negative_float(epsilon, "epsilon")
        self.mix = validation.real(mix, "mix", low=0.0, high=1.0)
        self.clip_min = _bound(clip_min, "clip_min")
        self.clip_max = _bound(clip_max, "clip_max")
        if np.any(np.asarray(self.clip_min) >= np.asarray(self.clip_max)):
            raise validation.invalid_argument("clip_max", f"values above clip_min={self.clip_min}", self.clip_max)
        # The valid range as the attacks take it: an input space with ε already in input units (scale 1).
        lower, upper = np.broadcast_arrays(np.ravel(self.clip_min), np.ravel(self.clip_max))
        self._range = pixels_lib.PixelSpace(1.0, tuple(float(v) for v in lower), tuple(float(v) for v in upper),
                                            "input")
        self._clean_half = _CleanHalf()

    def _craft(self, model_fn, x, y):
        """FGSM examples of `(x, y)` on `model_fn` (logits in inference mode), as constants."""
        return ops.stop_gradient(gradient_attacks.fgsm(model_fn, x, y, self._range, self.epsilon))

    def adversarial_examples(self, x, y):
        """FGSM examples of `(x, y)` from the current weights (inference mode), without gradient.

        Returns:
            float32 tensor of the backend, like `x`.
        """
        return self._craft(lambda t: self(t, training=False), x, y)

    def _loss_weights(self, batch, sample_weight):
        """Per-example weights of the 2B batch: 2(1 − mix)·w on the clean half, 2·mix·w on the adversarial one."""
        half = ops.ones((batch,), "float32")
        weights = ops.concatenate([2.0 * (1.0 - self.mix) * half, 2.0 * self.mix * half], axis=0)
        if sample_weight is None:
            return weights
        sw = ops.reshape(ops.cast(sample_weight, "float32"), (-1,))
        return weights * ops.concatenate([sw, sw], axis=0)

    @contextlib.contextmanager
    def _metrics_on_clean_half(self, batch, sample_weight):
        self._clean_half.batch, self._clean_half.sample_weight = batch, sample_weight
        try:
            yield
        finally:
            self._clean_half.batch, self._clean_half.sample_weight = None, None

    def train_step(self, *args):
        """Crafts x̃ from the current weights, then the backend's optimizer step on (1 − mix)·J(x) + mix·J(x̃).

        Args:
            *args: `(data,)` on TensorFlow and PyTorch; `(state, data)` on JAX (Keras's stateless step: `state` =
                (trainable, non_trainable, optimizer, metrics variables), whose weights x̃ is crafted from).

        Returns:
            What the backend's `train_step` returns: the logs (and on JAX the new state).
        """
        state, data = args if len(args) == 2 else (None, args[0])
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        x = ops.cast(x, "float32")
        if state is None:
            def model_fn(t):
                return self(t, training=False)
        else:
            trainable, non_trainable = state[0], state[1]

            def model_fn(t):  # the state's weights, not the variables' (JAX's step is a pure function of state)
                return self.stateless_call(trainable, non_trainable, t, training=False)[0]
        x_adv = self._craft(model_fn, x, y)
        batch = ops.shape(x)[0]
        data = (ops.concatenate([x, x_adv], axis=0), ops.concatenate([y, y], axis=0),
                self._loss_weights(batch, sample_weight))
        with self._metrics_on_clean_half(batch, sample_weight):
            return super().train_step(*(() if state is None else (state,)), data)

    def compute_metrics(self, x, y, y_pred, sample_weight=None):
        """Keras's metrics; inside `train_step` on the clean half (the first B examples, their own weights)."""
        batch = self._clean_half.batch
        if batch is not None:
            x, y, y_pred, sample_weight = x[:batch], y[:batch], y_pred[:batch], self._clean_half.sample_weight
        return super().compute_metrics(x, y, y_pred, sample_weight=sample_weight)

    def get_config(self):
        config = super().get_config()
        config.update({"epsilon": self.epsilon, "clip_min": self.clip_min, "clip_max": self.clip_max,
                       "mix": self.mix})
        return config


def adversarial_wrap(model, space=None, epsilon=8.0, mix=DEFAULT_MIX, name=None):
    """An `FGSMAdversarialModel` sharing the layers (and weights) of a functional `model`.

    Args:
        model: a functional `keras.Model` mapping images to logits.
        space: `PixelSpace` of the inputs' normalisation, or None: read from the model
            (`pixels.input_space`: raw pixels for a model whose first layer is a `PixelNormalization`).
        epsilon: float >= 0, ε on the 0–255 scale (paper: 8).
        mix: float in [0, 1], weight of the adversarial loss (default 0.5).
        name: str or None (default `model.name`).

    Returns:
        FGSMAdversarialModel; training it trains `model`.

    Raises:
        ValueError: `model` is not functional or takes labels; bad ε or mix.
    """
    if space is not None and not isinstance(space, pixels_lib.PixelSpace):
        raise validation.invalid_argument("space", "a PixelSpace (sphere_tf.adversarial.pixel_space)", space)
    inputs = getattr(model, "inputs", None)
    outputs = getattr(model, "outputs", None)
    if not inputs or not outputs or len(inputs) != 1 or len(outputs) != 1:
        raise validation.invalid_argument("model", "a functional model with one image input and one logits output",
                                          getattr(model, "name", model))
    space = pixels_lib.space_for(model, space)
    lo, hi = space.clip_bounds()
    as_list = (lambda v: [float(t) for t in np.ravel(v)]) if not isinstance(lo, float) else float
    return FGSMAdversarialModel(inputs[0], outputs[0], epsilon=space.epsilon(epsilon), clip_min=as_list(lo),
                                clip_max=as_list(hi), mix=mix, name=name or model.name)


__all__ = ["DEFAULT_MIX", "FGSMAdversarialModel", "adversarial_wrap"]
