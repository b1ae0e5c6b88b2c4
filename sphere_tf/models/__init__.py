"""Architectures, one family per file, chosen by registry name (`create_model(name, **kwargs)`)."""

from sphere_tf.models import blocks
from sphere_tf.models import mlp
from sphere_tf.models import operators
from sphere_tf.models import plain_cnn
from sphere_tf.models import resnet
from sphere_tf.models import sphereface
from sphere_tf.models.blocks import needs_labels
from sphere_tf.models.blocks import pack_inputs
from sphere_tf.models.registry import MODELS
from sphere_tf.models.registry import create_model
from sphere_tf.models.registry import get_model_fn
from sphere_tf.models.registry import list_models
from sphere_tf.models.registry import model_options
from sphere_tf.models.registry import register_model
from sphere_tf.models.registry import with_pixel_normalization
