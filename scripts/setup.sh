#!/usr/bin/env bash
# Sets up a fresh Debian machine for sphere_tf: the Fashion-MNIST Debian package
# and a virtualenv at .venv with an editable install and the test extras.
# Idempotent: re-running it only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -d /usr/share/datasets/fashion-mnist ]; then
  if command -v apt-get >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq dataset-fashion-mnist >/dev/null
  else
    echo "setup: apt-get not found; Fashion-MNIST will come from keras.datasets" >&2
  fi
fi

# A C++ compiler for the compiled training-path kernels (sphere_tf/backends/tensorflow/kernels).
if ! command -v "${CXX:-g++}" >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq g++ >/dev/null
fi

PYTHON="${PYTHON:-python3.11}"
# A complete set-up records what it was made from (this script, pyproject.toml, the interpreter, the PyTorch
# switch); run again with the same inputs it has nothing to do and says so at once (the README's test command
# runs it before every test run). Delete .venv/.setup-complete, or a virtualenv, to make it check and repair.
SETUP_STAMP=.venv/.setup-complete
setup_inputs() {
  cat scripts/setup.sh pyproject.toml; "$PYTHON" --version; echo "skip_torch=${SPHERE_TF_SKIP_TORCH:-0}"
}
SETUP_HASH=$(setup_inputs | sha256sum | cut -d' ' -f1)
if [ -f "$SETUP_STAMP" ] && [ "$(cat "$SETUP_STAMP")" = "$SETUP_HASH" ] && [ -x .venv/bin/python ] \
   && { [ "${SPHERE_TF_SKIP_TORCH:-0}" = 1 ] || [ -x .venv-torch/bin/python ]; }; then
  echo "setup: up to date (.venv, .venv-torch and the kernels were set up from this pyproject.toml and script)"
  exit 0
fi
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# The packages go in with uv, from the same index and with the same metadata as pip, in about a quarter of pip's
# time (the TensorFlow virtualenv: 52 s against 224 s here); pip stays in .venv for `pip check` below. Bytecode is
# compiled at install, as pip does: where PYTHONDONTWRITEBYTECODE is set nothing else writes it, and every process
# would compile TensorFlow's and PyTorch's sources again (the suites ran 1.9x slower so).
UV=.venv/bin/uv
if [ ! -x "$UV" ]; then
  .venv/bin/python -m pip install -q uv
fi
uv_install() {  # VENV ARGS...: installs into VENV's interpreter
  local venv=$1; shift
  "$UV" pip install -q --compile-bytecode --python "$venv/bin/python" "$@"
}
if ! .venv/bin/python -c "import sphere_tf, pytest, hypothesis" >/dev/null 2>&1 \
   || [ pyproject.toml -nt .venv/.installed ]; then
  uv_install .venv -e ".[tensorflow,test]"
  touch .venv/.installed
fi

# TF Serving protos for sphere_tf.export (warmup requests, models.config). The wheel declares a dependency on the
# full `tensorflow` wheel (570 MB, it would clobber tensorflow-cpu) but its protos need only what tensorflow-cpu,
# grpcio and protobuf (already installed with it) provide: install it without dependencies, then let `pip check`
# judge everything else. Its one expected complaint, the missing `tensorflow` distribution, is the only line let
# through; any other broken requirement fails the setup.
SERVING_API="tensorflow-serving-api==2.21.*"
if ! .venv/bin/python -c "import tensorflow_serving.apis.prediction_log_pb2" >/dev/null 2>&1; then
  uv_install .venv --no-deps "$SERVING_API"
fi
PIP_CHECK="$(.venv/bin/python -m pip check 2>&1 || true)"
UNEXPECTED="$(printf '%s\n' "$PIP_CHECK" | grep -v -e '^No broken requirements found' \
  -e '^tensorflow-serving-api [0-9.]* requires tensorflow, which is not installed\.$' -e '^$' || true)"
if [ -n "$UNEXPECTED" ]; then
  echo "setup: pip check found broken requirements:" >&2
  echo "$UNEXPECTED" >&2
  exit 1
fi

# The other Keras backends. JAX's CPU build joins the main venv (the `test` extra); .venv-torch holds PyTorch and
# JAX without TensorFlow: it keeps the main venv lean (the torch wheel pulls ~5 GB of CUDA libraries; the bare wheel
# does not import without them), it is where a JAX or PyTorch user runs the main job (README, "On JAX and
# PyTorch"), and where the tests check that the core and the runner run with no TensorFlow installed.
# `scripts/test_backends.sh` runs the backend suites on JAX and PyTorch there.
# PyTorch's CPU build where this machine keeps one in its wheel folder (PIP_FIND_LINKS), as the release check
# installs it; otherwise the index's `torch`.
TORCH_REQUIREMENT=(torch)
for folder in ${PIP_FIND_LINKS:-/opt/wheels}; do
  wheel=$(ls "$folder"/torch-*+cpu-cp311-*.whl 2>/dev/null | sort -V | tail -1 || true)
  if [ -n "$wheel" ]; then
    version=$(basename "$wheel" | cut -d- -f2)
    TORCH_REQUIREMENT=(--find-links "$folder" "torch==${version%%+*}")
    break
  fi
done
TORCH_VENV_PACKAGES=("${TORCH_REQUIREMENT[@]}" "jax[cpu]" pytest pytest-xdist hypothesis "foolbox>=3.3,<4" matplotlib)
if [ "${SPHERE_TF_SKIP_TORCH:-0}" != 1 ]; then
  if [ ! -x .venv-torch/bin/python ]; then
    "$PYTHON" -m venv .venv-torch
  fi
  if ! .venv-torch/bin/python -c "import torch, keras, jax, grain, tensorboardX, PIL, foolbox, matplotlib, sphere_tf, pytest, hypothesis" \
       >/dev/null 2>&1 \
     || [ pyproject.toml -nt .venv-torch/.installed ]; then
    uv_install .venv-torch "${TORCH_VENV_PACKAGES[@]}"
    # The package with its core dependencies only (Keras, NumPy, absl-py, ml_collections, Grain, tensorboardX,
    # Pillow): no TensorFlow.
    uv_install .venv-torch -e .
    if .venv-torch/bin/python -c "import tensorflow" >/dev/null 2>&1; then
      echo "setup: .venv-torch must not contain TensorFlow" >&2
      exit 1
    fi
    touch .venv-torch/.installed
  fi
fi

# Build the compiled training-path kernels now rather than in the first training step (cached per
# source, TensorFlow version, compiler, CPU and flags; a recorded failed build is retried here). If
# they cannot be built, training uses XLA clusters and tests/backends/tf_plugin/test_kernel_build.py fails.
# A failed build leaves the stamp unwritten, so the next run of this script retries it.
if .venv/bin/python -m sphere_tf.backends.tensorflow.kernels; then
  echo "$SETUP_HASH" > "$SETUP_STAMP"
fi
