"""Pure maths shared by every layer, loss and regularizer (no state)."""

from sphere_tf.ops import angles
from sphere_tf.ops import angular
from sphere_tf.ops import magnitude
from sphere_tf.ops import margin
from sphere_tf.ops import operator
from sphere_tf.ops.angles import safe_acos
