"""Plain VGG-style CNNs (conv stages with 2×2 max-pools, hidden FC layers, classifier).

| name             | paper, table                                      | conv stages             | hidden FC  |
|------------------|---------------------------------------------------|-------------------------|------------|
| `cnn3` … `cnn69` | SphereNet (NIPS 2017) App. Table 5 (CNN-N)         | [3×3; 64/96/128]×N/3    | 256        |
| `dcnet_cnn9`     | DCNet (CVPR 2018) App. Table 9, plain CNN-9        | [3×3; 64/128/256]×3     | 512        |
| `dcnet_cnn9_adv` | DCNet App. Table 9, CNN-9 (adversarial), no BN     | [3×3; 32/64/128]×3      | 256        |
| `opt_cnn6/9`     | OPT (CVPR 2021) Table F.1; wy1iu/OPT `opt_gs/architecture.py` | [3×3; 64/64/64]×2 or 3 | 64 |
| `mnist_2d`       | L-Softmax (ICML 2016) Table 2.1, "MNIST (Fig. 2)"  | [5×5; 32/64/128]×2      | 2          |
| `dcnet_mnist_2d` | DCNet App. D (MNIST visualisation)                 | [3×3; 32/64/128]×2      | 256, 2     |
| `small_cnn`      | the Fashion-MNIST network of `sphere_tf/configs/dcnet/`      | [3×3; 32/64]×2          | 128        |

An optional stem (`stem='cifar'`: a 3×3 conv `conv0`; `'imagenet'`: 7×7/2 conv
and 3×3/2 max-pool) comes first. Every conv is 'same' padded, stride 1, followed by BatchNorm and ReLU (each
switchable) and each stage by a 2×2 max-pool with stride 2. SphereNet's
Fig. 3(c) varies the widths of CNN-9 (`FIG3C_WIDTHS`, pass `widths=`);
`width_multiplier` scales any width set (tests use it to shrink models).
"""

import keras

from sphere_tf import validation
from sphere_tf.models import blocks
from sphere_tf.models import operators
from sphere_tf.models.registry import register_model

SPHERENET_WIDTHS = (64, 96, 128)
# SphereNet Fig. 3(c): conv1.x / conv2.x / conv3.x widths of CNN-9 and SphereNet-9.
FIG3C_WIDTHS = ((16, 32, 48), (64, 96, 128), (128, 192, 256), (256, 384, 512))


def build_plain_cnn(
    input_shape,
    num_classes,
    widths=SPHERENET_WIDTHS,
    convs_per_stage=3,
    dense_units=256,
    operator=None,
    batch_norm=True,
    relu=True,
    decoupled_dense=False,
    name="plain_cnn",
    kernel_size=3,
    fc_operator=None,
    head=None,
    width_multiplier=1.0,
    activation="relu",
    feature_bn_relu=True,
    stem=None,
    stem_width=None,
    first_operator=None,
):
    """Builds a plain CNN: `len(widths)` stages of `convs_per_stage` convs 'same', 2×2 max-pool.

    Args:
        input_shape: tuple, e.g. (32, 32, 3).
        num_classes: int, classifier width.
        widths: tuple of ints, filters per stage (before `width_multiplier`).
        convs_per_stage: int.
        dense_units: int or tuple of ints, the hidden FC widths (0 or () for none);
            not scaled by `width_multiplier`.
        operator: operator spec for every conv (`sphere_tf.models.operators`).
        batch_norm: bool, BatchNorm after every conv and hidden FC.
        relu: bool, the activation after every conv and hidden FC (SphereNet Table 3 drops it).
        decoupled_dense: bool, shorthand for `fc_operator=operator`.
        name: str, the model's name.
        kernel_size: int, conv kernel size.
        fc_operator: operator spec of the hidden FC layers; None gives a plain Dense.
        head: the classifier (`sphere_tf.models.blocks`): None (Dense), a dict or a layer.
        width_multiplier: float > 0, scales `widths`.
        activation: 'relu' or 'prelu' (L-Softmax's networks use PReLU).
        feature_bn_relu: bool, BatchNorm/activation after the last hidden FC too
            (False keeps a 2-D feature signed for plotting).
        stem: None (no stem), 'cifar' (a 3×3 conv unit `conv0` before the stages,
            L-Softmax's Conv0 of Table 2.1) or 'imagenet' (7×7/2 conv unit and
            3×3/2 max-pool, OPT's CNN-10 for ImageNet).
        stem_width: int, the stem's filters before `width_multiplier` (None: `widths[0]`).
        first_operator: operator spec of the first conv of the stages (`conv1_1`) only;
            None gives `operator`. OPT's PE-OPT and S-OPT keep full OPT there, where the
            3 input channels admit neither channel blocks nor 144 sampled dimensions.

    Returns:
        A functional `keras.Model` mapping images (and labels, for a `MarginHead`) to logits.
    """
    multiplier = blocks.check_common(batch_norm, relu, activation, width_multiplier)
    widths = blocks.scale_widths(widths, multiplier)
    convs_per_stage = validation.positive_int(convs_per_stage, "convs_per_stage")
    kernel_size = validation.positive_int(kernel_size, "kernel_size")
    if isinstance(dense_units, (list, tuple)):
        dense_units = tuple(validation.positive_int(u, f"dense_units[{i}]") for i, u in enumerate(dense_units))
    else:
        dense_units = (validation.positive_int(dense_units, "dense_units"),) if dense_units else ()
    operators.validate_operator(operator)
    if first_operator is not None:
        operators.validate_operator(first_operator, "first_operator")
    if fc_operator is None:
        fc_operator = operator if decoupled_dense else {"layer": "conv2d"}
    operators.validate_operator(fc_operator, "fc_operator", dense=True)
    images = blocks.images_input(input_shape)
    x = blocks.pixels(images)
    if stem is not None:
        stem_width = widths[0] if stem_width is None else blocks.scale_widths(stem_width, multiplier, "stem_width")[0]
        x = blocks.stem_unit(x, stem, stem_width, operator, batch_norm=batch_norm, relu=relu, activation=activation)
    for stage, width in enumerate(widths):
        for i in range(convs_per_stage):
            spec = first_operator if first_operator is not None and stage == i == 0 else operator
            x = blocks.conv_unit(x, spec, width, kernel_size, batch_norm=batch_norm, relu=relu,
                                 activation=activation, name=f"conv{stage + 1}_{i + 1}")
        x = keras.layers.MaxPooling2D(2, name=f"pool{stage + 1}")(x)
    x = keras.layers.Flatten(name="flatten")(x)
    for i, units in enumerate(dense_units):
        last = i == len(dense_units) - 1
        on = feature_bn_relu or not last
        x = blocks.fc_unit(x, fc_operator, units, batch_norm=batch_norm and on, relu=relu and on,
                           activation=activation, name="fc" if i == 0 else f"fc{i + 1}")
    return blocks.finish(images, x, head, num_classes, name)


