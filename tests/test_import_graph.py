"""The package's import graph: one-way tiers, no cycle, no private reach, lazy imports only for optional libraries.

The graph is read from the source (the AST of every module under sphere_tf/, imports inside functions
included), so it also holds the imports a test run never executes. An edge `a -> b` means module `a` imports
module `b`; importing `p.q.m` also runs the package `p.q` (its `__init__.py`), so `a` depends on `p.q` too unless
`a` lies inside it. The root package `sphere_tf` is the package's face: it imports the registering subpackages,
and nothing inside the package may import it back.

A last test imports `sphere_tf` and `sphere_tf.layers` in a fresh interpreter and checks that the lazy parts
(TensorFlow-only subpackages, optional libraries) stay unloaded.
"""

import ast
import json
import os
import subprocess
import sys

import pytest

from sphere_tf import dependencies

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "sphere_tf"

# Tiers, lowest first, named by the first component under sphere_tf/ (a subpackage or a top-level module).
# A module may import its own tier and the tiers below, never a tier above.
TIERS = (
    # 0. Foundations (no sphere_tf maths): argument checks, JSON files, name registries, the walk over a
    #    model's layers and calls (Keras alone), what must be installed (`dependencies`, not even Keras), the
    #    package version (`version`) and the version-recording registration of its Keras classes (`saving`).
    ("validation", "json_files", "registry", "walk", "dependencies", "version", "saving"),
    # 1. Maths and inputs: keras.ops functions, hyperspherical energies, tf.data pipelines from local files.
    ("ops", "energy", "data"),
    # 2. Building blocks: layers and what they are made of, trained with or regularised by; the backend
    #    plug-ins that accelerate ops.
    ("layers", "regularizers", "losses", "initializers", "optimizers", "metrics", "backends"),
    # 3. Architectures (the model zoo) and training callbacks.
    ("models", "callbacks"),
    # 4. Runs and their products: training (paradigms, checkpoints, strategies), evaluation, the adversarial
    #    toolkit, export; test helpers; the old import paths of moved names (`deprecation`).
    ("training", "evaluation", "adversarial", "export", "testing", "deprecation"),
    # 5. The runner: configs in, runs out (the schema, the tasks, the sweep), and the papers' configs it reads
    #    by name (`configs`). Nothing below reads a config.
    ("runners", "configs"),
)

# The only imports allowed inside functions: optional libraries, imported by the one function that needs them.
# Everything else is imported at the top of its module.
LAZY_IMPORTS = {
    # Optional third-party libraries (extras or separate installs).
    "sphere_tf.adversarial.evaluation": {"foolbox", "matplotlib"},  # DeepFool strength; the accuracy plot
    "sphere_tf.adversarial.attacks": {"cleverhans"},  # the TensorFlow reference attacks, imported when called
    "sphere_tf.evaluation.verification": {"matplotlib"},  # the ROC plot
    "sphere_tf.evaluation.face": {"tensorflow"},  # the TensorFlow backend's JPEG decoder (its training pipeline's)
    "sphere_tf.data.faces": {"PIL"},  # image_shape reads the header with Pillow
    "sphere_tf.data.tfds_source": {"tensorflow_datasets"},  # the tensorflow-datasets route (a slow import)
    "sphere_tf.export.formats": {"onnx", "onnxruntime", "tf2onnx"},  # ONNX export (`pip install -e .[export]`)
    "sphere_tf.export.serving": {"tensorflow_serving"},  # warmup and models.config protos (README "Serving")
    # A Keras backend's own library, in modules that every backend imports (the core runs without TensorFlow).
    "sphere_tf.ops.autodiff": {"tensorflow", "jax", "torch"},
    "sphere_tf.ops.runtime_checks": {"tensorflow", "jax"},
    "sphere_tf.regularizers.random_state": {"jax"},
    "sphere_tf.training.precise_bn": {"tensorflow", "jax"},
    # JAX's multi-process start, global arrays and collectives (keras.distribution has no timeout or gather).
    "sphere_tf.training.multi_device": {"jax"},
    # Keras's TensorFlow trainer (it imports TensorFlow): patched only for a model built under a tf.distribute scope.
    "sphere_tf.training.distribute": {"keras"},
    # Optional at import: Pillow decodes image files, tensorboardX writes event files, for the runs that need them.
    "sphere_tf.data.numpy_preprocessing": {"PIL"},
    "sphere_tf.callbacks.tensorboard": {"tensorboardX"},
    "sphere_tf.testing": {"tensorflow", "jax", "torch", "sphere_tf.backends.tensorflow.kernels.build"},
    # TensorFlow through the runner: a sweep aggregates without TensorFlow (bench/gpu) and trains with it.
    "sphere_tf.runners.sweep": {"sphere_tf.runners.classifier"},
    # The adversarial configs build on the task's defaults when a config is built, not when listed by name.
    "sphere_tf.configs.adversarial._base": {"sphere_tf.runners.adversarial"},
    # The TF Serving export (TensorFlow) only when the config asks for it: the run itself needs no TensorFlow.
    "sphere_tf.runners.classifier": {"sphere_tf.export"},
}

