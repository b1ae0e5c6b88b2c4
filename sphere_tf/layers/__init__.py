"""Keras layers: hyperspherical and decoupled operators, margin heads, OPT, ConvNorm."""

from sphere_tf.layers.decoupled import DecoupledConv2D
from sphere_tf.layers.decoupled import DecoupledDense
from sphere_tf.layers.decoupled import SphereConv2D
from sphere_tf.layers.decoupled import SphereDense
from sphere_tf.layers.margin_head import MarginHead
