#!/usr/bin/env bash
# Every test, the slow tier (tests/slow_tests.txt) included: the whole suite on the TensorFlow backend, then the
# backend suites on JAX and PyTorch (scripts/test_backends.sh) with the full hypothesis profile. CI runs the fast
# tier (the README's test command and `scripts/test_backends.sh` with `-m "not slow"`); run this before a release
# and after changing anything the slow tier covers (about 1.5 h on 2 cores).
# Usage: bash scripts/test_all.sh [extra pytest arguments]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh >/dev/null
status=0
.venv/bin/python -m pytest -n 2 -q "$@" tests || status=$?
SLOW_TIER=1 bash scripts/test_backends.sh jax torch || status=$?
exit "$status"