# Names that moved up to the runner keep their old paths, resolved on first access by `sphere_tf.deprecation`
# (with a DeprecationWarning): the only module names a lower tier may spell out in a string.
DEPRECATED_ALIASES = {
    "sphere_tf.training": {"sphere_tf.runners.classifier", "sphere_tf.runners.recipe", "sphere_tf.runners.sweep"},
    "sphere_tf.adversarial": {"sphere_tf.runners.adversarial"},
    "sphere_tf.evaluation": {"sphere_tf.runners.face"},
}

# Plug-ins loaded by name: a backend's accelerator (tier 2) registers itself into `ops.acceleration` when imported,
# and `ops.acceleration` imports the active backend's plug-in on first use (an entry point, the one upward path
# the maths tier has; the plug-ins' own imports point down).
PLUGIN_LOADS = {
    "sphere_tf.ops.acceleration": {
        "sphere_tf.backends.tensorflow", "sphere_tf.backends.jax", "sphere_tf.backends.torch",
    },
}

# Names in messages, loaded by nobody: the table of what needs TensorFlow (its keys are the modules that call
# `dependencies.tensorflow`, checked below, and the errors name them).
MESSAGE_NAMES = {"sphere_tf.dependencies": set(dependencies.TENSORFLOW_USES)}

# Private reach still to remove, named: `PartialFCHead` (a `MarginHead` subclass) calls the head module's label
# and shape checks, which become public in the concurrent losses refactor of `layers/margin_head.py`.
PRIVATE_REACH_PENDING = {("sphere_tf.layers.partial_fc", "sphere_tf.layers.margin_head")}

# Loaded on first use only: `import sphere_tf, sphere_tf.layers` must not import them.
LAZY_SUBPACKAGES = ("sphere_tf.adversarial", "sphere_tf.backends", "sphere_tf.data", "sphere_tf.evaluation",
                    "sphere_tf.export", "sphere_tf.models", "sphere_tf.runners")
OPTIONAL_LIBRARIES = ("cleverhans", "foolbox", "matplotlib", "tensorflow_datasets", "onnx", "tf2onnx",
                      "tensorflow_serving")


def _modules():
    """`{module name: path}` of every module under sphere_tf/ (packages by their own name)."""
    found = {}
    for folder, _, files in os.walk(os.path.join(ROOT, PACKAGE)):
        for file in files:
            if file.endswith(".py"):
                path = os.path.join(folder, file)
                name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                found[name[: -len(".__init__")] if name.endswith(".__init__") else name] = path
    return found


MODULES = _modules()


