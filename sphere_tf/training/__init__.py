"""Training with the DCNet tricks (weight projection, weighted gradients) and pretraining init.

`SphereModel` / `SphereSequential` / `SphereTrainingMixin` run weight projection
[D §4.1] and weighted gradients [D-18] inside `train_step`; `wrap` turns an
existing functional or Sequential model into a `SphereModel`;
`initialize_from_pretrained` copies a trained Conv2D/Dense model into its
decoupled twin [D §4.3]. `fit_resumable` / `StepCheckpoint` checkpoint every N
steps and resume exactly (`training.checkpoint`); `make_strategy` builds the
`tf.distribute` strategy a run trains under (`training.distribute`); `EpochLogger` /
`fit_verbosity` print one line per epoch where no terminal shows a progress bar
(`training.progress`). The config-driven loop lives in `training.classifier`.
"""

from sphere_tf.training.checkpoint import ConfigMismatchError
from sphere_tf.training.checkpoint import StepCheckpoint
from sphere_tf.training.checkpoint import callback_states
from sphere_tf.training.checkpoint import check_workdir_config
from sphere_tf.training.checkpoint import fit_resumable
from sphere_tf.training.checkpoint import latest_step
from sphere_tf.training.checkpoint import positioned_stream
from sphere_tf.training.checkpoint import record_config
from sphere_tf.training.checkpoint import regularizer_states
from sphere_tf.training.distribute import STRATEGIES
from sphere_tf.training.distribute import checkpoint_directory
from sphere_tf.training.distribute import configure_logical_cpus
from sphere_tf.training.distribute import in_multi_worker_mode
from sphere_tf.training.distribute import is_chief
from sphere_tf.training.distribute import make_strategy
from sphere_tf.training.distribute import distributed_fit
from sphere_tf.training.distribute import parse_tf_config
from sphere_tf.training.model import SphereModel
from sphere_tf.training.model import SphereSequential
from sphere_tf.training.model import SphereTrainingMixin
from sphere_tf.training.model import find_operator_layers
from sphere_tf.training.model import project_kernel
from sphere_tf.training.model import wrap
from sphere_tf.training.pretrain import TransferReport
from sphere_tf.training.pretrain import initialize_from_pretrained
from sphere_tf.training.pretrain import parameterised_layers
from sphere_tf.training.progress import EpochLogger
from sphere_tf.training.progress import fit_verbosity
from sphere_tf.training.progress import resolve_fit_verbosity
from sphere_tf.training.runtime import bfc_cpu_allocator_active
from sphere_tf.training.runtime import cpu_memory_info
from sphere_tf.training.runtime import use_bfc_cpu_allocator
