"""Metrics of hyperspherical feature quality (angular Fisher score, inter-class angles) and the papers'
test-set error rates (per class, over minority classes, top-k)."""

from sphere_tf.metrics.angular import AngularFisherScore
from sphere_tf.metrics.angular import MinInterclassAngle
from sphere_tf.metrics.angular import angular_fisher_score
from sphere_tf.metrics.angular import class_directions
from sphere_tf.metrics.angular import interclass_angles
from sphere_tf.metrics.angular import max_intraclass_angle
from sphere_tf.metrics.angular import min_interclass_angle
from sphere_tf.metrics.classification import class_counts
from sphere_tf.metrics.classification import class_set_error
from sphere_tf.metrics.classification import per_class_error
from sphere_tf.metrics.classification import top_k_error
