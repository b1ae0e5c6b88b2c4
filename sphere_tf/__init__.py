"""sphere_tf: deep learning on the hypersphere for Keras 3 / TensorFlow 2.

Subpackages: `adversarial` (FGSM/BIM/PGD attacks, adversarial training, DCNet
Tables 7/8), `ops` (the maths: angles, angular and magnitude functions, margins,
orthogonalisations, the layers' fused hot path), `backends` (backend plug-ins: the TensorFlow accelerator with its C++ training-path kernels), `layers`, `losses`, `regularizers`, `optimizers`,
`metrics`, `evaluation` (face verification), `callbacks`, `energy`, `initializers`, `training`, `models`, `data`,
`export`, `registry` (name registries), `validation` (argument checks), `walk` (a model's layers and calls)
`testing` (reference helpers for tests), `runners` (configs in, runs out), `configs` (the papers' experiments as
runner configs, by name), `saving` (the release recorded in serialized objects) and `version`.

Docstrings cite equations by key: `[S-n]` SphereNet (Deep Hyperspherical
Learning, NIPS 2017) eq. n, `[D-n]` DCNet (Decoupled Networks, CVPR 2018) eq. n,
`[T-c.n]` W. Liu's 2020 PhD thesis (Deep Representation Learning on Hypersphere)
eq. c.n, with § for sections; docs/citations.md lists every key and the authors'
repositories cited by file.
"""

import importlib

# `import sphere_tf` registers every Keras class of the package with `keras.saving` (so that
# `keras.saving.load_model` reads a `.keras` file after it, on TensorFlow, JAX or PyTorch, TensorFlow installed or
# not): the subpackages that define layers, losses, regularizers, initializers, optimizers, metrics, callbacks
# and training models import with the package. Everything else loads on first use (`sphere_tf.models`, or
# `from sphere_tf import export`): the TensorFlow-only parts (data pipelines, export, face evaluation, the
# adversarial toolkit) and their optional libraries (cleverhans, foolbox, matplotlib, tensorflow-datasets,
# tf2onnx), the backend plug-ins, the model zoo and the helper modules.
from sphere_tf import dependencies

dependencies.check_keras_backend()  # a hint naming KERAS_BACKEND, not a ModuleNotFoundError from inside Keras

from sphere_tf import callbacks  # noqa: E402
from sphere_tf import initializers  # noqa: E402
from sphere_tf import layers  # noqa: E402
from sphere_tf import losses  # noqa: E402
from sphere_tf import metrics  # noqa: E402
from sphere_tf import optimizers  # noqa: E402
from sphere_tf import regularizers  # noqa: E402
from sphere_tf import training  # noqa: E402
from sphere_tf import version  # noqa: E402

_LAZY_SUBMODULES = ("adversarial", "backends", "configs", "data", "energy", "evaluation", "export", "json_files",
                    "models", "ops", "registry", "runners", "saving", "testing", "validation", "walk")

__version__ = version.__version__  # written once, in sphere_tf/version.py


def __getattr__(name):
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"sphere_tf.{name}")
    raise AttributeError(f"module 'sphere_tf' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY_SUBMODULES))
