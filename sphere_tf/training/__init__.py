"""Training with the DCNet tricks (weight projection, weighted gradients) and pretraining init.

`SphereModel` / `SphereSequential` / `SphereTrainingMixin` run weight projection
[D §4.1] and weighted gradients [D-18] inside `train_step`; `wrap` turns an
existing functional or Sequential model into a `SphereModel`;
`initialize_from_pretrained` copies a trained Conv2D/Dense model into its
decoupled twin [D §4.3]. `fit_resumable` / `StepCheckpoint` checkpoint every N
steps and resume exactly (`training.checkpoint`); `make_strategy` builds the
`tf.distribute` strategy a run trains under (`training.distribute`); `EpochLogger` /
`fit_verbosity` print one line per epoch where no terminal shows a progress bar
(`training.progress`). The config-driven loop lives in `runners.classifier`.

The training paradigms (`model`, `pretrain`) need Keras alone and load with the package; the run machinery
(checkpoints, strategies, progress output, the allocator) loads on first use, since parts of it need TensorFlow;
where TensorFlow is not installed those names raise one `ImportError` saying so (`sphere_tf.dependencies`).
"""


from sphere_tf import dependencies
from sphere_tf import deprecation
from sphere_tf.training.model import SphereModel
from sphere_tf.training.model import SphereSequential
from sphere_tf.training.model import SphereTrainingMixin
from sphere_tf.training.model import find_operator_layers
from sphere_tf.training.model import project_kernel
from sphere_tf.training.model import wrap
from sphere_tf.training.pretrain import TransferReport
from sphere_tf.training.pretrain import initialize_from_pretrained
from sphere_tf.training.pretrain import parameterised_layers

# name -> the module that defines it (imported on first access).
_LAZY = {
    "ConfigMismatchError": "sphere_tf.training.checkpoint",
    "CorruptCheckpointError": "sphere_tf.training.checkpoint",
    "DiskFullError": "sphere_tf.training.checkpoint",
    "NonFiniteError": "sphere_tf.training.checkpoint",
    "WorkdirLockedError": "sphere_tf.training.workdir_lock",
    "StepCheckpoint": "sphere_tf.training.checkpoint",
    "callback_states": "sphere_tf.training.checkpoint",
    "check_workdir_config": "sphere_tf.training.checkpoint",
    "fit_resumable": "sphere_tf.training.checkpoint",
    "latest_step": "sphere_tf.training.checkpoint",
    "positioned_stream": "sphere_tf.training.checkpoint",
    "record_config": "sphere_tf.training.checkpoint",
    "regularizer_states": "sphere_tf.training.checkpoint",
    "STRATEGIES": "sphere_tf.training.distribute",
    "checkpoint_directory": "sphere_tf.training.distribute",
    "configure_logical_cpus": "sphere_tf.training.distribute",
    "in_multi_worker_mode": "sphere_tf.training.distribute",
    "is_chief": "sphere_tf.training.distribute",
    "make_strategy": "sphere_tf.training.distribute",
    "distributed_fit": "sphere_tf.training.distribute",
    "parse_tf_config": "sphere_tf.training.distribute",
    "EpochLogger": "sphere_tf.training.progress",
    "fit_verbosity": "sphere_tf.training.progress",
    "resolve_fit_verbosity": "sphere_tf.training.progress",
    "bfc_cpu_allocator_active": "sphere_tf.training.runtime",
    "cpu_memory_info": "sphere_tf.training.runtime",
    "request_bfc_cpu_allocator": "sphere_tf.training.runtime",
    "use_bfc_cpu_allocator": "sphere_tf.training.runtime",
}


# The config-driven runner moved above the library, to `sphere_tf.runners` (in 0.2.0); the old paths go in
# MOVED_REMOVED_IN.
MOVED = {
    "classifier": "sphere_tf.runners.classifier",
    "recipe": "sphere_tf.runners.recipe",
    "sweep": "sphere_tf.runners.sweep",
}
MOVED_REMOVED_IN = "0.4.0"


def _lazy(name):
    if name in _LAZY:
        return getattr(dependencies.import_for(f"{__name__}.{name}", _LAZY[name]), name)
    raise AttributeError(f"module 'sphere_tf.training' has no attribute {name!r}")


__getattr__ = deprecation.moved_names(__name__, MOVED, _lazy, removed_in=MOVED_REMOVED_IN)


def __dir__():
    return sorted(list(globals()) + list(_LAZY))
