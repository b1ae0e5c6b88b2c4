"""The maths shared by every layer, loss and regularizer, written with `keras.ops` (every Keras backend).

`angles`, `angular`, `magnitude`, `margin`, `orthogonal`, `fourier` and
`conv_geometry` are formulas; `response` is the layers' hot path (the decoupled
operator from ``x·ŵ`` and the patch norm) and `operator.decoupled_response` its
cosine form. `acceleration` is the boundary to a backend's accelerated hot path
(the TensorFlow plug-in in `sphere_tf.backends.tensorflow`): per layer call it
picks one `acceleration.Path`; `set_acceleration(False)` runs the reference
everywhere and `set_training_fusion(False)` keeps an accelerator to its plain path.
"""

from sphere_tf.ops import acceleration
from sphere_tf.ops import angles
from sphere_tf.ops import angular
from sphere_tf.ops import magnitude
from sphere_tf.ops import margin
from sphere_tf.ops import operator
from sphere_tf.ops import response
from sphere_tf.ops.acceleration import set_acceleration
from sphere_tf.ops.acceleration import set_training_fusion
from sphere_tf.ops.angles import safe_acos
