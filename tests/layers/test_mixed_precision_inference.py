"""Every public layer of `sphere_tf.layers` trains, predicts and evaluates under both mixed policies.

Under `mixed_float16` / `mixed_bfloat16` a layer's inference path (Keras runs `predict` and `evaluate`
as their own compiled functions, with `training=False`) can differ from its training path; issue 23
found `ConvNorm2D` training under a mixed policy and then failing at its first `predict`. For each
layer a tiny model is trained one step under the policy, then its weights (non-trainable statistics
included) are copied into the same model built under float32, and `predict` / `evaluate` of the two
are compared: finite, and equal up to 16-bit rounding.
"""

import inspect

import keras
import numpy as np
import pytest

from sphere_tf import layers as sphere_layers
from sphere_tf.layers import ConvNorm2D
from sphere_tf.layers import DecoupledConv2D
from sphere_tf.layers import DecoupledDense
from sphere_tf.layers import MarginHead
from sphere_tf.layers import OPTConv2D
from sphere_tf.layers import OPTDense
from sphere_tf.layers import OPTLayer
from sphere_tf.layers import PartialFCHead
from sphere_tf.layers import PixelNormalization
from sphere_tf.layers import SphereConv2D
from sphere_tf.layers import SphereDense
from sphere_tf.optimizers import PartialFCOptimizer

IMAGE_SHAPE = (6, 6, 3)
VECTOR_SHAPE = (5,)
NUM_CLASSES = 4
BATCH = 4

# Relative tolerance for outputs of the same weights: float16 keeps 11 significant bits, bfloat16 8;
# a few roundings (input, kernel, arccos, affine, BN) compound to a few ulps of the output scale.
TOLERANCE = {"mixed_float16": 1e-2, "mixed_bfloat16": 6e-2}


def _conv_model(layer):
    inputs = keras.Input(IMAGE_SHAPE)
    return keras.Model(inputs, layer(inputs))


def _dense_model(layer):
    inputs = keras.Input(VECTOR_SHAPE)
    return keras.Model(inputs, layer(inputs))


def _margin_head_model(loss_type):
    # docs/losses.md Pattern 1: labels as a second input of a functional model.
    def build():
        features = keras.Input(VECTOR_SHAPE, name="features")
        labels = keras.Input((), dtype="int32", name="labels")
        head = MarginHead(NUM_CLASSES, loss_type=loss_type)
        return keras.Model([features, labels], head(features, labels=labels))

    return build


def _partial_fc_model(loss_type):
    # docs/partial_fc.md: the same pattern; the head adds its own loss (3 shards: 6 columns, 2 of them padding).
    def build():
        features = keras.Input(VECTOR_SHAPE, name="features")
        labels = keras.Input((), dtype="int32", name="labels")
        head = PartialFCHead(NUM_CLASSES, loss_type=loss_type, sample_rate=0.5, num_shards=3, seed=0)
        return keras.Model([features, labels], head(features, labels=labels))

    return build


# name → (model builder, input kind). Builders run once under float32 and once under the policy.
CASES = {
    "decoupled_conv_tanh": (lambda: _conv_model(DecoupledConv2D(4, 3, magnitude="tanh")), "image"),
    "decoupled_conv_ball": (lambda: _conv_model(DecoupledConv2D(4, 3, magnitude="ball", padding="same")), "image"),
    "decoupled_conv_linear": (lambda: _conv_model(DecoupledConv2D(4, 3, magnitude="linear")), "image"),
    "decoupled_conv_tanh_weighted_grouped": (
        lambda: _conv_model(DecoupledConv2D(6, 3, magnitude="tanh", weighted="linear", groups=3)), "image"),
    "decoupled_conv_seg_sigmoid_rescale": (
        lambda: _conv_model(DecoupledConv2D(4, 3, magnitude="seg", angular="sigmoid", rescale=True)), "image"),
    "decoupled_dense_tanh": (lambda: _dense_model(DecoupledDense(4, magnitude="tanh")), "vector"),
    "decoupled_dense_ball": (lambda: _dense_model(DecoupledDense(4, magnitude="ball")), "vector"),
    "sphere_conv": (lambda: _conv_model(SphereConv2D(4, 3, angular="linear")), "image"),
    "sphere_conv_rescale": (lambda: _conv_model(SphereConv2D(4, 3, rescale=True)), "image"),
    "sphere_dense": (lambda: _dense_model(SphereDense(4)), "vector"),
    "conv_norm_3x3": (lambda: _conv_model(ConvNorm2D(4, 3, strides=2, padding="same")), "image"),
    "conv_norm_1x1": (lambda: _conv_model(ConvNorm2D(4, 1)), "image"),
    "conv_norm_plain": (lambda: _conv_model(ConvNorm2D(4, 3, affine=False, batch_norm=False)), "image"),
    "margin_head_asoftmax": (_margin_head_model("asoftmax"), "labelled"),
    "margin_head_arcface": (_margin_head_model("arcface"), "labelled"),
    "partial_fc_cosface": (_partial_fc_model("cosface"), "labelled_own_loss"),
    "opt_conv": (lambda: _conv_model(OPTConv2D(4, 3)), "image"),
    "opt_dense": (lambda: _dense_model(OPTDense(4)), "vector"),
    # The runner's first layer, in front of a conv (the inputs are N(0, 1) here: the arithmetic is the same).
    "pixel_normalization_conv": (
        lambda: _conv_model(lambda x: DecoupledConv2D(4, 3, magnitude="tanh")(PixelNormalization()(x))), "image"),
}

