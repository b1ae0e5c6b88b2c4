"""Optimizers: orthogonality-preserving Cayley SGD for OPT and the routing wrapper."""

from sphere_tf.optimizers.cayley_sgd import CayleySGD
from sphere_tf.optimizers.cayley_sgd import cayley_sgd_update
from sphere_tf.optimizers.routing import OPTOptimizer
from sphere_tf.optimizers.routing import is_rotation_variable
