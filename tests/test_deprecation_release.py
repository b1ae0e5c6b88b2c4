"""Deprecated import paths name the release that removes them, and go in that release.

Every package that keeps old import paths working (`__getattr__ = deprecation.moved_names(...)`, found here in the
source) states `removed_in`; the DeprecationWarning an old path gives names it. Once `sphere_tf.__version__`
reaches that release, `test_no_alias_outlives_its_removal_release` fails: the change that bumps the version
deletes the aliases (the package's MOVED table, its entry in tests/test_import_graph.py's DEPRECATED_ALIASES) and
lists them under "Removed" in CHANGELOG.md.

CHANGELOG.md itself has a section for the installed release, so a version bump comes with its change log.
"""

import ast
import importlib
import os
import re
import warnings

import pytest

import sphere_tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHANGELOG = os.path.join(ROOT, "CHANGELOG.md")


def _release(text):
    """`(major, minor, patch)` of a literal "X.Y.Z" (not the package's own parser)."""
    assert re.fullmatch(r"\d+\.\d+\.\d+", text), f"not a release number: {text!r}"
    return tuple(int(part) for part in text.split("."))


INSTALLED = _release(sphere_tf.__version__)


def _packages_with_moved_names():
    """The modules under sphere_tf/ whose source calls `moved_names(...)` (the deprecation module excepted)."""
    found = []
    for folder, _, files in os.walk(os.path.join(ROOT, "sphere_tf")):
        for name in files:
            if not name.endswith(".py"):
                continue
            path = os.path.join(folder, name)
            with open(path, encoding="utf-8") as f:
                tree = ast.parse(f.read(), path)
            calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
                     and getattr(node.func, "attr", getattr(node.func, "id", None)) == "moved_names"]
            module = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".").removesuffix(".__init__")
            if calls and module != "sphere_tf.deprecation":
                found.append(module)
    return sorted(found)


PACKAGES = _packages_with_moved_names()


def _aliases(package):
    getter = importlib.import_module(package).__getattr__
    return getter.moved, getter.removed_in


def test_the_deprecated_aliases_are_found():
    assert {"sphere_tf.adversarial", "sphere_tf.evaluation", "sphere_tf.training"} <= set(PACKAGES)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_alias_outlives_its_removal_release(package):
    moved, removed_in = _aliases(package)
    assert moved, f"{package} keeps moved_names with an empty table: remove the call"
    assert INSTALLED < _release(removed_in), (
        f"sphere_tf {sphere_tf.__version__} has reached {removed_in}, the release that removes {package}'s "
        f"deprecated aliases {sorted(moved)}: delete them (its MOVED table and moved_names call, their entry in "
        "tests/test_import_graph.py's DEPRECATED_ALIASES) and list them under 'Removed' in CHANGELOG.md.")


@pytest.mark.parametrize("package", PACKAGES)
def test_each_alias_resolves_with_a_warning_naming_its_removal_release(package):
    moved, removed_in = _aliases(package)
    for name, target in sorted(moved.items()):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = getattr(importlib.import_module(package), name)
        module_name, _, attribute = target.partition(":")
        expected = importlib.import_module(module_name)
        assert value is (getattr(expected, attribute) if attribute else expected)
        messages = [str(w.message) for w in caught if issubclass(w.category, DeprecationWarning)]
        assert any(f"{package}.{name} moved to {module_name}" in message
                   and f"removed in sphere_tf {removed_in}" in message for message in messages), messages


def test_moved_names_states_its_removal_release():
    from sphere_tf import deprecation

    with pytest.raises(TypeError):
        deprecation.moved_names("pkg", {"a": "b"})  # removed_in is required
    with pytest.raises(ValueError, match="not a sphere_tf version"):
        deprecation.moved_names("pkg", {"a": "b"}, removed_in="soon")


def _changelog():
    with open(CHANGELOG, encoding="utf-8") as f:
        return f.read()


def test_the_changelog_has_a_section_for_the_installed_release():
    text = _changelog()
    assert text.startswith("# Changelog")
    assert "keepachangelog.com" in text
    headings = re.findall(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?$", text, re.M)
    assert headings and headings[0] == ("Unreleased", "")
    releases = [name for name, _ in headings[1:]]
    assert releases and releases[0] == sphere_tf.__version__, (
        f"CHANGELOG.md's newest release is {releases[:1]}, the package is {sphere_tf.__version__}")
    assert all(date for _, date in headings[1:]), "a release heading without its date"
    assert [_release(r) for r in releases] == sorted((_release(r) for r in releases), reverse=True)


@pytest.mark.parametrize("package", PACKAGES)
def test_the_changelog_announces_each_removal(package):
    _, removed_in = _aliases(package)
    deprecated = re.findall(r"^### Deprecated\n(.*?)(?=^##)", _changelog() + "\n##", re.M | re.S)
    assert any(package in section and removed_in in section for section in deprecated), (
        f"CHANGELOG.md has no 'Deprecated' entry naming {package} and its removal release {removed_in}")
