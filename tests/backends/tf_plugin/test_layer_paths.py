"""The TensorFlow plug-in's layer paths: XLA clusters and compiled kernels in training graphs only, same values.

Runs on the TensorFlow backend (the plug-in's own suite); the layers' values on every path are compared
with NumPy in tests/layers/test_decoupled.py.
"""

import numpy as np
import pytest
import tensorflow as tf

from sphere_tf import testing
from sphere_tf.backends.tensorflow.kernels import build as kernel_build
from sphere_tf.layers import DecoupledConv2D
from sphere_tf.layers import DecoupledDense
from sphere_tf.layers import SphereConv2D
from sphere_tf.layers import SphereDense
from sphere_tf.ops import acceleration


def _inputs(rng, shape):
    return rng.normal(size=shape).astype(np.float32)


def _randomise(layer, rng, x):
    layer(x)
    weights = [rng.normal(size=w.shape).astype(np.float32) if w.trainable else w.numpy() for w in layer.weights]
    layer.set_weights(weights)


@pytest.mark.parametrize("factory", [
    lambda: DecoupledConv2D(3, 3, padding="same", magnitude="tanh", angular="cosine"),
    lambda: DecoupledConv2D(3, 3, strides=2, padding="same", magnitude="tanh", angular="sigmoid",
                            learnable_k=True),
    lambda: DecoupledConv2D(3, 3, dilation_rate=2, padding="same", magnitude="seg",
                            angular="linear"),
    lambda: DecoupledConv2D(3, 1, magnitude="tanh", angular="sqcosine", weighted="nonlinear"),
    lambda: SphereConv2D(3, 3, angular="linear", rescale=True),
    lambda: DecoupledDense(3, magnitude="mix", angular="cosine", weighted="linear"),
    lambda: SphereDense(3, angular="sigmoid"),
])
def test_eager_and_jit_compiled_agree(rng, factory):
    layer = factory()
    dense = isinstance(layer, (DecoupledDense, SphereDense))
    x = _inputs(rng, (4, 7) if dense else (2, 6, 6, 2))
    _randomise(layer, rng, x)

    def values_and_grads(xt):
        # Training and inference mode in one function: one XLA compilation per case.
        results = []
        for training in (True, False):
            with tf.GradientTape() as tape:
                tape.watch(xt)
                y = layer(xt, training=training)
                loss = tf.reduce_sum(y * y)
            results.append([y] + tape.gradient(loss, [xt] + layer.trainable_variables))
        return results

    xt = tf.constant(x)
    eager = values_and_grads(xt)
    compiled = tf.function(values_and_grads, jit_compile=True)(xt)
    for eager_mode, compiled_mode in zip(eager, compiled):
        np.testing.assert_allclose(compiled_mode[0].numpy(), eager_mode[0].numpy(), rtol=1e-5,
                                   atol=1e-5)
        # Gradients are sums over positions; XLA reorders them, so compare relative to their scale.
        for e, c in zip(eager_mode[1:], compiled_mode[1:]):
            e, c = e.numpy(), c.numpy()
            np.testing.assert_allclose(c, e, rtol=1e-4, atol=1e-4 * np.max(np.abs(e)))


# -- the XLA clusters of the training path (sphere_tf.backends.tensorflow.fused.use_training_fusion) ---------------------

XLA_FUSED = [
    lambda: DecoupledConv2D(4, 3, strides=2, padding="same", magnitude="tanh", angular="cosine",
                            alpha=1.7),
    lambda: SphereConv2D(4, 3, padding="same", angular="linear"),
    lambda: SphereConv2D(4, 3, dilation_rate=2, angular="sigmoid", k=0.5),
    lambda: DecoupledDense(4, magnitude="tanh", angular="cosine"),
]


def _nodes(concrete):
    graph_def = concrete.graph.as_graph_def()
    return list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def], graph_def


def _has_training_fusion(concrete):
    """Whether a traced graph uses an XLA cluster or the compiled TanhConv kernel."""
    nodes, graph_def = _nodes(concrete)
    attrs = [f.attr for f in graph_def.library.function] + [n.attr for n in nodes]
    return (any("_XlaMustCompile" in a and a["_XlaMustCompile"].b for a in attrs)
            or any(n.op.startswith("SphereTf") for n in nodes))


