"""DCNet's adversarial experiment (Tables 7 and 8) from a config: train, attack, tabulate (no flags here).

`run_experiment(config, workdir)` trains, for every seed, the four CNN-9 variants
of DCNet §6.2 (Baseline conv, SphereConv, BallConv, TanhConv; standard gradients,
no weight projection, no BN) naturally and with FGSM adversarial training, a
separately trained baseline as the black-box source, then evaluates

* white-box accuracy (Table 7): None / FGSM / BIM crafted on each target;
* black-box accuracy (Table 8): the same attacks crafted on the source baseline;
* white-box accuracy vs ε (a PNG);
* optionally DeepFool strength (App. C) on the naturally trained models.

The config schema is `DEFAULTS` (documented in docs/adversarial.md); the data,
model, optimizer and schedule sections are the classifier runner's
(`sphere_tf.runners.classifier`, docs/runner.md) and are validated by it.
Each trained model's whole training state is checkpointed under
`workdir/checkpoints/<training>_<model>_seed<k>` (`training.checkpoint.fit_resumable`),
so an interrupted run continues where it stopped and a finished one is only
re-evaluated.

The task runs on the TensorFlow, JAX and PyTorch Keras backends (`BACKENDS`), TensorFlow installed or not: the
attacks are `sphere_tf.adversarial.gradient_attacks` (`keras.ops`; cleverhans' FGSM and BIM examples to the last
bit on TensorFlow), FGSM adversarial training is the backend's own train step (`FGSMAdversarialModel`), DeepFool
is foolbox 3's model of the backend, and the data and checkpoints are the classifier runner's (Grain and array
checkpoints off TensorFlow). `validate` refuses what this environment cannot run before any data is read.
"""

import copy
import json
import os
import sys
import time

import keras
import numpy as np
from absl import logging

from sphere_tf import data as data_lib
from sphere_tf import dependencies
from sphere_tf import json_files
from sphere_tf import layers
from sphere_tf import losses as losses_lib
from sphere_tf import models as models_lib
from sphere_tf import saving
from sphere_tf import validation
from sphere_tf.adversarial import evaluation
from sphere_tf.adversarial import gradient_attacks
from sphere_tf.adversarial import pixels as pixels_lib
from sphere_tf.adversarial import training as training_lib
from sphere_tf.runners import classifier
from sphere_tf.runners import recipe
from sphere_tf.runners import schema
from sphere_tf.runners import tasks
from sphere_tf.training import checkpoint as checkpoint_lib
from sphere_tf.training import optimization
from sphere_tf.training import progress
from sphere_tf.training import workdir_lock

# DCNet §6.2 operators; the angular function of the adversarial models is not stated, cosine is inferred.
PAPER_OPERATORS = {
    "baseline": {"layer": "conv2d"},
    "sphereconv": {"layer": "decoupled", "magnitude": "sphere", "angular": "cosine"},
    "ballconv": {"layer": "decoupled", "magnitude": "ball", "angular": "cosine"},
    "tanhconv": {"layer": "decoupled", "magnitude": "tanh", "angular": "cosine"},
}
SOURCE_TRAININGS = ("natural", "matched")
# The Keras backends with the input gradients the attacks and the adversarial train step take
# (`sphere_tf.ops.autodiff`) and a foolbox 3 model class (`gradient_attacks.FOOLBOX_MODELS`).
BACKENDS = tuple(gradient_attacks.FOOLBOX_MODELS)

