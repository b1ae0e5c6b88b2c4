"""Every registered model (timm-style loop): shapes, operators in every conv slot, gradients,
parameter counts against the papers' tables, heads, `.keras` round trips and build-time errors."""

import os

import keras
import numpy as np
import pytest
from keras import ops

from sphere_tf import layers
from sphere_tf import models
from sphere_tf import testing
from sphere_tf import walk
from tests.models._tiny import tiny_input_shape
from tests.models._tiny import tiny_kwargs

# Conv slots per model, counted from the papers' tables: (3×3/5×5/7×7 convs, 1×1 shortcut convs).
CONV_SLOTS = {
    "cnn3": (3, 0), "cnn9": (9, 0), "cnn18": (18, 0), "cnn45": (45, 0), "cnn60": (60, 0), "cnn69": (69, 0),
    "dcnet_cnn9": (9, 0), "dcnet_cnn9_adv": (9, 0), "opt_cnn6": (6, 0), "opt_cnn9": (9, 0),
    "mnist_2d": (6, 0), "dcnet_mnist_2d": (6, 0), "small_cnn": (4, 0),
    # ResNet-32: stem + 3 stages × 5 blocks × 2 convs = 31; projections where the width changes (stages 2, 3).
    "resnet32": (31, 2), "spherenet_resnet32": (31, 2),
    # ResNet-18: stem + 4 stages × 2 blocks × 2 convs = 17; projections entering stages 2, 3, 4.
    "resnet18": (17, 3), "convnorm_resnet18": (17, 3), "sphere_resnet18_v1": (17, 3), "sphere_resnet18_v2": (17, 3),
    # ResNet-50: stem + (3 + 4 + 6 + 3) bottleneck blocks × 3 convs = 49; a projection entering every stage.
    "resnet50": (49, 4),
    # Modified ResNet-18: 1 + (1+2) + (1+4) + (1+6) + 1 = 17, identity shortcuts only.
    "modified_resnet18": (17, 0),
    # SphereFace (thesis Table 2.7): 4 stride-2 convs + 2 per residual unit, identity shortcuts only.
    "sphereface4": (4, 0), "sphereface10": (10, 0), "sphereface20": (20, 0), "sphereface36": (36, 0),
    "sphereface64": (64, 0),
    # OPT's MNIST MLP (thesis App. F.3): no convs, two hidden FC layers.
    "opt_mlp": (0, 0),
}
CONV_CLASSES = {
    "conv2d": keras.layers.Conv2D, "sphere": layers.SphereConv2D, "decoupled": layers.DecoupledConv2D,
    "opt": layers.OPTConv2D, "conv_norm": layers.ConvNorm2D,
}
OPERATORS = [
    {"layer": "conv2d", "kernel_initializer": "he_normal"},
    {"layer": "sphere", "angular": "sigmoid", "k": 0.3},
    {"layer": "decoupled", "magnitude": "ball", "angular": "sqcosine", "weighted": "linear"},
    {"layer": "opt", "orthogonalization": "cayley"},
    {"layer": "conv_norm", "affine": False},
]


# Registered models that cannot be built small, with the reason (a skip that says why, never a silent one).
NOT_TINY = {}


def _tiny(name, **kwargs):
    shape = tiny_input_shape(name)
    return models.create_model(name, input_shape=shape, num_classes=5, **{**tiny_kwargs(name), **kwargs}), shape


def _images(shape, n=2, seed=0):
    return np.random.default_rng(seed).uniform(0, 1, (n, *shape)).astype(np.float32)


def _convs(model):
    kinds = tuple(CONV_CLASSES.values())
    return [l for l in walk.iter_layers(model) if type(l) in kinds]


def test_every_model_is_listed_here():
    """The paper tables' conv counts cover every built-in model (a user's registration is tested without one)."""
    builtin = [n for n in models.list_models() if models.get_model_fn(n).__module__.startswith("sphere_tf.")]
    assert builtin == sorted(CONV_SLOTS)
    assert models.list_models("sphereface*") == ["sphereface10", "sphereface20", "sphereface36", "sphereface4",
                                                 "sphereface64"]


