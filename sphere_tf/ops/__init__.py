"""The maths shared by every layer, loss and regularizer, written with `keras.ops` and TensorFlow.

`angles`, `angular`, `magnitude`, `margin`, `orthogonal`, `fourier` and
`conv_geometry` are formulas; `operator.decoupled_response` is the decoupled
operator in cosine form. `fused` is the layers' hot path: per layer call it
picks one `fused.Path` (plain TensorFlow ops, XLA clusters, or the compiled C++
kernels that `sphere_tf.kernels` builds and loads); `set_training_fusion(False)`
turns the clusters and kernels off (the only process-wide switch here).
"""

from sphere_tf.ops import angles
from sphere_tf.ops import angular
from sphere_tf.ops import fused
from sphere_tf.ops import magnitude
from sphere_tf.ops import margin
from sphere_tf.ops import operator
from sphere_tf.ops.angles import safe_acos
from sphere_tf.ops.fused import set_training_fusion
