"""Whether a graph is being traced for XLA (`in_xla_context`).

The layers and RP-CoMHE run some of their elementwise work as small
`tf.function(jit_compile=True)` clusters inside an ordinary TensorFlow step.
Inside a function that XLA compiles as a whole (`tf.function(jit_compile=True)`,
Keras `jit_compile=True`) they use plain ops instead: XLA fuses those itself, and
some TensorFlow kernels (EuclideanNorm) have no XLA lowering.
"""

import tensorflow as tf

# Not public API, but the only way to see whether a graph is being traced for XLA;
# TensorFlow enters this context while tracing a jit_compile=True function, and
# Keras 2 used the same helper.
from tensorflow.python.ops import control_flow_util as _control_flow_util


def in_xla_context():
    """True while tracing a function that XLA will compile as a whole."""
    if tf.executing_eagerly():
        return False
    return _control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