@pytest.mark.parametrize("name", models.list_models())
def test_every_registered_model_builds_tiny_and_runs_forward(name):
    """timm's loop over `list_models()`: registering a model gets it built (tiny) and run."""
    if name in NOT_TINY:
        pytest.skip(f"{name} cannot be built tiny: {NOT_TINY[name]}")
    model, shape = _tiny(name)
    out = model(_images(shape), training=False)
    assert tuple(out.shape) == (2, 5)
    assert np.isfinite(ops.convert_to_numpy(out)).all()
    if name in CONV_SLOTS:
        assert len(_convs(model)) == sum(CONV_SLOTS[name])


@pytest.mark.structure_only
@pytest.mark.parametrize("index,name", list(enumerate(sorted(CONV_SLOTS))))
def test_requested_operator_reaches_every_conv_slot(index, name):
    operator = OPERATORS[index % len(OPERATORS)]  # every family meets several operators
    # v2 fixes plain 1×1 shortcuts unless told otherwise (tested below).
    extra = {"shortcut_operator": operator} if name == "sphere_resnet18_v2" else {}
    model, _ = _tiny(name, operator=operator, **extra)
    convs = _convs(model)
    assert len(convs) == sum(CONV_SLOTS[name])
    options = {k: v for k, v in operator.items() if k != "layer"}
    for conv in convs:
        assert type(conv) is CONV_CLASSES[operator["layer"]], conv.name
        config = conv.get_config()
        if operator["layer"] == "conv2d":
            assert config["kernel_initializer"]["class_name"] == "HeNormal"
        else:
            assert {k: config[k] for k in options} == options, conv.name


@pytest.mark.structure_only
def test_sphere_resnet18_v1_and_v2_differ_only_in_the_shortcuts():
    v1, _ = _tiny("sphere_resnet18_v1")
    v2, _ = _tiny("sphere_resnet18_v2")
    assert {type(c) for c in _convs(v1)} == {layers.SphereConv2D}
    assert all(c.get_config()["angular"] == "cosine" for c in _convs(v1))
    short2 = [c for c in _convs(v2) if "shortcut" in c.name]
    assert len(short2) == 3 and {type(c) for c in short2} == {keras.layers.Conv2D}
    assert {type(c) for c in _convs(v2) if "shortcut" not in c.name} == {layers.SphereConv2D}
    assert [c.kernel_size for c in short2] == [(1, 1)] * 3


@pytest.mark.structure_only
def test_shortcut_operator_is_its_own_slot():
    model, _ = _tiny("resnet32", operator={"layer": "sphere"}, shortcut_operator={"layer": "opt", "seed": 3})
    shortcuts = [c for c in _convs(model) if "shortcut" in c.name]
    assert [type(c) for c in shortcuts] == [layers.OPTConv2D] * 2
    # The spec's seed seeds the model: each layer its own stream (CRC-32 of "seed/name", as documented).
    import zlib  # noqa: PLC0415

    assert [c.get_config()["seed"] for c in shortcuts] == [
        zlib.crc32(f"3/{c.name}".encode()) & 0x7FFFFFFF for c in shortcuts]
    assert shortcuts[0].get_config()["seed"] != shortcuts[1].get_config()["seed"]


def test_a_seeded_opt_model_gives_same_shape_layers_different_fixed_kernels():
    """One seed in the operator spec: reproducible models, but no two layers share V (OPT, Liu et al. 2021)."""
    def fixed_kernels():
        model, _ = _tiny("opt_cnn6", operator={"layer": "opt", "seed": 0})
        return {c.name: ops.convert_to_numpy(c.fixed_kernel) for c in _convs(model)}

    first, again = fixed_kernels(), fixed_kernels()
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
    by_shape = {}
    for name, kernel in first.items():
        by_shape.setdefault(kernel.shape, []).append(kernel)
    pairs = [(a, b) for group in by_shape.values() for i, a in enumerate(group) for b in group[i + 1:]]
    assert pairs, "opt_cnn6 should have same-shape conv layers"
    for a, b in pairs:
        assert np.abs(a - b).max() > 1e-3


