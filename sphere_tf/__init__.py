"""sphere_tf: deep learning on the hypersphere for Keras 3 / TensorFlow 2.

Subpackages: `adversarial` (FGSM/BIM/PGD attacks, adversarial training, DCNet
Tables 7/8), `ops` (the maths: angles, angular and magnitude functions, margins,
orthogonalisations, the layers' fused hot path), `kernels` (the C++ training-path
kernels and their build), `layers`, `losses`, `regularizers`, `optimizers`,
`metrics`, `evaluation` (face verification), `callbacks`, `energy`, `initializers`, `training`, `models`, `data`,
`export`, `registry` (name registries), `validation` (argument checks) and
`testing` (reference helpers for tests, imported on its own).

Docstrings cite equations by key: `[S-n]` SphereNet (Deep Hyperspherical
Learning, NIPS 2017) eq. n, `[D-n]` DCNet (Decoupled Networks, CVPR 2018) eq. n,
`[T-c.n]` W. Liu's 2020 PhD thesis (Deep Representation Learning on Hypersphere)
eq. c.n, with § for sections; docs/citations.md lists every key and the authors'
repositories cited by file.
"""

from sphere_tf import adversarial
from sphere_tf import callbacks
from sphere_tf import data
from sphere_tf import energy
from sphere_tf import evaluation
from sphere_tf import export
from sphere_tf import initializers
from sphere_tf import kernels
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

__version__ = "0.1.0"
