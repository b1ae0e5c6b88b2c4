#!/usr/bin/env bash
# Runs sphere_tf tests through Bazel, offline, with Debian's bazel-bootstrap (4.2.3).
#
#   bash scripts/bazel_test.sh                      # the fast subset: targets tagged bazel_fast
#   bash scripts/bazel_test.sh //...                # every py_test
#   bash scripts/bazel_test.sh //:tests/ops/test_angles --test_output=all
#
# Installs bazel-bootstrap and bazel-platforms with apt-get when they are missing (as root,
# or through sudo). Needs the virtualenv from scripts/setup.sh: the tests run with
# .venv/bin/python (see WORKSPACE and tools/bazel/python_venv.bzl). Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v bazel >/dev/null 2>&1 || [ ! -f /usr/share/bazel/tools/platforms/BUILD ]; then
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "bazel_test: bazel is missing and apt-get is not available" >&2
    exit 1
  fi
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  echo "bazel_test: installing bazel-bootstrap and bazel-platforms (apt-get)" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq bazel-bootstrap bazel-platforms >/dev/null
fi

if [ ! -x .venv/bin/python ] && [ -z "${SPHERE_TF_PYTHON:-}" ]; then
  echo "bazel_test: .venv/bin/python is missing: run \`bash scripts/setup.sh\` first" >&2
  exit 1
fi

if [ $# -eq 0 ]; then
  set -- --build_tests_only --test_tag_filters=bazel_fast //...
fi
start=$(date +%s)
status=0
bazel test --test_output=errors "$@" || status=$?
echo "bazel_test: bazel test finished in $(( $(date +%s) - start ))s (exit $status)" >&2
exit $status
