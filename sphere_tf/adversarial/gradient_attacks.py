"""FGSM, BIM and PGD in `keras.ops` on every Keras backend: the numbers of `attacks` (cleverhans 4) without it.

DCNet's protocol (Liu et al., Decoupled Networks, CVPR 2018, §6.2, App. A.2/A.3), with J the softmax
cross-entropy of the true label on the model's logits, ε and τ on the 0–255 scale mapped into input space by a
`PixelSpace` (`pixels`), and "range" the valid pixel box [0, 255] in input space:

```
FGSM   x̃ = Clip_range(x + ε·sign(∇ₓJ(θ, x, y)))
BIM    x₀ = Clip_range(x),
       x_{t+1} = Clip_range(x + Clip_{[−ε, ε]}(Clip_range(x_t + τ·sign(∇ₓJ(θ, x_t, y))) − x)),  t < N
PGD    BIM from x₀ = Clip_range(x + Clip_{[−ε, ε]}(η)),  η ~ U[−ε, ε)^d, drawn per element
```

These are the operations of cleverhans 4's `fast_gradient_method` and `projected_gradient_descent` (norm ∞,
`rand_init=True, rand_minmax=ε` for PGD, `rand_init=False` for BIM), in their order: the gradient of the
per-example losses, `x + ε·sign(g)` (the product first), a clip to the range after every FGSM step, then the
projection of the perturbation to the ε-ball and the range clip again. Labels are the true labels, as
`attacks.py` passes them (cleverhans would use the model's predictions without them). On TensorFlow every
operation is the one cleverhans runs (the same `tf.nn.sparse_softmax_cross_entropy_with_logits` through
`keras.ops`, the same tape), so the examples agree with `attacks.fgsm/bim/pgd` to the last bit for the same
random start; on JAX and PyTorch they agree with the same formulas up to float32 rounding of the model.

PGD's random start cannot be bitwise-equal across backends: cleverhans draws η with TensorFlow's stateful
`tf.random.uniform(shape, −ε, ε)`, `pgd` here with `keras.random.uniform(shape, −ε, ε, seed)`, whose streams
differ per backend (and from TensorFlow's global generator) for the same seed. The distribution is the same
(i.i.d. `minval + U[0, 1)·(maxval − minval)` per element, float32, in input units, projected to the ε-ball (a
no-op) and clipped to the range). `pgd(..., start=η)` takes the draw instead, which is how the tests compare with
cleverhans (they record cleverhans' η and pass it).

Models run in inference mode (`training=False`). The gradient is `sphere_tf.ops.autodiff.input_gradient` (a
tape on TensorFlow, `jax.grad` on JAX, `torch.autograd` on PyTorch); this module imports no framework.

`make_attack`, `make_fgsm_sweep` and `make_predict` compile once per model behind one boundary (`_compile`):
a `tf.function` with a batch-size-free input signature on TensorFlow (one trace for every batch); on JAX one
`jax.jit` of a pure function of the model's variable values (`model.stateless_call`), so the compiled function
always sees the current weights (it compiles once per batch shape: a last, smaller batch adds one); PyTorch runs
eagerly. PGD's start is drawn outside the compiled function from the attack's own `keras.random.SeedGenerator`
(a JAX-compiled function cannot advance a generator) and passed in. The compiled callables return tensors of the
backend (`keras.ops.convert_to_numpy` reads them on every backend).

`foolbox_model` wraps a model for foolbox 3 (DeepFool) on the active backend (`evaluation.deepfool_strength`).
"""

import keras
import numpy as np
from keras import ops

from sphere_tf import validation
from sphere_tf.adversarial import pixels as pixels_lib
from sphere_tf.models import blocks
from sphere_tf.ops import autodiff

# "none" leaves the images alone (clean accuracy). The same names and budgets as `attacks`.
ATTACKS = ("none", "fgsm", "bim", "pgd")
# DCNet §6.2: "ε = 8, τ = 2, N = 20" on the 0–255 scale.
PAPER_EPSILON = 8.0
PAPER_STEP = 2.0
PAPER_ITERATIONS = 20

# foolbox 3's model class per Keras backend (`foolbox_model`).
FOOLBOX_MODELS = {"tensorflow": "TensorFlowModel", "jax": "JAXModel", "torch": "PyTorchModel"}


def inference_fn(model):
    """`x -> logits` of `model` in inference mode (the function the attacks differentiate).

    Raises:
        ValueError: `model` needs labels as an input (a `MarginHead` model), which an attack cannot feed.
    """
    if blocks.needs_labels(model):
        raise validation.invalid_argument(
            "model", "a model mapping images to logits (a MarginHead model takes labels as an input)", model.name)
    return lambda x: model(x, training=False)


