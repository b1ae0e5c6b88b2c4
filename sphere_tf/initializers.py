"""Energy-minimising initialisation of a layer's neurons (the refined V of OPT).

Orthogonal Over-Parameterized Training (Liu et al., "Orthogonal
Over-Parameterized Training", CVPR 2021; W. Liu's PhD thesis §7.3.7) keeps the
hyperspherical energy of the random neurons V fixed during training, so it
pays to start from a low-energy V. `refine_neurons` offers the thesis's two
refinements of a random kernel:

```
û ← normalize(û − lr·∇E_s(û))      `steps` times, from the unit directions of V    (energy_init)
v_i ← v_i / ‖v_i‖                   unit-norm neurons                               (normalize)
```

E_s is `sphere_tf.energy.hyperspherical_energy` (MHE, or its half-space variant
on {±û_i}); each neuron keeps its norm through the energy descent.

`refined_initializer` wraps that into a Keras initializer computed once, when
the layer is built, from a NumPy copy of the base draw (so a build inside a traced
function gets a constant).

`MeanShifted` adds a constant to another initializer's draw: the thesis's Table 7.2
raises the initial energy of V by shifting the mean of its He-normal draw.

`UnitNormNeurons` rescales every neuron of another initializer's draw to unit norm: the
"w/ Norm" column of the thesis's Table 7.7 for a plain (non-OPT) layer, whose neurons are
then trained freely.
"""

import keras
import numpy as np
from keras import ops

from sphere_tf import energy as energy_lib
from sphere_tf import saving
from sphere_tf import validation
from sphere_tf.ops import acceleration
from sphere_tf.ops import angles
from sphere_tf.ops import autodiff

ENERGY_INITS = ("mhe", "half_space_mhe")


def minimize_energy(directions, steps, lr, power, half_space):
    """Projected gradient descent of the hyperspherical energy of unit columns.

    ``û ← normalize(û − lr·∇E(û))`` for `steps` steps, with E the mean s-energy of
    `sphere_tf.energy.hyperspherical_energy` (half-space if asked).

    Args:
        directions: float tensor ``(d, n)`` of unit columns.
        steps: int >= 1.
        lr: float > 0, the step size.
        power: float >= 0, the Riesz power s.
        half_space: bool, the half-space energy.

    Returns:
        float32 tensor ``(d, n)`` of unit columns.
    """


    def energy(u):
        return energy_lib.hyperspherical_energy(u, power=power, half_space=half_space, epsilon=0.0)

    @autodiff.compiled  # one trace; the Python loop below only dispatches
    def step(u):
        _, grad = autodiff.value_and_grad(energy, u)
        # Exact unit norm after each step (no epsilon: the columns are never zero here).
        return ops.stop_gradient(angles.normalize(u - lr * grad, axis=0, epsilon=0.0)[0])

    u = ops.convert_to_tensor(directions, "float32")
    for _ in range(steps):
        u = step(u)
    return u


def refine_neurons(v, energy_init=None, steps=5000, lr=1.0, power=2.0, normalize=False):
    """The refined V: energy-minimised directions (keeping norms) and/or unit norms.

    Args:
        v: float tensor ``(d, n)``, one neuron per column.
        energy_init: None, 'mhe' or 'half_space_mhe'.
        steps, lr, power: the descent's settings (see `minimize_energy`).
        normalize: bool, rescale every neuron to unit norm at the end.

    Returns:
        float32 NumPy array ``(d, n)``.
    """
    # No epsilon: a Gaussian neuron is never zero, and the refinement is exact in norm.
    directions, norms = angles.normalize(v, axis=0, epsilon=0.0)
    if energy_init is not None:
        directions = minimize_energy(
            directions, steps=steps, lr=lr, power=power, half_space=energy_init == "half_space_mhe"
        )
    v = directions if normalize else directions * norms
    return ops.convert_to_numpy(v)


def refined_initializer(base, kernel_shape, **refine_kwargs):
    """A Keras initializer returning `refine_neurons` of one draw of `base`, computed now.

    Args:
        base: Keras initializer of the plain kernel.
        kernel_shape: the kernel shape; neurons are the columns of its
            ``(-1, kernel_shape[-1])`` flattening.
        **refine_kwargs: arguments of `refine_neurons`.

    Returns:
        callable ``(shape, dtype=None) -> tensor``.
    """

    # The base draw and the descent run eagerly, outside any trace (TensorFlow builds layers inside
    # `tf.function` traces): the initializer then returns a constant.
    def draw_and_refine():
        v = np.asarray(ops.convert_to_numpy(base(kernel_shape, "float32")), np.float32)
        return refine_neurons(v.reshape(-1, kernel_shape[-1]), **refine_kwargs).reshape(kernel_shape)

    value = acceleration.run_eagerly(draw_and_refine)

    def initializer(shape, dtype=None):
        return ops.cast(value, dtype or "float32")

    return initializer


