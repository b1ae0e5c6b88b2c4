"""The public modules of `sphere_tf`, found by walking the source tree (nothing is imported).

Shared by the site's page generator (`tools/docs/gen_api_pages.py`), the docstring check
(`tools/docs/hooks.py`) and `tests/test_docs_site.py`; standard library only, so it runs in any
virtualenv (the docs one has no TensorFlow, the test one no mkdocs).

A module is public when no component of its dotted name starts with an underscore (`_x.py`,
`__main__.py` and everything below a `_x/` package are private) and it is not below one of
`EXCLUDED`. Packages are the directories holding an `__init__.py`; a directory without one is
not walked (a build output, a data folder).
"""

import ast
import os

PACKAGE = "sphere_tf"

# Experiment config files (`sphere-tf run --config NAME`): not API. They are listed on one generated page
# (`CONFIGS_PAGE`) instead of one page per file.
CONFIGS_PACKAGE = "sphere_tf.configs"
# The TensorFlow plug-in's C++ kernel build (compiler flags, cache, loader): an internal of
# `sphere_tf.backends.tensorflow.fused`, run as `python -m sphere_tf.backends.tensorflow.kernels`.
KERNELS_PACKAGE = "sphere_tf.backends.tensorflow.kernels"
EXCLUDED = (CONFIGS_PACKAGE, KERNELS_PACKAGE)

# Site paths (relative to docs_dir) of the generated pages.
API_DIR = "api"
CONFIGS_PAGE = f"{API_DIR}/configs.md"
# The `sphere-tf` command (the package `sphere_tf_cli`, beside `sphere_tf`): one page of its commands' usage.
CLI_PACKAGE = "sphere_tf_cli"
CLI_PAGE = f"{API_DIR}/cli.md"

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _is_private(name):
    return any(part.startswith("_") for part in name.split("."))


def _is_excluded(name, excluded):
    return any(name == prefix or name.startswith(prefix + ".") for prefix in excluded)


def _walk(root, package, skip_private=True):
    """(dotted name, file path, is_package) of every module below `package`, sorted by name."""
    top = os.path.join(root, *package.split("."))
    found = []
    if not os.path.isfile(os.path.join(top, "__init__.py")):
        return found
    for dirpath, dirnames, filenames in os.walk(top):
        rel = os.path.relpath(dirpath, root)
        prefix = ".".join(rel.split(os.sep))
        if not os.path.isfile(os.path.join(dirpath, "__init__.py")):
            dirnames[:] = []
            continue
        dirnames[:] = sorted(d for d in dirnames
                             if d != "__pycache__" and not d.startswith(".")
                             and not (skip_private and d.startswith("_")))
        found.append((prefix, os.path.join(dirpath, "__init__.py"), True))
        for filename in sorted(filenames):
            stem, ext = os.path.splitext(filename)
            if ext != ".py" or filename == "__init__.py" or (skip_private and stem.startswith("_")):
                continue
            found.append((f"{prefix}.{stem}", os.path.join(dirpath, filename), False))
    return sorted(found)


def public_modules(root=ROOT, package=PACKAGE, excluded=EXCLUDED):
    """Dotted names of the public modules below `package` (itself included), sorted.

    Each gets one page of the API reference.
    """
    return [name for name, _, _ in _walk(root, package)
            if not _is_private(name) and not _is_excluded(name, excluded)]


def module_path(name, root=ROOT):
    """The source file of dotted module `name` (its `__init__.py` for a package)."""
    base = os.path.join(root, *name.split("."))
    return os.path.join(base, "__init__.py") if os.path.isdir(base) else base + ".py"


def is_package(name, root=ROOT):
    """Whether dotted module `name` is a package (a directory with an `__init__.py`)."""
    return os.path.isfile(os.path.join(root, *name.split("."), "__init__.py"))


def page_path(name):
    """The generated page of module `name`, relative to docs_dir: `api/sphere_tf/layers/index.md` for a package,
    `api/sphere_tf/layers/opt.md` for a module."""
    parts = name.split(".")
    if is_package(name):
        return "/".join([API_DIR, *parts, "index.md"])
    return "/".join([API_DIR, *parts]) + ".md"


def config_files(root=ROOT, package=CONFIGS_PACKAGE):
    """Repo-relative paths of the experiment config files below `package` (`__init__.py` files and private
    helpers left out), sorted; empty when the package does not exist."""
    files = []
    for name, path, is_pkg in _walk(root, package):
        if not is_pkg and not _is_private(name):
            files.append(os.path.relpath(path, root).replace(os.sep, "/"))
    return sorted(files)


def first_docstring_line(path):
    """The first line of a Python file's module docstring, or "" (parsed, not imported)."""
    try:
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
    except (OSError, SyntaxError, ValueError):
        return ""
    doc = ast.get_docstring(tree)
    return doc.strip().splitlines()[0].strip() if doc and doc.strip() else ""
