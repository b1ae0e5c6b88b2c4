"""Export helpers: SavedModel for TensorFlow Serving."""

from sphere_tf.export.saved_model import export_saved_model
