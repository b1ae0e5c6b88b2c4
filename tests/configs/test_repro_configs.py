"""The Fashion-MNIST reproduction configs (sphere_tf/configs/repro/) and the sweep driver (sphere_tf_cli/sweep.py).

Every variant of every config validates; every config's quick variant trains two steps on the real
Fashion-MNIST files; the sweep's mean ± std matches hand-computed values and the runs' own results.json; the
sweep's dry run lists every (variant, seed) with the config's step count, refuses a bad variant as the sweep does
and writes nothing.
"""

import glob
import itertools
import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

from sphere_tf.runners import classifier
from sphere_tf.runners import sweep

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPRO = os.path.join(ROOT, "sphere_tf", "configs", "repro")
CONFIG_FILES = sorted(p for p in glob.glob(os.path.join(REPRO, "*.py")) if not p.endswith("__init__.py"))

# Every config's variant axes (argument -> choices), as its docstring lists them.
AXES = {
    "fashion_mnist_no_relu.py": {"operator": ["conv2d", "sphere", "tanh"], "relu": ["True", "False"]},
    "fashion_mnist_convnorm_scarcity.py": {"norm": ["bn", "convnorm_bn", "convnorm", "vanilla"],
                                           "schedule": ["constant", "cosine"]},
    "fashion_mnist_mhe.py": {"reg": ["none", "mhe", "hs_mhe", "rp_comhe"]},
    "fashion_mnist_margin_2d.py": {"loss": ["softmax", "lsoftmax_m2", "lsoftmax_m4", "asoftmax_m4"]},
}


def _variants(path):
    axes = AXES[os.path.basename(path)]
    for values in itertools.product(*axes.values()):
        yield ",".join(f"{k}={v}" for k, v in zip(axes, values))


def test_every_config_has_axes():
    assert sorted(os.path.basename(p) for p in CONFIG_FILES) == sorted(AXES)


@pytest.mark.parametrize("path", CONFIG_FILES, ids=os.path.basename)
def test_every_variant_validates(path):
    module = sweep.load_config_module(path)
    assert "sphere-tf sweep" in module.__doc__
    variants = list(_variants(path))
    for variant in variants + [v + ",quick" for v in variants]:
        config = classifier.validate(module.get_config(variant))
        assert config["data"]["name"] == "fashion_mnist"
        assert config["export"] is False
    full = [classifier.validate(module.get_config(v)) for v in variants]
    for variant in module.SWEEP_VARIANTS:  # may leave axes at their defaults
        assert classifier.validate(module.get_config(variant)) in full, variant


@pytest.mark.parametrize("path", CONFIG_FILES, ids=os.path.basename)
def test_bad_variant_value_names_the_argument(path):
    module = sweep.load_config_module(path)
    axis, choices = next((k, v) for k, v in AXES[os.path.basename(path)].items() if k != "relu")
    with pytest.raises(ValueError, match=rf"{axis}='bogus'.*{choices[0]}"):
        module.get_config(f"{axis}=bogus")
    with pytest.raises(ValueError, match="Unknown config argument 'nope'"):
        module.get_config("nope=1")


def test_variants_differ_only_in_their_axis():
    """The compared variants of a claim share data, optimizer and schedule (a fair comparison)."""
    for path in CONFIG_FILES:
        module = sweep.load_config_module(path)
        axes = AXES[os.path.basename(path)]
        keys = ("data", "optimizer", "train", "seed") + (() if "schedule" in axes else ("schedule",))
        configs = [classifier.validate(module.get_config(v)) for v in _variants(path)]
        for config in configs[1:]:
            for key in keys:
                assert config[key] == configs[0][key], (path, key)


def test_mhe_baseline_tracks_the_same_layers_unregularized():
    module = sweep.load_config_module(os.path.join(REPRO, "fashion_mnist_mhe.py"))
    baseline = module.get_config("reg=none")
    assert list(baseline.regularizers) == []
    assert list(baseline.train.energy_layers) == ["conv*", "fc", "logits"]
    for reg in ("mhe", "hs_mhe", "rp_comhe"):
        config = module.get_config(f"reg={reg}")
        assert list(config.train.energy_layers) == list(baseline.train.energy_layers)
        # The regularized variants' layers are the tracked ones: the default (`None`, the regularized layers)
        # would log the same keys.
        patterns = [p for r in config.regularizers for p in ([r["layers"]] if isinstance(r["layers"], str)
                                                             else r["layers"])]
        assert sorted(patterns) == sorted(baseline.train.energy_layers)


