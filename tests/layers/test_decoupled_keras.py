"""Keras citizenship of SphereConv2D, SphereDense, DecoupledConv2D and DecoupledDense.

* Keras's own layer harness (`keras.src.testing.TestCase.run_layer_test`: build, shapes, weight
  counts, serialisation, a training step compiled as a graph and with XLA, and the mixed-precision
  check) over representative configurations;
* the Conv2D arguments a Keras user passes (`activation`, `data_format`, `groups`) against NumPy
  references on explicit (per-group) patches, `sphere_tf.testing.numpy_patches` /
  `numpy_decoupled`;
* errors: a window larger than the input fails at build / `compute_output_shape` with
  `keras.layers.Conv2D`'s message, DCNet-only arguments of the Sphere layers name the right layer;
* configs saved by the layers before these arguments existed (hard-coded below) still load into the
  same variables.
"""

import inspect

import keras
import numpy as np
import pytest
from keras import ops

from sphere_tf import testing
from sphere_tf.layers import DecoupledConv2D
from sphere_tf.layers import DecoupledDense
from sphere_tf.layers import SphereConv2D
from sphere_tf.layers import SphereDense

RHO_EPSILON = 1e-4  # upstream: radius ** 2 + 1e-4


def _counts(trainable, non_trainable):
    return dict(expected_num_trainable_weights=trainable, expected_num_non_trainable_weights=non_trainable)


# (name, class, constructor arguments, input shape, output shape, weight counts)
HARNESS_CASES = [
    ("tanh_cosine", DecoupledConv2D, dict(filters=4, kernel_size=3, padding="same"),
     (2, 6, 6, 3), (2, 6, 6, 4), _counts(2, 3)),
    ("ball_linear_strided_bias", DecoupledConv2D,
     dict(filters=4, kernel_size=3, strides=2, magnitude="ball", angular="linear", use_bias=True),
     (2, 7, 7, 2), (2, 3, 3, 4), _counts(3, 3)),
    ("seg_sigmoid_learnable_k_dilated", DecoupledConv2D,
     dict(filters=3, kernel_size=2, dilation_rate=2, magnitude="seg", angular="sigmoid", learnable_k=True),
     (2, 6, 5, 2), (2, 4, 3, 3), _counts(3, 3)),
    ("linear_cosine_no_norm", DecoupledConv2D, dict(filters=4, kernel_size=3, magnitude="linear"),
     (2, 5, 5, 2), (2, 3, 3, 4), _counts(1, 0)),
    ("mix_sqcosine_weighted_linear", DecoupledConv2D,
     dict(filters=4, kernel_size=1, magnitude="mix", angular="sqcosine", weighted="linear"),
     (2, 4, 4, 3), (2, 4, 4, 4), _counts(1, 0)),
    ("tanh_nonlinear_separate_fixed_rho", DecoupledConv2D,
     dict(filters=4, kernel_size=3, padding="same", weighted="nonlinear_separate", learnable_rho=False,
          rho=2.0), (2, 5, 5, 2), (2, 5, 5, 4), _counts(1, 4)),
    ("tanh_groups", DecoupledConv2D, dict(filters=6, kernel_size=3, padding="same", groups=3),
     (2, 5, 5, 3), (2, 5, 5, 6), _counts(2, 3)),
    ("channels_first_activation_upstream_average", DecoupledConv2D,
     dict(filters=4, kernel_size=3, data_format="channels_first", activation="relu", zero_debias=False,
          use_bias=True), (2, 3, 6, 6), (2, 4, 4, 4), _counts(3, 3)),
    ("sphere_linear_rescale", SphereConv2D, dict(filters=4, kernel_size=3, angular="linear", rescale=True),
     (2, 5, 5, 2), (2, 3, 3, 4), _counts(3, 0)),
    ("sphere_sigmoid_learnable_k_groups_channels_first", SphereConv2D,
     dict(filters=4, kernel_size=3, padding="same", angular="sigmoid", learnable_k=True, groups=2,
          data_format="channels_first", activation="tanh"), (2, 4, 5, 5), (2, 4, 5, 5), _counts(2, 0)),
    ("dense_tanh_cosine", DecoupledDense, dict(units=3), (4, 6), (4, 3), _counts(2, 3)),
    ("dense_ball_sqcosine_rank3_activation", DecoupledDense,
     dict(units=3, magnitude="ball", angular="sqcosine", activation="relu", use_bias=True),
     (2, 3, 5), (2, 3, 3), _counts(3, 3)),
    ("dense_tanh_nonlinear", DecoupledDense, dict(units=3, weighted="nonlinear", angular="linear"),
     (4, 5), (4, 3), _counts(2, 3)),
    ("sphere_dense_cosine", SphereDense, dict(units=3), (4, 5), (4, 3), _counts(1, 0)),
    ("sphere_dense_sigmoid_learnable_k_bias", SphereDense,
     dict(units=3, angular="sigmoid", learnable_k=True, use_bias=True, activation="sigmoid"),
     (4, 5), (4, 3), _counts(3, 0)),
]


