"""Runs one config over variants and seeds and aggregates the results (mean ± std); no flags here.

Each (variant, seed) is one run (`runners.run`: the config's task, classification by default) of
`get_config(variant)` with `config.seed = seed`, in `<workdir>/<variant>/seed_<n>/`
(a finished run is not trained again, an interrupted one resumes). The summary
(JSON, and a Markdown table beside it) holds, per variant, every run's test
accuracy, final-epoch history values (loss, accuracy, `energy/total`, ...), wall
and process CPU seconds, and their mean and sample standard deviation (ddof 1)
over the seeds. `trainers/sweep.py` is the absl main.

The runs are sequential: one process trains them one after another, variant by
variant, each variant's seeds in order. `dry_run` says what a sweep would run
before anything trains or is written: the recipe keys each variant changes, every
(variant, seed) run with its step count, a step time measured once per variant
(`classifier.dry_run`; the seeds of a variant share the model, hence the
estimate) and the estimated time of the whole sweep, the sum over its runs.
"""

import json
import math
import os
import time

from sphere_tf import configs
from sphere_tf import json_files
from sphere_tf import validation
from sphere_tf.runners import tasks
from sphere_tf.training import progress

# Per-run scalars aggregated over the seeds (history values are the last epoch's).
RUN_METRICS = ("test_accuracy", "test_error", "test_loss", "wall_seconds", "cpu_seconds")


def load_config_module(path):
    """Imports a config file by path.

    Args:
        path: str, a Python file defining `get_config(arg)`, or a packaged config's name
            (`sphere_tf.configs.config_path`).

    Returns:
        The module.

    Raises:
        FileNotFoundError: `path` is neither a file nor a packaged config's name.
        ValueError: the module has no `get_config`.
    """
    try:
        configs.config_path(path)
    except configs.ConfigNotFoundError as error:
        raise FileNotFoundError(str(error)) from None
    return configs.load_module(path)  # a ValueError (ConfigNotFoundError) without get_config


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


def _checked_runs(variants, seeds, caller):
    """`(variants, seeds)` as lists (seeds as ints), refused when empty or holding a duplicate."""
    variants, seeds = list(variants), [int(s) for s in seeds]
    if not variants or not seeds:
        raise ValueError(f"{caller}: expected variants and seeds, got {variants!r} and {seeds!r}.")
    if len(set(variants)) != len(variants) or len(set(seeds)) != len(seeds):
        raise ValueError(f"{caller}: duplicate variants or seeds in {variants!r}, {seeds!r}.")
    return variants, seeds


def run_config(module, variant, seed):
    """The config of one run: `get_config(variant)` with `config.seed = seed` (a bad variant raises here)."""
    config = module.get_config(variant)
    config.seed = seed
    return config


def run_dirname(variant, seed):
    """The run's folder under the sweep's workdir: `<variant_dirname>/seed_<n>`."""
    return os.path.join(variant_dirname(variant), f"seed_{seed}")


def run_sweep(config_path, variants, seeds, workdir, train_fn=None):
    """Trains every (variant, seed) and returns the summary dict.

    Args:
        config_path: str, the config file.
        variants: list of config-argument strings (one per variant).
        seeds: list of ints.
        workdir: str; run folders are `<workdir>/<variant_dirname>/seed_<n>`.
        train_fn: `(config, workdir) -> results` (default `runners.run`: the task the config names, a
            classification run unless it names another).

    Returns:
        `{"config": path, "seeds": [...], "variants": {variant: {"runs": [...], "aggregate": {...}}}}`.

    Raises:
        ValueError: no variants or no seeds, or a duplicate.
    """
    if train_fn is None:
        train_fn = _run_task
    variants, seeds = _checked_runs(variants, seeds, "run_sweep")
    module = load_config_module(config_path)
    summary = {"config": config_path, "seeds": seeds, "variants": {}}
    for variant in variants:
        runs = []
        for seed in seeds:  # one run at a time (`dry_run` sums its estimate over the runs for this reason)
            config = run_config(module, variant, seed)
            run_dir = os.path.join(workdir, run_dirname(variant, seed))
            wall, cpu = time.time(), time.process_time()
            results = train_fn(config, run_dir)
            runs.append(run_record(seed, results, time.time() - wall, time.process_time() - cpu))
        summary["variants"][variant] = {"runs": runs, "aggregate": aggregate(runs)}
    return summary


