"""Angular activations g(θ): SphereNet [S-2..4] and DCNet [D-11..14].

Each activation is a pure function of the cosine ``c = cos θ`` (float32) and the
sigmoid parameter ``k``; functions that need θ itself take it through
`angles.safe_acos`, the others never call arccos (cheaper, and exact at θ = 0, π).
Every g satisfies g(0) = 1, g(π/2) = 0, g(π) = −1 and maps [0, π] onto [−1, 1].

The ``*_of_theta`` forms evaluate g at an arbitrary angle, which margin losses
need for g(mθ) (GA-Softmax [S-11]).

A new activation is one function and one `ANGULAR_FNS` entry.
"""

import math

from keras import ops

from sphere_tf import registry

from sphere_tf.ops import angles


def linear_of_theta(theta):
    """Linear angular function  g(θ) = 1 − 2θ/π   [S-2] = [D-11].

    Upstream writes the slope as −0.63662 (= −2/π to 5 digits); we use the exact value.
    """
    return 1.0 - (2.0 / math.pi) * theta


def sigmoid_of_theta(theta, k):
    """Sigmoid angular function [S-4] = [D-13] in its overflow-free tanh form.

    ```
    g(θ) = (1 + e^{−π/2k}) / (1 − e^{−π/2k}) · (1 − e^{θ/k − π/2k}) / (1 + e^{θ/k − π/2k})
         = tanh((π/2 − θ) / 2k) / tanh(π / 4k)
    ```

    The two forms agree to 4e−16; the exponential form overflows for small k
    (k = 0.01 gives e^314), the tanh form cannot.

    Args:
        theta: float32 tensor of angles.
        k: float > 0 or tensor broadcastable to `theta`, the curvature parameter.
    """
    k = ops.cast(k, "float32")
    return ops.tanh((math.pi / 2.0 - theta) / (2.0 * k)) / ops.tanh(math.pi / (4.0 * k))


def linear(cos_theta, k=None):
    """g(θ) = 1 − 2θ/π from c = cos θ (needs θ)."""
    del k
    return linear_of_theta(angles.safe_acos(cos_theta))


def cosine(cos_theta, k=None):
    """g(θ) = cos θ   [S-3] = [D-12]; no arccos."""
    del k
    return ops.cast(cos_theta, "float32")


def sigmoid(cos_theta, k=0.3):
    """Sigmoid g(θ) with curvature k (needs θ); see `sigmoid_of_theta`."""
    return sigmoid_of_theta(angles.safe_acos(cos_theta), k)


def sqcosine(cos_theta, k=None):
    """Square cosine g(θ) = sign(cos θ)·cos²θ   [D-14], computed as c·|c|.

    c·|c| has the continuous derivative 2|c|, so sign() is never differentiated.
    """
    del k
    c = ops.cast(cos_theta, "float32")
    return c * ops.abs(c)


ANGULAR_FNS = {
    "linear": linear,
    "cosine": cosine,
    "sigmoid": sigmoid,
    "sqcosine": sqcosine,
}

# Activations that need θ = arccos(c); the rest are polynomials in c.
NEEDS_THETA = frozenset({"linear", "sigmoid"})
# Activations with a parameter k.
USES_K = frozenset({"sigmoid"})


def register_angular_fn(name, fn, needs_theta=True, uses_k=False):
    """Adds `fn(cos_theta, k)` under `name`; taken names raise `KeyError`."""
    global NEEDS_THETA, USES_K
    registry.register(ANGULAR_FNS, name, fn, "Angular function")
    if needs_theta:
        NEEDS_THETA = NEEDS_THETA | {name}
    if uses_k:
        USES_K = USES_K | {name}


def get_angular_fn(identifier):
    """Resolves a registry name (or a callable `fn(cos_theta, k)`) to a function."""
    if callable(identifier):
        return identifier
    return registry.lookup(ANGULAR_FNS, identifier, "angular function")
