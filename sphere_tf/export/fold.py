"""Folding for inference and export: OPT layers into plain Keras layers, BatchNormalization into operators.

Both folds go through the layers' public folding protocol (`sphere_tf.layers.folding`):
`fold_opt_model` (defined there, re-exported here) calls each OPT layer's `fold()`;
`fold_batch_norm` finds operator → BatchNormalization pairs in the model's graph and calls
the operator's `fold_affine(scale, shift)`.
"""

import keras
import numpy as np

from sphere_tf import saving
from sphere_tf import walk
from sphere_tf.layers.folding import clone_model_replacing
from sphere_tf.layers.folding import fold_opt_model  # noqa: F401  (public here too)


@saving.register_serializable()
class FoldedBatchNormalization(keras.layers.Layer):
    """Stands where `fold_batch_norm` removed a BatchNormalization: returns its input.

    Unlike `keras.layers.Identity` it takes BatchNormalization's call arguments
    (`training`, `mask`), which a model's copy passes on, and passes masks through.
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.supports_masking = True

    def call(self, inputs, training=None, mask=None):  # pylint: disable=unused-argument
        return inputs

    def compute_output_shape(self, input_shape):
        return input_shape


def _channel_axis(layer, rank):
    axis = -1 if getattr(layer, "data_format", "channels_last") == "channels_last" else 1
    return axis % rank


def _bn_axis(bn, rank):
    axis = bn.axis if isinstance(bn.axis, int) else (bn.axis[0] if len(bn.axis) == 1 else None)
    return None if axis is None else axis % rank


def _foldable_pairs(model):
    """`{operator name: BN layer}` for every operator whose one output feeds only a BatchNormalization."""
    nodes = walk.graph_nodes(model)
    if nodes is None:
        return {}
    calls, consumers = {}, {}
    for node in nodes:
        calls.setdefault(id(node.operation), []).append(node)
        for tensor in node.input_tensors:
            consumers.setdefault(id(tensor), []).append(node)
    outputs = {id(t) for t in model.outputs}
    pairs = {}
    for layer in model.layers:
        if not (callable(getattr(layer, "fold_affine", None)) and layer.rescale_folds_into_kernel):
            continue  # the folding protocol (sphere_tf.layers.folding)
        if layer.activation not in (None, keras.activations.linear):
            continue  # the BN sees the activation's output
        own = calls.get(id(layer), [])
        if len(own) != 1 or len(own[0].outputs) != 1:
            continue  # shared layers keep their BN
        output = own[0].outputs[0]
        users = consumers.get(id(output), [])
        if id(output) in outputs or len(users) != 1:
            continue  # the operator's output is also used elsewhere
        bn = users[0].operation
        if not isinstance(bn, keras.layers.BatchNormalization) or len(calls.get(id(bn), [])) != 1:
            continue
        rank = len(output.shape)
        if _bn_axis(bn, rank) != _channel_axis(layer, rank):
            continue
        pairs[layer.name] = bn
    return pairs


def _bn_affine(bn):
    """BN at inference as ``x·scale + shift`` per channel (float64 for the fold)."""
    variance = np.asarray(bn.moving_variance.numpy(), np.float64)
    mean = np.asarray(bn.moving_mean.numpy(), np.float64)
    gamma = np.ones_like(variance) if bn.gamma is None else np.asarray(bn.gamma.numpy(), np.float64)
    beta = np.zeros_like(variance) if bn.beta is None else np.asarray(bn.beta.numpy(), np.float64)
    scale = gamma / np.sqrt(variance + bn.epsilon)
    return scale, beta - mean * scale


def fold_batch_norm(model):
    """Return a copy of a Sequential/functional model with each operator → BatchNormalization pair folded.

    An operator whose response is linear in x·ŵ for every filter (cosine angular
    activation: SphereConv/SphereNorm cosine, every decoupled magnitude with cosine g;
    `rescale_folds_into_kernel`), with no activation, whose one output feeds only one
    `BatchNormalization` over its channel axis, becomes the same operator with
    `rescale=True`: scale ``γ/√(σ² + ε)`` and shift ``β − μ·γ/√(σ² + ε)`` (any old
    rescale and bias merged in), and the BN becomes a `FoldedBatchNormalization`
    (the identity). At
    inference the operator multiplies that scale into its normalised kernel, so the
    served graph has no full-size BN multiply: the same role BN folding plays for a
    plain convolution. Other layers are re-created from their configs with copies
    of their weights; a model without such a pair is returned as is.

    Inference outputs are unchanged up to float rounding (the BN uses its moving
    statistics; training-mode behaviour is not preserved, so the copy is for
    inference and export only).

    Args:
        model: a built Sequential or functional `keras.Model`.

    Returns:
        A `keras.Model` (a new one when something was folded).

    Raises:
        ValueError: a model with foldable pairs that `keras.models.clone_model`
            cannot copy (a subclassed model, or a layer without `get_config`).
    """
    pairs = _foldable_pairs(model)
    nested = [layer for layer in model.layers if isinstance(layer, keras.Model) and _has_pairs(layer)]
    if not pairs and not nested:
        return model
    folded_bns = {id(bn) for bn in pairs.values()}

    def replace(layer):
        if layer.name in pairs:
            return layer.fold_affine(*_bn_affine(pairs[layer.name]))
        if id(layer) in folded_bns:
            return FoldedBatchNormalization(name=layer.name)
        if isinstance(layer, keras.Model):
            return fold_batch_norm(layer)
        return None

    try:
        result = clone_model_replacing(model, replace)
    except (ValueError, TypeError, NotImplementedError) as error:
        raise ValueError(
            f"Cannot fold BatchNormalization into the operators of {model.name!r}: copying the model failed "
            f"({error}). Export with `fold_batch_norm=False`."
        ) from error
    return result


def _has_pairs(model):
    return bool(_foldable_pairs(model)) or any(
        isinstance(layer, keras.Model) and _has_pairs(layer) for layer in model.layers
    )
