#!/usr/bin/env python3
"""Regenerates the root `BUILD` file (Bazel) from the source tree, deterministically.

Usage (from anywhere):
    python scripts/update_build.py            # rewrite BUILD
    python scripts/update_build.py --check    # exit 1 if BUILD is out of date
    python scripts/update_build.py --tracked  # only files in the git index (what a clone gets)

What it writes:
  * one `py_library` per top-level source directory that exists (`sphere_tf`, its paper configs
    included, `sphere_tf_cli` (the runner's mains), `bench`, `examples`, `reproductions`) whose `srcs` list every `*.py` below it,
    with `imports = ["."]` so `import sphere_tf` works from the runfiles tree; `deps`
    between them come from the imports found in the files;
  * one `py_binary` per script with an `if __name__ == "__main__":` block in `sphere_tf_cli/`,
    `bench/`, `examples/` and `reproductions/` (`bazel run //:train_classifier -- --flags`);
  * `:test_support`, the non-test Python files under `tests/` (conftest.py, helpers);
  * one `py_test` per `tests/**/test_*.py`, named after its path (`//:tests/ops/test_angles`),
    run by pytest through `//tools/bazel:pytest_main.py`; `deps` are `:sphere_tf`,
    `:test_support` and every other library the file mentions (as an import, a module path
    `bench.x` or a file path `bench/...`).

Test size and tags: the files in FAST_TESTS (the core operator maths and this coverage
check) are tagged `bazel_fast`, the subset `.ci/run` runs through Bazel (every py_test
starts TensorFlow, so the subset is kept short; add `# bazel-tags: bazel_fast` to a file to
join it); tests under `tests/examples/`, `tests/reproductions/` and tests that start subprocesses are
`size = "large"` (15 min timeout), the rest `medium` (5 min). A test file can override this
with comment lines of its own:
    # bazel-size: enormous
    # bazel-tags: local, exclusive
"""

import argparse
import ast
import difflib
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD_PATH = os.path.join(ROOT, "BUILD")

# Top-level directories whose Python files become libraries, in BUILD order.
LIBRARY_DIRS = ("sphere_tf", "sphere_tf_cli", "bench", "examples", "reproductions")
# Directories whose `__main__` scripts also get a py_binary (in the library of their top-level directory).
BINARY_DIRS = ("sphere_tf_cli", "bench", "examples", "reproductions")
TESTS_DIR = "tests"
PYTEST_MAIN = "//tools/bazel:pytest_main.py"
FAST_TAG = "bazel_fast"
FAST_TESTS = (
    "tests/test_build.py",
    "tests/ops/test_angles.py",
    "tests/ops/test_angular.py",
    "tests/ops/test_magnitude.py",
    "tests/ops/test_operator.py",
)
# Root-level files pytest reads when present (configuration, root conftest).
PYTEST_ROOT_FILES = ("conftest.py", "pyproject.toml", "pytest.ini", "setup.cfg", "tox.ini")
SKIP_DIRS = {"__pycache__", ".hypothesis", ".pytest_cache"}
# With --tracked: the set of repo-relative paths in the git index; None means the whole tree.
_ONLY = None
VALID_SIZES = ("small", "medium", "large", "enormous")

_MAIN_RE = re.compile(r"""^if\s+__name__\s*==\s*['"]__main__['"]\s*:""", re.M)
_SIZE_RE = re.compile(r"^#\s*bazel-size:\s*(\w+)\s*$", re.M)
_TAGS_RE = re.compile(r"^#\s*bazel-tags:\s*(.+?)\s*$", re.M)


def _walk(rel_dir, predicate):
    """Sorted repo-relative paths (forward slashes) of files below `rel_dir` matching predicate."""
    found = []
    top = os.path.join(ROOT, rel_dir)
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in filenames:
            rel = os.path.relpath(os.path.join(dirpath, name), ROOT).replace(os.sep, "/")
            if predicate(rel) and (_ONLY is None or rel in _ONLY):
                found.append(rel)
    return sorted(found)


def _is_py(rel):
    return rel.endswith(".py")


def _is_test(rel):
    return os.path.basename(rel).startswith("test_") and rel.endswith(".py")


def _is_test_data(rel):
    return not rel.endswith((".py", ".pyc")) and "/__pycache__/" not in rel


def _read(rel):
    with open(os.path.join(ROOT, rel), encoding="utf-8") as f:
        return f.read()


def _imported_top_levels(source):
    """Top-level module names imported by `source` (absolute imports only)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set()
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def _referenced_libraries(source, libraries):
    """Libraries a file uses: imports, plus module (`bench.x`) or path (`bench/x`) strings."""
    used = _imported_top_levels(source) & set(libraries)
    for lib in libraries:
        if re.search(r"(?<![\w.])%s(?=[./])" % re.escape(lib), source) or re.search(
            r"""['"]%s['"]""" % re.escape(lib), source
        ):
            used.add(lib)
    return used


