"""Turns the fault suite's tallies into the tables of docs/reliability.md.

`scripts/test_faults.sh` runs tests/faults/ on each backend with `SPHERE_TF_FAULT_REPORT=<folder>`; each test
appends one JSON line per kind of fault or bad input it tried to `<folder>/<backend>.jsonl` (tests/faults/conftest.py,
the `tally` fixture): backend, test, passed, category, case, tried, lost. This prints, per backend, one table row
per (category, case): how many were tried, how many of those were in passing tests, and what was lost; then a
total per category.

Usage:
    python tools/faults/table.py FOLDER                 # prints the Markdown
    python tools/faults/table.py FOLDER --write FILE    # replaces the part of FILE between the markers
"""

import argparse
import collections
import json
import os
import sys

BACKENDS = ("tensorflow", "jax", "torch")
BEGIN, END = "<!-- fault tables: begin (tools/faults/table.py) -->", "<!-- fault tables: end -->"
REQUIRED = ("backend", "test", "passed", "category", "case", "tried", "lost")
# A kind with more cases than this (the fuzzers: one case per class, argument or config key) gets one row in the
# docs' tables; `--all-cases` prints every row.
MAX_CASES_SHOWN = 12


def read_rows(folder):
    """The tallies of every `<backend>.jsonl` in `folder`; a malformed line is an error naming file and line."""
    rows = []
    names = sorted(name for name in os.listdir(folder) if name.endswith(".jsonl"))
    if not names:
        raise ValueError(f"{folder} holds no <backend>.jsonl tallies (run scripts/test_faults.sh)")
    for name in names:
        path = os.path.join(folder, name)
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path}:{number}: not JSON ({error})") from None
                missing = [key for key in REQUIRED if key not in row]
                if missing:
                    raise ValueError(f"{path}:{number}: missing {', '.join(missing)}")
                rows.append(row)
    return rows


def summarize(rows):
    """backend -> category -> case -> {"tried", "passed", "lost" (sorted distinct), "tests"}."""
    table = collections.defaultdict(lambda: collections.defaultdict(dict))
    for row in rows:
        entry = table[row["backend"]][row["category"]].setdefault(
            row["case"], {"tried": 0, "passed": 0, "lost": set(), "tests": set()})
        entry["tried"] += int(row["tried"])
        entry["passed"] += int(row["tried"]) if row["passed"] else 0
        if row["lost"]:
            entry["lost"].add(row["lost"])
        entry["tests"].add(row["test"])
    return table


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def markdown(table, max_cases=MAX_CASES_SHOWN):
    """The Markdown tables, one per backend (TensorFlow, JAX, PyTorch first, then any other), and the totals; a
    kind of more than `max_cases` cases (None: no limit) is one row of its totals."""
    out = []
    order = [b for b in BACKENDS if b in table] + sorted(b for b in table if b not in BACKENDS)
    for backend in order:
        categories = table[backend]
        out.append(f"### {backend}\n")
        out.append("| kind | case | tried | passed | what is lost |")
        out.append("|---|---|---:|---:|---|")
        for category in sorted(categories):
            cases = categories[category]
            if max_cases is not None and len(cases) > max_cases:
                lost = "; ".join(sorted(set().union(*(e["lost"] for e in cases.values())))) or "nothing"
                out.append(f"| {_cell(category)} | {len(cases)} cases | {sum(e['tried'] for e in cases.values())} | "
                           f"{sum(e['passed'] for e in cases.values())} | {_cell(lost)} |")
                continue
            for case in sorted(cases):
                entry = cases[case]
                lost = "; ".join(sorted(entry["lost"])) or "nothing"
                out.append(f"| {_cell(category)} | {_cell(case)} | {entry['tried']} | {entry['passed']} | "
                           f"{_cell(lost)} |")
        out.append("")
        out.append("| kind | cases | tried | passed |")
        out.append("|---|---:|---:|---:|")
        for category in sorted(categories):
            cases = categories[category].values()
            out.append(f"| {_cell(category)} | {len(categories[category])} | {sum(e['tried'] for e in cases)} | "
                       f"{sum(e['passed'] for e in cases)} |")
        out.append("")
    return "\n".join(out)


def write_between_markers(path, text):
    """Replaces what lies between BEGIN and END in `path` by `text` (both markers must be there, once)."""
    with open(path, encoding="utf-8") as f:
        document = f.read()
    if document.count(BEGIN) != 1 or document.count(END) != 1 or document.index(BEGIN) > document.index(END):
        raise ValueError(f"{path} must hold the markers {BEGIN!r} and {END!r} once each, in that order")
    head, rest = document.split(BEGIN)
    _, tail = rest.split(END)
    with open(path, "w", encoding="utf-8") as f:
        f.write(f"{head}{BEGIN}\n{text.rstrip()}\n{END}{tail}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder")
    parser.add_argument("--write", metavar="FILE", help="replace the tables in FILE between the markers")
    parser.add_argument("--all-cases", action="store_true", help="one row per case, however many a kind has")
    args = parser.parse_args(argv)
    text = markdown(summarize(read_rows(args.folder)), max_cases=None if args.all_cases else MAX_CASES_SHOWN)
    if args.write:
        write_between_markers(args.write, text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