DEFAULTS = {
    "seeds": [0],
    "data": copy.deepcopy(schema.DEFAULTS["data"]),
    "model": {"name": "dcnet_cnn9_adv"},
    "operators": copy.deepcopy(PAPER_OPERATORS),
    "models": list(evaluation.MODELS),
    "trainings": list(evaluation.TRAININGS),
    "optimizer": {"name": "adam", "learning_rate": 1e-3},
    "schedule": copy.deepcopy(schema.DEFAULTS["schedule"]),
    "train": {"batch_size": 128, "epochs": 1, "steps": 0, "steps_per_epoch": 0, "verbose": "auto"},
    "adversarial_training": {"epsilon": gradient_attacks.PAPER_EPSILON, "mix": training_lib.DEFAULT_MIX},
    "attack": {"epsilon": gradient_attacks.PAPER_EPSILON, "step": gradient_attacks.PAPER_STEP,
               "iterations": gradient_attacks.PAPER_ITERATIONS, "batch_size": 250, "extra": []},
    "black_box": {"source_training": "natural", "natural_source": "", "fgsm_source": "", "source_seed_offset": 1000},
    "curve": {"epsilons": [0.0, 1.0, 2.0, 4.0, 8.0, 16.0], "attack": "fgsm"},
    "deepfool": {"images": 0, "steps": 50},
}
# Free-form sections (a model's / optimizer's keyword arguments) and the one a config replaces whole.
_OPEN_SECTIONS, _REPLACED_SECTIONS = ("model", "optimizer"), ("operators",)


def classifier_config(config, model, seed):
    """The classifier-runner config (`schema.DEFAULTS`) that trains `model` with `seed`."""
    if config["model"].get("operator") is not None:
        raise validation.invalid_argument("model.operator", "unset (the operators come from `operators`)",
                                          config["model"]["operator"])
    return {
        "seed": seed,
        "data": dict(config["data"]),
        "model": {**config["model"], "operator": config["operators"][model]},
        "optimizer": dict(config["optimizer"]),
        "schedule": dict(config["schedule"]),
        "train": dict(config["train"]),
        "export": False,
    }


@schema.config_errors
def validate(config):
    """Checks the whole config before any data is read; returns plain dicts with the defaults filled in.

    Raises:
        schema.ConfigError (a ValueError): an unknown key or a bad value, naming the dotted key.
    """
    config = schema.merge_config(DEFAULTS, tasks.without_task_key(config, "adversarial"), open_sections=_OPEN_SECTIONS,
                                    replaced_sections=_REPLACED_SECTIONS)
    seeds = config["seeds"]
    if not isinstance(seeds, list) or not seeds:
        raise validation.invalid_argument("seeds", "a non-empty list of ints >= 0", seeds)
    for i, seed in enumerate(seeds):
        validation.integer(seed, f"seeds[{i}]", minimum=0)
    if len(set(seeds)) != len(seeds):
        raise validation.invalid_argument("seeds", "distinct seeds", seeds)
    for key, choices in (("models", evaluation.MODELS), ("trainings", evaluation.TRAININGS)):
        values = config[key]
        if not isinstance(values, list) or not values:
            raise validation.invalid_argument(key, f"a non-empty list of {choices}", values)
        for i, value in enumerate(values):
            validation.one_of(value, f"{key}[{i}]", choices)
    if "baseline" not in config["operators"]:
        raise validation.invalid_argument("operators", "a dict holding at least 'baseline' (the black-box source)",
                                          sorted(config["operators"]))
    for model in config["models"]:
        if model not in config["operators"]:
            raise validation.invalid_argument("operators", f"an entry for every model in `models` ({model!r})",
                                              sorted(config["operators"]))
    for model in sorted(set(config["models"]) | {"baseline"}):
        # The spec itself first, so that its errors name `operators.<model>['<key>']` (the classifier's own check
        # below names it `model.operator`).
        models_lib.operators.validate_operator(config["operators"][model], f"operators.{model}")
        try:
            classifier.validate(classifier_config(config, model, config["seeds"][0]))
        except ValueError as error:
            raise ValueError(f"Invalid config for model {model!r}: {error}") from None
    adv = config["adversarial_training"]
    validation.non_negative_float(adv["epsilon"], "adversarial_training.epsilon")
    validation.real(adv["mix"], "adversarial_training.mix", low=0.0, high=1.0)
    attack = config["attack"]
    validation.non_negative_float(attack["epsilon"], "attack.epsilon")
    if not 0.0 <= validation.non_negative_float(attack["step"], "attack.step") <= attack["epsilon"]:
        raise validation.invalid_argument("attack.step", f"a float in [0, attack.epsilon={attack['epsilon']:g}] (a "
                                          "BIM step is at most the perturbation's budget)", attack["step"])
    validation.positive_int(attack["iterations"], "attack.iterations")
    validation.positive_int(attack["batch_size"], "attack.batch_size")
    if not isinstance(attack["extra"], list):
        raise validation.invalid_argument("attack.extra", "a list of attack names", attack["extra"])
    for i, name in enumerate(attack["extra"]):
        validation.one_of(name, f"attack.extra[{i}]", tuple(a for a in gradient_attacks.ATTACKS
                                                              if a not in evaluation.TABLE_ATTACKS))
    box = config["black_box"]
    validation.one_of(box["source_training"], "black_box.source_training", SOURCE_TRAININGS)
    validation.integer(box["source_seed_offset"], "black_box.source_seed_offset", minimum=1)
    for key in ("natural_source", "fgsm_source"):
        validation.text(box[key], f"black_box.{key}", allow_empty=True)  # a file or a workdir, '' for none
        if box[key] and not os.path.isfile(_source_file(box[key])):
            raise validation.invalid_argument(
                f"black_box.{key}", "a .keras model file or the workdir of a finished train_classifier run",
                box[key])
    curve = config["curve"]
    if not isinstance(curve["epsilons"], list) or not curve["epsilons"]:
        raise validation.invalid_argument("curve.epsilons", "a non-empty list of floats >= 0", curve["epsilons"])
    for i, eps in enumerate(curve["epsilons"]):
        validation.non_negative_float(eps, f"curve.epsilons[{i}]")
    validation.one_of(curve["attack"], "curve.attack", tuple(a for a in gradient_attacks.ATTACKS if a != "none"))
    validation.integer(config["deepfool"]["images"], "deepfool.images", minimum=0)
    validation.positive_int(config["deepfool"]["steps"], "deepfool.steps")
    _check_backend(config)
    return config


