"""Architectures, one family per file, chosen by registry name."""

from sphere_tf.models import operators
from sphere_tf.models import plain_cnn
from sphere_tf.models.registry import MODELS
from sphere_tf.models.registry import create_model
from sphere_tf.models.registry import get_model_fn
from sphere_tf.models.registry import register_model