def _finite_gradient_step(model, shape, labels_input=False):
    x = _images(shape, n=4, seed=1)
    y = np.array([0, 1, 2, 3], np.int32)
    inputs = models.pack_inputs(x, y) if labels_input else x
    before = [v.numpy().copy() for v in model.trainable_variables]
    optimizer = keras.optimizers.SGD(0.1)

    def loss_fn():
        logits = model(inputs, training=True)
        loss = ops.mean(keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True))
        return loss + sum(model.losses) if model.losses else loss

    loss, _, grads = testing.gradients(loss_fn, [], model.trainable_variables, state=model.non_trainable_variables)
    assert np.isfinite(float(loss))
    for var, grad in zip(model.trainable_variables, grads):
        assert np.isfinite(grad).all(), var.path
    # Every variable takes part (`testing.gradients` gives an unconnected one zeros, so test for them).
    assert all(np.any(grad != 0.0) for grad in grads), [v.path for v, g in zip(model.trainable_variables, grads)
                                                        if not np.any(g != 0.0)]
    optimizer.apply_gradients(zip([ops.convert_to_tensor(g) for g in grads], model.trainable_variables))
    changed = [not np.array_equal(b, v.numpy()) for b, v in zip(before, model.trainable_variables)]
    assert sum(changed) > len(changed) // 2


@pytest.mark.parametrize("name,operator", [
    ("cnn3", {"layer": "decoupled", "magnitude": "tanh", "angular": "cosine"}),
    ("spherenet_resnet32", {"layer": "sphere", "angular": "linear"}),
    ("opt_cnn6", {"layer": "opt", "orthogonalization": "gram_schmidt"}),
    ("convnorm_resnet18", None),  # the registered default: ConvNorm2D in every slot
    ("modified_resnet18", {"layer": "decoupled", "magnitude": "linear", "angular": "cosine"}),
    ("resnet50", {"layer": "sphere", "angular": "cosine"}),
])
def test_one_train_step_has_finite_gradients(name, operator):
    kwargs = {} if operator is None else {"operator": operator}
    if "resnet32" in name or name in ("convnorm_resnet18", "resnet50"):
        kwargs["blocks_per_stage"] = 1  # same slots, shorter
    model, shape = _tiny(name, **kwargs)
    _finite_gradient_step(model, shape)


def _trainable(model):
    return sum(int(np.prod(v.shape)) for v in model.trainable_variables)


