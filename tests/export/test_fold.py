"""sphere_tf.export.fold_opt_model: folded models are plain Keras models with the same outputs."""

import keras
import numpy as np

import sphere_tf
from sphere_tf import export
from sphere_tf import layers


def test_public_names_are_the_same_function():
    assert layers.fold_opt_model is export.fold_opt_model is sphere_tf.export.fold.fold_opt_model


def test_fold_nested_functional_model_then_export(tmp_path):
    inner_in = keras.Input((6, 6, 2))
    inner = keras.Model(inner_in, layers.OPTConv2D(3, 3, padding="SAME", orthogonalization="exp", seed=0)(inner_in))
    inputs = keras.Input((6, 6, 2))
    h = keras.layers.BatchNormalization()(inner(inputs))
    outputs = layers.OPTDense(2, orthogonalization="cayley", seed=1)(keras.layers.Flatten()(h))
    model = keras.Model(inputs, outputs)
    x = np.random.default_rng(0).standard_normal((3, 6, 6, 2)).astype(np.float32)
    model(x, training=True)  # moves the BN statistics away from their initial values
    folded = export.fold_opt_model(model)
    found = [type(layer).__name__ for layer in sphere_tf.layers.walk.iter_layers(folded)]
    assert "Conv2D" in found and "Dense" in found
    assert not layers.opt_layers(folded)
    # Reference: W = R·V written out by hand into plain layers.
    conv, dense = layers.opt_layers(model)
    w_conv = (conv.rotation().numpy() @ conv.fixed_kernel.numpy().reshape(-1, 3)).reshape(3, 3, 2, 3)
    np.testing.assert_allclose(folded.get_layer(inner.name).layers[-1].kernel.numpy(), w_conv, atol=1e-6)
    np.testing.assert_allclose(folded(x).numpy(), model(x).numpy(), atol=1e-5)
    path = export.export_saved_model(folded, str(tmp_path / "sm"), verify_inputs=x)
    assert path.endswith("sm")
    assert dense.units == 2
