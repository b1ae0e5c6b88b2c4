"""Config fuzzing: every leaf key of each runner task's config (classification, adversarial, face), with
hypothesis-generated wrong types and values, through the runner's own checks.

The keys are each task's schema (`runners.get_task(task).schema()`, every section and key with its default),
flattened: a new key is fuzzed as soon as the schema has it. The values are picked by the type of the key's
default (`_fuzzing.by_default`), with a small table (`CHOICES`) for the keys whose valid values are registry names.
Each example is the whole default config with one leaf replaced, given to the runner's entry points: `validate`
(every task) and, for the classification task, `dry_run(probe_steps=0)` (the run's length from the config, nothing
built or read: what `--dry_run` prints). The adversarial task's dry run dry-runs ten classifier configs (half a
second), the face task's builds the model: their `validate` runs each section's checks, classifier ones included.

Each example must either be accepted, keeping the value it was given (no bool for a number, no string for a number
or a bool, no float cut to an int, nothing non-finite, negative or past int32: every numeric setting of the runner
is a size, count, rate, probability or magnitude), or raise one `ConfigError` (a `ValueError`) whose message names
the dotted key (`train.batch_size`), before any data is read.

The fast subset (CI) draws the key per example with the hypothesis profile's examples per task (`sphere_tf`: 25 on
TensorFlow, `backends`: 8 on JAX and PyTorch); the slow test fuzzes every key with that many examples each.
"""

import collections
import copy
import functools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sphere_tf import dependencies
from sphere_tf import runners
from sphere_tf.adversarial import evaluation as adversarial_evaluation
from sphere_tf.adversarial import gradient_attacks
from sphere_tf.data import datasets
from sphere_tf.data import label_noise
from sphere_tf.data import normalization
from sphere_tf.models import operators
from sphere_tf.ops import angular as angular_lib
from sphere_tf.ops import magnitude as magnitude_lib
from sphere_tf.runners import schema
from sphere_tf.training import distribute
from sphere_tf.training import optimization
from tests.faults import _fuzzing as fuzz

CATEGORY = "config fuzzing"
TASKS = ("classification", "adversarial", "face")
# The task's name in the tallies (docs/reliability.md): the runner module it validates.
LABELS = {"classification": "classifier", "adversarial": "adversarial", "face": "face"}
# Keys whose str default stands for an identifier that also takes other types (an int verbosity, a batch count,
# a dict of layer-name pairs), besides a str.
IDENTIFIER_KEYS = {"train.verbose", "evaluation.precise_bn_batches", "paradigm.pretrained_match"}
# Valid values that need knowledge of the package (its registries); each key also gets the generic wrong values of
# its default's type. Operator keys of the adversarial task (`operators.<model>.<key>`) go by their last part.
CHOICES = {
    "data.name": sorted(datasets.DATASETS),
    "data.source": ["auto", *datasets.SOURCES],
    "data.pipeline": ["auto", *datasets.PIPELINES],
    "data.augmentation": list(datasets.augmentation_names(datasets.resolve_pipeline(None))),
    "data.eval_augmentation": list(datasets.augmentation_names(datasets.resolve_pipeline(None))),
    "data.normalization": sorted(normalization.NORMALIZATIONS),
    "data.label_mode": ["fine", "coarse"],
    "data.label_noise_type": [*label_noise.LABEL_NOISE_TYPES, "pairflip"],
    "data.class_limits": [[5000] * 10, [5000] * 9 + [50], [10], [-1] * 10],
    "model.name": ["small_cnn", "cnn9", "resnet18", "sphereface4", "opt_mlp", "mnist_2d"],
    "loss.name": list(schema.LOSSES),
    "loss.hinge_norm": ["l1", "l2"],
    "optimizer.name": sorted(optimization.OPTIMIZERS),
    "schedule.name": sorted(optimization.SCHEDULES),
    "schedule.boundaries": [[100, 200], [200, 100], [0], [1.5]],
    "schedule.monitor": ["loss", "val_loss", "accuracy"],
    "train.verbose": list(schema.FIT_VERBOSITY),
    "train.energy_layers": [["conv*"], "dense*", [], ["no_such_layer"]],
    "evaluation.precise_bn_batches": ["auto", 0, 5],
    "evaluation.minority_classes": [[0, 1], [10], [-1], [0, 0]],
    "paradigm.pretrained_match": ["position", "name", {"conv": "conv"}],
    "mixed_precision": list(schema.MIXED_PRECISION),
    "strategy": list(distribute.STRATEGIES),
    "regularizers": [[{"name": "mhe", "layers": "all"}], [{"name": "l2", "factor": 1e-4}], [{"name": "nonexistent"}],
                     [{}], ["mhe"]],
    "seeds": [[0, 1], [0, 0], [-1], [], [2 ** 40]],
    "models": [list(adversarial_evaluation.MODELS), ["baseline"], ["nonexistent"], []],
    "trainings": [list(adversarial_evaluation.TRAININGS), ["natural"], ["nonexistent"]],
    "attack.extra": [[], ["pgd"], ["nonexistent"], ["fgsm"]],
    "curve.attack": sorted(gradient_attacks.ATTACKS),
    "curve.epsilons": [[0.0, 8.0], [], [-1.0]],
    "black_box.source_training": ["natural", "matched"],
    "layer": list(operators.KINDS),
    "magnitude": sorted(magnitude_lib.MAGNITUDE_FNS),
    "angular": sorted(angular_lib.ANGULAR_FNS),
    "verification.far_targets": [[1e-3], [], [0.0], [1.5], [1e-3, 1e-3]],
    "training_set.image_shape": [[112, 96, 3], [112, 96], [0, 96, 3]],
}