@pytest.mark.structure_only
def test_parameter_counts_match_the_papers_tables():
    # SphereNet CNN-9 (App. Table 5), CIFAR 32×32: three pools -> 4×4×128 = 2048 into FC-256.
    convs = 9 * (3 * 64 + 64 * 64 + 64 * 64) + 9 * (64 * 96 + 96 * 96 + 96 * 96) + 9 * (96 * 128 + 2 * 128 * 128)
    bns = 2 * (3 * 64 + 3 * 96 + 3 * 128)
    fc = 2048 * 256 + 2 * 256
    cls = 256 * 10 + 10
    model = models.create_model("cnn9", input_shape=(32, 32, 3), num_classes=10)
    assert _trainable(model) == convs + bns + fc + cls == 1_231_242

    # DCNet plain CNN-9 (App. Table 9): 64/128/256, 4×4×256 = 4096 into FC-512, CIFAR-100.
    convs = 9 * (3 * 64 + 2 * 64 * 64 + 64 * 128 + 2 * 128 * 128 + 128 * 256 + 2 * 256 * 256)
    bns = 2 * (3 * 64 + 3 * 128 + 3 * 256)
    model = models.create_model("dcnet_cnn9", input_shape=(32, 32, 3), num_classes=100)
    assert _trainable(model) == convs + bns + 4096 * 512 + 2 * 512 + 512 * 100 + 100

    # DCNet adversarial CNN-9: 32/64/128, FC 256, no BN, so every conv and FC carries a bias.
    convs = 9 * (3 * 32 + 2 * 32 * 32 + 32 * 64 + 2 * 64 * 64 + 64 * 128 + 2 * 128 * 128) + 3 * (32 + 64 + 128)
    model = models.create_model("dcnet_cnn9_adv", input_shape=(32, 32, 3), num_classes=10)
    assert _trainable(model) == convs + 2048 * 256 + 256 + 256 * 10 + 10
    assert not [l for l in model.layers if isinstance(l, keras.layers.BatchNormalization)]

    # OPT CNN-6 with plain convs (wy1iu/OPT): six [3×3,64], FC 64 (4×4×64 = 1024 in), CIFAR-100.
    convs = 9 * (3 * 64 + 5 * 64 * 64) + 2 * 6 * 64
    model = models.create_model("opt_cnn6", input_shape=(32, 32, 3), num_classes=100)
    assert _trainable(model) == convs + 1024 * 64 + 2 * 64 + 64 * 100 + 100

    # L-Softmax's MNIST 2-D net (Table 2.1): [5×5] convs 32/64/128 ×2, PReLU per channel, 3×3×128 -> FC 2.
    convs = 25 * (1 * 32 + 32 * 32 + 32 * 64 + 64 * 64 + 64 * 128 + 128 * 128)
    bns = 2 * (2 * 32 + 2 * 64 + 2 * 128)  # BN γ, β per channel
    prelu = 2 * (32 + 64 + 128)  # one slope per channel per conv
    model = models.create_model("mnist_2d", num_classes=10)
    assert _trainable(model) == convs + bns + prelu + (1152 * 2 + 2) + (2 * 10 + 10)

    # SphereNet ResNet-32 (App. Table 6, Sec. 4.2): stem 64, 5 blocks at 64/96/128, 1×1 projections.
    total = 9 * 3 * 64 + 2 * 64
    c = 64
    for w in (64, 96, 128):
        for b in range(5):
            total += 9 * c * w + 2 * w + 9 * w * w + 2 * w
            if c != w:
                total += c * w + 2 * w
            c = w
    model = models.create_model("spherenet_resnet32", input_shape=(32, 32, 3), num_classes=10)
    assert _trainable(model) == total + 128 * 10 + 10

    # DCNet's modified ResNet-18 (App. Table 9), ImageNet classes.
    total = 49 * 3 * 128 + 2 * 128
    c = 128
    for w, units in ((128, 1), (256, 2), (512, 3), (1024, 0)):
        total += 9 * c * w + 2 * w + units * 2 * (9 * w * w + 2 * w)
        c = w
    model = models.create_model("modified_resnet18", input_shape=(64, 64, 3), num_classes=1000)
    assert _trainable(model) == total + 1024 * 1000 + 1000


@pytest.mark.structure_only
def test_standard_resnet18_has_the_published_parameter_count():
    # torchvision's resnet18 (He et al. 2016, ImageNet, 1000 classes): 11,689,512 parameters.
    model = models.create_model("resnet18", num_classes=1000)
    assert _trainable(model) == 11_689_512
    assert model.input_shape == (None, 224, 224, 3)
    assert model.get_layer("conv0").kernel_size == (7, 7) and model.get_layer("conv0").strides == (2, 2)
    cifar = models.create_model("resnet18", input_shape=(32, 32, 3), num_classes=1000, stem="cifar")
    # CIFAR stem: 3×3×3×64 instead of 7×7×3×64, no pooling (kuangliu/pytorch-cifar layout).
    assert _trainable(cifar) == 11_689_512 - 49 * 3 * 64 + 9 * 3 * 64
    assert "pool0" not in [l.name for l in cifar.layers]


def _resnet50_closed_form(num_classes=1000):
    """He et al. (2016) Table 1's ResNet-50 counted by hand: convs without biases, BN γ and β, the classifier."""
    total = 49 * 3 * 64 + 2 * 64  # conv1 7×7/2, 64
    channels = 64
    for width, count in ((64, 3), (128, 4), (256, 6), (512, 3)):
        for i in range(count):
            total += channels * width + 2 * width  # 1×1
            total += 9 * width * width + 2 * width  # 3×3
            total += width * 4 * width + 2 * 4 * width  # 1×1, ×4
            if i == 0:
                total += channels * 4 * width + 2 * 4 * width  # projection shortcut
            channels = 4 * width
    return total + 2048 * num_classes + num_classes


