"""Compiled CPU kernels of the operator layers' training path (C++ TensorFlow custom ops).

`fused_kernels.cc` holds the kernels; `build` compiles it against the installed
TensorFlow, caches and loads the library. `sphere_tf.ops.fused` uses them while
training where they load; inference and export never do.
"""

from sphere_tf.kernels import build
