"""`tf.distribute` helpers for the DCNet training tricks (TensorFlow backend only).

`sphere_tf.training.model` calls these when `keras.backend.backend() == "tensorflow"`:
Keras has no backend-neutral way to update a mirrored variable once per device from
inside a replica context, to read the replica count, or to gather a value from every
replica (`sphere_tf.layers.PartialFCHead` samples its classes from the labels of all
replicas).
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


def all_gather_across_replicas(x):
    """`x` of every replica concatenated on axis 0, in replica order (`x` itself with one replica).

    In a replica context of a strategy with more than one replica (inside
    `strategy.run`, as `train_step` is) this is `ReplicaContext.all_gather`, a
    synchronisation point of the replicas; the replicas' sizes on axis 0 may
    differ (a partial last batch). In the cross-replica context (`with
    strategy.scope():` outside `strategy.run`) and without a strategy there is one
    computation, so `x` is returned unchanged.
    """
    replica_context = tf.distribute.get_replica_context()
    if replica_context is None or replica_context.num_replicas_in_sync == 1:
        return x
    return replica_context.all_gather(x, axis=0)