def _run_task(config, workdir):
    name, config = tasks.split_task(config)
    return tasks.get_task(name).run(config, workdir)  # the task's module (TensorFlow) loads here, on first use


# A key one variant's resolved config lacks (another variant's section holds more keys).
_ABSENT = object()


def _varying_paths(configs, path=()):
    """The key paths (tuples) whose value is not the same in every one of `configs`, in the configs' key order.

    Sections that are dicts in every config are compared key by key; a section that is a dict in one config and
    not in another (a margin head against `head=None`) differs as a whole.
    """
    paths = []
    for key in dict.fromkeys(key for config in configs for key in config):
        values = [config.get(key, _ABSENT) for config in configs]
        if all(isinstance(value, dict) for value in values):
            paths += _varying_paths(values, path + (key,))
        elif any(value != values[0] for value in values[1:]):
            paths.append(path + (key,))
    return paths


def _lookup(config, path):
    for key in path:
        if not isinstance(config, dict) or key not in config:
            return _ABSENT
        config = config[key]
    return config


def recipe_differences(configs):
    """What each variant changes: the resolved config's keys that are not the same in every variant.

    Args:
        configs: dict variant -> resolved config (`classifier.validate`, plain dicts).

    Returns:
        `(varying_keys, differences)`: the dotted keys, and `{variant: {dotted key: value}}` over them (a key
        the variant's config lacks is left out).
    """
    paths = _varying_paths(list(configs.values()))
    differences = {variant: {".".join(path): value for path in paths
                             if (value := _lookup(config, path)) is not _ABSENT}
                   for variant, config in configs.items()}
    return [".".join(path) for path in paths], differences


def dry_run(config_path, variants, seeds, probe_steps=3):
    """What `run_sweep` would run, before anything trains or any file is written.

    Every run's config is made as `run_sweep` makes it and resolved by `classifier.dry_run`, all of them before
    any model is built, so a bad variant raises what the sweep raises (the config's own `ValueError`, or
    `classifier.ConfigError` as `train_and_evaluate` raises it), without a sweep's earlier runs first. Each
    variant's step is then measured once, on its first seed's config (`classifier.dry_run` with
    `probe_steps`): the seeds of a variant build the same model, so they share the measurement. A run's
    estimate is compile + steps × step time (every run builds and compiles its own model); the sweep's is the
    sum over its runs, because `run_sweep` trains them one after another in one process. No workdir is read:
    runs a workdir already holds finished (which the sweep would not train again) are counted too.

    Args:
        config_path: str, the config file.
        variants: list of config-argument strings (one per variant).
        seeds: list of ints.
        probe_steps: int >= 0, timed steps per variant (0: no model is built, no time estimate).

    Returns:
        dict: `config` (the path), `variants`, `seeds`, `varying_keys` and `differences` (`recipe_differences`
        of the variants' resolved configs), `runs` (one per (variant, seed) in the sweep's order: `variant`,
        `seed`, `run_dir` (under the workdir), `steps_per_epoch`, `epochs`, `total_steps`, and with
        `probe_steps` > 0 `estimated_train_seconds`), `probes` (`{variant: {"parameters", "compile_seconds",
        "seconds_per_step", "backend"}}`, empty without a probe), `total_steps` and `estimated_train_seconds`
        (sums over the runs; None when a run's steps are unknown, or without a probe).

    Raises:
        ValueError: as `run_sweep` (no variants or seeds, a duplicate, a bad variant), or a bad `probe_steps`.
        classifier.ConfigError (a ValueError): a variant's config is one the runner refuses.
    """
    from sphere_tf.runners import classifier  # noqa: PLC0415 (TensorFlow only when dry-running or training)
    variants, seeds = _checked_runs(variants, seeds, "dry_run")
    probe_steps = validation.integer(probe_steps, "probe_steps", minimum=0)
    module = load_config_module(config_path)
    runs, resolved = [], {}
    for variant in variants:  # every run's config, before any model is built: mistakes fail at once
        for seed in seeds:
            plan = classifier.dry_run(run_config(module, variant, seed), probe_steps=0)
            resolved.setdefault(variant, plan["config"])  # the first seed's: the variants differ by their keys only
            runs.append({"variant": variant, "seed": seed, "run_dir": run_dirname(variant, seed),
                         **{key: plan[key] for key in ("steps_per_epoch", "epochs", "total_steps")}})
    varying_keys, differences = recipe_differences(resolved)
    probes = {}
    if probe_steps:
        for variant in variants:
            # One model per variant, each tracing its own train function once (not retracing).
            with progress.quiet_retracing(("TensorFlowTrainer._make_function",)):
                plan = classifier.dry_run(run_config(module, variant, seeds[0]), probe_steps=probe_steps)
            probes[variant] = {key: plan[key] for key in ("parameters", "compile_seconds", "seconds_per_step",
                                                           "backend")}
        for run in runs:
            probe = probes[run["variant"]]
            run["estimated_train_seconds"] = (probe["compile_seconds"] + probe["seconds_per_step"] * run["total_steps"]
                                              if run["total_steps"] is not None else None)
    steps_known = all(run["total_steps"] is not None for run in runs)
    return {
        "config": config_path, "variants": variants, "seeds": seeds, "varying_keys": varying_keys,
        "differences": differences, "runs": runs, "probes": probes,
        "total_steps": sum(run["total_steps"] for run in runs) if steps_known else None,
        "estimated_train_seconds": (sum(run["estimated_train_seconds"] for run in runs)
                                    if probes and steps_known else None),
    }


