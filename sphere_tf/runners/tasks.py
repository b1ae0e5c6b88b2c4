"""The runner's tasks: what a config can ask the runner to do (TF Model Garden's `Task`, big_vision's one `train.py`).

A task is the handful of functions the runner calls on a config: `validate` (the config's keys over the task's
schema, checked once, before any data is read; plain dicts back), `run` (train and evaluate into a workdir; the
results dict back), `dry_run` / `dry_run_lines` (what a run would do and roughly how long it would take, nothing
written), and `schema` (every key a config of the task may set, for `--config.<key>=` overrides). A config names
its task in its top-level `task` key (default `classification`).

The tasks of the package live in their own modules and are imported on first use, so that `runners.schema`,
`runners.recipe` and `runners.sweep` load without TensorFlow (`bench/gpu`); a user's task is one
`register_task(name, Task(...))`.
"""

import dataclasses
import importlib
from typing import Callable

from sphere_tf import registry
from sphere_tf.runners import schema

TASK_KEY = "task"
DEFAULT_TASK = "classification"


@dataclasses.dataclass(frozen=True)
class Task:
    """One kind of run: the functions the runner calls on a config of it.

    Attributes:
        validate: `config -> config`: the config over the task's schema with its defaults, checked (a
            `schema.ConfigError` names the bad key); no data read, no model built.
        run: `(config, workdir) -> results`: trains and evaluates into `workdir` (resuming what it holds).
        dry_run: `(config, probe_steps) -> plan`: the resolved config and the run's size, nothing written.
        dry_run_lines: `plan -> [str]`: the plan's printout.
        schema: `() -> dict`: every section and key of the task's config with its default.
        result_lines: `results -> [str]`: what the runner's main prints after a run, beyond what `run` printed
            (none by default).
    """

    validate: Callable
    run: Callable
    dry_run: Callable
    dry_run_lines: Callable
    schema: Callable
    result_lines: Callable = lambda results: []


# name -> a `Task`, or the module whose `TASK` it is (imported on first use).
TASKS = {
    "classification": "sphere_tf.runners.classifier",
    "adversarial": "sphere_tf.runners.adversarial",
    "face": "sphere_tf.runners.face",
}


def register_task(name, task):
    """Adds `task` (a `Task`) as `name`; a taken name raises `KeyError`."""
    if not isinstance(task, Task):
        raise TypeError(f"register_task({name!r}, task): task must be a sphere_tf.runners.Task, got {task!r}.")
    return registry.register(TASKS, name, task, "task")


def list_tasks():
    """The registered task names, sorted."""
    return sorted(TASKS)


def get_task(name):
    """The task registered as `name` (unknown names list the valid ones)."""
    task = registry.lookup(TASKS, name, "task")
    if isinstance(task, str):
        task = TASKS[name] = importlib.import_module(task).TASK
    return task


def split_task(config):
    """`(task name, config without its task key)` of a config (a ConfigDict or a dict), the config a plain dict."""
    config = schema.plain_config(config)
    if not isinstance(config, dict):
        raise schema.ConfigError(f"A config must be a dict or ConfigDict, got {type(config).__name__}.")
    name = config.pop(TASK_KEY, DEFAULT_TASK)
    try:
        registry.lookup(TASKS, name, "task")
    except ValueError as error:
        raise schema.ConfigError(f"Invalid config key 'task': {error}") from None
    return name, config


def without_task_key(config, name):
    """The plain config without its `task` key, which must be absent or `name` (a task's own `validate` takes a
    config that still names it)."""
    config = schema.plain_config(config)
    if isinstance(config, dict) and TASK_KEY in config:
        config = dict(config)
        if config.pop(TASK_KEY) != name:
            raise schema.ConfigError(f"Invalid config key 'task': this is the {name!r} task's validation, and the "
                                     f"config names another task; run it with `sphere_tf.runners.run`.")
    return config


__all__ = ["DEFAULT_TASK", "TASKS", "TASK_KEY", "Task", "get_task", "list_tasks", "register_task", "split_task",
           "without_task_key"]
