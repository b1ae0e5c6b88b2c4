"""`tf.distribute` helpers for the DCNet training tricks (TensorFlow backend only).

`sphere_tf.training.model` calls these when `keras.backend.backend() == "tensorflow"`:
Keras has no backend-neutral way to update a mirrored variable once per device from
inside a replica context, or to read the replica count.
"""

import keras
import tensorflow as tf


def num_replicas_in_sync():
    """int, the replicas of the current `tf.distribute` strategy (1 outside any)."""
    return tf.distribute.get_strategy().num_replicas_in_sync


def per_replica_update(variables, update_fn):
    """Runs `update_fn(v)` once on every copy of each variable, whatever the context.

    In a replica context (inside `strategy.run`, as `train_step` is) the update
    goes through `merge_call` + `strategy.extended.update`, so a mirrored
    variable is updated once per step on each of its device copies with the same
    value, not once per replica.
    """
    tf_vars = [v.value if isinstance(v, keras.Variable) else v for v in variables]

    def merge_fn(strategy, *dist_vars):
        for var in dist_vars:
            strategy.extended.update(var, update_fn, group=False)

    replica_context = tf.distribute.get_replica_context()
    if replica_context is None:  # cross-replica context, e.g. `with strategy.scope():`
        merge_fn(tf.distribute.get_strategy(), *tf_vars)
    else:
        replica_context.merge_call(merge_fn, args=tuple(tf_vars))