@saving.register_serializable()
class MeanShifted(keras.initializers.Initializer):
    """`base`'s draw plus a constant `mean` (every entry).

    Liu's thesis (2020), Table 7.2 (OPT): neurons V drawn from He normal with
    the mean shifted by 1e-3 ... 5e-2 start from a higher hyperspherical energy
    (all neurons lean towards the all-ones direction), and OPT, which keeps that
    energy, trains worse or not at all. Use it as OPT's
    `fixed_kernel_initializer`, e.g. `MeanShifted(0.02)`.

    Args:
        mean: float, the shift.
        base: Keras initializer (object, name or config); default He normal
            (`VarianceScaling(2, 'fan_in', 'untruncated_normal')`, upstream OPT's V).
        seed: int or None, the seed of the default base (ignored when `base` is given).
    """

    def __init__(self, mean, base=None, seed=None):
        self.mean = validation.real(mean, "mean")
        seed = validation.integer(seed, "seed", minimum=0, allow_none=True, maximum=validation.MAX_INT32)
        if base is None:
            base = keras.initializers.VarianceScaling(2.0, "fan_in", "untruncated_normal", seed=seed)
        self.base = validation.keras_object(keras.initializers.get, base, "base", "initializer")

    def __call__(self, shape, dtype=None):
        return ops.add(self.base(shape, dtype=dtype), ops.cast(self.mean, dtype or "float32"))

    def get_config(self):
        return {"mean": self.mean, "base": keras.initializers.serialize(self.base)}



@saving.register_serializable()
class UnitNormNeurons(keras.initializers.Initializer):
    """`base`'s draw with every neuron rescaled to unit L2 norm.

    A neuron is one output unit: a column of the kernel flattened to
    ``(-1, shape[-1])`` (all kh·kw·C_in weights of a conv filter; the inputs of a
    Dense unit), so ``w_i ← w_i / ‖w_i‖``.

    Liu's thesis (2020), §7.3.7 and §7.5.3 (Table 7.7, "w/ Norm"): "After randomly
    initializing the neurons, we directly normalize the scale of the weights to 1."
    OPT's layers do it to their fixed V (`normalize_fixed_kernel=True`), which keeps
    the unit norms for the whole run; for the baseline row, plain convs, it is the
    initialisation only: nothing in the thesis renormalises the baseline's neurons
    during training (that would be DCNet's weight projection), so the trained
    weights are free to change norm.

    Args:
        base: Keras initializer (object, name or config); default He normal
            (`VarianceScaling(2, 'fan_in', 'untruncated_normal')`, the thesis's
            initialisation of the CNN-6 neurons).
        seed: int or None, the seed of the default base (ignored when `base` is given).
        epsilon: float >= 0, added to each norm (0: exact). A zero neuron (a base that
            can draw one, e.g. 'zeros') stays zero.

    Raises:
        ValueError: `epsilon` not a float >= 0 (named).
    """

    def __init__(self, base=None, seed=None, epsilon=0.0):
        seed = validation.integer(seed, "seed", minimum=0, allow_none=True, maximum=validation.MAX_INT32)
        if base is None:
            base = keras.initializers.VarianceScaling(2.0, "fan_in", "untruncated_normal", seed=seed)
        self.base = validation.keras_object(keras.initializers.get, base, "base", "initializer")
        self.epsilon = validation.non_negative_float(epsilon, "epsilon")

    def __call__(self, shape, dtype=None):
        dtype = dtype or "float32"
        shape = tuple(shape)
        # Norms in float32 whatever the variable's dtype (a float16 sum of squares over 576 weights may round).
        kernel = ops.cast(self.base(shape, dtype="float32"), "float32")
        neurons = ops.reshape(kernel, (-1, shape[-1]))
        norms = ops.sqrt(ops.sum(ops.square(neurons), axis=0, keepdims=True)) + self.epsilon
        # A zero neuron has no direction: it stays zero (0/0 would make the whole kernel's training NaN).
        norms = ops.where(norms > 0.0, norms, 1.0)
        return ops.cast(ops.reshape(neurons / norms, shape), dtype)

    def get_config(self):
        return {"base": keras.initializers.serialize(self.base), "epsilon": self.epsilon}
