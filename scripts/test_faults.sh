#!/usr/bin/env bash
# The whole fault-injection and fuzzing suite (tests/faults/) on TensorFlow, JAX and PyTorch, slow cases included,
# with SPHERE_TF_FAULT_SEEDS (default 5: each seed kills a run at 4 random points, so 20 kills a backend) seeds for the randomised kill points and the full hypothesis profile; the
# tallies go to build/faults/<backend>.jsonl and their tables to build/faults/tables.md
# (`--write-docs` also puts them into docs/reliability.md). CI runs the fast subset (`-m "not slow"`) in the
# README's test command and scripts/test_backends.sh.
# Usage: bash scripts/test_faults.sh [--write-docs] [backend ...]   (default: tensorflow jax torch)
set -uo pipefail
cd "$(dirname "$0")/.."
write_docs=0
if [ "${1:-}" = "--write-docs" ]; then write_docs=1; shift; fi
backends=("${@:-tensorflow jax torch}")
report=build/faults
rm -rf "$report" && mkdir -p "$report"
export SPHERE_TF_FAULT_REPORT="$PWD/$report" SPHERE_TF_FAULT_SEEDS="${SPHERE_TF_FAULT_SEEDS:-5}"
status=0
for b in ${backends[@]}; do
  if [ "$b" = tensorflow ]; then python=.venv/bin/python; else python=.venv-torch/bin/python; fi
  if [ ! -x "$python" ]; then echo "test_faults: $python is missing; run 'bash scripts/setup.sh' first" >&2; exit 2; fi
  echo "== tests/faults on KERAS_BACKEND=$b"
  start=$(date +%s)
  KERAS_BACKEND=$b "$python" -m pytest -n 2 -q -p no:cacheprovider tests/faults || status=$?
  echo "== $b: $(( $(date +%s) - start )) s"
done
.venv/bin/python tools/faults/table.py "$report" --all-cases > "$report/tables.md" || status=$?
.venv/bin/python tools/faults/table.py "$report" || status=$?
if [ "$write_docs" = 1 ]; then
  .venv/bin/python tools/faults/table.py "$report" --write docs/reliability.md || status=$?
fi
exit "$status"
