"""Losses: the angular-margin losses on cosines (CosFace, ArcFace, combined, SphereFace, GA-Softmax), cross-entropy
for margin-head logits (label smoothing included) and Caffe's multi-class hinge loss."""

from sphere_tf.losses.cosine_margin import ArcFaceLoss
from sphere_tf.losses.cosine_margin import CombinedMarginLoss
from sphere_tf.losses.cosine_margin import CosFaceLoss
from sphere_tf.losses.cosine_margin import GASoftmaxLoss
from sphere_tf.losses.cosine_margin import SphereFaceLoss
from sphere_tf.losses.cosine_margin import arcface_loss
from sphere_tf.losses.cosine_margin import combined_margin_loss
from sphere_tf.losses.cosine_margin import cosface_loss
from sphere_tf.losses.cosine_margin import ga_softmax_loss
from sphere_tf.losses.cosine_margin import sphereface_loss
from sphere_tf.losses.cosine_margin import with_feature_norm
from sphere_tf.losses.hinge import SparseHinge
from sphere_tf.losses.hinge import sparse_hinge
from sphere_tf.losses.margin_softmax import SparseCrossentropy
from sphere_tf.losses.margin_softmax import sparse_crossentropy
