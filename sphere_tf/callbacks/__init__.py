"""Keras callbacks for hyperspherical training."""

from sphere_tf.callbacks.energy import HypersphericalEnergy
from sphere_tf.callbacks.evaluation import BestCheckpoint
from sphere_tf.callbacks.evaluation import TestErrorLog
from sphere_tf.callbacks.label_range import LabelRangeCheck
from sphere_tf.callbacks.sopt import SOPTEpisodes
from sphere_tf.callbacks.norm_mean import WarnOnSkippedNormMean
