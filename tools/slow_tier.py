"""Adds to tests/slow_tests.txt the tests that took at least THRESHOLD seconds in a pytest `--durations` report.

    python -m pytest ... --durations=0 --durations-min=0.5 > report.txt
    python tools/slow_tier.py report.txt --threshold 3 --label "tensorflow, loaded host" [--keep PATTERN ...]

A test's time is the sum of its setup, call and teardown lines. Tests already listed are left as they are; a
test whose node id contains one of the `--keep` substrings stays in the fast tier (what CI must run whatever it
costs: the README's main job, the import checks, the degenerate-input property tests, the runner without
TensorFlow). New lines are appended under a comment naming the report's threshold and label.
"""

import argparse
import collections
import os
import re
import sys

SLOW_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "slow_tests.txt")
DURATION_LINE = re.compile(r"^(\d+(?:\.\d+)?)s (?:setup|call|teardown) +(tests/\S+)$")


def durations(report):
    """`{node id: seconds}` of a pytest `--durations` report."""
    totals = collections.defaultdict(float)
    with open(report, encoding="utf-8") as f:
        for line in f:
            match = DURATION_LINE.match(line.strip())
            if match:
                totals[match.group(2)] += float(match.group(1))
    return dict(totals)


def listed(path=SLOW_TESTS):
    with open(path, encoding="utf-8") as f:
        return {line.split("  #")[0].strip() for line in f if line.strip() and not line.startswith("#")}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report")
    parser.add_argument("--threshold", type=float, required=True, help="seconds")
    parser.add_argument("--label", required=True, help="where the report was measured, for the comment")
    parser.add_argument("--keep", action="append", default=[], help="substring of node ids that stay fast")
    args = parser.parse_args(argv)
    already = listed()
    new = sorted((node, seconds) for node, seconds in durations(args.report).items()
                 if seconds >= args.threshold and node not in already and not any(k in node for k in args.keep))
    if not new:
        print("slow_tier: nothing to add")
        return 0
    with open(SLOW_TESTS, "a", encoding="utf-8") as f:
        f.write(f"# >= {args.threshold:g} s ({args.label}):\n")
        for node, seconds in new:
            f.write(f"{node}  # {seconds:.0f} s\n")
    print(f"slow_tier: added {len(new)} tests ({sum(s for _, s in new):.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