@pytest.mark.parametrize(
    "cls,init_kwargs,input_shape,output_shape,counts", [c[1:] for c in HARNESS_CASES],
    ids=[c[0] for c in HARNESS_CASES],
)
def test_keras_layer_harness(cls, init_kwargs, input_shape, output_shape, counts, keras_harness):
    keras_harness.run_layer_test(
        cls,
        init_kwargs=init_kwargs,
        input_shape=input_shape,
        expected_output_shape=output_shape,
        expected_num_seed_generators=0,
        expected_num_losses=0,
        supports_masking=False,
        run_training_check=True,
        run_mixed_precision_check=True,
        **counts,
    )


# -- explicit signatures ---------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [DecoupledConv2D, DecoupledDense, SphereConv2D, SphereDense])
def test_constructor_signatures_name_every_argument(cls):
    params = inspect.signature(cls.__init__).parameters
    names = [n for n, p in params.items() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    expected = {"activation", "angular", "k", "learnable_k", "learnable_k_init", "use_bias", "epsilon",
                "rescale", "kernel_initializer", "bias_initializer", "kernel_regularizer",
                "bias_regularizer", "kernel_constraint", "bias_constraint"}
    if cls in (DecoupledConv2D, SphereConv2D):
        expected |= {"filters", "kernel_size", "strides", "padding", "data_format", "dilation_rate", "groups"}
    else:
        expected |= {"units"}
    if cls in (DecoupledConv2D, DecoupledDense):
        expected |= {"magnitude", "alpha", "beta", "rho", "learnable_rho", "weighted", "norm_momentum",
                     "zero_debias"}
    assert set(names) - {"self"} == expected
    # Every argument of the signature is documented and round-trips through get_config.
    for name in expected:
        assert f"{name}" in cls.__doc__, name
    layer = cls(3, 1) if cls in (DecoupledConv2D, SphereConv2D) else cls(3)
    assert expected <= set(layer.get_config())


# -- activation, data_format, groups vs NumPy --------------------------------------------------------


def _random_layer(layer, rng, x):
    layer(x[:1], training=False)
    layer.kernel.assign(rng.normal(size=layer.kernel.shape).astype(np.float32))
    if hasattr(layer, "rho_raw"):
        layer.rho_raw.assign(rng.uniform(0.5, 1.5, size=layer.rho_raw.shape).astype(np.float32))
    if getattr(layer, "use_bias", False):
        layer.bias.assign(rng.normal(size=layer.bias.shape).astype(np.float32))


def _numpy_grouped(x, kernel, groups, hp, norm_mean=None):
    """NumPy operator output of a grouped conv: each group on its own channels and filters.

    `x` NHWC, `kernel` HWIO with I = C / groups; E{‖x‖} (training: None) per group.
    """
    c_per_group = x.shape[-1] // groups
    f_per_group = kernel.shape[-1] // groups
    outs, means = [], []
    for g in range(groups):
        patches = testing.numpy_patches(x[..., g * c_per_group:(g + 1) * c_per_group], hp["kernel_size"],
                                        hp.get("strides", 1), hp.get("padding", "valid"),
                                        hp.get("dilation_rate", 1))
        out, mean = testing.numpy_decoupled(
            patches, kernel[..., g * f_per_group:(g + 1) * f_per_group], hp.get("magnitude", "sphere"),
            hp.get("angular", "cosine"), beta=0.5 if hp.get("magnitude") == "seg" else None,
            rho=hp.get("rho_values", [None] * groups)[g],
            norm_mean=None if norm_mean is None else norm_mean[g])
        outs.append(out)
        means.append(mean)
    return np.concatenate(outs, axis=-1), np.array(means)


@pytest.mark.parametrize("cls,hp", [
    (DecoupledConv2D, dict(magnitude="tanh", angular="cosine")),
    (DecoupledConv2D, dict(magnitude="ball", angular="linear", strides=2, padding="same")),
    (DecoupledConv2D, dict(magnitude="linear", angular="cosine")),  # the norm cancels per group too
    (DecoupledConv2D, dict(magnitude="seg", angular="sqcosine", dilation_rate=2, padding="same")),
    (SphereConv2D, dict(angular="sigmoid")),
])
@pytest.mark.parametrize("groups", [2, 3])
def test_grouped_operator_matches_numpy_per_group_patches(rng, cls, hp, groups):
    hp = dict(kernel_size=3, **hp)
    layer = cls(2 * groups, groups=groups, **hp)
    x = rng.normal(size=(2, 6, 7, 2 * groups)).astype(np.float32)
    x[:, :, :, :2] *= 10.0  # groups with different input scales: E{‖x‖} differs per group
    _random_layer(layer, rng, x)
    assert layer.kernel.shape == (3, 3, 2, 2 * groups)
    if hasattr(layer, "rho_raw"):
        rho = layer.rho_raw.numpy().astype(np.float64) ** 2 + RHO_EPSILON
        hp["rho_values"] = [rho[2 * g:2 * g + 2] for g in range(groups)]
    kernel = layer.kernel.numpy()
    expected, means = _numpy_grouped(x, kernel, groups, hp)
    np.testing.assert_allclose(ops.convert_to_numpy(layer(x, training=True)), expected, rtol=1e-5, atol=1e-5)
    if hasattr(layer, "rho_raw"):
        # One E{‖x‖} per group; after one step the debiased average is the batch mean.
        np.testing.assert_allclose(ops.convert_to_numpy(layer.norm_mean()), means, rtol=1e-5)
        assert not np.allclose(means[0], means[1], rtol=0.5)
        expected, _ = _numpy_grouped(x[:1], kernel, groups, hp, norm_mean=means)
        np.testing.assert_allclose(ops.convert_to_numpy(layer(x[:1], training=False)), expected,
                                   rtol=1e-5, atol=1e-5)


def test_grouped_operator_equals_separate_operators(rng):
    """groups=2 is two ungrouped layers side by side (weights split by filter and channel)."""
    x = rng.normal(size=(2, 5, 5, 4)).astype(np.float32)
    grouped = DecoupledConv2D(4, 3, groups=2, magnitude="tanh", angular="linear")
    parts = [DecoupledConv2D(2, 3, magnitude="tanh", angular="linear") for _ in range(2)]
    _random_layer(grouped, rng, x)
    for g, part in enumerate(parts):
        part(x[..., :2])
        part.kernel.assign(grouped.kernel.numpy()[..., 2 * g:2 * g + 2])
        part.rho_raw.assign(grouped.rho_raw.numpy()[2 * g:2 * g + 2])
    for training in (True, False):
        expected = np.concatenate(
            [ops.convert_to_numpy(p(x[..., 2 * g:2 * g + 2], training=training)) for g, p in enumerate(parts)],
            axis=-1)
        np.testing.assert_allclose(ops.convert_to_numpy(grouped(x, training=training)), expected,
                                   rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("cls,hp", [
    (DecoupledConv2D, dict(magnitude="tanh", angular="cosine", strides=2, padding="same")),
    (SphereConv2D, dict(angular="linear", groups=2)),
])
def test_channels_first_matches_numpy(rng, cls, hp):
    x_last = rng.normal(size=(2, 6, 5, 4)).astype(np.float32)
    x_first = np.transpose(x_last, (0, 3, 1, 2))
    layer = cls(4, 3, data_format="channels_first", **hp)
    _random_layer(layer, rng, x_first)
    groups = hp.get("groups", 1)
    np_hp = dict(kernel_size=3, **{k: v for k, v in hp.items() if k != "groups"})
    if hasattr(layer, "rho_raw"):
        np_hp["rho_values"] = [layer.rho_raw.numpy().astype(np.float64) ** 2 + RHO_EPSILON]
    expected, _ = _numpy_grouped(x_last, layer.kernel.numpy(), groups, np_hp)
    got = ops.convert_to_numpy(layer(x_first, training=True))
    np.testing.assert_allclose(got, np.transpose(expected, (0, 3, 1, 2)), rtol=1e-5, atol=1e-5)
    assert tuple(layer.compute_output_shape(x_first.shape)) == got.shape
    conv = keras.layers.Conv2D(4, 3, data_format="channels_first", **{k: v for k, v in hp.items()
                                                                      if k in ("strides", "padding", "groups")})
    assert tuple(conv.compute_output_shape(x_first.shape)) == got.shape


def test_default_data_format_follows_keras_config():
    previous = keras.config.image_data_format()
    try:
        keras.config.set_image_data_format("channels_first")
        assert DecoupledConv2D(2, 3).data_format == "channels_first"
        keras.config.set_image_data_format("channels_last")
        assert SphereConv2D(2, 3).data_format == "channels_last"
    finally:
        keras.config.set_image_data_format(previous)


@pytest.mark.parametrize("activation,fn", [("relu", lambda v: np.maximum(v, 0.0)),
                                           ("tanh", np.tanh),
                                           (keras.activations.sigmoid, lambda v: 1.0 / (1.0 + np.exp(-v)))])
def test_activation_applies_after_rescale_and_bias(rng, activation, fn):
    x = rng.normal(size=(5, 6)).astype(np.float32)
    layer = SphereDense(4, angular="linear", rescale=True, use_bias=True, activation=activation)
    _random_layer(layer, rng, x)
    layer.rescale_scale.assign(rng.uniform(0.5, 3.0, size=4).astype(np.float32))
    layer.rescale_shift.assign(rng.normal(size=4).astype(np.float32))
    out, _ = testing.numpy_decoupled(x, layer.kernel.numpy(), "sphere", "linear")
    expected = fn(out * layer.rescale_scale.numpy() + layer.rescale_shift.numpy() + layer.bias.numpy())
    np.testing.assert_allclose(ops.convert_to_numpy(layer(x)), expected, rtol=1e-5, atol=1e-6)
    rebuilt = SphereDense.from_config(layer.get_config())
    assert rebuilt.get_config()["activation"] == layer.get_config()["activation"]


# -- errors -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [DecoupledConv2D, SphereConv2D])
def test_input_smaller_than_kernel_fails_like_conv2d(cls):
    match = "Computed output size would be zero or negative"
    with pytest.raises(ValueError, match=match):
        keras.layers.Conv2D(4, 3)(np.zeros((1, 2, 2, 1), np.float32))
    with pytest.raises(ValueError, match=match):
        cls(4, 3).compute_output_shape((1, 2, 2, 1))
    with pytest.raises(ValueError, match=match):
        cls(4, 3)(np.zeros((1, 2, 2, 1), np.float32))
    with pytest.raises(ValueError, match=match):
        keras.Sequential([keras.Input((2, 2, 1)), cls(4, 3)])
    with pytest.raises(ValueError, match=match):
        cls(4, 3, data_format="channels_first").build((1, 1, 2, 2))


@pytest.mark.parametrize("cls,kwargs,fragment", [
    (DecoupledConv2D, dict(filters=4, kernel_size=3, groups=3), "`groups`"),
    (SphereConv2D, dict(filters=4, kernel_size=3, groups=0), "`groups`"),
    (DecoupledConv2D, dict(filters=4, kernel_size=3, data_format="NHWC"), "`data_format`"),
    (SphereDense, dict(units=2, activation="no_such_activation"), "no_such_activation"),
])
def test_bad_new_arguments(cls, kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        cls(**kwargs)


def test_input_channels_not_divisible_by_groups():
    with pytest.raises(ValueError, match="groups=2"):
        DecoupledConv2D(4, 3, groups=2)(np.zeros((1, 5, 5, 3), np.float32))


# -- configs saved before the new arguments ------------------------------------------------------------

_INIT = {"module": "keras.initializers", "class_name": "VarianceScaling",
         "config": {"seed": None, "scale": 2.0, "mode": "fan_in", "distribution": "untruncated_normal",
                    "input_axes": None, "output_axes": None}, "registered_name": None}
_ZEROS = {"module": "keras.initializers", "class_name": "Zeros", "config": {}, "registered_name": None}
_DTYPE = {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": None}
_COMMON = {"trainable": True, "dtype": _DTYPE, "kernel_initializer": _INIT, "bias_initializer": _ZEROS,
           "kernel_regularizer": None, "bias_regularizer": None, "kernel_constraint": None,
           "bias_constraint": None, "epsilon": 0.0001, "learnable_k_init": 0.5}
_DECOUPLED = {"alpha": 1.0, "rho": 1.0, "learnable_rho": True, "weighted": None, "norm_momentum": 0.999}

# `keras.saving.serialize_keras_object(layer)` of each layer as saved before `activation`,
# `data_format`, `groups` and `zero_debias` existed, with the variable paths in the order the
# `.keras` file stores them.
OLD_SAVED = [
    ({"module": "sphere_tf.layers.decoupled", "class_name": "DecoupledConv2D",
      "config": {"name": "dc", **_COMMON, **_DECOUPLED, "magnitude": "tanh", "angular": "sigmoid",
                 "beta": None, "k": 0.3, "learnable_k": True, "use_bias": True, "rescale": False,
                 "filters": 4, "kernel_size": (3, 3), "strides": (2, 2), "padding": "same",
                 "dilation_rate": (1, 1)},
      "registered_name": "sphere_tf>DecoupledConv2D"},
     (2, 6, 6, 2), ["dc/kernel", "dc/rho", "dc/k", "dc/bias", "dc/norm_mean_biased", "dc/norm_mean_weight"]),
    ({"module": "sphere_tf.layers.decoupled", "class_name": "SphereConv2D",
      "config": {"name": "sc", **_COMMON, "angular": "linear", "k": 0.3, "learnable_k": False,
                 "use_bias": False, "rescale": True, "filters": 4, "kernel_size": (3, 3),
                 "strides": (1, 1), "padding": "same", "dilation_rate": (1, 1)},
      "registered_name": "sphere_tf>SphereConv2D"},
     (2, 6, 6, 2), ["sc/kernel", "sc/rescale_scale", "sc/rescale_shift"]),
    ({"module": "sphere_tf.layers.decoupled", "class_name": "DecoupledDense",
      "config": {"name": "dd", **_COMMON, **_DECOUPLED, "magnitude": "seg", "angular": "sqcosine",
                 "beta": 0.3, "k": 0.3, "learnable_k": False, "use_bias": False, "rescale": False,
                 "units": 4},
      "registered_name": "sphere_tf>DecoupledDense"},
     (3, 5), ["dd/kernel", "dd/rho", "dd/norm_mean_biased", "dd/norm_mean_weight"]),
    ({"module": "sphere_tf.layers.decoupled", "class_name": "SphereDense",
      "config": {"name": "sd", **_COMMON, "angular": "sigmoid", "k": 0.3, "learnable_k": True,
                 "use_bias": True, "rescale": False, "units": 4},
      "registered_name": "sphere_tf>SphereDense"},
     (3, 5), ["sd/kernel", "sd/k", "sd/bias"]),
]


@pytest.mark.parametrize("saved,input_shape,paths", OLD_SAVED, ids=[s[0]["class_name"] for s in OLD_SAVED])
def test_configs_saved_before_new_arguments_still_load(saved, input_shape, paths):
    layer = keras.saving.deserialize_keras_object(saved)
    assert type(layer).__name__ == saved["class_name"]
    layer(np.zeros(input_shape, np.float32))
    # Same variables in the same order: a `.keras` file stores them by position. Operators with a radius
    # end with the skip counter created after these files were written (`load_own_variables`).
    stored = [v.path for v in layer.trainable_variables + layer.non_trainable_variables]
    assert stored[: len(paths)] == paths
    assert stored[len(paths):] == ([f"{layer.name}/norm_mean_skipped"] if layer.has_radius else [])
    config = layer.get_config()
    for key, value in saved["config"].items():
        assert config[key] == value, key
    # New keys get their defaults: no activation, channels_last, one group, the debiased average.
    assert config["activation"] == "linear"
    if "filters" in config:
        assert config["data_format"] == "channels_last" and config["groups"] == 1
    if "magnitude" in config:
        assert config["zero_debias"] is True
