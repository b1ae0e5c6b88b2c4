"""Magnitude functions h(‖x‖) of DCNet's decoupled operators [D-4..10, D-19..21].

A decoupled operator is ``f_d(w, x) = h(‖w‖, ‖x‖) · g(θ)`` [D-3]; unweighted
operators drop ‖w‖, so h is a function of the patch norm alone. Operators with a
radius take ``radius = ρ · E{‖x‖}``, the implemented form of DCNet's appendix
[D-19..21] (the layer owns ρ and the running mean E{‖x‖}).

Each function takes float32 tensors and returns a float32 tensor broadcastable
to ``x_norm``. A new operator is one function and one `MAGNITUDE_FNS` entry.
"""

import dataclasses
from typing import Callable, Optional

from keras import ops

from sphere_tf import registry


def _times(alpha, h):
    # α = 1 (the default) costs no full-size multiply.
    return h if isinstance(alpha, (int, float)) and alpha == 1 else alpha * h


def sphere(x_norm, radius, alpha, beta):
    """SphereConv  h = α   [D-4]; α = 1 is SphereNet."""
    del radius, beta
    return alpha * ops.ones_like(x_norm)


def ball(x_norm, radius, alpha, beta):
    """BallConv  h = α·min(‖x‖, r)/r   [D-5], r = ρ·E{‖x‖} [D-20]."""
    del beta
    # min(‖x‖/r, 1): the division is by the small radius tensor, not a full-size one.
    return _times(alpha, ops.minimum(x_norm * (1.0 / radius), 1.0))


def tanh(x_norm, radius, alpha, beta):
    """TanhConv  h = α·tanh(‖x‖/r)   [D-6], r = ρ·E{‖x‖} [D-19]."""
    del beta
    return _times(alpha, ops.tanh(x_norm * (1.0 / radius)))


def linear(x_norm, radius, alpha, beta):
    """LinearConv  h = α‖x‖   [D-7]."""
    del radius, beta
    return alpha * x_norm


def seg(x_norm, radius, alpha, beta):
    """SegConv  h = α‖x‖ for ‖x‖ ≤ r, β‖x‖ + αr − βr beyond   [D-8], [D-21].

    Written as ``α·min(‖x‖, r) + β·max(‖x‖ − r, 0)``, the same continuous
    function with one branch-free expression (upstream: α = 1, β = 0.5).
    """
    return alpha * ops.minimum(x_norm, radius) + beta * ops.relu(x_norm - radius)


def log(x_norm, radius, alpha, beta):
    """LogConv  h = α·log(1 + ‖x‖)   [D-9]."""
    del radius, beta
    return alpha * ops.log1p(x_norm)


def mix(x_norm, radius, alpha, beta):
    """MixConv  h = α‖x‖ + β·log(1 + ‖x‖)   [D-10]."""
    del radius
    return alpha * x_norm + beta * ops.log1p(x_norm)


@dataclasses.dataclass(frozen=True)
class Magnitude:
    """A registry entry: the function and which hyperparameters it reads."""

    fn: Callable
    has_radius: bool = False
    # None: β is not used and passing one is an error; else the DCNet default [D App B].
    default_beta: Optional[float] = None
    bounded: bool = False
    # h = α·h₁(‖x‖) with h₁ free of α: α may then join the one-channel per-position factor instead of
    # costing a full-size multiply (seg and mix mix α with β).
    alpha_factor: bool = False
    # h = α‖x‖ (LinearConv): with cosine g the patch norm cancels, f = α·x·ŵ.
    proportional_to_norm: bool = False


MAGNITUDE_FNS = {
    "sphere": Magnitude(sphere, bounded=True, alpha_factor=True),
    "ball": Magnitude(ball, has_radius=True, bounded=True, alpha_factor=True),
    "tanh": Magnitude(tanh, has_radius=True, bounded=True, alpha_factor=True),
    "linear": Magnitude(linear, alpha_factor=True, proportional_to_norm=True),
    "seg": Magnitude(seg, has_radius=True, default_beta=0.5),
    "log": Magnitude(log, alpha_factor=True),
    "mix": Magnitude(mix, default_beta=1.0),
}


def register_magnitude(name, magnitude):
    """Adds a `Magnitude` entry; taken names raise `KeyError`."""
    if not isinstance(magnitude, Magnitude):
        raise TypeError(f"Expected a `Magnitude`, received {magnitude!r}.")
    registry.register(MAGNITUDE_FNS, name, magnitude, "Magnitude function")


def get_magnitude(identifier):
    """Resolves a registry name to its `Magnitude` entry."""
    if isinstance(identifier, Magnitude):
        return identifier
    return registry.lookup(MAGNITUDE_FNS, identifier, "magnitude function")