# The public layer classes each case exercises (checked against `sphere_tf.layers` below).
COVERED = {
    DecoupledConv2D, DecoupledDense, SphereConv2D, SphereDense, ConvNorm2D, MarginHead, PartialFCHead, OPTConv2D,
    OPTDense, PixelNormalization,
}


@pytest.fixture(params=sorted(TOLERANCE))
def policy(request):
    """Sets a mixed global dtype policy for the test and restores the previous one after it."""
    previous = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(request.param)
    yield request.param
    keras.mixed_precision.set_global_policy(previous)


def _data(kind, rng):
    if kind in ("labelled", "labelled_own_loss"):
        x = rng.normal(size=(BATCH, *VECTOR_SHAPE)).astype("float32")
        y = rng.integers(0, NUM_CLASSES, size=(BATCH,)).astype("int32")
        return [x, y], y
    x = rng.normal(size=(BATCH, *(IMAGE_SHAPE if kind == "image" else VECTOR_SHAPE))).astype("float32")
    return x, None


def _compile(model, kind):
    if kind == "labelled":
        model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    elif kind == "labelled_own_loss":
        model.compile(PartialFCOptimizer("sgd"), loss=None)
    else:
        model.compile("sgd", "mse")


def test_cases_cover_every_public_layer():
    public = {
        obj for obj in vars(sphere_layers).values()
        if inspect.isclass(obj) and issubclass(obj, keras.layers.Layer) and obj is not OPTLayer  # abstract base
    }
    assert public == COVERED, f"layers without a mixed-precision case: {sorted(c.__name__ for c in public - COVERED)}"


@pytest.mark.parametrize("case", sorted(CASES))
def test_fit_predict_evaluate_match_float32(case, policy, rng):
    build, kind = CASES[case]
    x, y = _data(kind, rng)

    keras.mixed_precision.set_global_policy("float32")
    reference = build()
    _compile(reference, kind)
    keras.mixed_precision.set_global_policy(policy)
    model = build()
    _compile(model, kind)
    model.set_weights(reference.get_weights())
    if y is None:
        y = rng.normal(size=reference.output.shape[1:]).astype("float32")[None].repeat(BATCH, axis=0)

    history = model.fit(x, y, batch_size=BATCH, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    reference.set_weights(model.get_weights())  # the trained weights and statistics, all stored in float32

    out = np.asarray(model.predict(x, verbose=0), dtype="float32")
    expected = reference.predict(x, verbose=0)
    assert np.all(np.isfinite(out)), case
    tol = TOLERANCE[policy]
    np.testing.assert_allclose(out, expected, rtol=tol, atol=tol * max(1.0, np.abs(expected).max()))

    loss = model.evaluate(x, y, batch_size=BATCH, verbose=0)
    expected_loss = reference.evaluate(x, y, batch_size=BATCH, verbose=0)
    assert np.isfinite(loss)
    np.testing.assert_allclose(loss, expected_loss, rtol=2 * tol, atol=tol)


def test_conv_norm_step_counter_advances_past_16_bit_range(policy, rng):
    # The step t of ConvNorm's ramp-down α(t) is a float32 variable; read in a 16-bit compute dtype
    # t + 1 rounds back to t beyond the last integer that dtype holds exactly (2^11, 2^8), freezing α.
    last_exact_step = {"mixed_float16": 2.0**11, "mixed_bfloat16": 2.0**8}[policy]
    layer = ConvNorm2D(2, 3, batch_norm=False)
    layer.build((None, *IMAGE_SHAPE))
    layer.num_batches_tracked.assign(last_exact_step)
    layer(rng.normal(size=(2, *IMAGE_SHAPE)).astype("float32"), training=True)
    assert float(keras.ops.convert_to_numpy(layer.num_batches_tracked)) == last_exact_step + 1.0