def _register(name, doc, convs_per_stage, widths=SPHERENET_WIDTHS, dense_units=256, input_shape=(32, 32, 3),
              **defaults):
    def builder(input_shape=input_shape, num_classes=10, **kwargs):
        kwargs = {"widths": widths, "dense_units": dense_units, **defaults, **kwargs}
        return build_plain_cnn(input_shape, num_classes, convs_per_stage=convs_per_stage, name=name, **kwargs)

    builder.__name__ = name
    builder.__doc__ = doc
    return register_model(builder, passes_kwargs_to=build_plain_cnn)


for _n in (3, 9, 18, 45, 60, 69):
    _register(f"cnn{_n}", f"SphereNet's CNN-{_n} (App. Table 5): [3×3]×{_n // 3} per stage at 64/96/128, "
              "2×2 max-pools, FC 256.", _n // 3)

_register("dcnet_cnn9", "DCNet's plain CNN-9 (App. Table 9): [3×3]×3 per stage at 64/128/256, FC 512.",
          3, widths=(64, 128, 256), dense_units=512)
_register("dcnet_cnn9_adv", "DCNet's adversarial CNN-9 (App. Table 9, §6.2): [3×3]×3 at 32/64/128, FC 256, "
          "no BatchNorm by default.", 3, widths=(32, 64, 128), dense_units=256, batch_norm=False)
_register("opt_cnn6", "OPT's CNN-6 (Table F.1; wy1iu/OPT `opt_gs/architecture.py`): [3×3,64]×2 per stage, FC 64.",
          2, widths=(64, 64, 64), dense_units=64)
_register("opt_cnn9", "OPT's CNN-9 (Table F.1): [3×3,64]×3 per stage, FC 64.",
          3, widths=(64, 64, 64), dense_units=64)
_register("mnist_2d", "The MNIST 2-D-feature net of L-Softmax (Table 2.1, Fig. 2) and SphereFace's "
          "visualisations: [5×5]×2 at 32/64/128, PReLU, FC 2 (no BN/activation on the 2-D feature).",
          2, widths=(32, 64, 128), dense_units=2, input_shape=(28, 28, 1), kernel_size=5,
          activation="prelu", feature_bn_relu=False)
_register("dcnet_mnist_2d", "DCNet's MNIST visualisation net (App. D): [3×3]×2 at 32/64/128, FC 256, FC 2 "
          "(no BN/activation on the 2-D feature).", 2, widths=(32, 64, 128), dense_units=(256, 2),
          input_shape=(28, 28, 1), feature_bn_relu=False)


@register_model(passes_kwargs_to=build_plain_cnn)
def small_cnn(input_shape=(28, 28, 1), num_classes=10, widths=(32, 64), convs_per_stage=2,
              dense_units=128, **kwargs):
    """Two stages of two 3×3 convs (32, 64), FC 128: the Fashion-MNIST network of the DCNet config."""
    return build_plain_cnn(input_shape, num_classes, widths=widths, convs_per_stage=convs_per_stage,
                           dense_units=dense_units, name="small_cnn", **kwargs)
