"""Lists the public objects of `sphere_tf` that have no docstring (static analysis with griffe; nothing imported).

Run by the site build (`tools/docs/hooks.py` logs each one as a warning, which fails `mkdocs build --strict`) and
on its own:

    .venv-docs/bin/python tools/docs/check_docstrings.py     # exit 1, one line per finding, when there is any

Public, and so checked:
  * every module `api_modules.public_modules()` gives a page (no `_` component; configs and the C++ kernel build
    left out);
  * in each, the classes and functions it defines whose names have no leading underscore; where the module
    defines `__all__`, exactly the names listed there (an object imported and re-exported through `__all__` is
    checked where it is defined, even in a private module);
  * the public methods and properties of those classes, except overrides that inherit a docstring: a method
    whose name a base class in the package defines with a docstring, or a framework hook (`call`, `build`,
    `get_config`, `on_epoch_end`, ... in `FRAMEWORK_HOOKS`) of a class deriving from a class outside the
    package (Keras, `tf.distribute`), whose meaning the framework documents.

It also checks the parameters those docstrings document (`Args:`): every name, each name of a group
(`alpha, beta: ...`, the code's style) included, must be a parameter of the signature (of `__init__` for a
class; a signature with `*args` forwards names it cannot list, and is not checked). griffe's own check
(`warn_unknown_params`) treats a group as one unknown name, so the site turns it off and this check stands in
for it.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import api_modules  # noqa: E402
import griffe_runtime_docs  # noqa: E402

# Methods a subclass of a Keras (or other outside) class overrides with the meaning the framework documents.
FRAMEWORK_HOOKS = frozenset({
    # keras.layers.Layer / keras.Model / keras.losses.Loss / keras.metrics.Metric / keras.regularizers.Regularizer
    "build", "call", "compute_output_shape", "compute_output_spec", "get_config", "from_config",
    "get_build_config", "build_from_config", "load_own_variables", "save_own_variables", "compute_loss",
    "train_step", "test_step", "predict_step", "update_state", "result", "reset_state",
    # keras.optimizers.Optimizer
    "apply", "apply_gradients", "update_step", "finalize_variable_values",
    # torch.autograd.Function (the PyTorch plug-in's closed-form gradients; the class docstring gives the maths)
    "forward", "backward", "setup_context",
    # keras.callbacks.Callback (plus every `on_*` method)
    "set_model", "set_params",
    # keras.random.SeedGenerator
    "next",
})


def _is_hook(name):
    return name in FRAMEWORK_HOOKS or name.startswith("on_")


def _public(name):
    return not name.startswith("_")


def _target(member):
    """The object an alias points to, or None when it lies outside the loaded package (Keras, NumPy, ...)."""
    import griffe

    if not member.is_alias:
        return member
    try:
        target = member.final_target
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    return target if target.path.split(".")[0] == api_modules.PACKAGE else None


def _is_callable_member(obj):
    kind = obj.kind.value
    return kind in ("class", "function") or (kind == "attribute" and "property" in obj.labels)


def _base_classes(cls):
    """(resolved bases inside the package, whether any base lies outside it), over the whole hierarchy."""
    import griffe

    inside, outside, todo, seen = [], False, [cls], set()
    while todo:
        current = todo.pop()
        for base in current.bases:
            path = getattr(base, "canonical_path", str(base))
            if not path.startswith(api_modules.PACKAGE + "."):
                outside = True
                continue
            try:
                resolved = current.modules_collection.get_member(path)
                if resolved.is_alias:
                    resolved = resolved.final_target
            except (KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
                outside = True
                continue
            if resolved.path not in seen and resolved.kind.value == "class":
                seen.add(resolved.path)
                inside.append(resolved)
                todo.append(resolved)
    return inside, outside


def _inherits_docstring(cls, name):
    bases, outside = _base_classes(cls)
    for base in bases:
        member = base.members.get(name)
        if member is not None and not member.is_alias and member.docstring:
            return True
    return outside and _is_hook(name)


def unknown_parameters(obj):
    """The names `obj`'s docstring documents as parameters (groups split) that its signature lacks."""
    import griffe

    if obj.docstring is None or obj.kind.value not in ("class", "function"):
        return []
    try:
        params = obj.parameters
    except AttributeError:
        return []
    if any(param.kind.value == "variadic positional" for param in params):
        return []  # `*args` forwarded to a base (`keras.Model(inputs, outputs)`): its names are not ours to list
    names = {param.name for param in params}
    sections = griffe.parse_google(obj.docstring, warn_unknown_params=False, warn_missing_types=False,
                                   warnings=False)
    unknown = []
    for section in sections:
        if section.kind.value not in ("parameters", "other parameters"):
            continue
        for entry in section.value:
            for name in entry.name.split(","):
                name = name.strip().lstrip("*")
                if name and name not in names:
                    unknown.append(name)
    return unknown


