"""FGSM, BIM and PGD through cleverhans 4, with budgets in pixel units, compiled once per model.

DCNet's protocol (Liu et al., Decoupled Networks, CVPR 2018, §6.2, App. A.2/A.3)
with J the training loss (softmax cross-entropy of the true label):

```
FGSM   x̃ = Clip_range(x + ε·sign(∇ₓJ(θ, x, y)))                      (Goodfellow et al., 2015)
BIM    x₀ = x,  x_{t+1} = Clip_range(Clip_{x,ε}(x_t + τ·sign(∇ₓJ(θ, x_t, y))))   t < N   (Kurakin et al., 2016)
PGD    BIM started from x + U(−ε, ε)^d (clipped to the range)       (Madry et al., 2018)
```

ε, τ are on the 0–255 scale (paper: ε = 8, τ = 2, N = 20) and mapped into the
model's input space by a `PixelSpace` (`sphere_tf.adversarial.pixels`); "range"
is the valid pixel range [0, 255] in input space, enforced after every step. The
functions taking a model read its space from it when `space` is None
(`pixels.input_space`: raw pixels for a model whose first layer is a
`PixelNormalization`) and refuse a space that disagrees with such a layer.
The gradients come from cleverhans 4 (`cleverhans.tf2.attacks`:
`fast_gradient_method`, `basic_iterative_method`,
`projected_gradient_descent`), called with `sanity_checks=False` (its
NumPy-based asserts fail under NumPy >= 1.24 and inside `tf.function`). Models
run in inference mode (`training=False`: decoupled operators use their moving
average of E‖x‖, as at test time).

`make_attack` compiles the whole attack — the N-step BIM loop included,
unrolled into one graph — into a single `tf.function` with a batch-size-free
input signature, so it is traced once per (model, attack) and never again per
batch or iteration. TensorFlow's retracing detector counts traces per Python code
object, across the `tf.function`s made from one closure, so an experiment that
attacks 8 models reads as "8 retracings" of `make_attack.<locals>.run` although
each function is traced once; `per_model_tracing()` drops that one warning.

This module is the TensorFlow reference: the application (`evaluation`, `training`, the runner's adversarial
task) crafts its examples with `gradient_attacks`, the same operations in `keras.ops` on every Keras backend,
which the tests hold to these functions' numbers (bitwise on TensorFlow). TensorFlow and cleverhans are imported
by the functions that use them (`_tf`, `_cleverhans`), so the module, its names and budgets import without them.
"""


import numpy as np

from sphere_tf import dependencies
from sphere_tf import validation
from sphere_tf.adversarial import gradient_attacks
from sphere_tf.adversarial import pixels as pixels_lib
from sphere_tf.training import progress



def _tf():
    """TensorFlow, imported on first use: the module imports without it (the attack names and budgets are
    `gradient_attacks`'), and a call without it raises one error naming this module."""
    return dependencies.tensorflow(__name__)


def _cleverhans():
    """cleverhans 4's TensorFlow attacks `(fast_gradient_method, basic_iterative_method,
    projected_gradient_descent)`, imported on first use (importing cleverhans imports TensorFlow)."""
    _tf()
    from cleverhans.tf2.attacks.basic_iterative_method import basic_iterative_method  # noqa: PLC0415
    from cleverhans.tf2.attacks.fast_gradient_method import fast_gradient_method  # noqa: PLC0415
    from cleverhans.tf2.attacks.projected_gradient_descent import projected_gradient_descent  # noqa: PLC0415

    return fast_gradient_method, basic_iterative_method, projected_gradient_descent


# The attack names, DCNet's budget (§6.2) and the model function are the backend-neutral module's.
ATTACKS = gradient_attacks.ATTACKS
PAPER_EPSILON = gradient_attacks.PAPER_EPSILON
PAPER_STEP = gradient_attacks.PAPER_STEP
PAPER_ITERATIONS = gradient_attacks.PAPER_ITERATIONS
inference_fn = gradient_attacks.inference_fn


