"""Old import paths of names that moved, kept working with a `DeprecationWarning` naming the new home.

A package lists its moved names, `{old attribute: "new.module"}` (the module itself moved) or
`{old attribute: "new.module:attribute"}`, and sets `__getattr__ = moved_names(__name__, MOVED, fallback)`.
The new home is imported on first access only: a moved name may now live in a higher tier (the runners moved above
the library), and the library must not import it for everyone else.
"""

import importlib
import warnings


def moved_names(package, moved, fallback=None):
    """A module `__getattr__` resolving the names of `moved` in their new modules (with a warning), then
    `fallback(name)` (the package's own lazy names), else `AttributeError`."""

    def __getattr__(name):
        target = moved.get(name)
        if target is not None:
            module_name, _, attribute = target.partition(":")
            warnings.warn(f"{package}.{name} moved to {module_name}{'.' + attribute if attribute else ''}; the old "
                          "path still works but will be removed.", DeprecationWarning, stacklevel=2)
            module = importlib.import_module(module_name)
            return getattr(module, attribute) if attribute else module
        if fallback is not None:
            return fallback(name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__


__all__ = ["moved_names"]
