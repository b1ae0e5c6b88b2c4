#!/usr/bin/env bash
# Builds the release as users get it and installs it the way they do:
#   1. the sdist and the wheel (`python -m build`) into build/dist, checked by `twine check`; the wheel must hold
#      only the two packages (sphere_tf, its paper configs inside, and sphere_tf_cli), their metadata and the C++
#      kernel sources: no tests, runs, results or build products;
#   2. the wheel installed into a fresh virtualenv per backend (build/wheel-venvs/<backend>): `[tensorflow]`,
#      `[jax]` (no TensorFlow) and `[torch]` (no TensorFlow; the CPU build of PyTorch from this machine's wheel
#      folder, PIP_FIND_LINKS, where one is there);
#   3. in each, tools/release/smoke_test.py run from an empty folder outside the source tree: import, a few `fit`
#      steps of the operator layers and a margin head, a `.keras` round trip and the `sphere-tf` command on a
#      two-step config.
# Prints the wheel's size and each install's time. Usage: bash scripts/check_release.sh [tensorflow jax torch]
# RELEASE_PHASE=install runs steps 1-2 only and RELEASE_PHASE=smoke step 3 only (on what `install` left in build/):
# .ci/run installs while the test suite runs, since installing waits mostly on the network and the disk. The three
# smoke tests run side by side.
#
# The virtualenvs are made and filled by uv (installed into build/release-tools with build and twine): the same
# PyPI metadata and wheels as pip, in about a quarter of pip's time here (the TensorFlow virtualenv: 52 s
# against 224 s), which keeps this inside CI's time.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$(pwd)"
PYTHON="${PYTHON:-python3.11}"
BACKENDS=("${@:-tensorflow jax torch}")
BACKENDS=(${BACKENDS[@]})

PHASE="${RELEASE_PHASE:-all}"
TOOLS=build/release-tools
status=0

install() {
  if [ ! -x "$TOOLS/bin/uv" ] || ! "$TOOLS/bin/python" -c "import build, twine" >/dev/null 2>&1; then
    "$PYTHON" -m venv "$TOOLS"
    "$TOOLS/bin/python" -m pip install -q build twine uv
  fi
  rm -rf build/dist build/wheel-venvs
  local start=$(date +%s)
  "$TOOLS/bin/python" -m build -q -o build/dist . >/dev/null
  "$TOOLS/bin/twine" check --strict build/dist/*
  WHEEL=$(ls build/dist/*.whl)
  "$TOOLS/bin/python" tools/release/check_wheel.py "$WHEEL" build/dist/*.tar.gz
  echo "check_release: built in $(( $(date +%s) - start ))s: $(basename "$WHEEL") $(du -k "$WHEEL" | cut -f1) KiB"

  # The CPU build of PyTorch where this machine keeps one (a plain `torch` from PyPI is a several-GB CUDA build).
  local torch_cpu=() folder wheel version
  for folder in ${PIP_FIND_LINKS:-/opt/wheels}; do
    wheel=$(ls "$folder"/torch-*+cpu-cp311-*.whl 2>/dev/null | sort -V | tail -1 || true)
    if [ -n "$wheel" ]; then
      version=$(basename "$wheel" | cut -d- -f2); torch_cpu=(--find-links "$folder" "torch==${version%%+*}"); break
    fi
  done
  local backend venv extra
  for backend in "${BACKENDS[@]}"; do
    venv="build/wheel-venvs/$backend"
    start=$(date +%s)
    "$TOOLS/bin/uv" venv -q -p "$PYTHON" "$venv"
    extra=()
    [ "$backend" = torch ] && extra=("${torch_cpu[@]}")
    if ! "$TOOLS/bin/uv" pip install -q --python "$venv/bin/python" "${WHEEL}[$backend]" "${extra[@]}"; then
      echo "check_release: $backend: installing the wheel FAILED" >&2; status=1; rm -rf "$venv"; continue
    fi
    if [ "$backend" != tensorflow ] && "$venv/bin/python" -c "import tensorflow" >/dev/null 2>&1; then
      echo "check_release: the $backend virtualenv has TensorFlow" >&2; status=1; rm -rf "$venv"; continue
    fi
    echo "check_release: $backend: installed in $(( $(date +%s) - start ))s ($(du -sm "$venv" | cut -f1) MB)"
  done
}

smoke() {
  local backend venv custom_ops dir pids=() names=()
  for backend in "${BACKENDS[@]}"; do
    venv="build/wheel-venvs/$backend"
    if [ ! -x "$venv/bin/python" ]; then
      echo "check_release: $backend: no virtualenv in $venv (run RELEASE_PHASE=install first)" >&2; status=1; continue
    fi
    # uv installs no bytecode, and where PYTHONDONTWRITEBYTECODE is set no process would write any: every one of
    # the smoke test's processes would compile TensorFlow's or PyTorch's sources again (132 s against 57 s for the
    # three). With it unset the first process writes the .pyc files of what it imports, as a pip install's would be
    # there; compiling every file at install instead cost the background about three CPU-minutes.
    # TensorFlow: the XLA path, not the compiled kernels (SPHERE_TF_CUSTOM_OPS=0). Their C++ source is in the
    # wheel (tools/release/check_wheel.py checks it) and the main suite builds and tests them; building them again
    # here costs about two CPU-minutes of CI.
    custom_ops=1; [ "$backend" = tensorflow ] && custom_ops="${SMOKE_CUSTOM_OPS:-0}"
    dir=$(mktemp -d)
    (cd "$dir" && start=$(date +%s) \
      && env -u PYTHONDONTWRITEBYTECODE KERAS_BACKEND=$backend SPHERE_TF_CUSTOM_OPS=$custom_ops "$ROOT/$venv/bin/python" \
           "$ROOT/tools/release/smoke_test.py" "$dir" > "$dir/log" 2>&1 \
      && echo "check_release: $backend: smoke test passed in $(( $(date +%s) - start ))s" >> "$dir/log") &
    pids+=($!); names+=("$backend:$dir")
  done
  local i
  for i in "${!pids[@]}"; do
    backend=${names[$i]%%:*}; dir=${names[$i]#*:}
    if wait "${pids[$i]}"; then
      grep -E "^(ok|check_release):" "$dir/log"
    else
      cat "$dir/log"; echo "check_release: $backend: smoke test FAILED" >&2; status=1
    fi
    rm -rf "$dir"
  done
}

case "$PHASE" in
  install) install ;;
  smoke) smoke ;;
  all) install; smoke ;;
  *) echo "check_release: RELEASE_PHASE must be install, smoke or all, not '$PHASE'" >&2; exit 2 ;;
esac
exit $status
