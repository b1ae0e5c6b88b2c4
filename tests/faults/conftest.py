"""The fault-injection and fuzzing suite's tally: what was tried on which backend, and what survived.

A test of `tests/faults/` asks for the `tally` fixture and calls it once per kind of fault it injects or bad input
it tries: ``tally("kill -9", "during a checkpoint write", tried=20, lost="0 steps beyond the last checkpoint")``.
When the test ends, its rows are appended with the test's outcome (passed or not) to
``$SPHERE_TF_FAULT_REPORT/<backend>.jsonl`` if that variable names a folder (`scripts/test_faults.sh` sets it);
`tools/faults/table.py` turns those files into the tables of docs/reliability.md. Without the variable the
fixture records nothing and the tests run as any others.

The fast subset (CI) is what is not marked `slow`; the full run (`scripts/test_faults.sh`) runs everything, with
`SPHERE_TF_FAULT_SEEDS` (default 2 in CI, 20 in the full run) seeds for the randomised kill points.
"""

import json
import os

import keras
import pytest

REPORT_ENV = "SPHERE_TF_FAULT_REPORT"
SEEDS_ENV = "SPHERE_TF_FAULT_SEEDS"


def fault_seeds(default=2):
    """How many seeds the randomised fault tests draw (`SPHERE_TF_FAULT_SEEDS`, default `default`)."""
    return int(os.environ.get(SEEDS_ENV, default))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.fault_call_passed = report.passed


@pytest.fixture
def tally(request):
    """`tally(category, case, tried=1, lost="")`: records one kind of fault or bad input this test tried."""
    rows = []

    def record(category, case, tried=1, lost=""):
        if not isinstance(tried, int) or tried < 1:
            raise ValueError(f"tally: `tried` must be a positive int, got {tried!r}")
        rows.append({"category": str(category), "case": str(case), "tried": tried, "lost": str(lost)})

    yield record
    folder = os.environ.get(REPORT_ENV)
    if not folder or not rows:
        return
    passed = bool(getattr(request.node, "fault_call_passed", False))
    os.makedirs(folder, exist_ok=True)
    backend = keras.backend.backend()
    lines = "".join(json.dumps({"backend": backend, "test": request.node.nodeid, "passed": passed, **row}) + "\n"
                    for row in rows)
    # One write per test with O_APPEND: the xdist workers' rows never interleave within a line.
    fd = os.open(os.path.join(folder, f"{backend}.jsonl"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, lines.encode("utf-8"))
    finally:
        os.close(fd)
