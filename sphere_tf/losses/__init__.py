"""Losses: cross-entropy for margin-head logits (label smoothing included) and Caffe's multi-class hinge loss."""

from sphere_tf.losses.hinge import SparseHinge
from sphere_tf.losses.hinge import sparse_hinge
from sphere_tf.losses.margin_softmax import SparseCrossentropy
from sphere_tf.losses.margin_softmax import sparse_crossentropy
