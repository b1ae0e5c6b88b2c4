"""The runner: one config-driven loop above the library, with the kinds of run as tasks plugged into it.

`run(config, workdir)` reads the config's `task` (`classification` by default; `adversarial`, `face`; see
`runners.tasks`), checks the config once over that task's schema (`runners.schema`, docs/runner.md) and runs it:

* `classification` (`runners.classifier`): the train-and-evaluate loop every task builds on (data, model,
  checkpoints and exact resume, strategies, periodic evaluation, export);
* `adversarial` (`runners.adversarial`): DCNet's white-box / black-box experiment (Tables 7 and 8), each model
  trained by the classification loop;
* `face` (`runners.face`): the classification loop on an identity folder, then LFW-format verification;
* `runners.sweep` runs one config file over variants and seeds and aggregates the results.

The library below (`sphere_tf.layers`, `models`, `training`, `evaluation`, `adversarial`, `export`, ...) reads no
config: the runner turns configs into its arguments. `trainers/` holds the absl mains.
"""

from sphere_tf.runners.schema import ConfigError
from sphere_tf.runners.tasks import TASKS
from sphere_tf.runners.tasks import Task
from sphere_tf.runners.tasks import get_task
from sphere_tf.runners.tasks import list_tasks
from sphere_tf.runners.tasks import register_task
from sphere_tf.runners.tasks import split_task


def validate(config):
    """`(task name, resolved config)`: the config checked once over its task's schema, defaults filled in.

    Raises:
        ConfigError (a ValueError): an unknown task or key, or a bad value, naming the dotted key.
    """
    name, config = split_task(config)
    return name, get_task(name).validate(config)


def run(config, workdir):
    """Runs the config's task into `workdir` (resuming what it holds); returns the task's results dict."""
    name, config = split_task(config)
    return get_task(name).run(config, workdir)


def dry_run(config, probe_steps=3):
    """What `run(config, ...)` would do, nothing trained or written: the task's plan, with its `task` name."""
    name, config = split_task(config)
    return {"task": name, **get_task(name).dry_run(config, probe_steps=probe_steps)}


def dry_run_lines(plan):
    """The printout of a `dry_run` plan."""
    return get_task(plan["task"]).dry_run_lines(plan)


__all__ = ["TASKS", "ConfigError", "Task", "dry_run", "dry_run_lines", "get_task", "list_tasks", "register_task",
           "run", "split_task", "validate"]