@pytest.mark.structure_only
def test_resnet50_has_the_published_parameter_count_and_keras_applications_layout():
    model = models.create_model("resnet50", num_classes=1000)
    # torchvision's resnet50: 25,557,032 parameters (He et al. 2016: "25.6M").
    assert _trainable(model) == _resnet50_closed_form() == 25_557_032
    assert model.input_shape == (None, 224, 224, 3) and model.get_layer("avg_pool").output.shape[-1] == 2048
    # keras.applications.ResNet50 (v1, He et al.'s Caffe layout) has the same conv kernels, plus a bias in
    # every conv, which the BN after it makes redundant (ours have none).
    reference = keras.applications.ResNet50(weights=None, include_top=True, classes=1000)
    ref_convs = [l for l in reference.layers if isinstance(l, keras.layers.Conv2D)]
    convs = _convs(model)
    assert sorted(tuple(c.kernel.shape) for c in convs) == sorted(tuple(c.kernel.shape) for c in ref_convs)
    assert not any(c.use_bias for c in convs)
    ref_biases = sum(int(np.prod(c.bias.shape)) for c in ref_convs)
    assert _trainable(reference) - ref_biases == _trainable(model)
    # Stage strides: the first 1×1 conv of stages 2-4 sees x[:, ::2, ::2] (stride-2 conv), the 3×3 convs stride 1.
    for stage, size in ((1, 56), (2, 28), (3, 14), (4, 7)):
        assert model.get_layer(f"stage{stage}_block1_conv1").output.shape[1:3] == (size, size)
        assert model.get_layer(f"stage{stage}_block1_conv2").strides == (1, 1)
    assert model.get_layer("stage2_block1_conv1_subsample").strides == (2, 2)