# One quick variant per config: the one with the most distinctive layers.
QUICK = {
    "fashion_mnist_no_relu.py": "quick,operator=sphere,relu=False",
    "fashion_mnist_convnorm_scarcity.py": "quick,norm=convnorm_bn",
    "fashion_mnist_mhe.py": "quick,reg=rp_comhe",
    "fashion_mnist_margin_2d.py": "quick,loss=lsoftmax_m4",
}


@pytest.mark.parametrize("path", CONFIG_FILES, ids=os.path.basename)
def test_quick_variant_trains_two_steps(path, tmp_path):
    config = sweep.load_config_module(path).get_config(QUICK[os.path.basename(path)])
    results = classifier.train_and_evaluate(config, str(tmp_path))
    assert results["steps"] == 2
    assert len(results["history"]["loss"]) == 1
    assert math.isfinite(results["test_loss"]) and 0.0 <= results["test_accuracy"] <= 100.0
    if os.path.basename(path) == "fashion_mnist_mhe.py":  # the tracked energy is in the history
        assert results["regularized_layers"]
        assert math.isfinite(results["history"]["energy/total"][0])


def test_mean_std_hand_computed():
    # 80, 82, 84: mean 82, sample variance ((−2)² + 0 + 2²)/2 = 4, std 2.
    assert sweep.mean_std([80.0, 82.0, 84.0]) == {"mean": 82.0, "std": 2.0, "n": 3}
    # 1, 2, 3, 4, 10: mean 4, squared deviations 9+4+1+0+36 = 50, /4 = 12.5.
    result = sweep.mean_std([1, 2, 3, 4, 10])
    assert result["mean"] == 4.0 and result["std"] == pytest.approx(math.sqrt(12.5), rel=1e-12)
    assert sweep.mean_std([7.5]) == {"mean": 7.5, "std": 0.0, "n": 1}
    with pytest.raises(ValueError, match="at least one"):
        sweep.mean_std([])
    with pytest.raises(ValueError, match="finite"):
        sweep.mean_std([1.0, float("nan")])


def test_run_sweep_aggregates_per_variant(tmp_path):
    """With a recorded trainer: folders, per-seed rows and mean ± std against hand-computed values."""
    accuracy = {("a=1", 0): 80.0, ("a=1", 1): 82.0, ("a=1", 2): 84.0,
                ("a=2", 0): 90.0, ("a=2", 1): 90.0, ("a=2", 2): 93.0}
    config_file = tmp_path / "cfg.py"
    config_file.write_text(
        "import ml_collections\n"
        "def get_config(arg=None):\n"
        "    return ml_collections.ConfigDict({'seed': 0, 'arg': arg})\n")
    calls = []

    def train_fn(config, workdir):
        calls.append((config.arg, config.seed, workdir))
        acc = accuracy[(config.arg, config.seed)]
        return {"test_accuracy": acc, "test_error": 100.0 - acc, "test_loss": acc / 100.0, "steps": 5,
                "history": {"loss": [2.0, 1.0 + config.seed], "energy/total": [3.0, 3.0 - config.seed]}}

    summary = sweep.run_sweep(str(config_file), ["a=1", "a=2"], ["0", "1", "2"], str(tmp_path / "w"), train_fn)
    assert [c[:2] for c in calls] == [(v, s) for v in ("a=1", "a=2") for s in (0, 1, 2)]
    assert calls[0][2] == str(tmp_path / "w" / "a-1" / "seed_0")
    agg1 = summary["variants"]["a=1"]["aggregate"]
    assert agg1["test_accuracy"] == {"mean": 82.0, "std": 2.0, "n": 3}
    assert agg1["test_error"]["mean"] == pytest.approx(18.0) and agg1["test_error"]["std"] == pytest.approx(2.0)
    # final/loss: 1, 2, 3 -> mean 2, std 1; final/energy/total: 3, 2, 1 -> mean 2, std 1.
    assert agg1["final/loss"] == {"mean": 2.0, "std": 1.0, "n": 3}
    assert agg1["final/energy/total"] == {"mean": 2.0, "std": 1.0, "n": 3}
    # 90, 90, 93: mean 91, squared deviations 1+1+4 = 6, /2 = 3.
    agg2 = summary["variants"]["a=2"]["aggregate"]
    assert agg2["test_accuracy"]["mean"] == 91.0
    assert agg2["test_accuracy"]["std"] == pytest.approx(math.sqrt(3.0), rel=1e-12)
    assert "seed" not in agg2 and "steps" not in agg2

    path = tmp_path / "out" / "summary.json"
    sweep.write_summary(summary, str(path))
    assert json.loads(path.read_text()) == json.loads(json.dumps(summary))
    table = (tmp_path / "out" / "summary.md").read_text()
    assert "| `a=1` | 3 | 82.00 ± 2.00 | 80.00, 82.00, 84.00 |" in table
    assert "| `a=2` | 3 | 91.00 ± 1.73 |" in table


