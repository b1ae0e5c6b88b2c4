"""tests/slow_tests.txt, the slow tier that CI's fast tier leaves to `scripts/test_all.sh`, names tests that exist.

A renamed or deleted test would otherwise leave a stale line behind (harmless, but the list would stop saying what
the fast tier leaves out); a renamed slow test silently joins the fast tier, which the CI time shows.
"""

import ast
import os
import re

from tests import conftest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NODE_ID = re.compile(r"^(tests/[\w/]+\.py)::(?:\w+::)?(\w+)(\[.*\])?$")  # a test function, or a method of a class


def _defined_tests(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    return {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name.startswith("test")}


def test_every_slow_entry_names_a_test_function():
    entries = sorted(conftest.slow_test_ids())
    assert entries
    stale = []
    for entry in entries:
        match = NODE_ID.match(entry)
        assert match, f"not a pytest node id: {entry!r}"
        path, name = match.group(1), match.group(2)
        if not os.path.isfile(os.path.join(ROOT, path)) or name not in _defined_tests(path):
            stale.append(entry)
    assert stale == []


def test_the_readme_test_command_is_the_fast_tier_and_test_all_runs_the_rest():
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        test_command = [line for line in f.read().splitlines()[:6] if "pytest" in line]
    assert test_command and '-m "not slow"' in test_command[0]
    with open(os.path.join(ROOT, "scripts", "test_all.sh"), encoding="utf-8") as f:
        script = f.read()
    pytest_lines = [line for line in script.splitlines() if "-m pytest" in line]
    assert pytest_lines and not any("not slow" in line for line in pytest_lines)
    assert "SLOW_TIER=1 bash scripts/test_backends.sh" in script
