#!/usr/bin/env bash
# The GPU check of the backend-neutral core, for a host with JAX (and optionally PyTorch) and no TensorFlow,
# given only this source tree and the Keras wheel (plus namex, optree, ml_collections if missing):
#   1. the numerical parity subset of the test suite on the GPU (JAX backend, float32 matmuls and convolutions
#      at full precision: JAX's default TF32 would not meet float32 tolerances),
#   2. the CNN-9 train-step and forward benchmarks on JAX, side by side with Conv2D (ratios, images/s,
#      compile times), float32 and mixed bfloat16, batch 128 and 512; optimized HLO of the train steps,
#   3. the same on PyTorch at batch 128, float32;
#   4. the README's main job through the runner itself on JAX (Grain input, array checkpoints, tensorboardX; no
#      TensorFlow, no export): its results.json and wall time. The runner's wheels (grain and its array_record,
#      etils, cloudpickle, portpicker, psutil, protobuf; tensorboardX, packaging; pillow; ml_collections, absl-py)
#      go in WHEEL_DIR with Keras's; the Fashion-MNIST idx files in FASHION_MNIST_DIR (default: the Debian folder);
#   5. with REPRO_BUDGET=<seconds>, the full-data reproductions through the runner (bench/gpu/reproduce.py).
# Usage: bash bench/gpu/run.sh OUT_DIR [WHEEL_DIR]     (SMALL=1: tiny shapes, for a CPU dry run)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT="${1:?usage: bench/gpu/run.sh OUT_DIR [WHEEL_DIR]}"
WHEELS="${2:-}"
mkdir -p "$OUT"
if [ -n "$WHEELS" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
    "$WHEELS"/*.whl || exit 1
  export PYTHONPATH="/tmp/site:$PWD"
else
  export PYTHONPATH="$PWD"
fi
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null | tee "$OUT/gpu.txt"

if [ "${SMALL:-0}" = 1 ]; then
  # float32 only, and XLA without LLVM optimisation: a dry run checks that the script works, not speed.
  BENCH=(--batch_sizes=8 --image_size=16 --widths=8,8,8 --steps=2 --rounds=2 --warmup=1 --dtypes=float32)
  # The Keras trainer eager and the hand-written step: torch.compile (keras_jit) takes minutes per model on a CPU.
  TORCH_BENCH=(--batch_sizes=8 --image_size=16 --widths=8,8,8 --steps=2 --rounds=2 --warmup=1 --dtypes=float32
               --trainers=keras,stateless)
  export XLA_FLAGS="${XLA_FLAGS:-} --xla_backend_optimization_level=0"
  PARITY_K="matches_numpy and not unknown_spatial and (tanh or sphere)"
else
  BENCH=(--batch_sizes=128,512 --forward_batch_sizes=512 --steps=20 --rounds=5
         --cases=conv2d,sphere_cosine,sphere_cosine:reference,sphere_linear,tanh_cosine)
  # Keras's trainer eager and with torch.compile (jit_compile=True), the plug-in and the reference path.
  TORCH_BENCH=(--batch_sizes=128 --dtypes=float32 --steps=10 --rounds=3
               --cases=conv2d,sphere_cosine,sphere_linear,sphere_linear:reference,tanh_cosine,tanh_cosine:reference)
  PARITY_K="matches_numpy or gradients or finite"
fi

status=0
echo "== parity subset on the GPU (JAX)"
KERAS_BACKEND=jax JAX_DEFAULT_MATMUL_PRECISION=highest timeout 240 python3 -m pytest -q -p no:cacheprovider \
  -x tests/ops/test_angles.py tests/ops/test_magnitude.py tests/ops/test_angular.py tests/ops/test_operator.py \
  tests/layers/test_decoupled.py -k "$PARITY_K" 2>&1 | tail -15 | tee "$OUT/parity_jax.txt" || status=1

echo "== CNN-9 benchmarks (JAX)"
KERAS_BACKEND=jax python3 -m bench.bench_backends "${BENCH[@]}" --results_file="$OUT/bench_jax.jsonl" \
  --hlo_dir="$OUT/hlo" 2>&1 | grep -v "^WARNING\|^I0000" | tail -40 || status=1
(cd "$OUT/hlo" 2>/dev/null && tar czf ../hlo.tgz . && cd .. && rm -rf hlo)

echo "== CNN-9 benchmarks (PyTorch)"
KERAS_BACKEND=torch python3 -m bench.bench_backends "${TORCH_BENCH[@]}" --modes=train,forward \
  --results_file="$OUT/bench_torch.jsonl" 2>&1 | grep -v "^WARNING" | tail -20 || status=1
echo "== the README's main job through the runner (JAX)"
MAIN_JOB=(--config=sphere_tf/configs/dcnet/fashion_mnist_tanh_cosine.py --config.export=False --workdir="$OUT/main_job")
if [ "${SMALL:-0}" = 1 ]; then
  # Tiny generated archives in the Fashion-MNIST layout and the config's two-step variant on a tiny model.
  mkdir -p "$OUT/fashion_mnist"
  python3 -c "from sphere_tf.data import archive_writers as a; a.write_mnist('$OUT/fashion_mnist', n_train=64, n_test=16)"
  MAIN_JOB=(--config=sphere_tf/configs/dcnet/fashion_mnist_tanh_cosine.py:quick --config.export=False --workdir="$OUT/main_job"
            --config.data.manual_dir="$OUT/fashion_mnist" --config.model.widths=[4] --config.model.convs_per_stage=1
            --config.model.dense_units=8)
elif [ -n "${FASHION_MNIST_DIR:-}" ]; then
  MAIN_JOB+=(--config.data.manual_dir="$FASHION_MNIST_DIR")
fi
start=$(date +%s)
KERAS_BACKEND=jax python3 -m sphere_tf_cli.train_classifier "${MAIN_JOB[@]}" 2>&1 \
  | grep -v "^WARNING\|^I0000" | tail -15 || status=1
echo "{\"main_job_wall_s\": $(( $(date +%s) - start ))}" > "$OUT/main_job_time.json"
[ -f "$OUT/main_job/results.json" ] || status=1

# 5. The full-data reproductions through the runner (docs/reproductions.md), when REPRO_BUDGET (seconds) is set:
#    every claim's variants seed by seed, 8 runs at a time, no new run after the budget (SMALL: one quick run).
if [ -n "${REPRO_BUDGET:-}" ]; then
  echo "== full-data reproductions through the runner (JAX)"
  if [ "${SMALL:-0}" = 1 ]; then
    REPRO=(--mode=quick --seeds=0 --workers=1 --data_dir="$OUT/fashion_mnist"
           "--jobs=sphere_tf/configs/repro/fashion_mnist_margin_2d.py|loss=lsoftmax_m2,recipe=paper")
  else
    REPRO=(--workers=8 --time_budget="$REPRO_BUDGET" ${FASHION_MNIST_DIR:+--data_dir="$FASHION_MNIST_DIR"})
  fi
  KERAS_BACKEND=jax python3 -m bench.gpu.reproduce --out="$OUT/reproductions" "${REPRO[@]}" 2>&1 \
    | grep -v "^WARNING\|^I0000" | tail -60 || status=1
  [ -f "$OUT/reproductions/summary.json" ] || status=1
fi
exit "$status"
