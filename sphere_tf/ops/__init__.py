"""Pure maths shared by every layer, loss and regularizer.

`fused` is the layers' hot path; `set_training_fusion(False)` turns its compiled
kernels and XLA clusters off (the only process-wide switch here).
"""

from sphere_tf.ops import angles
from sphere_tf.ops import angular
from sphere_tf.ops import fused
from sphere_tf.ops import magnitude
from sphere_tf.ops import margin
from sphere_tf.ops import operator
from sphere_tf.ops.angles import safe_acos
from sphere_tf.ops.fused import set_training_fusion
