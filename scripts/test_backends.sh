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
# optimizers, callbacks, the training paradigms, the degenerate-input property tests, the `.keras` files of an
# earlier release (saved on TensorFlow), the release recorded in files and checkpoints, and the documentation's Python blocks (those needing TensorFlow are skipped,
# and tests/test_docs.py checks how many ran); and the runner without TensorFlow: the Grain pipeline and its NumPy
# augmentations, step checkpoints (recovery from a corrupt one), short runs and exact resume after kill -9; the
# FGSM/BIM/PGD attacks in keras.ops, FGSM adversarial training, the white/black-box evaluation and the adversarial
# task; face verification (LFW/YTF protocols, flip embeddings) and the face task; the fault suite's fast subset.
# TensorFlow-only modules and tests in them are deselected by tests/conftest.py.
RUNNER_SUITES=(
  tests/data/test_grain_pipeline.py tests/data/test_numpy_preprocessing.py tests/training/test_checkpoint_recovery.py
  tests/training/test_array_checkpoint.py
  tests/training/test_precise_bn.py
  tests/runners/test_runner_without_tensorflow.py tests/adversarial/test_gradient_attacks.py
  tests/evaluation tests/runners/test_face_without_tensorflow.py
  tests/adversarial/test_adv_train_step.py tests/adversarial/test_adv_training.py tests/adversarial/test_adv_evaluation.py
  tests/runners/test_adversarial_without_tensorflow.py
  # Every module outside sphere_tf/backends and export imports here, where TensorFlow is not installed.
  tests/test_import_graph.py
  # The fault-injection and fuzzing suite's fast subset (kill -9, damaged checkpoints, a full disk, non-finite
  # batches, the workdir lock, fuzzed constructors and configs, untrusted files); scripts/test_faults.sh runs all.
  tests/faults
)
# The runner's suites come first: their tests are the longest (whole runs in child processes), and started first
# they overlap the short ones instead of leaving one xdist worker idle at the end.
CORE_SUITES=(
  "${RUNNER_SUITES[@]}"
  # JAX past one device (keras.distribution): 2 and 4 CPU devices, two processes, a kill -9 and the resume.
  tests/training/test_multi_device.py tests/runners/test_runner_multi_device.py
  tests/ops tests/layers tests/losses tests/regularizers tests/metrics tests/models tests/optimizers
  tests/callbacks tests/test_energy.py tests/test_initializers.py tests/test_registry.py
  tests/training/test_model.py tests/training/test_pretrain.py tests/backends/jax_plugin tests/test_saved_files.py
  tests/test_versioned_files.py tests/test_docs.py
)
# PyTorch: the same core suites with the PyTorch plug-in's tests instead of the JAX plug-in's.
TORCH_SUITES=(
  "${RUNNER_SUITES[@]}"
  tests/ops tests/layers tests/losses tests/regularizers tests/metrics tests/models tests/optimizers
  tests/callbacks tests/test_energy.py tests/test_initializers.py tests/test_registry.py
  tests/training/test_model.py tests/training/test_pretrain.py tests/backends/torch_plugin tests/test_saved_files.py
  tests/test_versioned_files.py tests/test_docs.py
)
status=0
for backend in "${@:-jax torch}"; do
  for b in $backend; do
    echo "== core suites on KERAS_BACKEND=$b"
    if [ "$b" = torch ]; then suites=("${TORCH_SUITES[@]}"); else suites=("${CORE_SUITES[@]}"); fi
    # The fast tier unless SLOW_TIER=1 (scripts/test_all.sh): tests/slow_tests.txt lists what it leaves out.
    tier=(-m "not slow"); [ "${SLOW_TIER:-0}" = 1 ] && tier=()
    KERAS_BACKEND=$b "$PYTHON" -m pytest -n 2 -q -p no:cacheprovider "${tier[@]}" "${suites[@]}" || status=$?
  done
done
exit "$status"