def _resolve(name):
    """The innermost module of the package that `name` (a module or a module's attribute) lies in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module):
    """`[(imported name, line, inside a function)]` of one module, `from a import b` as `a.b`."""
    path = MODULES[module]
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = []

    def visit(node, in_function):
        if isinstance(node, ast.Import):
            found.extend((alias.name, node.lineno, in_function) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
                for _ in range(node.level - 1):
                    package = package.rpartition(".")[0]
                base = f"{package}.{base}" if base else package
            found.extend((f"{base}.{alias.name}", node.lineno, in_function) for alias in node.names)
        inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    visit(tree, False)
    return found


def _edges():
    """`{module: {imported module: line}}` inside the package, with the packages that each import runs."""
    edges = {}
    for module in MODULES:
        out = edges.setdefault(module, {})
        for name, line, _ in _imports(module):
            if name.split(".")[0] != PACKAGE:
                continue
            target = _resolve(name)
            parts = target.split(".")
            for depth in range(2, len(parts) + 1):  # the packages on the way run first (not the root)
                step = ".".join(parts[:depth])
                if step != module and not module.startswith(step + "."):
                    out.setdefault(step, line)
            if target == PACKAGE:
                out.setdefault(PACKAGE, line)
    return edges


def _tier(module):
    if module == PACKAGE:
        return len(TIERS)
    first = module.split(".")[1]
    for tier, names in enumerate(TIERS):
        if first in names:
            return tier
    raise AssertionError(f"{module} is in no tier: add {first!r} to TIERS in {__file__}")


def test_every_module_has_a_tier():
    for module in MODULES:
        _tier(module)


def test_no_import_runs_up_a_tier():
    upward = [
        f"{module}:{line} imports {target} (tier {_tier(module)} -> {_tier(target)})"
        for module, targets in _edges().items() for target, line in targets.items()
        if _tier(target) > _tier(module)
    ]
    assert upward == []


def _string_references(module):
    """`{module: line}` of the package modules a module names in a string constant (`importlib` targets, lazy
    tables: "sphere_tf.x.y" or "sphere_tf.x.y:attribute")."""
    path = MODULES[module]
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value.partition(":")[0]
            if name in MODULES and name not in (module, PACKAGE):
                found.setdefault(name, node.lineno)
    return found


def test_strings_name_no_higher_tier_but_the_deprecated_aliases():
    upward = [
        f"{module}:{line} names {target} (tier {_tier(module)} -> {_tier(target)})"
        for module in MODULES for target, line in _string_references(module).items()
        if _tier(target) > _tier(module)
        and target not in DEPRECATED_ALIASES.get(module, set()) | PLUGIN_LOADS.get(module, set())
        | MESSAGE_NAMES.get(module, set())
    ]
    assert upward == []


BACKEND_LIBRARIES = ("tensorflow", "jax", "torch")
# Where a Keras backend's own library may be imported at module level: the plug-ins and the TF Serving export.
BACKEND_HOMES = ("sphere_tf.backends.", "sphere_tf.export")


def _outside_backend_homes():
    return sorted(m for m in MODULES if not m.startswith(BACKEND_HOMES) and m != "sphere_tf.backends")


def _run_at_import(statements):
    """The statements among `statements` that run when the module is imported: function bodies do not (their
    decorators and defaults do), class bodies do."""
    for node in statements:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from (ast.Expr(d) for d in node.decorator_list + node.args.defaults
                        + [d for d in node.args.kw_defaults if d is not None])
        elif isinstance(node, ast.ClassDef):
            yield from (ast.Expr(d) for d in node.decorator_list + node.bases)
            yield from _run_at_import(node.body)
        else:
            yield node


def test_no_module_outside_the_backends_imports_a_backend_library_at_module_level():
    """TensorFlow, JAX and PyTorch are imported at module level only under `sphere_tf/backends/<name>/` and by
    `export` (TensorFlow by nature). Elsewhere a module uses them inside the functions that need them, or through
    `dependencies.lazy_tensorflow` (TensorFlow on first use), so it imports on every backend."""
    found = []
    for module in _outside_backend_homes():
        with open(MODULES[module], encoding="utf-8") as f:
            tree = ast.parse(f.read(), MODULES[module])
        for node in _run_at_import(tree.body):
            if isinstance(node, ast.Import) and any(a.name.split(".")[0] in BACKEND_LIBRARIES for a in node.names):
                found.append(f"{module}:{node.lineno}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in BACKEND_LIBRARIES:
                found.append(f"{module}:{node.lineno}")
            if "dependencies.tensorflow(" in ast.unparse(node):  # the eager import, at module level
                found.append(f"{module}:{node.lineno}")
    assert found == []


def test_lazy_tensorflow_users_have_their_message():
    users = [module for module in _outside_backend_homes() if module != "sphere_tf.dependencies"
             if "= dependencies.lazy_tensorflow(__name__)" in open(MODULES[module], encoding="utf-8").read()]
    assert users  # the tf.data pipelines at least
    for module in users:
        dependencies.tensorflow_message(module)  # raises KeyError without an entry


# Imports every module outside the backend homes with the named libraries made unimportable.
_IMPORT_ALL_WITHOUT = """
import importlib, json, sys
for blocked in sys.argv[2].split(","):
    sys.modules[blocked] = None  # `import blocked` now raises ImportError
failed = {}
for module in json.loads(sys.argv[1]):
    try:
        importlib.import_module(module)
    except Exception as error:  # noqa: BLE001 (every failure is reported)
        failed[module] = f"{type(error).__name__}: {error}"[:300]