def _break_cycles(deps, order):
    """Drops (with a warning) library edges that would make Bazel's dependency graph cyclic.

    Edges are added in `order` (the library's position, then its deps'); an edge that
    closes a cycle is reported and left out, since one cycle makes every target unloadable.
    """

    def reaches(graph, start, goal):
        stack, seen = [start], set()
        while stack:
            node = stack.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                stack.extend(graph.get(node, ()))
        return False

    kept = {lib: set() for lib in deps}
    for lib in order:
        for dep in [d for d in order if d in deps.get(lib, ())]:
            if reaches(kept, dep, lib):
                print("update_build: warning: %s imports %s, which already depends on %s; "
                      "edge left out of BUILD (import cycle between directories)" % (lib, dep, lib),
                      file=sys.stderr)
            else:
                kept[lib].add(dep)
    return kept


def _fmt_list(items, indent):
    if not items:
        return "[]"
    if len(items) == 1:
        return '["%s"]' % items[0]
    pad = " " * (indent + 4)
    return "[\n" + "".join('%s"%s",\n' % (pad, item) for item in items) + " " * indent + "]"


def _rule(kind, attrs):
    """Formats one rule call; `attrs` is an ordered list of (name, value) with value str/list."""
    lines = ["%s(" % kind]
    for key, value in attrs:
        if value is None or value == []:
            continue
        if isinstance(value, bool):
            lines.append("    %s = %s," % (key, value))
        elif isinstance(value, list):
            lines.append("    %s = %s," % (key, _fmt_list(value, 4)))
        else:
            lines.append('    %s = "%s",' % (key, value))
    lines.append(")")
    return "\n".join(lines)


def _labels(names):
    return [":" + n for n in names]


def _test_name(rel):
    return rel[: -len(".py")]


def _test_size_and_tags(rel, source):
    size = "medium"
    parts = rel.split("/")
    if (len(parts) > 2 and parts[1] in ("examples", "reproductions")) or re.search(
        r"^\s*(import subprocess|from subprocess import)", source, re.M
    ):
        size = "large"
    tags = set()
    if rel in FAST_TESTS:
        tags.add(FAST_TAG)
    match = _SIZE_RE.search(source)
    if match:
        if match.group(1) not in VALID_SIZES:
            raise ValueError("%s: `# bazel-size: %s` is not one of %s" % (rel, match.group(1), VALID_SIZES))
        size = match.group(1)
    for match in _TAGS_RE.finditer(source):
        tags.update(t.strip() for t in match.group(1).split(",") if t.strip())
    return size, sorted(tags)


