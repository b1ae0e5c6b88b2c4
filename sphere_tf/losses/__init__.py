"""Losses: cross-entropy for margin-head logits (label smoothing included)."""

from sphere_tf.losses.margin_softmax import SparseCrossentropy
from sphere_tf.losses.margin_softmax import sparse_crossentropy
