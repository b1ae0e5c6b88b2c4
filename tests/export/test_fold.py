"""sphere_tf.export.fold_opt_model and fold_batch_norm: folded models are Keras models with the same outputs."""

import keras
from keras.src import testing
import numpy as np
import pytest

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
    found = [type(layer).__name__ for layer in sphere_tf.walk.iter_layers(folded)]
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


# -- fold_batch_norm ------------------------------------------------------------------------


def _moved(model, shape, seed=0):
    """Training-mode calls move the BN statistics (and E{‖x‖}) away from their initial values."""
    rng = np.random.default_rng(seed)
    for _ in range(3):
        model(rng.uniform(-1, 1, (6,) + shape).astype(np.float32), training=True)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            layer.gamma.assign(rng.uniform(0.5, 2.0, layer.gamma.shape))
            layer.beta.assign(rng.normal(size=layer.beta.shape))
    return model


def _numpy_bn(out, bn, axis=-1):
    shape = [1] * out.ndim
    shape[axis] = -1
    scale = bn.gamma.numpy() / np.sqrt(bn.moving_variance.numpy() + bn.epsilon)
    shift = bn.beta.numpy() - bn.moving_mean.numpy() * scale
    return out * scale.reshape(shape) + shift.reshape(shape)


def test_fold_batch_norm_folds_cosine_operators_only():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([
        keras.Input((7, 7, 3)),
        layers.DecoupledConv2D(4, 3, padding="same", magnitude="tanh", angular="cosine", use_bias=True),
        keras.layers.BatchNormalization(),  # folded
        keras.layers.ReLU(),
        layers.SphereConv2D(5, 3, angular="linear"),
        keras.layers.BatchNormalization(),  # kept: g(θ) is not linear in x·ŵ
        layers.SphereConv2D(5, 3, angular="cosine", activation="relu"),
        keras.layers.BatchNormalization(),  # kept: BN sees the activation's output
        keras.layers.Flatten(),
        layers.SphereDense(6, angular="cosine", rescale=True),
        keras.layers.BatchNormalization(),  # folded, merged with the layer's own rescale
    ])
    _moved(model, (7, 7, 3))
    model.layers[-2].rescale_scale.assign(np.linspace(0.5, 1.5, 6))
    model.layers[-2].rescale_shift.assign(np.linspace(-1, 1, 6))
    folded = export.fold_batch_norm(model)
    kinds = [type(layer).__name__ for layer in folded.layers]
    assert kinds == ["DecoupledConv2D", "FoldedBatchNormalization", "ReLU", "SphereConv2D", "BatchNormalization", "SphereConv2D",
                     "BatchNormalization", "Flatten", "SphereDense", "FoldedBatchNormalization"]
    x = np.random.default_rng(5).uniform(-1, 1, (4, 7, 7, 3)).astype(np.float32)
    # Reference: each folded operator against NumPy BN applied to the unfolded operator's output.
    conv, bn = model.layers[0], model.layers[1]
    np.testing.assert_allclose(folded.layers[0](x).numpy(), _numpy_bn(conv(x).numpy(), bn), rtol=1e-5, atol=1e-5)
    feats = model.layers[7](model.layers[6](model.layers[5](model.layers[4](model.layers[3](model.layers[2](
        bn(conv(x))))))))
    np.testing.assert_allclose(folded.layers[8](feats).numpy(), _numpy_bn(model.layers[8](feats).numpy(),
                                                                          model.layers[9]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(folded(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)
    assert folded.layers[0].rescale and not folded.layers[0].use_bias


def test_fold_batch_norm_leaves_shared_outputs_axes_and_foreign_models_alone():
    inputs = keras.Input((6, 6, 2))
    shared = layers.SphereConv2D(3, 3, angular="cosine", name="shared")(inputs)
    branch = keras.layers.BatchNormalization()(shared)  # the conv output also feeds the Add
    kept = keras.layers.Add()([branch, shared])
    wrong_axis = layers.SphereConv2D(3, 1, angular="cosine", data_format="channels_first")(kept)
    wrong_axis = keras.layers.BatchNormalization(axis=-1)(wrong_axis)  # not the channel axis
    right_axis = layers.SphereConv2D(4, 1, angular="cosine", data_format="channels_first")(kept)
    right_axis = keras.layers.BatchNormalization(axis=1)(right_axis)  # folded
    outputs = keras.layers.Concatenate()([keras.layers.Flatten()(wrong_axis), keras.layers.Flatten()(right_axis)])
    model = _moved(keras.Model(inputs, outputs), (6, 6, 2))
    folded = export.fold_batch_norm(model)
    assert [type(layer).__name__ for layer in folded.layers].count("FoldedBatchNormalization") == 1
    x = np.random.default_rng(2).uniform(-1, 1, (3, 6, 6, 2)).astype(np.float32)
    np.testing.assert_allclose(folded(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)
    plain = keras.Sequential([keras.Input((4, 4, 1)), keras.layers.Conv2D(2, 3), keras.layers.BatchNormalization()])
    assert export.fold_batch_norm(plain) is plain  # nothing to fold: the same object


def test_fold_batch_norm_inside_a_nested_model_and_mixed_precision():
    keras.config.set_dtype_policy("mixed_float16")
    try:
        inner = keras.Sequential([keras.Input((5, 5, 2)), layers.SphereConv2D(3, 3, angular="cosine"),
                                  keras.layers.BatchNormalization()], name="inner")
        inputs = keras.Input((5, 5, 2))
        outputs = keras.layers.Flatten()(inner(inputs))
        model = _moved(keras.Model(inputs, outputs), (5, 5, 2))
        _moved(inner, (5, 5, 2), seed=3)
        folded = export.fold_batch_norm(model)
        inner_folded = folded.get_layer("inner")
        assert [type(layer).__name__ for layer in inner_folded.layers] == ["SphereConv2D", "FoldedBatchNormalization"]
        assert inner_folded.layers[0].compute_dtype == "float16"
        x = np.random.default_rng(4).uniform(-1, 1, (3, 5, 5, 2)).astype(np.float32)
        np.testing.assert_allclose(np.asarray(folded(x), np.float32), np.asarray(model(x), np.float32),
                                   rtol=5e-3, atol=5e-3)
    finally:
        keras.config.set_dtype_policy("float32")


def _frozen_ops(path):
    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    fn = tf.saved_model.load(path).signatures[export.SERVING_SIGNATURE]
    graph_def = fn.graph.as_graph_def()
    names = [n.name for n in graph_def.node] + [n.name for f in graph_def.library.function for n in f.node_def]
    return fn, names


def test_export_model_serves_the_folded_operators(tmp_path):
    keras.utils.set_random_seed(1)
    model = keras.Sequential([
        keras.Input((8, 8, 3)),
        layers.DecoupledConv2D(4, 3, padding="same", magnitude="tanh", angular="cosine"),
        keras.layers.BatchNormalization(),
        keras.layers.ReLU(),
        keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(3),
    ])
    _moved(model, (8, 8, 3))
    images = np.random.default_rng(0).integers(0, 256, (5, 8, 8, 3)).astype(np.uint8)
    folded = export.export_model(model, str(tmp_path), "m", warmup_batch_sizes=(), verify_inputs=images)
    plain = export.export_model(model, str(tmp_path), "m", warmup_batch_sizes=(), verify_inputs=images,
                                fold_batch_norm=False, verify=False)
    fn_folded, names_folded = _frozen_ops(folded.path)
    fn_plain, names_plain = _frozen_ops(plain.path)
    assert any("batchnorm" in n for n in names_plain)
    assert not any("batchnorm" in n for n in names_folded)
    got = fn_folded(images=images)["logits"].numpy()
    want = model((images.astype(np.float32) - 128.0) / 128.0, training=False).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got, fn_plain(images=images)["logits"].numpy(), rtol=1e-4, atol=1e-4)


class FoldedBatchNormalizationTest(testing.TestCase):
    def test_keras_layer_harness(self):
        self.run_layer_test(
            export.FoldedBatchNormalization, init_kwargs={}, input_shape=(2, 3, 4), expected_output_shape=(2, 3, 4),
            expected_num_trainable_weights=0, expected_num_non_trainable_weights=0, supports_masking=True,
            run_training_check=False,
        )


def test_folded_model_round_trips_through_a_keras_file(tmp_path):
    model = _moved(keras.Sequential([keras.Input((6, 6, 2)), layers.SphereConv2D(3, 3, angular="cosine"),
                                     keras.layers.BatchNormalization(), keras.layers.Flatten()]), (6, 6, 2))
    folded = export.fold_batch_norm(model)
    path = str(tmp_path / "folded.keras")
    folded.save(path)
    loaded = keras.saving.load_model(path)
    assert type(loaded.layers[1]).__name__ == "FoldedBatchNormalization"
    x = np.random.default_rng(0).uniform(-1, 1, (2, 6, 6, 2)).astype(np.float32)
    np.testing.assert_allclose(loaded(x).numpy(), model(x).numpy(), rtol=1e-5, atol=1e-5)


class _Scaled(keras.layers.Layer):
    """A layer whose config cannot rebuild it (its required argument is not in `get_config`)."""

    def __init__(self, factor, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, inputs):
        return inputs * self.factor

    def get_config(self):
        return {"name": self.name, "trainable": self.trainable}  # without `factor`


def test_fold_batch_norm_names_the_way_out_when_the_model_cannot_be_copied(tmp_path):
    inputs = keras.Input((5, 5, 2))
    h = keras.layers.BatchNormalization()(layers.SphereConv2D(3, 3, angular="cosine")(inputs))
    model = _moved(keras.Model(inputs, _Scaled(2.0)(keras.layers.Flatten()(h))), (5, 5, 2))
    with pytest.raises(ValueError, match="(?s)Cannot fold BatchNormalization .* `fold_batch_norm=False`"):
        export.fold_batch_norm(model)
    images = np.random.default_rng(0).integers(0, 256, (2, 5, 5, 2)).astype(np.uint8)
    result = export.export_model(model, str(tmp_path), "m", warmup_batch_sizes=(), verify_inputs=images,
                                 fold_batch_norm=False, verify=False)
    assert result.version == 1
