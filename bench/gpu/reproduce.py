r"""The full-data reproductions of docs/reproductions.md through the runner, on a host without TensorFlow.

Each claim is a config under `sphere_tf/configs/repro/` whose `full` argument gives the converged recipe (all 60,000
Fashion-MNIST training images, or the claim's 10% subset, trained for tens of passes). Every (config, variant,
seed) is one run of the runner itself (`sphere_tf.runners.classifier.train_and_evaluate`, what
`sphere_tf_cli/train_classifier.py` runs: Grain input off TensorFlow, step checkpoints, TensorBoard scalars,
precise batch statistics, `results.json`) in `--out/runs/<claim>/<variant>/seed_<n>`, with two additions for
the record (`full_data.run_one`): the test set evaluated after every pass, and the training accuracy of the first
steps. No SavedModel is exported (`export=False`: TensorFlow Serving export needs TensorFlow).

The orchestrator runs every (config, variant, seed) as its own process, `--workers` at a time on the one GPU
(the small networks leave a GPU mostly idle, so several processes share it well), seed by seed so that a
run cut short by `--time_budget` still has every claim at its first seeds; a run cut short resumes from its
last checkpoint when the script is started again with the same `--out`. Output in `--out`:
`runs.jsonl` (one line per finished run: final and best-pass test accuracy, per-pass test curve, the
interval training accuracy of the first steps, the tracked energy, the 2-D feature statistics) and
`summary.json` (mean ± sample std over the seeds, per config and variant).

  python -m bench.gpu.reproduce --out=/tmp/repro --workers=8            # GPU host, KERAS_BACKEND=jax
  python -m bench.gpu.reproduce --out=/tmp/repro --mode=quick --seeds=0  # CPU dry run (two steps a run)
"""

import json
import os
import subprocess
import sys
import time

from absl import app
from absl import flags

from bench.gpu import full_data
from sphere_tf.runners import sweep

_CONFIGS = flags.DEFINE_list("configs", [
    "sphere_tf/configs/repro/fashion_mnist_no_relu.py", "sphere_tf/configs/repro/fashion_mnist_convnorm_scarcity.py",
    "sphere_tf/configs/repro/fashion_mnist_mhe.py", "sphere_tf/configs/repro/fashion_mnist_margin_2d.py",
], "Config files; each one's SWEEP_VARIANTS are run.")
_VARIANTS = flags.DEFINE_list("variants", [], "Variant strings to run (default: every config's SWEEP_VARIANTS).")
_JOBS = flags.DEFINE_string(
    "jobs", "", "Semicolon-separated 'CONFIG|VARIANT' pairs to run instead of --configs × --variants (a variant "
    "may hold commas: 'sphere_tf/configs/repro/fashion_mnist_margin_2d.py|loss=softmax,recipe=paper').")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds of every variant.")
_MODE = flags.DEFINE_enum("mode", "full", ["full", "quick"], "The config argument: 'full' or 'quick' (dry run).")
_OUT = flags.DEFINE_string("out", None, "Output folder.", required=True)
_WORKERS = flags.DEFINE_integer("workers", 4, "Runs at a time (processes).")
_TIME_BUDGET = flags.DEFINE_float("time_budget", 0.0, "Seconds after which no new run starts (0: no limit).")
_DATA_DIR = flags.DEFINE_string("data_dir", "", "Folder with the four Fashion-MNIST idx files ('' = default).")
_RUN = flags.DEFINE_string("run", "", "Internal: 'CONFIG|VARIANT|SEED', one run in this process.")

def _jobs():
    jobs = []
    if _JOBS.value:
        pairs = [entry.split("|") for entry in _JOBS.value.split(";") if entry.strip()]
        if any(len(pair) != 2 for pair in pairs):
            raise ValueError(f"--jobs={_JOBS.value!r}: expected 'CONFIG|VARIANT' entries separated by ';'.")
        return [(path.strip(), variant.strip(), seed) for seed in _SEEDS.value for path, variant in pairs]
    for seed in _SEEDS.value:
        for path in _CONFIGS.value:
            variants = _VARIANTS.value or getattr(sweep.load_config_module(path), "SWEEP_VARIANTS", [""])
            jobs += [(path, variant, seed) for variant in variants]
    return jobs


def orchestrate():
    os.makedirs(_OUT.value, exist_ok=True)
    runs_path = os.path.join(_OUT.value, "runs.jsonl")
    open(runs_path, "w").close()
    pending, running, records, started = _jobs(), [], [], time.time()
    print(f"{len(pending)} runs, {_WORKERS.value} at a time", flush=True)
    while pending or running:
        budget_left = not _TIME_BUDGET.value or time.time() - started < _TIME_BUDGET.value
        while pending and budget_left and len(running) < _WORKERS.value:
            job = pending.pop(0)
            command = [sys.executable, "-m", "bench.gpu.reproduce", f"--run={'|'.join(job)}", f"--mode={_MODE.value}",
                       f"--out={_OUT.value}", f"--data_dir={_DATA_DIR.value}"]
            running.append((job, subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                  text=True)))
        if not budget_left and pending:
            print(f"time budget reached: {len(pending)} runs not started", flush=True)
            pending = []
        for job, process in list(running):
            if process.poll() is None:
                continue
            running.remove((job, process))
            output = process.stdout.read()
            lines = [line for line in output.splitlines() if line.startswith("RECORD ")]
            if process.returncode or not lines:
                print(f"FAILED {job} (exit {process.returncode}):\n{output[-3000:]}", flush=True)
                continue
            record = json.loads(lines[-1][len("RECORD "):])
            records.append(record)
            with open(runs_path, "a") as f:
                f.write(json.dumps(record) + "\n")
            print(f"{time.time() - started:6.0f}s {record['claim']} {record['variant']} seed {record['seed']}: "
                  f"test {record['test_accuracy']:.2f}% (best pass {record['best_pass_test_accuracy']:.2f}%), "
                  f"{record['wall_seconds']:.0f}s", flush=True)
        time.sleep(0.5)
    with open(os.path.join(_OUT.value, "summary.json"), "w") as f:
        json.dump(full_data.summarize(records), f, indent=1)
    print(f"done: {len(records)} runs in {time.time() - started:.0f}s", flush=True)
    return 0 if records else 1


def main(argv):
    del argv
    if _RUN.value:
        config_path, variant, seed = _RUN.value.split("|")
        workdir = os.path.join(_OUT.value, "runs", full_data.claim_name(config_path),
                               sweep.variant_dirname(variant), f"seed_{seed}")
        record = full_data.run_one(config_path, variant, seed, _MODE.value, _DATA_DIR.value, workdir)
        print("RECORD " + json.dumps(record), flush=True)
        return 0
    return orchestrate()


if __name__ == "__main__":
    app.run(main)
