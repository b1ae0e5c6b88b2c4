"""The package's version, written here only, and the comparison of the versions that files record.

`sphere_tf.__version__`, the packaging metadata (pyproject.toml reads `__version__` from this file without
importing the package, so it stays a plain string literal) and the version that `.keras` files and step
checkpoints record (`sphere_tf.saving`, `sphere_tf.training.checkpoint`) all come from `__version__`.

Versions are ``MAJOR.MINOR.PATCH``. A file format changes only with the major or the minor version: a file
written by a newer patch release of the installed major.minor is read as written by the installed one, a file
written by a newer minor (or major) release is not (see `newer_format`).
"""

import re

__version__ = "0.2.0"

_VERSION = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?")


def parse(version):
    """`(major, minor, patch)` of a version string: ``"0.2.0"`` -> ``(0, 2, 0)``.

    A missing patch number reads as 0 (``"1.3"``); a suffix after the numbers (``"0.3.0rc1"``, ``"0.3.0.dev2"``)
    is ignored: a pre-release of 0.3.0 writes the 0.3 format.

    Raises:
        ValueError: `version` is not a string starting ``MAJOR.MINOR``.
    """
    match = _VERSION.match(version) if isinstance(version, str) else None
    if match is None:
        raise ValueError(f"not a sphere_tf version (MAJOR.MINOR.PATCH): {version!r}")
    return int(match[1]), int(match[2]), int(match[3] or 0)


def format_version(version):
    """``"MAJOR.MINOR"`` of a version string: the release line whose files share one format."""
    major, minor, _ = parse(version)
    return f"{major}.{minor}"


def newer_format(recorded, installed=None):
    """Whether a file that records the version `recorded` comes from a newer major or minor release than
    `installed` (default: this package's `__version__`), whose format this release may not read.

    A newer patch release of the same major.minor writes the same format: False.
    """
    return parse(recorded)[:2] > parse(installed or __version__)[:2]


__all__ = ["__version__", "format_version", "newer_format", "parse"]