def _variant_name(variant):
    return variant or "default"


def dry_run_lines(plan):
    """The sweep dry run's report (`dry_run`): what each variant changes, every run's steps, the total time."""
    from sphere_tf.runners import classifier  # noqa: PLC0415

    runs = plan["runs"]
    def count(n, noun):
        return f"{n} {noun}" + ("" if n == 1 else "s")

    lines = [f"sweep            {plan['config']}: {count(len(plan['variants']), 'variant')} x "
             f"{count(len(plan['seeds']), 'seed')} = {count(len(runs), 'run')}, trained one after another in one "
             "process"]
    if plan["varying_keys"]:
        lines.append(f"varying keys     {', '.join(plan['varying_keys'])} (every other key is the same in every "
                     "variant)")
    else:
        lines.append("varying keys     none" + (" (one variant)" if len(plan["variants"]) == 1
                                                else " (the variants resolve to the same config)"))
    for variant in plan["variants"]:
        values = plan["differences"][variant]
        changes = ", ".join(f"{key}={json.dumps(values[key])}" if key in values else f"{key} not set"
                            for key in plan["varying_keys"])
        lines.append(f"variant          {_variant_name(variant)}" + (f": {changes}" if changes else ""))
        if variant in plan["probes"]:
            probe = plan["probes"][variant]
            lines.append(f"  step time      {probe['seconds_per_step'] * 1000:.1f} ms measured on a synthetic batch "
                         f"(compile {probe['compile_seconds']:.1f} s), {probe['parameters']:,} parameters; "
                         "shared by its seeds")
    for run in runs:
        if run["total_steps"] is None:
            text = "steps unknown until the data is read"
        else:
            text = f"{run['total_steps']} steps ({run['epochs']} epochs of {run['steps_per_epoch']})"
        if "estimated_train_seconds" in run:
            text += f", {classifier.duration_text(run['estimated_train_seconds'])}"
        lines.append(f"run              {_variant_name(run['variant'])} seed {run['seed']}: {text}")
    total = plan["total_steps"]
    lines.append(f"steps            {total if total is not None else 'unknown'} in {count(len(runs), 'run')}")
    if plan["probes"]:
        backend = next(iter(plan["probes"].values()))["backend"]
        lines.append(f"estimated time   {classifier.duration_text(plan['estimated_train_seconds'])} of training on "
                     f"this machine (backend {backend}): the sum over the {count(len(runs), 'run')}, trained one after "
                     "another, each compiling its own model (data loading, evaluations and export not counted)")
    return lines


def write_summary(summary, path):
    """Writes `summary` as JSON to `path` and its `markdown_table` to `path` with `.md`."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    json_files.write_json(path, summary, indent=1)
    with open(os.path.splitext(path)[0] + ".md", "w") as f:
        f.write(markdown_table(summary))