def _traced_gradients(layer, spec, training):
    """The concrete function of the layer's input and weight gradients."""
    def fn(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = layer(x, training=training)
        return tape.gradient(y, [x] + layer.trainable_variables)
    return tf.function(fn).get_concrete_function(spec)


def test_tanh_cosine_training_graph_uses_the_compiled_kernel():
    assert kernel_build.compiled_kernels() is not None, kernel_build.status()
    layer = DecoupledConv2D(4, 3, padding="same")  # TanhConv + cosine, the DCNet default
    spec = tf.TensorSpec((None, 7, 7, 3), tf.float32)
    layer(tf.zeros((1, 7, 7, 3)), training=False)

    def op_types(training):
        return {n.op for n in _nodes(_traced_gradients(layer, spec, training))[0]}

    assert {"SphereTfTanhCosine", "SphereTfTanhCosineGrad"} <= op_types(True)
    assert not any(op.startswith("SphereTf") for op in op_types(False))


def _training_values_and_grads(layer, x, loss_fn):
    """`[y, ∂L/∂x, ∂L/∂weights...]` of one training-mode call."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = layer(x, training=True)
        loss = loss_fn(y)
    return [y] + tape.gradient(loss, [x] + layer.trainable_variables)


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "xla"])
@pytest.mark.parametrize("factory", XLA_FUSED)
def test_xla_clusters_match_plain_ops(rng, factory, kernel):
    # Training-mode values and every gradient with the training-path fusions (the
    # compiled TanhConv kernel, or XLA clusters only) and with plain ops.
    if kernel:
        assert kernel_build.compiled_kernels() is not None, kernel_build.status()
    kernel_build.set_enabled(kernel)
    try:
        _assert_training_fusion_matches_plain_ops(rng, factory)
    finally:
        kernel_build.set_enabled(True)


def _assert_training_fusion_matches_plain_ops(rng, factory):
    layers = [factory(), factory()]
    dense = isinstance(layers[0], DecoupledDense)
    x = tf.constant(_inputs(rng, (3, 7) if dense else (2, 7, 7, 3)))
    _randomise(layers[0], rng, x.numpy())
    layers[1](x[:1], training=False)
    layers[1].set_weights(layers[0].get_weights())
    layers[1]._use_training_fusion = False
    results = [_training_values_and_grads(layer, x, lambda y: tf.reduce_sum(tf.sin(3.0 * y)))
               for layer in layers]
    for fused_value, plain_value in zip(*results):
        plain_value = plain_value.numpy()
        np.testing.assert_allclose(fused_value.numpy(), plain_value, rtol=1e-5,
                                   atol=1e-5 * max(1.0, np.max(np.abs(plain_value))))


def test_xla_clusters_match_plain_ops_under_mixed_precision(rng):
    # float16 conv and input gradient, float32 norms/angles: the clusters keep the dtypes.
    layers = [DecoupledConv2D(4, 3, padding="same", magnitude="tanh", angular="cosine",
                              dtype="mixed_float16") for _ in range(2)]
    x = tf.constant(_inputs(rng, (2, 6, 6, 3)).astype(np.float16))
    for layer in layers:
        layer(x[:1], training=False)
    layers[1].set_weights(layers[0].get_weights())
    layers[1]._use_training_fusion = False
    results = [_training_values_and_grads(layer, x, lambda y: tf.reduce_sum(tf.cast(y, tf.float32) ** 2))
               for layer in layers]
    for y, x_grad in (r[:2] for r in results):
        assert y.dtype == tf.float16 and x_grad.dtype == tf.float16
    for fused_value, plain_value in zip(*results):
        fused_value = tf.cast(fused_value, tf.float32).numpy()
        plain_value = tf.cast(plain_value, tf.float32).numpy()
        assert np.all(np.isfinite(fused_value))
        np.testing.assert_allclose(fused_value, plain_value, rtol=2e-2,
                                   atol=2e-2 * max(1.0, np.max(np.abs(plain_value))))


@pytest.mark.parametrize("factory", XLA_FUSED)
def test_xla_clusters_only_in_training_graphs(rng, factory):
    # Inference (what SavedModel export traces) must not need the XLA JIT, which
    # TensorFlow Serving disables by default; training graphs use the clusters.
    layer = factory()
    dense = isinstance(layer, DecoupledDense)
    spec = tf.TensorSpec((None, 7) if dense else (None, 7, 7, 3), tf.float32)
    layer(tf.zeros([1] + list(spec.shape[1:])), training=False)

    def grads(training):
        return _traced_gradients(layer, spec, training)

    assert _has_training_fusion(grads(True))
    assert not _has_training_fusion(grads(False))
    assert not _has_training_fusion(tf.function(lambda x: layer(x, training=False)).get_concrete_function(spec))
    acceleration.set_training_fusion(False)
    try:
        assert not _has_training_fusion(grads(True))
    finally:
        acceleration.set_training_fusion(True)

    # Inside a function XLA compiles as a whole: plain ops, no nested clusters.
    assert not _has_training_fusion(
        tf.function(lambda x: layer(x, training=True), jit_compile=True).get_concrete_function(spec)
    )
