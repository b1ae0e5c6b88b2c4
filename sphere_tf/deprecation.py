"""Old import paths of names that moved, kept working with a `DeprecationWarning` naming the new home and the
release that removes the old path.

A package lists its moved names, `{old attribute: "new.module"}` (the module itself moved) or
`{old attribute: "new.module:attribute"}`, with the release in which they go, and sets
`__getattr__ = moved_names(__name__, MOVED, fallback, removed_in=MOVED_REMOVED_IN)`.
The new home is imported on first access only: a moved name may now live in a higher tier (the runners moved above
the library), and the library must not import it for everyone else.

Aliases are kept for two minor releases after the move: the runner's moves of 0.2.0 go in 0.4.0.
tests/test_deprecation_release.py fails once `sphere_tf.__version__` reaches the removal release of an alias still
present, so the release that bumps the version deletes them (and says so in CHANGELOG.md, under "Removed").
"""

import importlib
import warnings

from sphere_tf import version


def moved_names(package, moved, fallback=None, *, removed_in):
    """A module `__getattr__` resolving the names of `moved` in their new modules (with a warning naming
    `removed_in`), then `fallback(name)` (the package's own lazy names), else `AttributeError`.

    Args:
        package: str, the module's `__name__`.
        moved: dict old attribute -> "new.module" or "new.module:attribute".
        fallback: optional callable name -> value for the module's other lazy names.
        removed_in: str, the release ("MAJOR.MINOR.PATCH") whose package no longer has these aliases.

    Returns:
        The `__getattr__` function, with the attributes `moved` and `removed_in` (read by the release test).
    """
    version.parse(removed_in)  # ValueError for anything but a version

    def __getattr__(name):
        target = moved.get(name)
        if target is not None:
            module_name, _, attribute = target.partition(":")
            warnings.warn(f"{package}.{name} moved to {module_name}{'.' + attribute if attribute else ''}; the old "
                          f"path still works but is deprecated and will be removed in sphere_tf {removed_in}.",
                          DeprecationWarning, stacklevel=2)
            module = importlib.import_module(module_name)
            return getattr(module, attribute) if attribute else module
        if fallback is not None:
            return fallback(name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    __getattr__.moved = moved
    __getattr__.removed_in = removed_in
    return __getattr__


__all__ = ["moved_names"]