def test_bottleneck_block_matches_a_numpy_forward():
    """One bottleneck block (stride 2, projection shortcut, `batch_norm=False` so every conv has a bias) against
    NumPy convolutions with the layers' own weights: 1×1/2 → ReLU → 3×3 → ReLU → 1×1 (×4), plus the 1×1/2
    projection, then ReLU."""
    inputs = keras.Input((6, 6, 3))
    outputs = models.resnet.bottleneck_block(inputs, 2, 2, None, None, False, True, "relu", name="b")
    block = keras.Model(inputs, outputs)
    x = _images((6, 6, 3), n=2, seed=5) - 0.5
    got = ops.convert_to_numpy(block(x))

    def conv(t, layer):
        kernel, bias = (ops.convert_to_numpy(w) for w in layer.weights)
        k = kernel.shape[0]
        pad = k // 2
        padded = np.pad(t, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
        out = np.zeros((*t.shape[:3], kernel.shape[-1]))
        for i in range(t.shape[1]):
            for j in range(t.shape[2]):
                patch = padded[:, i:i + k, j:j + k, :]
                out[:, i, j] = np.tensordot(patch, kernel, axes=([1, 2, 3], [0, 1, 2])) + bias
        return out

    sub = x[:, ::2, ::2]
    y = np.maximum(conv(sub, block.get_layer("b_conv1")), 0)
    y = np.maximum(conv(y, block.get_layer("b_conv2")), 0)
    y = conv(y, block.get_layer("b_conv3"))
    expected = np.maximum(y + conv(sub, block.get_layer("b_shortcut")), 0)
    assert got.shape == (2, 3, 3, 8)
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.structure_only
def test_opt_mlp_layout_and_operator_in_the_hidden_layers():
    # Thesis App. F.3: 784 -> 256 -> 256 -> 10, biases, ReLU; OPT in the hidden layers, a plain Dense classifier.
    model = models.create_model("opt_mlp")
    assert model.input_shape == (None, 28, 28, 1)
    assert _trainable(model) == (784 * 256 + 256) + (256 * 256 + 256) + (256 * 10 + 10) == 269_322
    assert [type(l) for l in model.layers if isinstance(l, keras.layers.Dense)] == [keras.layers.Dense] * 3
    assert not [l for l in model.layers if isinstance(l, keras.layers.BatchNormalization)]
    normal = {"class_name": "RandomNormal", "config": {"stddev": 1.0}}
    opt_model = models.create_model("opt_mlp", operator={"layer": "opt", "orthogonalization": "gram_schmidt",
                                                         "fixed_kernel_initializer": normal})
    hidden = [opt_model.get_layer(n) for n in ("fc1", "fc2")]
    assert all(isinstance(l, layers.OPTDense) for l in hidden)
    assert [tuple(l.fixed_kernel.shape) for l in hidden] == [(784, 256), (256, 256)]
    assert type(opt_model.get_layer("logits")) is keras.layers.Dense
    # V ~ N(0, 1): the fixed neurons' spread is the initializer's (std 1.0, not He's sqrt(2/784)).
    assert 0.95 < float(np.std(ops.convert_to_numpy(hidden[0].fixed_kernel))) < 1.05
    x = _images((28, 28, 1), n=3)
    flat = x.reshape(3, -1)
    w1 = ops.convert_to_numpy(hidden[0].effective_kernel())
    probe = keras.Model(opt_model.input, opt_model.get_layer("relu_fc1").output)
    np.testing.assert_allclose(ops.convert_to_numpy(probe(x)), np.maximum(flat @ w1, 0), rtol=1e-4, atol=1e-3)


@pytest.mark.structure_only
def test_fig3c_widths_and_width_multiplier():
    for widths in models.plain_cnn.FIG3C_WIDTHS:
        model = models.create_model("cnn9", widths=widths)
        assert [c.filters for c in _convs(model)] == [w for w in widths for _ in range(3)]
    half = models.create_model("cnn9", width_multiplier=0.5)
    assert [c.filters for c in _convs(half)] == [32] * 3 + [48] * 3 + [64] * 3


def test_conv_norm_carries_its_own_batch_norm():
    model, _ = _tiny("convnorm_resnet18")
    assert not [l for l in model.layers if isinstance(l, keras.layers.BatchNormalization)]
    assert all(c.batch_norm for c in _convs(model))
    model, _ = _tiny("convnorm_resnet18", batch_norm=False)
    assert not any(c.batch_norm for c in _convs(model))


def test_sphere_norm_and_ablation_switches():
    # SphereNorm (SphereNet Fig. 5): cosine SphereConv in place of BN; no-ReLU (Table 3).
    model, shape = _tiny("cnn9", operator={"layer": "sphere", "angular": "cosine", "rescale": True},
                         batch_norm=False, relu=False)
    kinds = {type(l) for l in model.layers}
    assert keras.layers.BatchNormalization not in kinds and keras.layers.ReLU not in kinds
    assert all(c.get_config()["rescale"] for c in _convs(model))
    out = model(_images(shape), training=True)
    assert tuple(out.shape) == (2, 5)


def test_margin_head_takes_labels_as_second_input(tmp_path):
    model, shape = _tiny("cnn9", head={"layer": "margin", "loss_type": "asoftmax", "margin": 4,
                                       "annealing": "mnist"})
    assert models.needs_labels(model) and not models.needs_labels(_tiny("cnn3")[0])
    assert sorted(model.input) == ["images", "labels"]
    _finite_gradient_step(model, shape, labels_input=True)
    head = model.get_layer("logits")
    assert isinstance(head, layers.MarginHead) and int(head.iteration.numpy()) == 1
    x, y = _images(shape, n=3), np.array([0, 1, 2], np.int32)
    # At inference the labels are ignored: plain logits, the same for any labels.
    a = model(models.pack_inputs(x, y), training=False)
    b = model(models.pack_inputs(x, np.zeros(3, np.int32)), training=False)
    a, b = ops.convert_to_numpy(a), ops.convert_to_numpy(b)
    np.testing.assert_allclose(a, b)
    path = str(tmp_path / "margin.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    np.testing.assert_allclose(ops.convert_to_numpy(restored(models.pack_inputs(x, y))), a, rtol=1e-5, atol=1e-5)
    assert int(restored.get_layer("logits").iteration.numpy()) == 1


def test_head_as_layer_instance_and_as_registry_name():
    model, shape = _tiny("opt_cnn6", head=layers.SphereDense(5, angular="cosine", name="cls"))
    assert isinstance(model.get_layer("cls"), layers.SphereDense)
    model, shape = _tiny("opt_cnn6", head={"layer": "decoupled", "magnitude": "linear"})
    assert isinstance(model.get_layer("logits"), layers.DecoupledDense)
    assert tuple(model(_images(shape)).shape) == (2, 5)


@pytest.mark.parametrize("name,operator", [
    ("spherenet_resnet32", {"layer": "opt", "orthogonalization": "cayley"}),
    ("convnorm_resnet18", None),
])
def test_keras_file_round_trip(tmp_path, name, operator):
    kwargs = {} if operator is None else {"operator": operator}
    model, shape = _tiny(name, blocks_per_stage=1, **kwargs)
    x = _images(shape, n=3)
    model(x, training=True)  # move BN / ConvNorm running statistics off their initial values
    path = str(tmp_path / f"{name}.keras")
    model.save(path)
    restored = keras.models.load_model(path)
    np.testing.assert_allclose(ops.convert_to_numpy(restored(x, training=False)),
                               ops.convert_to_numpy(model(x, training=False)), rtol=1e-5, atol=1e-5)
    assert [type(c) for c in _convs(restored)] == [type(c) for c in _convs(model)]


def test_typos_fail_at_build_time_naming_the_choices():
    with pytest.raises(ValueError, match=r"operator\['layer'\].*'conv_norm'.*'opt'.*Received.*'spere'"):
        models.create_model("resnet32", operator={"layer": "spere"})
    with pytest.raises(ValueError, match=r"`shortcut_operator\['layer'\]`.*Received: shortcut_op.*'optt'"):
        models.create_model("resnet32", shortcut_operator="optt")
    with pytest.raises(ValueError, match=r"`orthogonalization`.*'gram_schmidt'.*Received: orthogonalization='qr_typo'"):
        models.create_model("opt_cnn6", operator={"layer": "opt", "orthogonalization": "qr_typo"})
    with pytest.raises(ValueError, match=r"head\['layer'\].*'margin'.*Received.*'arcface'"):
        models.create_model("cnn3", head={"layer": "arcface"})
    with pytest.raises(ValueError, match=r"fc_operator\['layer'\].*'sphere'.*Received.*'dense2'"):
        models.create_model("cnn9", fc_operator={"layer": "dense2"})
    with pytest.raises(ValueError, match=r"SphereConv2D.*'angulr'"):
        models.create_model("cnn3", operator={"layer": "sphere", "angulr": "cosine"})
    with pytest.raises(ValueError, match=r"`loss_type`.*'arcface'.*Received: loss_type='arcfase'"):
        models.create_model("cnn3", head={"layer": "margin", "loss_type": "arcfase"})
    with pytest.raises(ValueError, match=r"`stem`.*\('cifar', 'imagenet'\).*'cifr'"):
        models.create_model("resnet18", stem="cifr")
    with pytest.raises(ValueError, match=r"`activation`.*'relu', 'prelu'"):
        models.create_model("cnn3", activation="gelu")
    with pytest.raises(ValueError, match=r"`width_multiplier`"):
        models.create_model("cnn3", width_multiplier=0)
    with pytest.raises(ValueError, match=r"`blocks_per_stage`.*3 counts"):
        models.create_model("resnet32", blocks_per_stage=(5, 5))
    with pytest.raises(ValueError, match=r"`input_shape`: expected \(height, width, channels\)"):
        models.create_model("cnn3", input_shape=(32, 32))
    with pytest.raises(ValueError, match=r"Unknown model 'resnet34'.*resnet32"):
        models.create_model("resnet34")


def test_two_d_feature_nets_end_in_a_signed_2d_feature():
    for name, fcs in (("mnist_2d", ["fc"]), ("dcnet_mnist_2d", ["fc", "fc2"])):
        model = models.create_model(name, num_classes=10, width_multiplier=1 / 8)
        assert [model.get_layer(n).units for n in fcs][-1] == 2
        after = [l.name for l in model.layers][[l.name for l in model.layers].index(fcs[-1]) + 1:]
        assert after == ["logits"], after  # no BN / activation clipping the plotted feature


def test_same_seed_same_model():
    weights = []
    for _ in range(2):
        keras.utils.set_random_seed(7)
        model, _ = _tiny("opt_cnn6", operator={"layer": "opt"}, fc_operator={"layer": "opt"})
        weights.append([w.numpy() for w in model.weights])
    for a, b in zip(*weights):
        np.testing.assert_array_equal(a, b)
    fixed = [l.fixed_kernel.numpy() for l in walk.iter_layers(model) if isinstance(l, layers.OPTLayer)]
    assert len(fixed) == 7 and not np.array_equal(fixed[1], fixed[2])  # each layer draws its own V


def test_zero_pad_shortcut_matches_numpy_and_has_no_parameters():
    x = np.random.default_rng(4).standard_normal((2, 6, 6, 3)).astype(np.float32)
    inputs = keras.Input((6, 6, 3))
    out = keras.Model(inputs, models.resnet.zero_pad_shortcut(inputs, 5, 2, name="s"))(x)
    expected = np.concatenate([x[:, ::2, ::2, :], np.zeros((2, 3, 3, 2), np.float32)], axis=-1)
    np.testing.assert_array_equal(ops.convert_to_numpy(out), expected)
    projection = models.create_model("resnet32", widths=(16, 32, 64), num_classes=10)
    option_a = models.create_model("resnet32", widths=(16, 32, 64), num_classes=10, shortcut="zero_pad")
    assert len(_convs(option_a)) == 31
    # The two 1×1 projections (16->32, 32->64) and their BNs are all that differ.
    assert _trainable(projection) - _trainable(option_a) == 16 * 32 + 2 * 32 + 32 * 64 + 2 * 64
    # He et al.'s CIFAR ResNet-32 (option A): 0.46M parameters (CVPR 2016, Table 6).
    assert round(_trainable(option_a) / 1e6, 2) == 0.46
    with pytest.raises(ValueError, match=r"`shortcut`.*\('projection', 'zero_pad'\).*'zero'"):
        models.create_model("resnet32", shortcut="zero")


def test_strided_projection_shortcut_is_the_1x1_conv_of_the_subsampled_input():
    """`x[:, ::2, ::2]` then a 1×1 conv: what a stride-2 1×1 conv computes (He et al. 2016, option B)."""
    model = models.create_model("resnet18", input_shape=(32, 32, 3), num_classes=3, width_multiplier=1 / 16)
    subsample = model.get_layer("stage2_block1_shortcut_subsample")
    conv = model.get_layer("stage2_block1_shortcut")
    probe = keras.Model(model.input, [subsample.input, conv.output])
    x = _images((32, 32, 3), n=2, seed=3)
    block_input, shortcut = (ops.convert_to_numpy(t) for t in probe(x))
    kernel = ops.convert_to_numpy(conv.kernel)[0, 0]  # (c_in, c_out)
    expected = np.zeros(shortcut.shape)
    for n in range(block_input.shape[0]):
        for i in range(shortcut.shape[1]):
            for j in range(shortcut.shape[2]):
                expected[n, i, j] = block_input[n, 2 * i, 2 * j] @ kernel
    np.testing.assert_allclose(shortcut, expected, rtol=1e-5, atol=1e-5)


def test_narrow_resnet18_trains_at_imagenet_size():
    """ResNet-18 at width 1/8 on 224×224: a strided 1×1 shortcut conv (8 -> 16 channels at 56×56) used to abort
    the process in TensorFlow 2.21's oneDNN filter gradient; in a subprocess, so a crash fails only this test."""
    import subprocess  # noqa: PLC0415
    import sys  # noqa: PLC0415

    script = (
        "import numpy as np, keras\n"
        "from sphere_tf import models\n"
        "m = models.create_model('resnet18', input_shape=(224, 224, 3), num_classes=4, width_multiplier=0.125)\n"
        "m.compile(optimizer='sgd', loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))\n"
        "x = np.random.default_rng(0).normal(size=(4, 224, 224, 3)).astype('float32')\n"
        "m.fit(x, np.arange(4), batch_size=2, epochs=1, verbose=0)\n"
        "print('trained')\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run([sys.executable, "-c", script], cwd=root, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
    assert proc.returncode == 0 and "trained" in proc.stdout, (proc.returncode, proc.stderr[-2000:])
