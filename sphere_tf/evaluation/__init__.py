"""Evaluation protocols: face verification (LFW 10-fold accuracy, ROC, TAR@FAR) on flip-concatenated embeddings."""

from sphere_tf.evaluation import face
from sphere_tf.evaluation import verification
from sphere_tf.evaluation.face import evaluate_workdir
from sphere_tf.evaluation.face import split_config
from sphere_tf.evaluation.face import train_face
from sphere_tf.evaluation.face import verify
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
