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

# Subpackages load on first use (`sphere_tf.layers`, or the attribute `sphere_tf.layers`): the core
# (ops, layers, losses, regularizers, models, ...) imports with Keras alone on every backend, while data,
# export, evaluation and the adversarial toolkit need TensorFlow (and cleverhans, foolbox, matplotlib,
# tensorflow-datasets) only when they are used.
_SUBPACKAGES = (
    "adversarial", "backends", "callbacks", "data", "energy", "evaluation", "export", "initializers", "layers",
    "losses", "metrics", "models", "ops", "optimizers", "registry", "regularizers", "training", "validation",
)

__version__ = "0.1.0"


def __getattr__(name):
    if name in _SUBPACKAGES:
        return importlib.import_module(f"sphere_tf.{name}")
    raise AttributeError(f"module 'sphere_tf' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_SUBPACKAGES))