def test_run_sweep_bad_arguments(tmp_path):
    with pytest.raises(FileNotFoundError, match="--config"):
        sweep.load_config_module(str(tmp_path / "missing.py"))
    empty = tmp_path / "empty.py"
    empty.write_text("X = 1\n")
    with pytest.raises(ValueError, match="get_config"):
        sweep.load_config_module(str(empty))
    path = CONFIG_FILES[0]
    with pytest.raises(ValueError, match="duplicate"):
        sweep.run_sweep(path, ["", ""], [0], str(tmp_path), train_fn=lambda c, w: None)
    with pytest.raises(ValueError, match="expected variants and seeds"):
        sweep.run_sweep(path, [""], [], str(tmp_path), train_fn=lambda c, w: None)


def test_real_sweep_matches_the_runs_results(tmp_path):
    """Two seeds of a real quick run: the summary's mean ± std equals NumPy's over the runs' results.json."""
    path = os.path.join(REPRO, "fashion_mnist_no_relu.py")
    summary = sweep.run_sweep(path, ["quick,operator=conv2d"], [0, 1], str(tmp_path))
    accs = []
    for seed in (0, 1):
        with open(tmp_path / "quick_operator-conv2d" / f"seed_{seed}" / "results.json") as f:
            accs.append(json.load(f)["test_accuracy"])
    agg = summary["variants"]["quick,operator=conv2d"]["aggregate"]["test_accuracy"]
    assert agg["mean"] == pytest.approx(np.mean(accs), abs=1e-9)
    assert agg["std"] == pytest.approx(np.std(accs, ddof=1), abs=1e-9)
    assert [r["seed"] for r in summary["variants"]["quick,operator=conv2d"]["runs"]] == [0, 1]


def test_margin_paper_recipe_is_the_authors_mnist_recipe():
    """`recipe=paper`: thesis §2.2.7 / Table 2.1 on Fashion-MNIST (the check behind reproductions.md §5)."""
    module = sweep.load_config_module(os.path.join(REPRO, "fashion_mnist_margin_2d.py"))
    for loss in ("softmax", "lsoftmax_m2", "lsoftmax_m4"):
        config = classifier.validate(module.get_config(f"loss={loss},recipe=paper,full=True"))
        assert config["data"]["name"] == "fashion_mnist" and config["data"]["train_limit"] == 0
        assert config["data"]["normalization"] == "mean_subtraction"
        assert config["model"]["width_multiplier"] == 1.0
        assert config["model"]["operator"]["kernel_initializer"] == "he_normal"
        assert config["optimizer"] == {"name": "sgd", "learning_rate": 0.1, "momentum": 0.9}
        assert config["schedule"]["name"] == "step" and config["schedule"]["boundaries"] == [12000, 15000]
        assert config["schedule"]["decay_factor"] == 0.1
        assert config["train"]["batch_size"] == 256 and config["train"]["steps"] == 18000
        # Caffe's weight decay 5e-4 adds 5e-4·w to the gradient: Keras L2(2.5e-4) on every kernel.
        assert config["regularizers"] == [{"name": "weight_decay", "layers": "*", "factor": 2.5e-4}]
        head = config["model"]["head"]
        assert head is None if loss == "softmax" else head["annealing"] == "mnist"
    assert module.get_config("recipe=paper,width=0.5").model.width_multiplier == 0.5
    assert module.get_config("width=1").model.width_multiplier == 1.0
    assert module.get_config("").model.width_multiplier == 0.25
    with pytest.raises(ValueError, match="recipe"):
        module.get_config("recipe=sgd")
    with pytest.raises(ValueError, match="width"):
        module.get_config("width=-1")