def _labels(labels):
    tf = _tf()
    return tf.cast(labels, tf.int64)


def fgsm(model_fn, images, labels, space, epsilon=PAPER_EPSILON):
    """One FGSM step of size ε (pixels) on the true labels, clipped to the valid range.

    Args:
        model_fn: callable `x -> logits` (`inference_fn(model)`).
        images: float tensor (B, H, W, C), model inputs.
        labels: int tensor (B,), the true classes.
        space: `PixelSpace` of the inputs' normalisation.
        epsilon: float >= 0, ε on the 0–255 scale.

    Returns:
        float32 tensor like `images`.
    """
    fast_gradient_method, _, _ = _cleverhans()
    clip_min, clip_max = space.clip_bounds()
    return fast_gradient_method(model_fn, images, space.epsilon(epsilon), np.inf, clip_min=clip_min,
                                clip_max=clip_max, y=_labels(labels), sanity_checks=False)


def _check_iterative(epsilon, step, iterations):
    epsilon = validation.non_negative_float(epsilon, "epsilon")
    step = validation.non_negative_float(step, "step")
    iterations = validation.positive_int(iterations, "iterations")
    if step > epsilon:
        raise validation.invalid_argument("step", f"a float <= epsilon={epsilon:g} (cleverhans requires τ <= ε)",
                                          step)
    return epsilon, step, iterations


def bim(model_fn, images, labels, space, epsilon=PAPER_EPSILON, step=PAPER_STEP, iterations=PAPER_ITERATIONS):
    """The basic iterative method: N FGSM steps of τ, projected to the ε-ball and the range after each.

    Args:
        model_fn, images, labels, space: as `fgsm`.
        epsilon: float >= 0, ε (pixels).
        step: float in [0, ε], τ (pixels).
        iterations: int > 0, N.

    Returns:
        float32 tensor like `images`.

    Raises:
        ValueError: a bad ε, τ or N (named).
    """
    epsilon, step, iterations = _check_iterative(epsilon, step, iterations)
    tf, (_, basic_iterative_method, _) = _tf(), _cleverhans()
    clip_min, clip_max = space.clip_bounds()
    return basic_iterative_method(model_fn, tf.cast(images, tf.float32), space.epsilon(epsilon), space.epsilon(step),
                                  iterations, np.inf, clip_min=clip_min, clip_max=clip_max, y=_labels(labels),
                                  sanity_checks=False)


def pgd(model_fn, images, labels, space, epsilon=PAPER_EPSILON, step=PAPER_STEP, iterations=PAPER_ITERATIONS):
    """BIM from a uniform random start in the ε-ball (Madry et al.); arguments as `bim`."""
    epsilon, step, iterations = _check_iterative(epsilon, step, iterations)
    tf, (_, _, projected_gradient_descent) = _tf(), _cleverhans()
    clip_min, clip_max = space.clip_bounds()
    eps = space.epsilon(epsilon)
    return projected_gradient_descent(model_fn, tf.cast(images, tf.float32), eps, space.epsilon(step), iterations,
                                      np.inf, clip_min=clip_min, clip_max=clip_max, y=_labels(labels),
                                      rand_init=True, rand_minmax=eps, sanity_checks=False)