def _check_backend(config):
    """What this backend and environment cannot run, refused with the config (before any data is read).

    Every part of the task runs on the TensorFlow, JAX and PyTorch Keras backends (`gradient_attacks`, the
    backend-neutral `FGSMAdversarialModel`); another backend has no gradient to attack with, and DeepFool needs
    foolbox 3 installed.
    """
    backend = keras.backend.backend()
    if backend not in BACKENDS:
        raise ValueError(f"The adversarial task runs on the Keras backends {', '.join(BACKENDS)} (the attacks and "
                         f"FGSM adversarial training take input gradients). Received: KERAS_BACKEND={backend!r}")
    images = config["deepfool"]["images"]
    if images and not dependencies.installed("foolbox"):
        raise validation.invalid_argument(
            "deepfool.images", f"0 here: DeepFool runs through foolbox 3, which is not installed (Keras backend "
            f"{backend!r}; pip install foolbox)", images)


def _raw_pixel_space(channels):
    """The attack space of the runner's models: raw pixels (their first layer normalises them), ε in pixels."""
    return pixels_lib.pixel_space("none", channels)


def _raw_pixel_model(model, cfg, info):
    """A black-box source taking raw pixels: as loaded when it normalises them itself, else (a run saved before
    the runner put `PixelNormalization` first) behind the config's `data.normalization`, which it was trained on."""
    if layers.model_normalization(model) is not None:
        return model
    return models_lib.with_pixel_normalization(
        model, **recipe.normalization_kwargs(cfg["data"]["normalization"], info["channel_mean"]))


def _source_file(path):
    return path if path.endswith(".keras") else classifier.pretrained_model_path(path)


def _test_arrays(test_ds):
    images, labels = [], []
    for x, y in test_ds:
        images.append(np.asarray(x))  # tf.data tensors or Grain's NumPy batches
        labels.append(np.asarray(y))
    return np.concatenate(images), np.concatenate(labels).astype(np.int32)


def _progress_line(label, done, total):
    """A model's turn, `label` = (prefix, name): 'P training N', 'P resuming N at step k of M' or 'P loading N'
    (its checkpoint is finished: nothing is trained)."""
    prefix, name = label
    if done >= total:
        return f"{prefix} loading {name} (trained, {total} steps)"
    if done:
        return f"{prefix} resuming {name} at step {done} of {total}"
    return f"{prefix} training {name}"


