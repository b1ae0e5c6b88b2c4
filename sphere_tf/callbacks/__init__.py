"""Keras callbacks for hyperspherical training."""

from sphere_tf.callbacks.energy import HypersphericalEnergy
from sphere_tf.callbacks.evaluation import BestCheckpoint
from sphere_tf.callbacks.evaluation import TestErrorLog
from sphere_tf.callbacks.label_range import LabelRangeCheck
from sphere_tf.callbacks.sopt import SOPTEpisodes
from sphere_tf.callbacks.tensorboard import ScalarTensorBoard
from sphere_tf.callbacks.tensorboard import ScalarWriter
from sphere_tf.callbacks.tensorboard import scalar_writer
from sphere_tf.callbacks.tensorboard import tensorboard_callback
from sphere_tf.callbacks.norm_mean import WarnOnSkippedNormMean