# -- the steps -------------------------------------------------------------------------------------------------


def _images(images):
    return ops.convert_to_tensor(images, "float32")


def _labels(labels):
    return ops.convert_to_tensor(labels, "int32")


def _bounds(space):
    """The range as floats when every channel shares it, else `(C,)` float32 arrays (broadcast on the last axis)."""
    if len(set(space.lower)) == 1 and len(set(space.upper)) == 1:
        return space.lower[0], space.upper[0]
    return np.asarray(space.lower, np.float32), np.asarray(space.upper, np.float32)


def _clip(x, low, high):
    """`tf.clip_by_value(x, low, high)`: the same values on every backend (low <= high)."""
    return ops.maximum(ops.minimum(x, high), low)


def _loss(model_fn, labels):
    """x -> per-example softmax cross-entropy of `labels` on the logits (cleverhans' default `loss_fn`)."""
    def loss(x):
        logits = model_fn(x)
        if keras.backend.standardize_dtype(logits.dtype) != "float32":
            logits = ops.cast(logits, "float32")
        return ops.sparse_categorical_crossentropy(labels, logits, from_logits=True)
    return loss


def _fgsm_step(loss, x, eps, bounds):
    """Clip_range(x + ε·sign(∇ₓJ)): cleverhans' `fast_gradient_method` (norm ∞)."""
    grad = autodiff.input_gradient(loss, x)
    return _clip(ops.add(x, ops.multiply(eps, ops.sign(grad))), *bounds)


def _project(x, adv, eps, bounds):
    """The perturbation to the ε-ball, then the range: cleverhans' `clip_eta` and its second clip."""
    eta = _clip(ops.subtract(adv, x), -eps, eps)
    return _clip(ops.add(x, eta), *bounds)


def _iterate(loss, x, adv, eps, tau, iterations, bounds):
    for _ in range(iterations):  # unrolled, as cleverhans' Python loop (N is small: 20 in the paper)
        adv = _fgsm_step(loss, adv, tau, bounds)
        adv = _project(x, adv, eps, bounds)
    return adv


def _check_iterative(epsilon, step, iterations):
    epsilon = validation.non_negative_float(epsilon, "epsilon")
    step = validation.non_negative_float(step, "step")
    iterations = validation.positive_int(iterations, "iterations")
    if step > epsilon:
        raise validation.invalid_argument("step", f"a float <= epsilon={epsilon:g} (cleverhans requires τ <= ε)",
                                          step)
    return epsilon, step, iterations


def _check_space(space):
    if not isinstance(space, pixels_lib.PixelSpace):
        raise validation.invalid_argument("space", "a PixelSpace (sphere_tf.adversarial.pixels.input_space)", space)
    return space


# -- the attacks, eager ----------------------------------------------------------------------------------------


def fgsm(model_fn, images, labels, space, epsilon=PAPER_EPSILON):
    """One FGSM step of size ε (pixels) on the true labels, clipped to the valid range.

    Args:
        model_fn: callable `x -> logits` (`inference_fn(model)`).
        images: float array or tensor (B, H, W, C), model inputs.
        labels: int array or tensor (B,), the true classes.
        space: `PixelSpace` of the inputs' normalisation.
        epsilon: float >= 0, ε on the 0–255 scale.

    Returns:
        float32 tensor of the backend, like `images`.
    """
    space = _check_space(space)
    eps = space.epsilon(epsilon)
    return _fgsm_step(_loss(model_fn, _labels(labels)), _images(images), eps, _bounds(space))


def bim(model_fn, images, labels, space, epsilon=PAPER_EPSILON, step=PAPER_STEP, iterations=PAPER_ITERATIONS):
    """The basic iterative method: N FGSM steps of τ, projected to the ε-ball and the range after each.

    Args:
        model_fn, images, labels, space: as `fgsm`.
        epsilon: float >= 0, ε (pixels).
        step: float in [0, ε], τ (pixels).
        iterations: int > 0, N.

    Returns:
        float32 tensor of the backend, like `images`.

    Raises:
        ValueError: a bad ε, τ or N (named).
    """
    epsilon, step, iterations = _check_iterative(epsilon, step, iterations)
    space = _check_space(space)
    x, bounds = _images(images), _bounds(space)
    eps, tau = space.epsilon(epsilon), space.epsilon(step)
    return _iterate(_loss(model_fn, _labels(labels)), x, _clip(x, *bounds), eps, tau, iterations, bounds)


