"""The papers' experiments as runner configs: one file per table or figure, `get_config(arg)` in each.

A config is named by its path below this folder without `.py` (`dcnet/table4_resnet32_adam`); `sphere-tf configs`
lists them with the first line of each file's docstring, and `sphere-tf run --config NAME` (or a path to a file
of your own) runs one. The folders follow the papers: `spherenet` (Deep Hyperspherical Learning, NIPS 2017),
`dcnet` (Decoupled Networks, CVPR 2018), `losses` (L-Softmax, ICML 2016; the thesis's Table 3.1), `face`
(SphereFace, CVPR 2017; Partial FC), `mhe` (Learning towards Minimum Hyperspherical Energy, NeurIPS 2018),
`comhe` (Regularizing Neural Networks via Minimizing Hyperspherical Energy, CVPR 2020), `opt` (Orthogonal
Over-Parameterized Training, CVPR 2021), `convnorm` (ConvNorm, NeurIPS 2021), `adversarial` (DCNet Tables 7
and 8), `repro` (the Fashion-MNIST reproductions of docs/reproductions.md). A file without a top-level `get_config`
(`common.py`, `face/recipe.py`, `_base.py`, each folder's `__init__.py`) holds what configs share; it is not one.

Nothing here is imported by the library: the runner reads a config by name or path (`config_path`).
"""

import ast
import importlib.util
import os

FOLDER = os.path.dirname(os.path.abspath(__file__))


class ConfigNotFoundError(ValueError):
    """A `--config` that is neither a file nor the name of a packaged config."""


def names():
    """The packaged configs' names (`dcnet/table4_resnet32_adam`): the files below this folder with a top-level
    `get_config`, sorted."""
    found = []
    for dirpath, dirnames, filenames in os.walk(FOLDER):
        dirnames[:] = [d for d in dirnames if not d.startswith(("_", "."))]
        for filename in filenames:
            path = os.path.join(dirpath, filename)
            if filename.endswith(".py") and not filename.startswith("_") and _defines_get_config(path):
                found.append(os.path.relpath(path[:-3], FOLDER).replace(os.sep, "/"))
    return sorted(found)


def _defines_get_config(path):
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    return any(isinstance(node, ast.FunctionDef) and node.name == "get_config" for node in tree.body)


def config_path(spec):
    """The file of `spec`: an existing file path as it is, else a packaged config's name.

    A name is the config's path below this folder, with or without `.py` and with or without a leading
    `configs/` (the layout of the source tree before the configs moved into the package), e.g.
    `dcnet/fashion_mnist_tanh_cosine`.

    Raises:
        ConfigNotFoundError: `spec` is neither a file nor a packaged config's name (the message says how to
            list the names).
    """
    if os.path.isfile(spec):
        return spec
    name = spec.replace(os.sep, "/")
    for prefix in ("sphere_tf/configs/", "configs/"):
        if name.startswith(prefix):
            name = name[len(prefix):]
    if name.endswith(".py"):
        name = name[:-3]
    parts = name.split("/")
    candidate = os.path.join(FOLDER, *parts) + ".py"
    # The same test as `names()` for this one file (no walk of the folder); `..` and private files are no names.
    if all(part and not part.startswith(("_", ".")) for part in parts) and os.path.isfile(candidate) \
            and _defines_get_config(candidate):
        return candidate
    raise ConfigNotFoundError(f"--config: {spec!r} is neither a config file nor a packaged config's name "
                              "(`sphere-tf configs` lists them).")


def load_module(spec, module_name=None):
    """Imports the config `spec` (a file or a packaged config's name, `config_path`) and returns the module.

    Raises:
        ConfigNotFoundError: `spec` is not a config, or its file defines no callable `get_config`.
    """
    path = config_path(spec)
    name = module_name or os.path.splitext(os.path.basename(path))[0]
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    if not callable(getattr(module, "get_config", None)):
        raise ConfigNotFoundError(f"--config: {path!r} defines no get_config(arg).")
    return module


def summary(name):
    """The first line of the packaged config `name`'s docstring (read without importing it)."""
    with open(config_path(name), encoding="utf-8") as f:
        docstring = ast.get_docstring(ast.parse(f.read())) or ""
    return docstring.strip().splitlines()[0] if docstring.strip() else ""


__all__ = ["ConfigNotFoundError", "FOLDER", "config_path", "load_module", "names", "summary"]
