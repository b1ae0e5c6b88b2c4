"""Keras layers: hyperspherical and decoupled operators, margin heads (dense and Partial FC), OPT, ConvNorm, and the
model's input normalisation (`PixelNormalization`, read back by `model_normalization`)."""

from sphere_tf.layers.conv_norm import ConvNorm2D
from sphere_tf.layers.decoupled import DecoupledConv2D
from sphere_tf.layers.decoupled import DecoupledDense
from sphere_tf.layers.decoupled import SphereConv2D
from sphere_tf.layers.decoupled import SphereDense
from sphere_tf.layers.margin_head import MarginHead
from sphere_tf.layers.partial_fc import PartialFCHead
from sphere_tf.layers.partial_fc import class_sharding_layout
from sphere_tf.layers.folding import fold_opt_model
from sphere_tf.layers.kernels import effective_kernel
from sphere_tf.layers.kernels import has_effective_kernel
from sphere_tf.layers.opt import OPTConv2D
from sphere_tf.layers.opt import OPTDense
from sphere_tf.layers.opt import OPTLayer
from sphere_tf.layers.opt import opt_layers
from sphere_tf.layers.pixel_normalization import PixelNormalization
from sphere_tf.layers.pixel_normalization import model_normalization

# `sphere_tf.layers.walk` moved to `sphere_tf.walk` (below the layers and the regularizers, which both use it);
# the old name stays an alias.
from sphere_tf import walk  # noqa: E402,F401
