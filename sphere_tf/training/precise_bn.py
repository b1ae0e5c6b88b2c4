"""Precise batch statistics: recompute the inference averages of BN and of the operators' E{‖x‖} before evaluation.

During training the moving averages of `keras.layers.BatchNormalization` (mean and
variance, momentum 0.99: a memory of ~100 steps) and of the decoupled operators'
E{‖x‖} (`norm_mean_biased` / `norm_mean_weight`, momentum 0.999: ~1000 steps)
mix statistics of weights that have since changed, and after a short run they
are still close to their initial values: a network at 90% training accuracy can
score chance level on the test set. "Precise BN" (Wu & Johnson, "Rethinking
'Batch' in BatchNorm", 2021, §3; fvcore's `update_bn_stats` used by Detectron2,
pycls's `compute_precise_bn_stats`) freezes the weights and recomputes the
averages over a pass of training batches: each average becomes the plain mean,
over the batches, of the per-batch statistic the layer uses in training (batch
mean and biased batch variance for BN, batch mean of ‖x‖ for the operators).

Implementation: every tracked layer's momentum is set to 0 for the pass, so after
a training-mode forward pass its moving statistic holds exactly that batch's
statistic; the statistics are summed in NumPy and their means assigned at the
end, and the momenta restored. Gradients and weights are untouched; layers in
training mode (Dropout) behave as in training, as in fvcore, and every other
non-trainable variable (a margin head's annealing step) is restored after the pass.
"""

import itertools
import math

import keras
import numpy as np

from sphere_tf import validation
from sphere_tf.training import multi_device

# A moving average with momentum m is "young" after fewer than YOUNG_TIMESCALES / (1 − m) updates: its
# initial value still weighs m^t > e^-5 ≈ 0.7%, and it averages weights older than its recent ones.
YOUNG_TIMESCALES = 5.0
DEFAULT_BATCHES = 200


def _layers(model):
    # Keras has no public recursive layer walk; `_flatten_layers` is the one `Model.layers` itself uses.
    return [layer for layer in model._flatten_layers(include_self=False, recursive=True) if layer.built]


def tracked_layers(model):
    """The layers whose inference statistics `recompute_statistics` recomputes, with their momentum attribute:
    `(layer, attribute, variables)` for BatchNormalization (moving mean, variance) and for the decoupled
    operators with a radius (TanhConv/BallConv: E{‖x‖} biased average and its debiasing weight)."""
    tracked = []
    for layer in _layers(model):
        if isinstance(layer, keras.layers.BatchNormalization) and not layer.renorm:
            tracked.append((layer, "momentum", (layer.moving_mean, layer.moving_variance)))
        elif getattr(layer, "has_radius", False) and hasattr(layer, "norm_mean_biased"):
            tracked.append((layer, "norm_momentum", (layer.norm_mean_biased, layer.norm_mean_weight)))
    return tracked


def young_averages(model, steps):
    """`(layer name, momentum, steps needed)` of each moving average that `steps` training steps left young
    (fewer than `YOUNG_TIMESCALES / (1 − momentum)` updates)."""
    young = []
    for layer, attribute, _ in tracked_layers(model):
        momentum = float(getattr(layer, attribute))
        needed = math.ceil(YOUNG_TIMESCALES / (1.0 - momentum)) if momentum < 1.0 else math.inf
        if steps < needed:
            young.append((layer.name, momentum, needed))
    return young


def _forward(model):
    """A training-mode forward pass over one batch, compiled: `tf.function` on TensorFlow, `jax.jit` of the
    model's `stateless_call` on JAX (an eager JAX pass dispatches every op on its own: minutes for 200 batches of
    a small CNN on a CPU), eager on PyTorch."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf  # noqa: PLC0415 (only this backend)

        def forward(inputs):
            model(inputs, training=True)

        return tf.function(forward, reduce_retracing=True)
    if backend != "jax":
        return lambda inputs: model(inputs, training=True)
    import jax  # noqa: PLC0415 (only this backend)

    @jax.jit
    def updated_state(trainable, non_trainable, inputs):
        _, non_trainable = model.stateless_call(trainable, non_trainable, inputs, training=True)
        return non_trainable

    def forward(inputs):
        if keras.distribution.distribution() is not None:
            # keras.distribution (DataParallel, several processes): each process holds its rows of a batch; the
            # statistics are the global batch's, as in the training step.
            inputs = multi_device.global_batch(inputs)
        state = updated_state([v.value for v in model.trainable_variables],
                              [v.value for v in model.non_trainable_variables], inputs)
        for variable, value in zip(model.non_trainable_variables, state):
            variable.assign(value)

    return forward


def recompute_statistics(model, batches, num_batches):
    """Recomputes the inference statistics of `model`'s BN and decoupled-operator layers as plain means over
    `num_batches` batches.

    Args:
        model: a built `keras.Model`.
        batches: iterable of model inputs or of `(inputs, labels)` / `(inputs, labels, weights)` tuples (a
            `tf.data.Dataset` of training batches, as `fit` takes it).
        num_batches: int > 0, how many batches to average over (fewer when `batches` ends before).

    Returns:
        int, the number of batches averaged over (0 when the model has no tracked layer: nothing to do).
    """
    validation.positive_int(num_batches, "num_batches")
    tracked = tracked_layers(model)
    if not tracked:
        return 0
    saved = [getattr(layer, attribute) for layer, attribute, _ in tracked]
    # Training-mode calls have other side effects (a margin head's annealing step, dropout's seed state):
    # every other non-trainable variable is restored afterwards, as if the pass had not happened.
    recomputed = {id(v) for _, _, variables in tracked for v in variables}
    others = [(v, keras.ops.convert_to_numpy(v.value)) for v in model.non_trainable_variables
              if id(v) not in recomputed]
    sums = [[np.zeros(v.shape, np.float64) for v in variables] for _, _, variables in tracked]
    forward = _forward(model)
    seen = 0
    try:
        for layer, attribute, _ in tracked:
            setattr(layer, attribute, 0.0)  # the moving statistic becomes the batch's statistic
        for batch in itertools.islice(iter(batches), num_batches):
            inputs = batch[0] if isinstance(batch, tuple) else batch
            forward(inputs)
            for total, (_, _, variables) in zip(sums, tracked):
                for i, variable in enumerate(variables):
                    total[i] += keras.ops.convert_to_numpy(variable.value)
            seen += 1
    finally:
        for (layer, attribute, _), momentum in zip(tracked, saved):
            setattr(layer, attribute, momentum)
        for variable, value in others:
            variable.assign(value)
    if seen == 0:
        raise ValueError("recompute_statistics: `batches` yielded no batch.")
    for total, (_, _, variables) in zip(sums, tracked):
        for value, variable in zip(total, variables):
            variable.assign((value / seen).astype(variable.dtype))
    return seen