def _train(cfg, training, config, space, directory, verbose, callbacks, label=("", "the model")):
    """Builds and trains one model as `cfg` (a validated classifier config) says (printing its
    `_progress_line` first); returns the plain model."""
    data_cfg, train_cfg = cfg["data"], cfg["train"]
    kwargs = classifier.data_kwargs(data_cfg)

    def load(step):
        return data_lib.get_datasets(data_cfg["name"], batch_size=train_cfg["batch_size"], seed=cfg["seed"],
                                     initial_step=step, **kwargs)

    train_ds, _, info = load(0)
    steps_per_epoch, epochs = classifier.run_length(train_cfg, info["steps_per_epoch"])
    total = steps_per_epoch * epochs
    print(_progress_line(label, checkpoint_lib.latest_step(directory), total))
    keras.utils.set_random_seed(cfg["seed"])
    model_cfg = dict(cfg["model"])
    model = models_lib.create_model(model_cfg.pop("name"), input_shape=info["input_shape"],
                                    num_classes=info["num_classes"],
                                    **recipe.normalization_kwargs(data_cfg["normalization"], info["channel_mean"]),
                                    **model_cfg)
    fit_model = model
    if training == "fgsm":
        adv = config["adversarial_training"]
        fit_model = training_lib.adversarial_wrap(model, space, epsilon=adv["epsilon"], mix=adv["mix"])
    rate = optimization.build_learning_rate(cfg["optimizer"].get("learning_rate"), cfg["schedule"], total)
    fit_model.compile(optimizer=optimization.build_optimizer(cfg["optimizer"], rate),
                      loss=losses_lib.SparseCrossentropy(), metrics=["accuracy"])
    fit_model.optimizer.build(fit_model.trainable_variables)
    checkpoint_lib.fit_resumable(
        fit_model, lambda step: train_ds if step == 0 else load(step)[0], epochs=epochs, directory=directory,
        steps_per_epoch=steps_per_epoch, every_steps=total,
        callbacks=list(callbacks) + optimization.schedule_callbacks(cfg["schedule"]), verbose=verbose)
    return model


def _nested():
    return {t: {} for t in evaluation.TRAININGS}


def _mean_std(per_seed):
    """training -> model -> attack -> list  =>  (means, stds) of the same nesting."""
    means, stds = {}, {}
    for training, per_model in per_seed.items():
        means[training], stds[training] = {}, {}
        for model, per_attack in per_model.items():
            means[training][model] = {a: float(np.mean(v)) for a, v in per_attack.items()}
            stds[training][model] = {a: float(np.std(v, ddof=1)) if len(v) > 1 else 0.0 for a, v in per_attack.items()}
    return means, stds


