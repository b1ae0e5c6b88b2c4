"""Evaluation protocols: face verification (LFW 10-fold accuracy, ROC, TAR@FAR) on flip-concatenated embeddings.

Every Keras backend, without TensorFlow off the TensorFlow backend: the embeddings are one compiled `keras.ops`
function per backend (`verification.EmbeddingFunction`), the pair images NumPy batches (`face.pair_image_batches`).
Training a face model from a config and evaluating a run's workdir are the runner's face task
(`sphere_tf.runners.face`).
"""

from sphere_tf import deprecation
from sphere_tf.evaluation import face
from sphere_tf.evaluation import verification
from sphere_tf.evaluation.face import verify
from sphere_tf.evaluation.verification import EmbeddingFunction
from sphere_tf.evaluation.verification import accuracy_at
from sphere_tf.evaluation.verification import best_threshold
from sphere_tf.evaluation.verification import cosine_scores
from sphere_tf.evaluation.verification import embedding_model
from sphere_tf.evaluation.verification import extract_embeddings
from sphere_tf.evaluation.verification import flip_embedding_fn
from sphere_tf.evaluation.verification import kfold_accuracy
from sphere_tf.evaluation.verification import mean_unit_embeddings
from sphere_tf.evaluation.verification import plain_embedding_fn
from sphere_tf.evaluation.verification import plot_roc
from sphere_tf.evaluation.verification import roc_curve
from sphere_tf.evaluation.verification import tar_at_far
from sphere_tf.evaluation.verification import threshold_accuracies

# The config-driven face runs moved above the library, to the runner's face task (in 0.2.0); the old paths go in
# MOVED_REMOVED_IN.
MOVED = {name: f"sphere_tf.runners.face:{name}" for name in ("evaluate_workdir", "split_config", "train_face")}
MOVED_REMOVED_IN = "0.4.0"
__getattr__ = deprecation.moved_names(__name__, MOVED, removed_in=MOVED_REMOVED_IN)