def generate():
    """Returns the text of BUILD for the current tree."""
    libraries = {d: _walk(d, _is_py) for d in LIBRARY_DIRS if os.path.isdir(os.path.join(ROOT, d))}
    libraries = {d: srcs for d, srcs in libraries.items() if srcs}
    lib_names = list(libraries)
    tests = _walk(TESTS_DIR, _is_test) if os.path.isdir(os.path.join(ROOT, TESTS_DIR)) else []
    support = (
        [p for p in _walk(TESTS_DIR, _is_py) if not _is_test(p)]
        if os.path.isdir(os.path.join(ROOT, TESTS_DIR))
        else []
    )
    support_data = _walk(TESTS_DIR, _is_test_data) if os.path.isdir(os.path.join(ROOT, TESTS_DIR)) else []
    root_files = [f for f in PYTEST_ROOT_FILES if os.path.isfile(os.path.join(ROOT, f))]

    out = [
        "# Bazel targets for sphere_tf. GENERATED by scripts/update_build.py: do not edit by hand;",
        "# after adding or removing modules or tests run `python scripts/update_build.py`",
        "# (tests/test_build.py fails while a module or test file is not covered here).",
        "# Offline set-up (stub rule repositories, the .venv Python toolchain): see WORKSPACE.",
        "",
        'load("@rules_python//python:defs.bzl", "py_binary", "py_library", "py_test")',
        "",
        'package(default_visibility = ["//visibility:public"])',
        "",
        'exports_files(["BUILD"])',
    ]

    # Libraries: deps from real imports only (docstrings mention other directories freely).
    lib_deps = {}
    for lib, srcs in libraries.items():
        used = set()
        for rel in srcs:
            used |= _imported_top_levels(_read(rel)) & set(lib_names)
        used.discard(lib)
        lib_deps[lib] = used
    lib_deps = _break_cycles(lib_deps, lib_names)
    for lib, srcs in libraries.items():
        deps = [n for n in lib_names if n in lib_deps[lib]]
        fields = [("name", lib), ("srcs", srcs)]
        # C++ kernel sources the package compiles at run time (sphere_tf/backends/tensorflow/kernels/build.py).
        kernels = _walk(lib, lambda rel: rel.endswith(".cc")) if os.path.isdir(os.path.join(ROOT, lib)) else []
        if kernels:
            fields.append(("data", kernels))
        out += ["", _rule("py_library", fields + [
            ("imports", ["."]),
            ("deps", _labels(deps)),
        ])]

    # Binaries for __main__ scripts.
    binaries = []
    for folder in BINARY_DIRS:
        lib = folder.split("/")[0]
        for rel in libraries.get(lib, []):
            if (rel.startswith(folder + "/") and os.path.basename(rel) != "__init__.py"
                    and _MAIN_RE.search(_read(rel))):
                binaries.append((lib, rel))
    stems = [os.path.splitext(os.path.basename(rel))[0] for _, rel in binaries]
    taken = set(lib_names) | {"test_support"}
    for (lib, rel), stem in zip(binaries, stems):
        name = stem if stems.count(stem) == 1 and stem not in taken else "%s_%s" % (lib, stem)
        name = name.replace("/", "_")
        taken.add(name)
        out += ["", _rule("py_binary", [
            ("name", name),
            ("srcs", [rel]),
            ("main", rel),
            ("python_version", "PY3"),
            ("deps", [":" + lib]),
        ])]

    # Test support: conftest.py, helpers, fixtures, pytest configuration.
    if support or support_data or root_files:
        out += ["", _rule("py_library", [
            ("name", "test_support"),
            ("testonly", True),
            ("srcs", support + [f for f in root_files if f.endswith(".py")]),
            ("data", support_data + [f for f in root_files if not f.endswith(".py")]),
            ("imports", ["."]),
            ("deps", [":sphere_tf"] if "sphere_tf" in libraries else []),
        ])]

    # Tests.
    for rel in tests:
        source = _read(rel)
        size, tags = _test_size_and_tags(rel, source)
        used = _referenced_libraries(source, lib_names)
        if "sphere_tf" in libraries:
            used.add("sphere_tf")
        deps = _labels([n for n in lib_names if n in used])
        if support or support_data or root_files:
            deps.append(":test_support")
        data = None
        if rel == TESTS_DIR + "/test_build.py":
            # The coverage check walks the tree: give it every file it must see, by glob, so
            # a file missing from the explicit lists above still shows up in its runfiles.
            data = "GLOB"
        attrs = [
            ("name", _test_name(rel)),
            ("size", size),
            ("srcs", [rel, PYTEST_MAIN]),
            ("args", ["$(rootpath %s)" % rel]),
            ("data", None),
            ("main", PYTEST_MAIN),
            ("python_version", "PY3"),
            ("tags", tags),
            ("deps", sorted(set(deps), key=deps.index)),
        ]
        text = _rule("py_test", attrs)
        if data == "GLOB":
            patterns = ["%s/**/*.py" % d for d in LIBRARY_DIRS] + ["%s/**/*.py" % TESTS_DIR]
            glob = "    data = [\n        \"BUILD\",\n        \"scripts/update_build.py\",\n    ] + glob(\n"
            glob += "        %s,\n        exclude = [\"**/__pycache__/**\"],\n    ),\n" % _fmt_list(patterns, 8)
            text = text.replace('    main = "', glob + '    main = "', 1)
        out += ["", text]
    return "\n".join(out) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 (with a diff) if BUILD is stale")
    parser.add_argument(
        "--tracked", action="store_true",
        help="list only files in the git index (`git add` them first): the BUILD a fresh clone needs "
        "while other people's files are still uncommitted in a shared tree")
    args = parser.parse_args(argv)
    if args.tracked:
        global _ONLY  # pylint: disable=global-statement
        listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout
        _ONLY = set(p for p in listed.split("\0") if p)
    text = generate()
    current = open(BUILD_PATH, encoding="utf-8").read() if os.path.exists(BUILD_PATH) else ""
    if args.check:
        if current != text:
            sys.stdout.writelines(difflib.unified_diff(
                current.splitlines(True), text.splitlines(True), "BUILD", "BUILD (generated)"))
            print("BUILD is out of date: run `python scripts/update_build.py`.", file=sys.stderr)
            return 1
        return 0
    if current != text:
        with open(BUILD_PATH, "w", encoding="utf-8") as f:
            f.write(text)
        print("wrote %s" % os.path.relpath(BUILD_PATH))
    return 0


if __name__ == "__main__":
    sys.exit(main())