def random_start(shape, space, epsilon=PAPER_EPSILON, seed=None):
    """PGD's random perturbation η ~ U[−ε, ε)^shape in input units (ε in pixels), float32, as cleverhans draws it.

    `seed`: None (Keras's global generator; not inside a JAX-compiled function), an int or a
    `keras.random.SeedGenerator`.
    """
    eps = _check_space(space).epsilon(epsilon)
    return keras.random.uniform(tuple(shape), minval=-eps, maxval=eps, dtype="float32", seed=seed)


def pgd(model_fn, images, labels, space, epsilon=PAPER_EPSILON, step=PAPER_STEP, iterations=PAPER_ITERATIONS,
        start=None, seed=None):
    """BIM from a uniform random start in the ε-ball (Madry et al.); arguments as `bim`, and

    Args:
        start: None or an array like `images`: the random perturbation η in input units (cleverhans'
            `random_lp_vector` draw); projected to the ε-ball before use. None: `random_start(images' shape,
            space, epsilon, seed)`.
        seed: None, an int or a `keras.random.SeedGenerator`, for the draw when `start` is None.

    Returns:
        float32 tensor of the backend, like `images`.

    Raises:
        ValueError: a bad ε, τ or N, or a `start` of another shape (named).
    """
    epsilon, step, iterations = _check_iterative(epsilon, step, iterations)
    space = _check_space(space)
    x, bounds = _images(images), _bounds(space)
    if start is None:
        start = random_start(ops.shape(x), space, epsilon, seed)
    start = ops.convert_to_tensor(start, "float32")
    if tuple(ops.shape(start)) != tuple(ops.shape(x)):
        raise validation.invalid_argument("start", f"an array of the images' shape {tuple(ops.shape(x))}",
                                          tuple(ops.shape(start)))
    return _pgd(model_fn, x, _labels(labels), start, space.epsilon(epsilon), space.epsilon(step), iterations,
                bounds)


def _pgd(model_fn, x, labels, start, eps, tau, iterations, bounds):
    adv = _clip(ops.add(x, _clip(start, -eps, eps)), *bounds)  # cleverhans: clip_eta(η), x + η, the range
    return _iterate(_loss(model_fn, labels), x, adv, eps, tau, iterations, bounds)


# -- compiled once per model -------------------------------------------------------------------------------------


# The compiled function of an attack (its body on one model): `autodiff.ModelFunction`, shared with the face
# embeddings (`sphere_tf.evaluation.verification`).
CompiledFunction = autodiff.ModelFunction


def _compile(model, body, signature):
    """The one boundary where an attack meets a backend's compiler (`CompiledFunction`)."""
    inference_fn(model)  # a model that takes labels fails here, naming `model`
    return CompiledFunction(model, body, signature)


def _input_shape(model):
    return (None,) + tuple(model.inputs[0].shape[1:])


def make_attack(model, attack, space=None, epsilon=PAPER_EPSILON, step=PAPER_STEP, iterations=PAPER_ITERATIONS,
                seed=None):
    """`attack` on `model` as one compiled function `(images, labels) -> adversarial images`.

    As `attacks.make_attack`, on every backend. On TensorFlow the body is traced once for every batch size
    (input signature `(None, H, W, C)` float32, `(None,)` int32); on JAX it is jitted once per batch shape and
    reads the model's current weights at each call. PGD draws its start for each call from a
    `keras.random.SeedGenerator(seed)` of its own, outside the compiled function.

    Args:
        model: a built Keras model mapping images to logits.
        attack: one of `ATTACKS`.
        space: `PixelSpace` of the inputs, or None: read from the model (`pixels.input_space`).
        epsilon, step, iterations: ε, τ (pixels) and N (`bim`, `pgd`).
        seed: None or int, PGD's random starts.

    Returns:
        callable `(images, labels) -> float32 tensor` (for 'none': the images as a tensor). Its `traces`
        attribute counts the traces of the compiled body (absent for 'none').

    Raises:
        ValueError: unknown attack, bad budget, a model that needs labels as input, or a `space` that
            disagrees with the model's `PixelNormalization`.
    """
    attack = validation.one_of(attack, "attack", ATTACKS)
    inference_fn(model)
    space = pixels_lib.space_for(model, space)
    if attack != "fgsm":
        _, step, iterations = _check_iterative(epsilon, step, iterations)
    if attack == "none":
        return lambda images, labels: _images(images)
    eps, bounds = space.epsilon(epsilon), _bounds(space)
    shape = _input_shape(model)
    signature = [(shape, "float32"), (shape[:1], "int32")]
    if attack == "fgsm":
        return _compile(model, lambda f, x, y: _fgsm_step(_loss(f, y), x, eps, bounds), signature)
    tau = space.epsilon(step)
    if attack == "bim":
        return _compile(model, lambda f, x, y: _iterate(_loss(f, y), x, _clip(x, *bounds), eps, tau, iterations,
                                                        bounds), signature)
    compiled = _compile(model, lambda f, x, y, start: _pgd(f, x, y, start, eps, tau, iterations, bounds),
                        signature + [(shape, "float32")])
    return _PGDAttack(compiled, space, epsilon, keras.random.SeedGenerator(seed))


