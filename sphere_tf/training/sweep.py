"""Runs one config over variants and seeds and aggregates the results (mean ± std); no flags here.

Each (variant, seed) is one `classifier.train_and_evaluate` run of
`get_config(variant)` with `config.seed = seed`, in `<workdir>/<variant>/seed_<n>/`
(a finished run is not trained again, an interrupted one resumes). The summary
(JSON, and a Markdown table beside it) holds, per variant, every run's test
accuracy, final-epoch history values (loss, accuracy, `energy/total`, ...), wall
and process CPU seconds, and their mean and sample standard deviation (ddof 1)
over the seeds. `trainers/sweep.py` is the absl main.
"""

import importlib.util
import math
import os
import time

from sphere_tf import json_files

# Per-run scalars aggregated over the seeds (history values are the last epoch's).
RUN_METRICS = ("test_accuracy", "test_error", "test_loss", "wall_seconds", "cpu_seconds")


def load_config_module(path):
    """Imports a config file by path.

    Args:
        path: str, a Python file defining `get_config(arg)`.

    Returns:
        The module.

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: the module has no `get_config`.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--config: no config file {path!r}.")
    spec = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(path))[0], path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "get_config", None)):
        raise ValueError(f"--config: {path!r} defines no get_config(arg).")
    return module


def variant_dirname(variant):
    """A folder name for a variant string: `operator=sphere,relu=False` -> `operator-sphere_relu-False`."""
    if not variant:
        return "default"
    return variant.replace("=", "-").replace(",", "_").replace("/", "-")


def mean_std(values):
    """Mean and sample standard deviation (ddof 1; 0.0 for one value) of a non-empty list of floats.

    Args:
        values: sequence of finite numbers.

    Returns:
        `{"mean": float, "std": float, "n": int}`.

    Raises:
        ValueError: `values` is empty or holds a non-finite number.
    """
    values = [float(v) for v in values]
    if not values:
        raise ValueError("mean_std: expected at least one value, got none.")
    if not all(math.isfinite(v) for v in values):
        raise ValueError(f"mean_std: expected finite values, got {values}.")
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else 0.0
    return {"mean": mean, "std": std, "n": n}


def run_record(seed, results, wall_seconds, cpu_seconds):
    """The per-run row of the summary: seed, `RUN_METRICS` and the last value of every history key."""
    record = {"seed": int(seed), "test_accuracy": results["test_accuracy"], "test_error": results["test_error"],
              "test_loss": results["test_loss"], "steps": results["steps"],
              "wall_seconds": float(wall_seconds), "cpu_seconds": float(cpu_seconds)}
    for key, values in sorted(results.get("history", {}).items()):
        if values:
            record[f"final/{key}"] = float(values[-1])
    return record


def aggregate(runs):
    """Mean ± std over seeds of every numeric key the runs share (except `seed`, `steps`).

    Args:
        runs: list of `run_record` dicts of one variant.

    Returns:
        dict key -> `mean_std(...)`.

    Raises:
        ValueError: `runs` is empty.
    """
    if not runs:
        raise ValueError("aggregate: expected at least one run, got none.")
    keys = set(runs[0])
    for run in runs[1:]:
        keys &= set(run)
    keys -= {"seed", "steps"}
    return {key: mean_std([run[key] for run in runs]) for key in sorted(keys)
            if all(isinstance(run[key], (int, float)) for run in runs)}


def markdown_table(summary):
    """A Markdown table: variant | seeds | test accuracy (%) mean ± std | per seed | CPU s per run."""
    lines = ["| variant | seeds | test accuracy % (mean ± std) | per seed | CPU s / run |",
             "|---|---|---|---|---|"]
    for variant, entry in summary["variants"].items():
        acc = entry["aggregate"]["test_accuracy"]
        per_seed = ", ".join(f"{run['test_accuracy']:.2f}" for run in entry["runs"])
        cpu = entry["aggregate"]["cpu_seconds"]["mean"]
        lines.append(f"| `{variant or 'default'}` | {acc['n']} | {acc['mean']:.2f} ± {acc['std']:.2f} | "
                     f"{per_seed} | {cpu:.0f} |")
    return "\n".join(lines) + "\n"


def run_sweep(config_path, variants, seeds, workdir, train_fn=None):
    """Trains every (variant, seed) and returns the summary dict.

    Args:
        config_path: str, the config file.
        variants: list of config-argument strings (one per variant).
        seeds: list of ints.
        workdir: str; run folders are `<workdir>/<variant_dirname>/seed_<n>`.
        train_fn: `(config, workdir) -> results` (default `classifier.train_and_evaluate`).

    Returns:
        `{"config": path, "seeds": [...], "variants": {variant: {"runs": [...], "aggregate": {...}}}}`.

    Raises:
        ValueError: no variants or no seeds, or a duplicate.
    """
    if train_fn is None:
        from sphere_tf.training import classifier  # noqa: PLC0415 (TensorFlow only when training)
        train_fn = classifier.train_and_evaluate
    variants, seeds = list(variants), [int(s) for s in seeds]
    if not variants or not seeds:
        raise ValueError(f"run_sweep: expected variants and seeds, got {variants!r} and {seeds!r}.")
    if len(set(variants)) != len(variants) or len(set(seeds)) != len(seeds):
        raise ValueError(f"run_sweep: duplicate variants or seeds in {variants!r}, {seeds!r}.")
    module = load_config_module(config_path)
    summary = {"config": config_path, "seeds": seeds, "variants": {}}
    for variant in variants:
        runs = []
        for seed in seeds:
            config = module.get_config(variant)
            config.seed = seed
            run_dir = os.path.join(workdir, variant_dirname(variant), f"seed_{seed}")
            wall, cpu = time.time(), time.process_time()
            results = train_fn(config, run_dir)
            runs.append(run_record(seed, results, time.time() - wall, time.process_time() - cpu))
        summary["variants"][variant] = {"runs": runs, "aggregate": aggregate(runs)}
    return summary


def write_summary(summary, path):
    """Writes `summary` as JSON to `path` and its `markdown_table` to `path` with `.md`."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    json_files.write_json(path, summary, indent=1)
    with open(os.path.splitext(path)[0] + ".md", "w") as f:
        f.write(markdown_table(summary))
