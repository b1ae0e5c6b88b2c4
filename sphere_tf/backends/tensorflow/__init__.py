"""The TensorFlow plug-in: hand-written gradients, XLA clusters and compiled CPU kernels for the hot path.

`fused` holds the implementation (`fused.ACCELERATOR`), `kernels` the C++ training-path kernels and
their build (``python -m sphere_tf.backends.tensorflow.kernels`` builds them now), `xla_context`
whether a graph is being traced for XLA, `distribute` the `tf.distribute` replica context the
training paradigms need (weight projection's merge call, the replica count) and Partial FC's label
all-gather. Importing this package registers the accelerator for the TensorFlow backend
(`sphere_tf.ops.acceleration` does so on first use).
"""

from sphere_tf.backends.tensorflow import fused
from sphere_tf.ops import acceleration

acceleration.register_accelerator("tensorflow", fused.ACCELERATOR)