def _check_class(cls, missing, problems):
    for name, member in cls.members.items():
        if not _public(name) or member.is_alias or not _is_callable_member(member):
            continue
        if member.kind.value == "class":
            continue  # a nested class is not checked (none is public API here)
        if not member.docstring and not _inherits_docstring(cls, name):
            missing.append(member.path)
        problems.extend(_unknown_parameter_lines(member))


def _unknown_parameter_lines(obj):
    return [f"{obj.path}: documents parameter '{name}', which is not in its signature"
            for name in unknown_parameters(obj)]


_LOADED = {}  # root -> (fingerprint of the sources, griffe tree): one load per build, a fresh one after edits


def _fingerprint(root):
    entries = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, api_modules.PACKAGE)):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for filename in filenames:
            if filename.endswith(".py"):
                stat = os.stat(os.path.join(dirpath, filename))
                entries.append((dirpath, filename, stat.st_mtime_ns, stat.st_size))
    return tuple(sorted(entries))


def load_package(root=api_modules.ROOT):
    """The griffe tree of the package, loaded from source (no import, no TensorFlow needed).

    Shared by the docstring check and the page generator of one build (`mkdocs serve` loads again once a source
    file changed).
    """
    import griffe

    fingerprint = _fingerprint(root)
    cached = _LOADED.get(root)
    if cached is not None and cached[0] == fingerprint:
        return cached[1]
    extensions = griffe.load_extensions(griffe_runtime_docs.RuntimeDocstrings())
    package = griffe.load(api_modules.PACKAGE, search_paths=[root], try_relative_path=False,
                          allow_inspection=False, resolve_aliases=False, extensions=extensions)
    _LOADED[root] = (fingerprint, package)
    return package


def check(root=api_modules.ROOT, package=None):
    """`(missing, problems)`: the dotted paths of the public modules, classes, functions and methods lacking a
    docstring, and one line per documented parameter their signature lacks; both sorted."""
    package = package if package is not None else load_package(root)
    missing, problems, checked = [], [], set()

    def check_object(obj):
        if obj.path in checked:
            return
        checked.add(obj.path)
        if not obj.docstring:
            missing.append(obj.path)
        problems.extend(_unknown_parameter_lines(obj))
        if obj.kind.value == "class":
            _check_class(obj, missing, problems)

    for module_name in api_modules.public_modules(root):
        module = package if module_name == api_modules.PACKAGE else package[module_name.split(".", 1)[1]]
        if not module.docstring:
            missing.append(module.path)
        exports = module.exports
        if exports is not None:
            names = [str(name) for name in exports]
        else:
            names = [name for name, member in module.members.items() if _public(name) and not member.is_alias]
        for name in names:
            member = module.members.get(name)
            if member is None:
                continue  # a submodule named in `__all__`, or a name set dynamically
            target = _target(member)
            if target is None or target.is_module or not _is_callable_member(target):
                continue
            check_object(target)
    return sorted(set(missing)), sorted(set(problems))


def missing_docstrings(root=api_modules.ROOT, package=None):
    """Dotted paths of the public modules, classes, functions and methods lacking a docstring, sorted."""
    return check(root, package)[0]


def main():
    """Prints each public object lacking a docstring and each unknown documented parameter; exit status 1 when
    there is any."""
    missing, problems = check()
    for path in missing:
        print(f"missing docstring: {path}", flush=True)
    for line in problems:
        print(line, flush=True)
    if missing or problems:
        print(f"{len(missing)} public object(s) of {api_modules.PACKAGE} without a docstring, "
              f"{len(problems)} unknown documented parameter(s)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
