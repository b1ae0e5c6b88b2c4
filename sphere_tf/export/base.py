"""What every export writer shares: the error, the signature names, sample pixels, the output check, frozen saving.

`serving` (TF Serving folders) and `formats` (ONNX, TFLite) both build on this module; neither imports
the other's internals.
"""

import os

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

SERVING_SIGNATURE = "serving_default"
EMBEDDINGS_SIGNATURE = "embeddings"


class ExportError(RuntimeError):
    """The exported SavedModel failed its verification (nothing was made visible)."""


def sample_pixels(batch_size, image_shape, dtype="uint8", seed=0):
    """Deterministic pixels in 0..255 of `image_shape` (warmup requests, verification)."""
    pixels = np.random.default_rng(seed).integers(0, 256, (batch_size,) + tuple(image_shape))
    return pixels.astype(dtype)


def compare(name, served, expected, atol, reference="the Keras model's", error=ExportError):
    """Max |served − expected|; raises `error` on another shape, a non-finite value or a diff above
    atol·max(1, |expected|)."""
    served = np.asarray(served, np.float64)
    expected = np.asarray(expected, np.float64)
    if served.shape != expected.shape:
        raise error(f"{name} has shape {served.shape}; {reference} is {expected.shape}.")
    diff = float(np.max(np.abs(served - expected))) if served.size else 0.0
    scale = max(1.0, float(np.max(np.abs(expected))) if expected.size else 1.0)
    if not np.isfinite(served).all() or not diff <= atol * scale:
        raise error(f"{name} differs from {reference} by {diff} (> atol·max(1, |expected|) = {atol * scale}).")
    return diff


def save_frozen(module, folder, signatures):
    """`tf.saved_model.save` of a frozen (variable-free, inference-only) module, without custom-gradient markers.

    The frozen graph keeps the `_gradient_op_type` attribute that `tf.custom_gradient`
    puts on the layers' ops, whose gradient functions cannot be saved; every
    `tf.saved_model.load` then warned "Importing a function ... with ops with unsaved
    custom gradients". The attribute is removed from the written graph: the serving
    functions take raw pixels and are never differentiated.
    """
    tf.saved_model.save(module, folder, signatures=signatures,
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=False))
    path = os.path.join(folder, "saved_model.pb")
    saved = saved_model_pb2.SavedModel()
    with open(path, "rb") as f:
        saved.ParseFromString(f.read())
    for meta_graph in saved.meta_graphs:
        nodes = [meta_graph.graph_def.node] + [f.node_def for f in meta_graph.graph_def.library.function]
        for node_defs in nodes:
            for node in node_defs:
                if "_gradient_op_type" in node.attr:
                    del node.attr["_gradient_op_type"]
    with open(path, "wb") as f:
        f.write(saved.SerializeToString())