class _PGDAttack:
    """PGD compiled: draws the start per call, then runs the compiled iterations."""

    def __init__(self, compiled, space, epsilon, generator):
        self.compiled, self._space, self._epsilon, self._generator = compiled, space, epsilon, generator

    @property
    def traces(self):
        return self.compiled.traces

    def __call__(self, images, labels):
        images = _images(images)
        return self.compiled(images, labels, random_start(ops.shape(images), self._space, self._epsilon,
                                                          self._generator))


def make_fgsm_sweep(model, space=None):
    """FGSM on `model` with ε (pixels) as a tensor argument: one compiled function serves every ε of a curve.

    Returns:
        compiled callable `(images, labels, epsilon) -> adversarial images`, `epsilon` a float32 scalar on the
        0–255 scale (as `attacks.make_fgsm_sweep`).
    """
    inference_fn(model)
    space = pixels_lib.space_for(model, space)
    bounds = _bounds(space)
    shape = _input_shape(model)
    signature = [(shape, "float32"), (shape[:1], "int32"), ((), "float32")]
    return _compile(model, lambda f, x, y, epsilon: _fgsm_step(_loss(f, y), x, epsilon * space.scale, bounds),
                    signature)


def make_predict(model):
    """`images -> int32 predicted classes` of `model` in inference mode, compiled once (forward only)."""
    inference_fn(model)
    return _compile(model, lambda f, x: ops.cast(ops.argmax(f(x), axis=-1), "int32"),
                    [(_input_shape(model), "float32")])


# -- foolbox 3 (DeepFool) ---------------------------------------------------------------------------------------


def foolbox_model(foolbox, model, bounds):
    """`model` as a foolbox 3 model of the active Keras backend, in inference mode.

    TensorFlow: `foolbox.TensorFlowModel` of `inference_fn(model)`; JAX: `foolbox.JAXModel` of it (the Keras model
    traced by `jax.grad` as any JAX function); PyTorch: `foolbox.PyTorchModel` of the Keras model itself (a
    `torch.nn.Module`, called without `training`, so in inference mode), on Keras's device, built with the
    module in eval mode (foolbox warns of a module in training mode; restored after). The images' layout is
    Keras's `image_data_format` on every backend.

    Args:
        foolbox: the `foolbox` module (an optional dependency, imported by the caller).
        model: Keras model (images -> logits).
        bounds: `(low, high)` floats, the valid input range.

    Returns:
        the foolbox model.
    """
    backend = keras.backend.backend()
    if backend not in FOOLBOX_MODELS:
        raise ValueError(f"foolbox supports the tensorflow, jax and torch Keras backends. Received: {backend!r}")
    model_fn = inference_fn(model)
    bounds = tuple(float(b) for b in bounds)
    if backend == "tensorflow":
        return foolbox.TensorFlowModel(model_fn, bounds=bounds)
    if backend == "jax":
        return foolbox.JAXModel(model_fn, bounds=bounds, data_format=keras.config.image_data_format())
    device = ops.convert_to_tensor(np.zeros((), np.float32)).device
    was_training = model.training
    model.eval()
    try:
        fmodel = foolbox.PyTorchModel(model, bounds=bounds, device=device)
    finally:
        model.train(was_training)
    fmodel.data_format = keras.config.image_data_format()
    return fmodel


def foolbox_labels(labels):
    """Labels as the backend tensor foolbox 3 compares with its argmax: int64 (TensorFlow, PyTorch), JAX's default
    int (int32 unless x64 is enabled, as `jnp.argmax`).

    eagerpy's `np.find_common_type` (removed in NumPy 2) runs when the labels' dtype differs from the argmax's.
    """
    labels = np.asarray(labels).astype(np.int64)
    if keras.backend.backend() == "jax":
        return ops.convert_to_tensor(labels)  # int64 NumPy -> JAX's default int
    return ops.convert_to_tensor(labels, "int64")


__all__ = ["ATTACKS", "FOOLBOX_MODELS", "PAPER_EPSILON", "PAPER_ITERATIONS", "PAPER_STEP", "CompiledFunction",
           "bim", "fgsm", "foolbox_labels", "foolbox_model", "inference_fn", "make_attack", "make_fgsm_sweep",
           "make_predict", "pgd", "random_start"]