@evaluation.per_model_tracing()  # one trace per model, not "retracing" (evaluation.PER_MODEL_FUNCTIONS)
@schema.config_errors
def dry_run(config, probe_steps=3):
    """What `run_experiment(config)` would train, before anything trains or is written: every trained model
    (the black-box sources included) with its step count, and an estimated training time on this machine.

    Each (training, model) pair's step is measured once as `classifier.dry_run` measures a run (built, wrapped
    for FGSM adversarial training and compiled as `run_experiment` builds it; a synthetic batch); the estimate
    sums compile + steps × step time over every trained model. The attacks' evaluation is not counted.

    Returns:
        dict: `config` (resolved), `trainings` (one entry per trained model: `seed`, `training`, `model`,
        `total_steps`, and with `probe_steps` > 0 `seconds_per_step`, `compile_seconds`), `total_steps`, and
        `estimated_train_seconds` (None without a probe or when a step count is unknown).
    """
    config = validate(config)
    probe_steps = validation.integer(probe_steps, "probe_steps", minimum=0)
    planned = []
    for seed in config["seeds"]:
        kinds = []
        for training in config["trainings"]:
            kind = training if config["black_box"]["source_training"] == "matched" else "natural"
            if kind not in kinds and not config["black_box"][f"{kind}_source"]:
                kinds.append(kind)
                planned.append((seed + config["black_box"]["source_seed_offset"], kind, "baseline", "source"))
        planned += [(seed, training, model, "target") for training in config["trainings"] for model in config["models"]]
    measured, trainings = {}, []
    for seed, training, model_name, role in planned:
        cfg = classifier_config(config, model_name, seed)
        entry = {"seed": seed, "training": training, "model": model_name, "role": role,
                 "total_steps": classifier.dry_run(cfg, probe_steps=0)["total_steps"]}
        if probe_steps and (training, model_name) not in measured:
            measured[(training, model_name)] = _measure(classifier.validate(cfg), training, config, probe_steps)
        if probe_steps:
            entry["compile_seconds"], entry["seconds_per_step"] = measured[(training, model_name)]
        trainings.append(entry)
    steps = [t["total_steps"] for t in trainings]
    known = all(s is not None for s in steps)
    estimate = (sum(t["compile_seconds"] + t["seconds_per_step"] * t["total_steps"] for t in trainings)
                if probe_steps and known else None)
    return {"config": config, "trainings": trainings, "total_steps": sum(steps) if known else None,
            "estimated_train_seconds": estimate}


def dry_run_lines(plan):
    """The printout of a `dry_run` plan: one line per trained model, then the totals."""
    lines = []
    for entry in plan["trainings"]:
        timing = (f", {entry['seconds_per_step'] * 1000:.1f} ms a step (compile {entry['compile_seconds']:.1f} s)"
                  if "seconds_per_step" in entry else "")
        lines.append(f"seed {entry['seed']} {entry['training']:8s} {entry['model']:10s} ({entry['role']}): "
                     f"{entry['total_steps']} steps{timing}")
    seconds = plan["estimated_train_seconds"]
    lines.append(f"steps            {plan['total_steps']} in {len(plan['trainings'])} trainings")
    lines.append("estimated time   " + ("unknown" if seconds is None else f"{seconds / 60:.0f} min")
                 + " of training on this machine (attacks, data loading and evaluation not counted)")
    return lines


def _measure(cfg, training, config, probe_steps):
    """`(compile_seconds, seconds_per_step)` of one model's training step, built as `_train` builds it."""
    spec = data_lib.DATASETS[cfg["data"]["name"]]
    channels = spec.input_shape[-1]
    # The channel mean does not change the step's cost; a data set without a published one (mean_subtraction
    # computes it from the images) is timed with mid-grey.
    mean = spec.channel_mean or (127.5,) * channels
    space = _raw_pixel_space(channels)
    model_cfg = dict(cfg["model"])
    model = models_lib.create_model(model_cfg.pop("name"), input_shape=spec.input_shape,
                                    num_classes=spec.num_classes,
                                    **recipe.normalization_kwargs(cfg["data"]["normalization"], mean), **model_cfg)
    if training == "fgsm":
        adv = config["adversarial_training"]
        model = training_lib.adversarial_wrap(model, space, epsilon=adv["epsilon"], mix=adv["mix"])
    model.compile(optimizer=optimization.build_optimizer(cfg["optimizer"], cfg["optimizer"].get("learning_rate")),
                  loss=losses_lib.SparseCrossentropy(), metrics=["accuracy"])
    return recipe.measure_step_time(model, cfg["train"]["batch_size"], spec.input_shape, spec.num_classes,
                                    probe_steps, seed=cfg["seed"])