@functools.lru_cache(maxsize=None)
def _schema(task):
    return runners.get_task(task).schema()


def leaves(tree, prefix=""):
    """`(dotted key, default)` of every leaf of a config tree (a section with keys is walked; an empty dict or a
    list is a leaf)."""
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            yield from leaves(value, dotted + ".")
        else:
            yield dotted, value


def base_config(task):
    """The task's whole default config, every key explicit (an example differs from it in one leaf); the export
    off where TensorFlow is not installed (the SavedModel export needs it, and `validate` says so)."""
    config = copy.deepcopy(_schema(task))
    if "export" in config and not dependencies.installed("tensorflow"):
        config["export"] = False
    return config


def with_leaf(config, dotted, value):
    config = copy.deepcopy(config)
    *sections, key = dotted.split(".")
    node = config
    for section in sections:
        node = node[section]
    node[key] = value
    return config


def leaf(config, dotted):
    node = config
    for part in dotted.split("."):
        node = node[part]
    return node


def value_strategy(dotted, default):
    """Values to try for the key: the wrong values of its default's type (and of every other), and the valid
    values `CHOICES` knows (by the dotted key, or by its last part for the adversarial task's operators)."""
    strategies = [fuzz.by_default(default)]
    choices = CHOICES.get(dotted, CHOICES.get(dotted.rsplit(".", 1)[-1]) if dotted.startswith("operators.") else None)
    if choices:
        strategies.insert(0, fuzz.fresh(choices))
    return st.one_of(*strategies)


def entry_points(task, config):
    """The resolved config of the runner's checks: `validate`, and the classification task's dry run."""
    resolved = runners.validate({"task": task, **config})[1]
    if task == "classification":
        runners.dry_run({"task": task, **config}, probe_steps=0)
    return resolved


def check_config(task, dotted, value):
    """One example: the task's default config with `dotted` set to `value` is either accepted, keeping the value
    (`_fuzzing.check_accepted`, nothing negative), or refused by one ValueError / TypeError naming `dotted`."""
    default = leaf(_schema(task), dotted)
    config = with_leaf(base_config(task), dotted, value)
    try:
        resolved = entry_points(task, config)
    except fuzz.CLEAN_ERRORS as error:
        assert fuzz.names(str(error), dotted), (
            f"{task}: {dotted}={value!r} raised {type(error).__name__} without naming {dotted!r}: {error}")
        return "refused"
    fuzz.check_accepted(dotted, value, default, leaf(resolved, dotted), identifier=dotted in IDENTIFIER_KEYS,
                        non_negative=True)
    return "accepted"


def config_keys(task):
    return [dotted for dotted, _ in leaves(_schema(task))]


def test_every_task_is_fuzzed():
    """A new task of the runner is fuzzed as soon as it is registered; the base configs are valid."""
    assert sorted(TASKS) == runners.list_tasks()
    for task in TASKS:
        entry_points(task, base_config(task))
        assert len(config_keys(task)) > 20


@pytest.mark.parametrize("task", TASKS)
def test_config_fuzzing(task, tally):
    """The profile's examples for the task, each with one leaf key drawn and fuzzed."""
    keys = config_keys(task)
    tried = collections.Counter()

    @given(st.data())
    def fuzz_one(data):
        dotted = data.draw(st.sampled_from(keys), label="key")
        value = data.draw(value_strategy(dotted, leaf(_schema(task), dotted)), label="value")
        check_config(task, dotted, value)
        tried[dotted] += 1

    fuzz_one()
    for dotted, count in sorted(tried.items()):
        tally(CATEGORY, f"{LABELS[task]}: {dotted}", tried=count)


def _all_keys():
    return [(task, dotted) for task in TASKS for dotted in config_keys(task)]


@pytest.mark.slow
@pytest.mark.parametrize("task,dotted", _all_keys())
def test_config_fuzzing_every_key(task, dotted, tally):
    """The full run: the profile's examples for every leaf key of every task."""
    tried = []

    @given(value_strategy(dotted, leaf(_schema(task), dotted)))
    def fuzz_one(value):
        tried.append(check_config(task, dotted, value))

    fuzz_one()
    tally(CATEGORY, f"{LABELS[task]}: {dotted}", tried=len(tried))