def make_attack(model, attack, space=None, epsilon=PAPER_EPSILON, step=PAPER_STEP, iterations=PAPER_ITERATIONS):
    """`attack` on `model` as one compiled function `(images, labels) -> adversarial images`.

    The function is a `tf.function` with input signature `(None, H, W, C)` float32
    and `(None,)` int32, so every batch (any size) reuses the one trace;
    `fn.experimental_get_tracing_count()` stays 1 (TensorFlow still warns of
    "retracing" after several models: see `per_model_tracing`).

    Args:
        model: a built Keras model mapping images to logits.
        attack: one of `ATTACKS`.
        space: `PixelSpace` of the inputs, or None: read from the model (`pixels.input_space`).
        epsilon, step, iterations: ε, τ (pixels) and N (`bim`, `pgd`).

    Returns:
        The compiled callable.

    Raises:
        ValueError: unknown attack, bad budget, a model that needs labels as input, or a `space` that
            disagrees with the model's `PixelNormalization`.
    """
    attack = validation.one_of(attack, "attack", ATTACKS)
    model_fn = inference_fn(model)
    space = pixels_lib.space_for(model, space)
    if attack != "fgsm":
        _check_iterative(epsilon, step, iterations)
    tf = _tf()  # after the arguments' checks: a bad argument is named on every backend
    shape = tuple(model.inputs[0].shape[1:])
    signature = [tf.TensorSpec((None,) + shape, tf.float32), tf.TensorSpec((None,), tf.int32)]

    def run(images, labels):
        if attack == "none":
            return tf.identity(images)
        if attack == "fgsm":
            return fgsm(model_fn, images, labels, space, epsilon)
        if attack == "bim":
            return bim(model_fn, images, labels, space, epsilon, step, iterations)
        return pgd(model_fn, images, labels, space, epsilon, step, iterations)

    return tf.function(run, input_signature=signature)


# The functions made once per model (attacks, predictions, Keras's fit/evaluate steps of a new model): one
# trace each, which TensorFlow's detector, counting per code object, reports as retracing across models.
PER_MODEL_FUNCTIONS = ("make_attack.<locals>.run", "make_fgsm_sweep.<locals>.sweep", "make_predict.<locals>.predict",
                       "TensorFlowTrainer._make_function")


def per_model_tracing():
    """Within it, TensorFlow's "N out of the last M calls to <f> triggered tf.function retracing" warning is
    dropped for the `PER_MODEL_FUNCTIONS` (each traced once per model; see the module docstring). Every
    other warning, and that one for any other function, passes."""
    return progress.quiet_retracing(PER_MODEL_FUNCTIONS)


def make_fgsm_sweep(model, space=None):
    """FGSM on `model` with ε (pixels) as a tensor argument: one trace serves every ε of a curve.

    `space`: as `make_attack` (None: read from the model).

    Returns:
        compiled callable `(images, labels, epsilon) -> adversarial images`, `epsilon` a float32 scalar
        on the 0–255 scale.
    """
    tf, (fast_gradient_method, _, _) = _tf(), _cleverhans()
    model_fn = inference_fn(model)
    space = pixels_lib.space_for(model, space)
    shape = tuple(model.inputs[0].shape[1:])
    clip_min, clip_max = space.clip_bounds()
    signature = [tf.TensorSpec((None,) + shape, tf.float32), tf.TensorSpec((None,), tf.int32),
                 tf.TensorSpec((), tf.float32)]

    @tf.function(input_signature=signature)
    def sweep(images, labels, epsilon):
        return fast_gradient_method(model_fn, images, epsilon * space.scale, np.inf, clip_min=clip_min,
                                    clip_max=clip_max, y=_labels(labels), sanity_checks=False)

    return sweep


def make_predict(model):
    """`images -> int32 predicted classes` of `model` in inference mode, compiled once (forward only)."""
    tf = _tf()
    model_fn = inference_fn(model)
    shape = tuple(model.inputs[0].shape[1:])

    @tf.function(input_signature=[tf.TensorSpec((None,) + shape, tf.float32)])
    def predict(images):
        return tf.argmax(model_fn(images), axis=-1, output_type=tf.int32)

    return predict


__all__ = ["ATTACKS", "PAPER_EPSILON", "PAPER_ITERATIONS", "PAPER_STEP", "PER_MODEL_FUNCTIONS", "bim", "fgsm",
           "inference_fn", "per_model_tracing",
           "make_attack", "make_fgsm_sweep", "make_predict", "pgd"]