# The published Fashion-MNIST training split; a run's epoch is whole batches of it (or of `data.train_limit`).
FASHION_MNIST_TRAIN_IMAGES = 60000


def _expected_steps(config):
    """A run's optimizer steps from its config alone: `train.steps`, else epochs × steps per epoch, one epoch
    being `train.steps_per_epoch` or one pass in whole batches (the runner drops the last partial batch)."""
    train = config.train
    if train.steps:
        return train.steps
    images = min(config.data.train_limit or FASHION_MNIST_TRAIN_IMAGES, FASHION_MNIST_TRAIN_IMAGES)
    return train.epochs * (train.steps_per_epoch or images // train.batch_size)


def test_sweep_dry_run_lists_every_run_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anything written to a relative path would land here
    path = os.path.join(REPRO, "fashion_mnist_no_relu.py")
    module = sweep.load_config_module(path)
    # A short run, a full-data one (epochs of whole batches) and a quick one (fixed epochs of 2 steps).
    variants = ["operator=conv2d,relu=False", "operator=sphere,full=True", "quick,operator=tanh"]
    seeds = [0, 1, 2]
    plan = sweep.dry_run(path, variants, seeds, probe_steps=1)

    assert [(run["variant"], run["seed"]) for run in plan["runs"]] == list(itertools.product(variants, seeds))
    expected = {variant: _expected_steps(module.get_config(variant)) for variant in variants}
    assert expected == {variants[0]: 300, variants[1]: 20 * (60000 // 128), variants[2]: 2}
    for run in plan["runs"]:
        assert run["total_steps"] == expected[run["variant"]], run
        assert run["run_dir"] == os.path.join(sweep.variant_dirname(run["variant"]), f"seed_{run['seed']}")
    assert plan["total_steps"] == sum(run["total_steps"] for run in plan["runs"]) == len(seeds) * sum(expected.values())

    # One measurement per variant, shared by its seeds; the sweep's estimate is the sum over its runs.
    assert sorted(plan["probes"]) == sorted(variants)
    for run in plan["runs"]:
        probe = plan["probes"][run["variant"]]
        assert probe["seconds_per_step"] > 0 and probe["compile_seconds"] > 0
        assert run["estimated_train_seconds"] == pytest.approx(
            probe["compile_seconds"] + probe["seconds_per_step"] * run["total_steps"])
    assert plan["estimated_train_seconds"] == pytest.approx(
        sum(run["estimated_train_seconds"] for run in plan["runs"]))

    # The differences: the keys some variant changes, each variant's values; nothing the variants share.
    resolved = {variant: classifier.validate(module.get_config(variant)) for variant in variants}
    assert {"model.relu", "model.operator", "data.train_limit", "train.batch_size"} <= set(plan["varying_keys"])
    assert "optimizer.name" not in plan["varying_keys"] and "seed" not in plan["varying_keys"]
    for variant in variants:
        assert plan["differences"][variant]["model.relu"] == resolved[variant]["model"]["relu"]
        assert plan["differences"][variant]["data.train_limit"] == resolved[variant]["data"]["train_limit"]
    lines = sweep.dry_run_lines(plan)
    assert sum(line.startswith("run ") for line in lines) == len(variants) * len(seeds)
    assert sum(line.startswith("  step time") for line in lines) == len(variants)
    assert f"steps            {plan['total_steps']} in 9 runs" in lines
    assert any(line.startswith("estimated time") and "the sum over the 9 runs" in line for line in lines)
    assert not any('"optimizer"' in line for line in lines)  # not the whole config per variant
    assert list(tmp_path.iterdir()) == []


def test_recipe_differences_of_nested_and_missing_sections():
    configs = {"a": {"seed": 0, "model": {"head": None, "relu": True}, "train": {"steps": 5}},
               "b": {"seed": 0, "model": {"head": {"margin": 4}, "relu": True, "extra": 1}, "train": {"steps": 6}}}
    keys, differences = sweep.recipe_differences(configs)
    assert keys == ["model.head", "model.extra", "train.steps"]
    assert differences == {"a": {"model.head": None, "train.steps": 5},
                           "b": {"model.head": {"margin": 4}, "model.extra": 1, "train.steps": 6}}
    assert sweep.recipe_differences({"only": configs["a"]}) == ([], {"only": {}})


def _sweep_error(run):
    with pytest.raises(Exception) as error:  # noqa: PT011 (the type is what the test compares)
        run()
    return type(error.value), str(error.value)


@pytest.mark.parametrize("bad", ["operator=bogus", "nope=1", "operator="])
def test_sweep_dry_run_refuses_a_bad_variant_as_the_sweep_does(bad, tmp_path):
    """The same exception and message as a real sweep, which raises it on reaching the variant."""
    path = os.path.join(REPRO, "fashion_mnist_no_relu.py")
    trained = []

    def train_fn(config, workdir):
        trained.append(workdir)
        return {"test_accuracy": 50.0, "test_error": 50.0, "test_loss": 1.0, "steps": 2, "history": {}}

    variants = ["quick,operator=conv2d", bad]
    real = _sweep_error(lambda: sweep.run_sweep(path, variants, [0], str(tmp_path / "w"), train_fn))
    assert len(trained) == 1  # the real sweep ran the good variant first
    assert _sweep_error(lambda: sweep.dry_run(path, variants, [0], probe_steps=0)) == real


def test_sweep_dry_run_refuses_a_config_the_runner_refuses(tmp_path):
    """A variant whose config fails `classifier.validate`: the dry run raises the sweep's ConfigError."""
    config_file = tmp_path / "cfg.py"
    config_file.write_text(
        "from sphere_tf.configs.repro import fashion_mnist_no_relu as base\n"
        "def get_config(arg=None):\n"
        "    config = base.get_config('quick')\n"
        "    config.data.augmentation = arg\n"
        "    return config\n")
    real = _sweep_error(lambda: sweep.run_sweep(str(config_file), ["flipp"], [0], str(tmp_path / "w")))
    assert real[0] is classifier.ConfigError and "data.augmentation" in real[1]
    assert _sweep_error(lambda: sweep.dry_run(str(config_file), ["none", "flipp"], [0], probe_steps=0)) == real
    assert not (tmp_path / "w").exists()
    with pytest.raises(ValueError, match="dry_run: duplicate"):
        sweep.dry_run(str(config_file), ["none", "none"], [0])
    with pytest.raises(ValueError, match="dry_run: expected variants and seeds"):
        sweep.dry_run(str(config_file), ["none"], [])


def _sweep_main(args, cwd):
    return subprocess.run([sys.executable, "-m", "sphere_tf_cli.sweep", *args], cwd=cwd,
                          env=dict(os.environ, PYTHONPATH=ROOT), capture_output=True, text=True, timeout=300)


def test_sweep_main_dry_run_needs_no_workdir_and_writes_nothing(tmp_path):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    config = os.path.join(REPRO, "fashion_mnist_mhe.py")
    result = _sweep_main([f"--config={config}", "--dry_run", "--dry_run_steps=1", "--seeds=0,1",
                          "--variants=quick,reg=none;quick,reg=mhe"], cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert "2 variants x 2 seeds = 4 runs, trained one after another" in out
    assert "variant          quick,reg=none: regularizers=[]" in out
    assert out.count("  step time") == 2 and "run              quick,reg=mhe seed 1: 2 steps (1 epochs of 2)" in out
    assert "steps            8 in 4 runs" in out and "estimated time" in out
    assert list(cwd.iterdir()) == []
    # Given a workdir and a summary path, still nothing is written; without --dry_run the workdir is required.
    workdir, summary = tmp_path / "never", tmp_path / "never.json"
    result = _sweep_main([f"--config={config}", "--dry_run", "--dry_run_steps=0", f"--workdir={workdir}",
                          f"--summary={summary}"], cwd)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "run              reg=rp_comhe seed 2:" in result.stdout and "estimated time" not in result.stdout
    assert not workdir.exists() and not summary.exists() and list(cwd.iterdir()) == []
    result = _sweep_main([f"--config={config}"], cwd)
    assert result.returncode != 0 and "--workdir is required (except with --dry_run)" in result.stderr
