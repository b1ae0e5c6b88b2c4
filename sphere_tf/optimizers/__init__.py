"""Optimizers: orthogonality-preserving Cayley SGD for OPT, the routing wrapper and the Partial FC wrapper."""

from sphere_tf.optimizers.cayley_sgd import CayleySGD
from sphere_tf.optimizers.cayley_sgd import cayley_sgd_update
from sphere_tf.optimizers.routing import OPTOptimizer
from sphere_tf.optimizers.routing import is_rotation_variable
from sphere_tf.optimizers.partial_fc import PartialFCOptimizer
from sphere_tf.optimizers.partial_fc import is_partial_fc_variable
