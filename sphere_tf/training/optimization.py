"""Optimizers and learning-rate schedules by name, for the config-driven runner.

Optimizers (`OPTIMIZERS`): Adam, AdamW (decoupled weight decay, Loshchilov &
Hutter, ICLR 2019), SGD with momentum and Nesterov. SphereNet (NIPS 2017, §4.1)
and the authors' TF code (wy1iu/SphereNet `sphere_resnet/*/train.py`) use SGD
momentum 0.9; DCNet's CIFAR recipe (CVPR 2018, §5.1) uses Adam 1e-3 for the
small nets.

Schedules (`SCHEDULES`), all counted in optimizer steps as the papers count
iterations:

- `constant`: the base learning rate.
- `step`: multiply by `decay_factor` at each of `boundaries` (SphereNet §4.1:
  0.1 at 34K and 54K iterations, stop at 64K), via
  `keras.optimizers.schedules.PiecewiseConstantDecay`.
- `cosine`: `keras.optimizers.schedules.CosineDecay` from the base rate to
  `alpha` × base over `decay_steps` (0: the whole run).
- `plateau`: a constant rate lowered by `keras.callbacks.ReduceLROnPlateau`
  (`decay_factor`, `patience` epochs, `min_lr`, `monitor`).
"""

import keras

from sphere_tf import registry
from sphere_tf import validation

OPTIMIZERS = {
    "adam": keras.optimizers.Adam,
    "adamw": keras.optimizers.AdamW,
    "sgd": keras.optimizers.SGD,
}
SCHEDULES = {}


def register_optimizer(name, cls):
    """Adds an optimizer class `cls(learning_rate=..., **kwargs)` under `name`."""
    return registry.register(OPTIMIZERS, name, cls, "optimizer")


def register_schedule(name, fn):
    """Adds `fn(learning_rate, spec, total_steps) -> float or LearningRateSchedule` under `name`."""
    return registry.register(SCHEDULES, name, fn, "schedule")


def _constant(learning_rate, spec, total_steps):
    return learning_rate


def check_schedule(spec):
    """Checks every option of the `schedule` section that it holds, whichever schedule `name` uses it, naming the
    key (`schedule.decay_factor`): a wrong value in an option the schedule ignores today fails when the config
    switches schedule, hours later.

    Raises:
        ValueError: a bad option, naming it.
    """
    boundaries = spec.get("boundaries", [])
    if not isinstance(boundaries, (list, tuple)):
        raise validation.invalid_argument("schedule.boundaries", "a list of steps (ints > 0)", boundaries)
    boundaries = [validation.positive_int(b, f"schedule.boundaries[{i}]", maximum=validation.MAX_INT32)
                  for i, b in enumerate(boundaries)]
    if sorted(set(boundaries)) != boundaries:
        raise validation.invalid_argument("schedule.boundaries", "strictly increasing steps", boundaries)
    validation.positive_float(spec.get("decay_factor", 0.1), "schedule.decay_factor")
    validation.integer(spec.get("decay_steps", 0), "schedule.decay_steps", minimum=0, maximum=validation.MAX_INT32)
    validation.real(spec.get("alpha", 0.0), "schedule.alpha", low=0.0, high=1.0)
    validation.integer(spec.get("patience", 10), "schedule.patience", minimum=0, maximum=validation.MAX_INT32)
    validation.non_negative_float(spec.get("min_lr", 0.0), "schedule.min_lr")
    validation.text(spec.get("monitor", "loss"), "schedule.monitor")


def _step(learning_rate, spec, total_steps):
    boundaries = [validation.positive_int(b, f"schedule.boundaries[{i}]") for i, b in
                  enumerate(spec.get("boundaries") or ())]
    if not boundaries:
        raise validation.invalid_argument("schedule.boundaries", "a non-empty list of steps for schedule.name='step'",
                                          [])
    if sorted(set(boundaries)) != boundaries:
        raise validation.invalid_argument("schedule.boundaries", "strictly increasing steps", boundaries)
    factor = validation.positive_float(spec.get("decay_factor", 0.1), "schedule.decay_factor")
    values = [learning_rate * factor**i for i in range(len(boundaries) + 1)]
    return keras.optimizers.schedules.PiecewiseConstantDecay(boundaries, values)


def _cosine(learning_rate, spec, total_steps):
    decay_steps = validation.integer(spec.get("decay_steps", 0), "schedule.decay_steps", minimum=0) or total_steps
    alpha = validation.real(spec.get("alpha", 0.0), "schedule.alpha", low=0.0, high=1.0)
    return keras.optimizers.schedules.CosineDecay(learning_rate, decay_steps=decay_steps, alpha=alpha)


register_schedule("constant", _constant)
register_schedule("step", _step)
register_schedule("cosine", _cosine)
register_schedule("plateau", _constant)  # the callback from `schedule_callbacks` lowers it


def build_learning_rate(learning_rate, spec, total_steps):
    """The learning rate (float or schedule) for `spec = {'name': ..., **options}`.

    Args:
        learning_rate: float > 0, the base rate (`optimizer.learning_rate`).
        spec: dict, the `schedule` section.
        total_steps: int > 0, the run's optimizer steps (cosine's default span).

    Returns:
        float or `keras.optimizers.schedules.LearningRateSchedule`.
    """
    learning_rate = validation.positive_float(learning_rate, "optimizer.learning_rate")
    fn = registry.lookup(SCHEDULES, spec.get("name", "constant"), "schedule.name")
    check_schedule(spec)
    return fn(learning_rate, spec, validation.positive_int(total_steps, "total_steps"))


def schedule_callbacks(spec):
    """Keras callbacks a schedule needs (`plateau`: `ReduceLROnPlateau`), else []."""
    if spec.get("name") != "plateau":
        return []
    return [keras.callbacks.ReduceLROnPlateau(
        monitor=spec.get("monitor", "loss"),
        factor=validation.real(spec.get("decay_factor", 0.1), "schedule.decay_factor", low=0.0, high=1.0,
                               low_open=True, high_open=True),
        patience=validation.integer(spec.get("patience", 10), "schedule.patience", minimum=0),
        min_lr=validation.non_negative_float(spec.get("min_lr", 0.0), "schedule.min_lr"),
        verbose=0,
    )]


def build_optimizer(spec, learning_rate):
    """A Keras optimizer from `spec = {'name': ..., 'learning_rate': ..., **kwargs}`.

    Args:
        spec: dict, the `optimizer` section; keys other than `name` and
            `learning_rate` go to the optimizer class (e.g. `momentum`,
            `nesterov`, `weight_decay`, `beta_1`).
        learning_rate: float or schedule (from `build_learning_rate`).

    Raises:
        ValueError: unknown name or option, naming `optimizer.<key>`.
    """
    options = dict(spec)
    cls = registry.lookup(OPTIMIZERS, options.pop("name", None), "optimizer.name")
    options.pop("learning_rate", None)
    try:
        return cls(learning_rate=learning_rate, **options)
    except (TypeError, ValueError) as error:
        raise ValueError(f"Invalid `optimizer` option for {spec.get('name')!r} ({sorted(options)}): {error}") from None


def current_learning_rate(optimizer):
    """float, the learning rate the optimizer applies at its current step."""
    rate = optimizer.learning_rate
    return float(keras.ops.convert_to_numpy(rate))
