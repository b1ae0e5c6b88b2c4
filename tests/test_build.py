"""BUILD (Bazel) covers every module and test file of the tree.

Parses the BUILD text (it is Starlark, which Python's `ast` reads for the constructs we
use); Bazel itself is not invoked here. Regenerate with `python scripts/update_build.py`.
Under `bazel test //:tests/test_build` the tree seen here is the runfiles tree, which the
target's `glob()` data fills with every Python file, so the check means the same thing.
"""

import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Directories whose every *.py must be in the srcs of a py_library or py_binary.
MODULE_DIRS = ("sphere_tf", "sphere_tf_cli", "bench", "examples", "reproductions")
TESTS_DIR = "tests"
FIX = "run `python scripts/update_build.py` to regenerate BUILD"


def _py_files(root, top):
    """Repo-relative paths of *.py files below `top` (skipping caches and hidden dirs)."""
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
        dirnames[:] = [d for d in dirnames if d != "__pycache__" and not d.startswith(".")]
        for name in filenames:
            if name.endswith(".py"):
                out.append(os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/"))
    return sorted(out)


def _literal(node):
    try:
        return ast.literal_eval(node)
    except ValueError:
        # e.g. `["BUILD"] + glob([...])`: keep the literal part.
        if isinstance(node, ast.BinOp):
            left = _literal(node.left)
            return left if isinstance(left, list) else []
        return None


def parse_build(text):
    """Returns [(rule_kind, {attr: value})] for the top-level rule calls in a BUILD text."""
    rules = []
    for stmt in ast.parse(text, filename="BUILD").body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
            call = stmt.value
            if isinstance(call.func, ast.Name):
                attrs = {kw.arg: _literal(kw.value) for kw in call.keywords if kw.arg}
                rules.append((call.func.id, attrs))
    return rules


def check_build(root, build_text):
    """Problems with `build_text` for the tree at `root`, as human-readable strings."""
    rules = parse_build(build_text)
    lib_srcs, test_srcs, problems = set(), {}, []
    names = [attrs.get("name") for _, attrs in rules if attrs.get("name")]
    for kind, attrs in rules:
        srcs = [s for s in attrs.get("srcs") or [] if not s.startswith(("//", "@", ":"))]
        if kind in ("py_library", "py_binary"):
            lib_srcs.update(srcs)
        elif kind == "py_test":
            for src in srcs:
                test_srcs.setdefault(src, attrs.get("name"))
            if attrs.get("main") and attrs["main"] not in (attrs.get("srcs") or []):
                problems.append("py_test %s: main %s is not in its srcs" % (attrs.get("name"), attrs["main"]))
        for src in srcs:
            if not os.path.isfile(os.path.join(root, src)):
                problems.append("%s %s lists %s, which does not exist" % (kind, attrs.get("name"), src))
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        problems.append("duplicate target names: %s" % ", ".join(dupes))

    modules = [p for d in MODULE_DIRS for p in _py_files(root, d)]
    missing = [p for p in modules if p not in lib_srcs]
    if missing:
        problems.append("modules in no py_library/py_binary srcs: %s" % ", ".join(missing))
    tests = _py_files(root, TESTS_DIR)
    missing_tests = [p for p in tests if os.path.basename(p).startswith("test_") and p not in test_srcs]
    if missing_tests:
        problems.append("test files with no py_test: %s" % ", ".join(missing_tests))
    helpers = [p for p in tests if not os.path.basename(p).startswith("test_")]
    missing_helpers = [p for p in helpers if p not in lib_srcs and p not in test_srcs]
    if missing_helpers:
        problems.append("test helpers (conftest etc.) in no target: %s" % ", ".join(missing_helpers))
    return problems


def test_build_covers_every_module_and_test_file():
    with open(os.path.join(ROOT, "BUILD"), encoding="utf-8") as f:
        problems = check_build(ROOT, f.read())
    assert not problems, "BUILD is incomplete (%s):\n  " % FIX + "\n  ".join(problems)


def test_every_test_file_has_its_own_py_test_run_by_pytest():
    with open(os.path.join(ROOT, "BUILD"), encoding="utf-8") as f:
        rules = parse_build(f.read())
    tests = [attrs for kind, attrs in rules if kind == "py_test"]
    assert tests
    for attrs in tests:
        own = [s for s in attrs["srcs"] if s.startswith(TESTS_DIR + "/")]
        assert len(own) == 1, attrs["name"]
        assert attrs["name"] == own[0][: -len(".py")]
        assert attrs["args"] == ["$(rootpath %s)" % own[0]]
        assert attrs["main"] == "//tools/bazel:pytest_main.py"
        assert ":sphere_tf" in attrs["deps"]
    fast = [a["name"] for a in tests if "bazel_fast" in (a.get("tags") or [])]
    assert "tests/test_build" in fast


def _tree(tmp_path, files):
    for rel in files:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    return str(tmp_path)


_SMALL_BUILD = """
load("@rules_python//python:defs.bzl", "py_library", "py_test")
py_library(name = "sphere_tf", srcs = ["sphere_tf/__init__.py"], imports = ["."])
py_test(
    name = "tests/ops/test_a",
    srcs = ["tests/ops/test_a.py", "//tools/bazel:pytest_main.py"],
    main = "//tools/bazel:pytest_main.py",
    data = ["BUILD"] + glob(["tests/**/*.py"]),
    deps = [":sphere_tf"],
)
"""


def test_check_accepts_a_complete_build(tmp_path):
    root = _tree(tmp_path, ["sphere_tf/__init__.py", "tests/ops/test_a.py"])
    assert check_build(root, _SMALL_BUILD) == []


@pytest.mark.parametrize(
    "extra, expected",
    [
        ("sphere_tf/ops/new_op.py", "modules in no py_library/py_binary srcs: sphere_tf/ops/new_op.py"),
        ("sphere_tf_cli/train_x.py", "modules in no py_library/py_binary srcs: sphere_tf_cli/train_x.py"),
        ("reproductions/run_y.py", "modules in no py_library/py_binary srcs: reproductions/run_y.py"),
        ("tests/layers/test_new.py", "test files with no py_test: tests/layers/test_new.py"),
        ("tests/conftest.py", "test helpers (conftest etc.) in no target: tests/conftest.py"),
    ],
)
def test_check_names_each_uncovered_file(tmp_path, extra, expected):
    root = _tree(tmp_path, ["sphere_tf/__init__.py", "tests/ops/test_a.py", extra])
    assert check_build(root, _SMALL_BUILD) == [expected]


def test_check_ignores_caches_and_non_python_files(tmp_path):
    root = _tree(tmp_path, [
        "sphere_tf/__init__.py", "tests/ops/test_a.py",
        "sphere_tf/__pycache__/x.py", "sphere_tf/notes.md", "bench/results/cpu/r.jsonl",
    ])
    assert check_build(root, _SMALL_BUILD) == []


def test_check_reports_stale_entries_and_duplicates(tmp_path):
    root = _tree(tmp_path, ["tests/ops/test_a.py"])
    text = _SMALL_BUILD + 'py_library(name = "sphere_tf", srcs = [])\n'
    problems = check_build(root, text)
    assert "py_library sphere_tf lists sphere_tf/__init__.py, which does not exist" in problems
    assert "duplicate target names: sphere_tf" in problems


def _load_generator(monkeypatch, root):
    """scripts/update_build.py as a module, pointed at `root`."""
    import importlib.util  # pylint: disable=import-outside-toplevel

    spec = importlib.util.spec_from_file_location(
        "update_build", os.path.join(ROOT, "scripts", "update_build.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "ROOT", root)
    return module


def test_generator_output_for_this_tree_is_complete(monkeypatch):
    text = _load_generator(monkeypatch, ROOT).generate()
    assert check_build(ROOT, text) == []


def test_generator_targets_sizes_tags_and_deps(tmp_path, monkeypatch):
    files = {
        "sphere_tf/__init__.py": "",
        "sphere_tf/ops/a.py": "import numpy as np\n",
        "sphere_tf_cli/__init__.py": "",
        "sphere_tf_cli/train.py": "from sphere_tf.ops import a\n\nif __name__ == '__main__':\n    pass\n",
        "sphere_tf/configs/base.py": "import ml_collections\n",
        "bench/__init__.py": "",
        "bench/bench_x.py": "import sphere_tf\n\nif __name__ == '__main__':\n    pass\n",
        "tests/conftest.py": "",
        "tests/ops/test_angles.py": "from sphere_tf.ops import a\n",
        "tests/ops/test_other.py": "from sphere_tf.ops import a\n",
        "tests/cli/test_train.py": "import subprocess\nCMD = ['-m', 'bench.bench_x']\n",
        "tests/layers/test_slow.py": "# bazel-size: enormous\n# bazel-tags: local, exclusive\n",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    text = _load_generator(monkeypatch, str(tmp_path)).generate()
    assert check_build(str(tmp_path), text) == []
    rules = {attrs["name"]: (kind, attrs) for kind, attrs in parse_build(text) if "name" in attrs}
    assert rules["train"] == ("py_binary", rules["train"][1])
    assert (rules["train"][1]["main"], rules["train"][1]["deps"]) == ("sphere_tf_cli/train.py", [":sphere_tf_cli"])
    assert rules["sphere_tf_cli"][1]["deps"] == [":sphere_tf"]
    assert rules["bench_x"][1]["deps"] == [":bench"]
    assert rules["bench"][1]["deps"] == [":sphere_tf"]
    assert "sphere_tf/configs/base.py" in rules["sphere_tf"][1]["srcs"]
    assert rules["test_support"][1]["srcs"] == ["tests/conftest.py"]
    ops = rules["tests/ops/test_angles"][1]
    assert (ops["size"], ops["tags"], ops["deps"]) == ("medium", ["bazel_fast"], [":sphere_tf", ":test_support"])
    assert "tags" not in rules["tests/ops/test_other"][1]
    train = rules["tests/cli/test_train"][1]
    assert train["size"] == "large" and "tags" not in train
    assert train["deps"] == [":sphere_tf", ":bench", ":test_support"]
    slow = rules["tests/layers/test_slow"][1]
    assert (slow["size"], slow["tags"]) == ("enormous", ["exclusive", "local"])


def test_generator_breaks_import_cycles_between_directories(tmp_path, monkeypatch, capsys):
    for rel, text in {"sphere_tf/__init__.py": "import bench\n", "bench/__init__.py": "import sphere_tf\n"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    text = _load_generator(monkeypatch, str(tmp_path)).generate()
    rules = {attrs["name"]: attrs for _, attrs in parse_build(text) if "name" in attrs}
    assert rules["sphere_tf"]["deps"] == [":bench"]
    assert "deps" not in rules["bench"]
    assert "import cycle" in capsys.readouterr().err
