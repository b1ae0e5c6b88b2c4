"""Name registries: every `register_*` / `get_*` pair of the package reads and writes through these two.

The registries themselves are plain dicts beside the functions they name
(`ops.angular.ANGULAR_FNS`, `ops.magnitude.MAGNITUDE_FNS`,
`ops.orthogonal.ORTHOGONALIZATION_FNS`, `energy.ENERGY_FNS`, `models.MODELS`);
a taken name raises (big_vision's registry) rather than silently replacing an
entry (timm's).
"""

from sphere_tf import validation


def register(registry, name, value, kind):
    """Adds `value` under `name`; returns it.

    Raises:
        KeyError: `name` is taken.
    """
    if name in registry:
        raise KeyError(f"{kind} {name!r} is already registered.")
    registry[name] = value
    return value


def lookup(registry, name, kind):
    """The entry registered as `name`.

    Raises:
        ValueError: an unknown name; the message lists the registered ones.
    """
    try:
        known = name in registry
    except TypeError:  # unhashable
        known = False
    if not known:
        raise ValueError(f"Unknown {kind} {name!r}; expected one of {sorted(registry)}."
                         + validation.did_you_mean(name, registry))
    return registry[name]
