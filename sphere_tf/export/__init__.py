"""Export helpers: SavedModel for TensorFlow Serving, and folding OPT layers into plain ones."""

from sphere_tf.export.fold import fold_opt_model
from sphere_tf.export.saved_model import export_saved_model
