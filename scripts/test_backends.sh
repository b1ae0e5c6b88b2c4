#!/usr/bin/env bash
# The core suites on the JAX and PyTorch Keras backends (the TensorFlow backend runs the whole suite:
# the README's test command). Both run in .venv-torch, which has no TensorFlow, so they also show that the
# core needs none. Usage: bash scripts/test_backends.sh [jax|torch ...]  (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=.venv-torch/bin/python
if [ ! -x "$PYTHON" ]; then
  echo "test_backends: $PYTHON is missing; run 'bash scripts/setup.sh' first" >&2
  exit 2
fi
# The suites of the backend-neutral core: maths, layers, losses, regularizers, energy, metrics, models,
# optimizers, callbacks, the training paradigms and the degenerate-input property tests. TensorFlow-only
# modules and tests in them are deselected by tests/conftest.py.
CORE_SUITES=(
  tests/ops tests/layers tests/losses tests/regularizers tests/metrics tests/models tests/optimizers
  tests/callbacks tests/test_energy.py tests/test_initializers.py tests/test_registry.py
  tests/training/test_model.py tests/training/test_pretrain.py tests/backends/jax_plugin
  tests/layers/test_partial_fc.py
)
# PyTorch: the core modules whose tests are ported to PyTorch. Still to port (their tests multiply NumPy arrays
# with torch tensors that require grad, compare torch dtypes/shapes with strings/tuples, and one state update
# inside `testing.gradients` trips autograd's in-place check): tests/layers/test_decoupled.py,
# test_decoupled_upstream.py, test_margin_head.py, test_opt.py, test_conv_norm.py, tests/ops/test_margin.py,
# tests/test_energy.py, tests/regularizers/test_mhe.py, test_comhe.py, test_regularizer_state.py,
# tests/training/test_model.py. The layers themselves run on PyTorch: the cross-backend .keras tests load and
# run every layer there, and the suites below exercise them.
TORCH_SUITES=(
  tests/ops/test_angles.py tests/ops/test_angular.py tests/ops/test_magnitude.py tests/ops/test_operator.py
  tests/ops/test_orthogonal.py tests/ops/test_fourier.py tests/ops/test_rotation.py tests/ops/test_autodiff.py
  tests/layers/test_decoupled_keras.py tests/layers/test_mixed_precision_inference.py
  tests/layers/test_norm_mean_nonfinite.py tests/losses tests/metrics tests/models tests/optimizers tests/callbacks
  tests/regularizers/test_orthogonality.py tests/test_initializers.py tests/test_registry.py
  tests/training/test_pretrain.py
  tests/layers/test_partial_fc.py tests/layers/test_partial_fc_sharded.py
)
status=0
for backend in "${@:-jax torch}"; do
  for b in $backend; do
    echo "== core suites on KERAS_BACKEND=$b"
    if [ "$b" = torch ]; then suites=("${TORCH_SUITES[@]}"); else suites=("${CORE_SUITES[@]}"); fi
    KERAS_BACKEND=$b "$PYTHON" -m pytest -n 2 -q -p no:cacheprovider "${suites[@]}" || status=$?
  done
done
exit "$status"