print(json.dumps(failed))
"""


@pytest.mark.parametrize("backend, blocked", [("jax", "tensorflow,torch"), ("torch", "tensorflow,jax")])
def test_every_module_outside_the_backends_imports_without_the_other_backends(backend, blocked):
    """The check above, run: with only `backend`'s library importable, every module outside the backend homes
    (and the test helpers of `sphere_tf.testing`, which import their backends inside functions) imports."""
    if not dependencies.installed(backend):
        pytest.skip(f"{backend} is not installed here")
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    proc = subprocess.run([sys.executable, "-c", _IMPORT_ALL_WITHOUT, json.dumps(_outside_backend_homes()), blocked],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == {}


def test_deprecated_aliases_resolve_with_a_warning():
    import importlib
    import warnings

    for package, targets in DEPRECATED_ALIASES.items():
        moved = importlib.import_module(package).MOVED
        assert {target.partition(":")[0] for target in moved.values()} == targets
        for name, target in moved.items():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                value = getattr(importlib.import_module(package), name)
            module_name, _, attribute = target.partition(":")
            expected = importlib.import_module(module_name)
            assert value is (getattr(expected, attribute) if attribute else expected)
            assert any(issubclass(w.category, DeprecationWarning) and module_name in str(w.message) for w in caught)


def test_no_module_imports_the_root_package():
    back = [f"{module}:{line}" for module, targets in _edges().items() if module != PACKAGE
            for target, line in targets.items() if target == PACKAGE]
    assert back == [], "import the subpackage itself (the root's import already ran)"


def test_import_graph_has_no_cycle():
    edges = {module: [t for t in targets if t != PACKAGE] for module, targets in _edges().items()}
    state, stack, cycles = {}, [], []

    def visit(module):  # depth first; a grey node met again closes a cycle
        state[module] = "grey"
        stack.append(module)
        for target in edges.get(module, ()):
            if state.get(target) == "grey":
                cycles.append(" -> ".join(stack[stack.index(target):] + [target]))
            elif target not in state:
                visit(target)
        stack.pop()
        state[module] = "black"

    for module in sorted(edges):
        if module not in state:
            visit(module)
    assert cycles == []


def test_imports_inside_functions_are_the_named_optional_ones():
    unexpected = []
    for module in MODULES:
        allowed = LAZY_IMPORTS.get(module, set())
        for name, line, in_function in _imports(module):
            if not in_function:
                continue
            internal = name.split(".")[0] == PACKAGE
            key = _resolve(name) if internal else name.split(".")[0]
            if key not in allowed:
                unexpected.append(f"{module}:{line} imports {name} inside a function")
    assert unexpected == [], "import at the top of the module, or name an optional library in LAZY_IMPORTS"
    stale = {m: names for m, names in LAZY_IMPORTS.items() if m not in MODULES}
    assert stale == {}


def test_no_private_reach_across_modules():
    """No `from sphere_tf.x import _name`, no `x._name` on another sphere_tf module."""
    reach = []
    for module, path in MODULES.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), path)
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == PACKAGE:
                for alias in node.names:
                    full = f"{node.module}.{alias.name}"
                    if full in MODULES:
                        aliases[alias.asname or alias.name] = full
                    elif alias.name.startswith("_") and _resolve(node.module) != module:
                        reach.append(f"{module}:{node.lineno} imports {full}")
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name.split(".")[0] == PACKAGE and alias.asname:
                        aliases[alias.asname] = alias.name
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")
                    and aliases[node.value.id] != module
                    and (module, aliases[node.value.id]) not in PRIVATE_REACH_PENDING):
                reach.append(f"{module}:{node.lineno} reads {aliases[node.value.id]}.{node.attr}")
    assert reach == []


_PROBE = """
import json, sys
import keras
after_keras = set(sys.modules)
import sphere_tf, sphere_tf.layers
print(json.dumps({"new": sorted(set(sys.modules) - after_keras), "all": sorted(sys.modules)}))
"""


def test_import_sphere_tf_and_layers_leaves_the_lazy_parts_unloaded():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p),
           "TF_CPP_MIN_LOG_LEVEL": "3"}
    proc = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    loaded = [m for m in report["all"] if m in LAZY_SUBPACKAGES or m.startswith(tuple(p + "." for p in LAZY_SUBPACKAGES))]
    assert loaded == []
    # Keras itself imports matplotlib when it is installed; sphere_tf adds none of the optional libraries.
    added = sorted({m.split(".")[0] for m in report["new"]} & set(OPTIONAL_LIBRARIES))
    assert added == []
    never = sorted({m.split(".")[0] for m in report["all"]} & {"cleverhans", "foolbox", "tensorflow_datasets"})
    assert never == []


@pytest.mark.parametrize("module", [pytest.param("sphere_tf.export", marks=pytest.mark.tensorflow_only),
                                    "sphere_tf.data", "sphere_tf.models"])
def test_lazy_subpackages_load_as_attributes(module):
    import sphere_tf

    assert getattr(sphere_tf, module.split(".")[1]).__name__ == module