@evaluation.per_model_tracing()  # one trace per model and attack, not "retracing" (PER_MODEL_FUNCTIONS)
@workdir_lock.held_while_running  # the workdir's lock, taken below before the first write, ends with the run
def run_experiment(config, workdir):
    """Runs DCNet's white-box / black-box adversarial experiment; writes and returns `results.json`.

    Writes to `workdir`: `config.json`, `checkpoints/` (each trained model's
    state), `results.json`, `tables.md` (Tables 7 and 8, mean ± std over seeds,
    the paper's CIFAR-10 numbers in brackets) and `accuracy_vs_epsilon.png` (where matplotlib is installed).

    `results.json` holds `white_box` and `black_box`, each
    `{training: {model: {attack: accuracy %}}}` (training in natural/fgsm, model in
    baseline/sphereconv/ballconv/tanhconv, attack in none/fgsm/bim and the
    `attack.extra` ones; means over seeds), `seeds`, the same nesting per seed
    (`per_seed`) and as standard deviations (`std`), `curve` (ε and the
    accuracies), `deepfool` (when asked for), the data sizes, the settings and the Keras `backend`.

    Args:
        config: ConfigDict or dict following `DEFAULTS`.
        workdir: str, the output folder.

    Returns:
        dict, the contents of `results.json`.

    Raises:
        schema.ConfigError (a ValueError): a bad config (before any data is read).
        DataNotFoundError: the data set's files are missing (before anything is written).
        checkpoint.ConfigMismatchError: `workdir` holds another config's run.
        workdir_lock.WorkdirLockedError (a ValueError): another live process runs in `workdir` (named in the
            message).
    """
    started = time.time()
    config = validate(config)
    checkpoint_lib.check_workdir_config(workdir, config)
    verbose, callbacks = progress.resolve_fit_verbosity(config["train"]["verbose"], sys.stdout)
    attacks = list(evaluation.TABLE_ATTACKS) + list(config["attack"]["extra"])
    budget = {k: config["attack"][k] for k in ("epsilon", "step", "iterations")}
    batch = config["attack"]["batch_size"]
    white = {t: {m: {a: [] for a in attacks} for m in config["models"]} for t in config["trainings"]}
    black = copy.deepcopy(white)
    curves = {t: {m: [] for m in config["models"]} for t in config["trainings"]}
    deepfool, sizes = {}, {}
    checkpoints = os.path.join(workdir, "checkpoints")

    for seed in config["seeds"]:
        base_cfg = classifier.validate(classifier_config(config, "baseline", seed))
        _, test_ds, info = data_lib.get_datasets(base_cfg["data"]["name"], batch_size=batch, seed=seed,
                                                 **classifier.data_kwargs(base_cfg["data"]))
        workdir_lock.acquire(workdir)  # one run per workdir (docs/training.md); again for later seeds: a no-op
        checkpoint_lib.record_config(workdir, config)  # after the data are found: missing archives leave no workdir
        images, labels = _test_arrays(test_ds)
        sizes = {"train_size": info["train_size"], "test_size": int(len(labels))}
        space = _raw_pixel_space(info["input_shape"][-1])
        sources = {}
        for training in config["trainings"]:
            kind = training if config["black_box"]["source_training"] == "matched" else "natural"
            if kind in sources:
                continue
            path = config["black_box"][f"{kind}_source"]
            if path:
                sources[kind] = _raw_pixel_model(saving.load_model(_source_file(path)), base_cfg, info)
            else:
                source_seed = seed + config["black_box"]["source_seed_offset"]
                cfg = classifier.validate(classifier_config(config, "baseline", source_seed))
                sources[kind] = _train(cfg, kind, config, space,
                                       os.path.join(checkpoints, f"source_{kind}_seed{source_seed}"), verbose,
                                       callbacks, (f"[seed {seed}]", f"the black-box source baseline ({kind}, "
                                                                     f"seed {source_seed})"))
        for training in config["trainings"]:
            targets = {}
            for model_name in config["models"]:
                cfg = classifier.validate(classifier_config(config, model_name, seed))
                model = _train(cfg, training, config, space,
                               os.path.join(checkpoints, f"{training}_{model_name}_seed{seed}"), verbose, callbacks,
                               (f"[seed {seed}]", f"{model_name} ({training})"))
                targets[model_name] = model
                accs = evaluation.white_box(model, images, labels, space, attacks=attacks, batch_size=batch, **budget)
                for attack, acc in accs.items():
                    white[training][model_name][attack].append(acc)
                curves[training][model_name].append(evaluation.accuracy_curve(
                    model, images, labels, space, config["curve"]["epsilons"], attack=config["curve"]["attack"],
                    batch_size=batch, **budget))
                print(f"[seed {seed}] white-box {training} {model_name}: "
                      + ", ".join(f"{a} {v:.2f}%" for a, v in accs.items()))
                if training == "natural" and config["deepfool"]["images"]:
                    n = config["deepfool"]["images"]
                    strength = evaluation.deepfool_strength(model, images[:n], labels[:n], space,
                                                            steps=config["deepfool"]["steps"])
                    deepfool.setdefault(model_name, []).append(
                        {k: v for k, v in strength.items() if k not in ("l2", "linf")})
            kind = training if config["black_box"]["source_training"] == "matched" else "natural"
            transfer = evaluation.black_box(sources[kind], targets, images, labels, space, attacks=attacks,
                                            batch_size=batch, **budget)
            for model_name, accs in transfer.items():
                for attack, acc in accs.items():
                    black[training][model_name][attack].append(acc)
            print(f"[seed {seed}] black-box {training}: " + "; ".join(
                f"{m} " + ", ".join(f"{a} {v:.2f}%" for a, v in accs.items()) for m, accs in transfer.items()))

    white_mean, white_std = _mean_std(white)
    black_mean, black_std = _mean_std(black)
    results = {
        "white_box": white_mean,
        "black_box": black_mean,
        "seeds": list(config["seeds"]),
        "std": {"white_box": white_std, "black_box": black_std},
        "per_seed": {"white_box": white, "black_box": black},
        "curve": {"attack": config["curve"]["attack"], "epsilons": config["curve"]["epsilons"],
                  "white_box": {t: {m: np.mean(v, axis=0).tolist() for m, v in per.items()}
                                for t, per in curves.items()}},
        "deepfool": deepfool,
        "data": {"name": config["data"]["name"], **sizes, "normalization": config["data"]["normalization"]},
        "attack": budget,
        "adversarial_training": config["adversarial_training"],
        "black_box_source": config["black_box"]["source_training"],
        "backend": keras.backend.backend(),
        "seconds": time.time() - started,
    }
    json_files.write_json(os.path.join(workdir, "results.json"), results)
    tables = "\n\n".join([
        evaluation.markdown_table(white, f"White-box attacks (Table 7 layout), {config['data']['name']}, "
                                  f"accuracy %, mean ± std over seeds {config['seeds']}; (paper, CIFAR-10)",
                                  attacks=attacks, paper=evaluation.PAPER_TABLE7),
        evaluation.markdown_table(black, f"Black-box attacks (Table 8 layout), {config['data']['name']}, "
                                  f"accuracy %, mean ± std over seeds {config['seeds']}; (paper, CIFAR-10)",
                                  attacks=attacks, paper=evaluation.PAPER_TABLE8),
    ])
    with open(os.path.join(workdir, "tables.md"), "w") as f:
        f.write(tables + "\n")
    plot_path = os.path.join(workdir, "accuracy_vs_epsilon.png")
    if dependencies.installed("matplotlib"):
        evaluation.plot_curves(curves, config["curve"]["epsilons"], plot_path,
                               title=f"White-box {config['curve']['attack'].upper()} accuracy vs ε "
                                     f"({config['data']['name']})")
    else:
        # The plot is optional (matplotlib is not a core dependency); results.json holds the same curve.
        print(f"{plot_path} not written: matplotlib is not installed (pip install matplotlib).")
    logging.info("Results: %s", json.dumps(results["white_box"]))
    print(tables)
    print(f"{sizes.get('train_size')} train / {sizes.get('test_size')} test images; "
          f"{time.time() - started:.0f} s; workdir {workdir}")
    return results


TASK = tasks.Task(validate=validate, run=run_experiment, dry_run=dry_run, dry_run_lines=dry_run_lines,
                  schema=lambda: copy.deepcopy(DEFAULTS))

__all__ = ["BACKENDS", "DEFAULTS", "PAPER_OPERATORS", "SOURCE_TRAININGS", "TASK", "classifier_config", "dry_run",
           "dry_run_lines", "run_experiment", "validate"]
