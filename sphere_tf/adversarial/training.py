"""FGSM adversarial training in a Keras `train_step` (DCNet §6.2, App. A.3; Goodfellow et al., 2015).

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
"""


import keras
import numpy as np

from sphere_tf import dependencies
from sphere_tf import validation
from sphere_tf.adversarial import pixels as pixels_lib
from sphere_tf.training import model as model_lib

tf = dependencies.tensorflow(__name__)
from cleverhans.tf2.attacks.fast_gradient_method import fast_gradient_method  # noqa: E402 (imports TensorFlow)

DEFAULT_MIX = 0.5


def _bound(value, name):
    if isinstance(value, (list, tuple)):
        return [validation.real(v, f"{name}[{i}]") for i, v in enumerate(value)]
    return validation.real(value, name)


@keras.saving.register_keras_serializable(package="sphere_tf")
class FGSMAdversarialModel(keras.Model):
    """A functional `keras.Model` whose `fit` does FGSM adversarial training.

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

    def _clip_bounds(self):
        lo, hi = self.clip_min, self.clip_max
        if isinstance(lo, list):
            return tf.constant(lo, tf.float32), tf.constant(hi, tf.float32)
        return lo, hi

    def adversarial_examples(self, x, y):
        """FGSM examples of `(x, y)` from the current weights (inference mode), without gradient."""
        clip_min, clip_max = self._clip_bounds()
        adv = fast_gradient_method(lambda t: self(t, training=False), x, self.epsilon, np.inf,
                                   clip_min=clip_min, clip_max=clip_max, y=tf.cast(y, tf.int64), sanity_checks=False)
        return tf.stop_gradient(adv)

    def train_step(self, data):
        """Crafts x̃ from the current weights, then one optimizer step on (1 − mix)·J(x) + mix·J(x̃)."""
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        x = tf.cast(x, tf.float32)
        batch = tf.shape(x)[0]
        x_adv = self.adversarial_examples(x, y)
        inputs = tf.concat([x, x_adv], axis=0)
        targets = tf.concat([y, y], axis=0)
        half = tf.ones([batch], tf.float32)
        weights = tf.concat([2.0 * (1.0 - self.mix) * half, 2.0 * self.mix * half], axis=0)
        if sample_weight is not None:
            sw = tf.cast(tf.reshape(sample_weight, [-1]), tf.float32)
            weights = weights * tf.concat([sw, sw], axis=0)
        with tf.GradientTape() as tape:
            y_pred = self(inputs, training=True)
            loss = model_lib.compute_training_loss(self, inputs, targets, y_pred, weights)
            model_lib.track_loss(self, loss, batch)
            scaled = self.optimizer.scale_loss(loss) if self.optimizer is not None else loss
        variables = self.trainable_weights
        if variables:
            gradients = tape.gradient(scaled, variables)
            self.optimizer.apply(gradients, variables)
        return self.compute_metrics(x, y, y_pred[:batch], sample_weight=sample_weight)

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
