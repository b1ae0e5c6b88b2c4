"""Compiled CPU kernels of the operator layers' training path (C++ TensorFlow custom ops).

`fused_kernels.cc` holds the kernels; `build` compiles it against the installed
TensorFlow (with a flag policy that builds on every x86-64 CPU TensorFlow runs
on, AVX-512 FP16 ones included), caches and loads the library.
`sphere_tf.backends.tensorflow.fused` uses them while training where they load; inference and
export never do. ``python -m sphere_tf.backends.tensorflow.kernels`` builds them now.
"""

from sphere_tf.backends.tensorflow.kernels import build
