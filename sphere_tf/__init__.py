"""sphere_tf: deep learning on the hypersphere for Keras 3 / TensorFlow 2.

Subpackages: `adversarial` (FGSM/BIM/PGD attacks, adversarial training, DCNet
Tables 7/8), `ops` (the maths: angles, angular and magnitude functions, margins,
orthogonalisations, the layers' fused hot path), `backends` (backend plug-ins: the TensorFlow accelerator with its C++ training-path kernels), `layers`, `losses`, `regularizers`, `optimizers`,
`metrics`, `evaluation` (face verification), `callbacks`, `energy`, `initializers`, `training`, `models`, `data`,
`export`, `registry` (name registries), `validation` (argument checks) and
`testing` (reference helpers for tests, imported on its own).

Docstrings cite equations by key: `[S-n]` SphereNet (Deep Hyperspherical
Learning, NIPS 2017) eq. n, `[D-n]` DCNet (Decoupled Networks, CVPR 2018) eq. n,
`[T-c.n]` W. Liu's 2020 PhD thesis (Deep Representation Learning on Hypersphere)
eq. c.n, with § for sections; docs/citations.md lists every key and the authors'
repositories cited by file.
"""

import importlib

# The backend-neutral core imports with the package, so every layer, loss, regularizer, optimizer and callback is
# registered for `keras.saving.load_model` after `import sphere_tf` (on TensorFlow, JAX or PyTorch, TensorFlow
# installed or not). The parts that need TensorFlow (data pipelines, export, face evaluation, the adversarial
# toolkit and their third-party libraries: cleverhans, foolbox, matplotlib, tensorflow-datasets) and the backend
# plug-ins load on first use: `sphere_tf.export` or the attribute `sphere_tf.export`.
from sphere_tf import callbacks
from sphere_tf import energy
from sphere_tf import initializers
from sphere_tf import layers
from sphere_tf import losses
from sphere_tf import metrics
from sphere_tf import models
from sphere_tf import ops
from sphere_tf import optimizers
from sphere_tf import registry
from sphere_tf import regularizers
from sphere_tf import training
from sphere_tf import validation

_LAZY_SUBPACKAGES = ("adversarial", "backends", "data", "evaluation", "export")

__version__ = "0.1.0"


def __getattr__(name):
    if name in _LAZY_SUBPACKAGES:
        return importlib.import_module(f"sphere_tf.{name}")
    raise AttributeError(f"module 'sphere_tf' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY_SUBPACKAGES))
