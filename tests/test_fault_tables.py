"""tools/faults/table.py and the `tally` fixture of tests/faults/conftest.py: the figures of docs/reliability.md."""

import json
import os
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools", "faults"))
import table  # noqa: E402


def _row(backend, category, case, tried, passed, lost="", test="t.py::t"):
    return {"backend": backend, "test": test, "passed": passed, "category": category, "case": case, "tried": tried,
            "lost": lost}


def _write(folder, rows):
    for row in rows:
        with open(os.path.join(folder, f"{row['backend']}.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")


def test_rows_are_summed_per_backend_category_and_case(tmp_path):
    _write(tmp_path, [
        _row("jax", "kill -9", "during a step", 3, True, "1 step recomputed"),
        _row("jax", "kill -9", "during a step", 2, False, "1 step recomputed", test="t.py::u"),
        _row("jax", "kill -9", "during a checkpoint write", 4, True, "2 steps recomputed"),
        _row("torch", "config fuzzing", "train.batch_size", 25, True),
        _row("tensorflow", "kill -9", "during a step", 1, True),
    ])
    text = table.markdown(table.summarize(table.read_rows(tmp_path)))
    # TensorFlow, JAX, PyTorch in that order; the failing test's 2 tries count as tried, not passed.
    assert text.index("### tensorflow") < text.index("### jax") < text.index("### torch")
    assert "| kill -9 | during a step | 5 | 3 | 1 step recomputed |" in text
    assert "| kill -9 | during a checkpoint write | 4 | 4 | 2 steps recomputed |" in text
    assert "| config fuzzing | train.batch_size | 25 | 25 | nothing |" in text
    jax_part = text[text.index("### jax"):text.index("### torch")]
    assert "| kill -9 | 2 | 9 | 7 |" in jax_part


def test_a_malformed_tally_names_the_file_and_line(tmp_path):
    (tmp_path / "jax.jsonl").write_text(json.dumps(_row("jax", "a", "b", 1, True)) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"jax.jsonl:2: not JSON"):
        table.read_rows(tmp_path)
    (tmp_path / "jax.jsonl").write_text(json.dumps({"backend": "jax", "case": "b"}) + "\n")
    with pytest.raises(ValueError, match=r"jax.jsonl:1: missing test, passed, category, tried, lost"):
        table.read_rows(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="holds no"):
        table.read_rows(tmp_path / "empty")


def test_write_replaces_only_between_the_markers(tmp_path):
    doc = tmp_path / "reliability.md"
    doc.write_text(f"# Title\nbefore\n{table.BEGIN}\nold table\n{table.END}\nafter\n")
    table.write_between_markers(doc, "| new |\n")
    assert doc.read_text() == f"# Title\nbefore\n{table.BEGIN}\n| new |\n{table.END}\nafter\n"
    doc.write_text("no markers\n")
    with pytest.raises(ValueError, match="must hold the markers"):
        table.write_between_markers(doc, "x")


def test_the_tally_fixture_appends_its_rows_with_the_outcome(tmp_path):
    suite = tmp_path / "faults"
    suite.mkdir()
    shutil.copy(os.path.join(ROOT, "tests", "faults", "conftest.py"), suite / "conftest.py")
    (suite / "test_sample.py").write_text(
        "def test_survives(tally):\n    tally('kill -9', 'during a step', tried=3, lost='1 step')\n\n"
        "def test_fails(tally):\n    tally('kill -9', 'during export')\n    assert False\n\n"
        "def test_bad_count(tally):\n    tally('x', 'y', tried=0)\n")
    report = tmp_path / "report"
    env = dict(os.environ, SPHERE_TF_FAULT_REPORT=str(report), KERAS_BACKEND=os.environ.get("KERAS_BACKEND", "tensorflow"))
    process = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                              str(suite)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert "2 failed, 1 passed" in process.stdout, process.stdout[-2000:]
    assert "`tried` must be a positive int" in process.stdout
    (name,) = os.listdir(report)
    rows = [json.loads(line) for line in (report / name).read_text().splitlines()]
    by_case = {row["case"]: row for row in rows}
    assert set(by_case) == {"during a step", "during export"}
    assert by_case["during a step"]["passed"] is True and by_case["during a step"]["tried"] == 3
    assert by_case["during export"]["passed"] is False and by_case["during a step"]["lost"] == "1 step"
    assert name == f"{by_case['during a step']['backend']}.jsonl"


def test_a_kind_of_many_cases_is_one_row_unless_all_are_asked_for(tmp_path):
    _write(tmp_path, [_row("jax", "config fuzzing", f"train.key{i}", 25, i != 3) for i in range(5)])
    summary = table.summarize(table.read_rows(tmp_path))
    assert "| config fuzzing | 5 cases | 125 | 100 | nothing |" in table.markdown(summary, max_cases=4)
    every = table.markdown(summary, max_cases=None)
    assert "| config fuzzing | train.key3 | 25 | 0 | nothing |" in every and "5 cases" not in every
