"""Residual networks of the SphereNet, DCNet and ConvNorm papers, any operator in every conv.

| name                 | paper, table                                  | stem             | widths × blocks    |
|----------------------|-----------------------------------------------|------------------|--------------------|
| `resnet32`           | DCNet App. Table 9; SphereNet Table 6 (§4.3)  | 3×3, 96          | 96/192/384 × 5     |
| `spherenet_resnet32` | SphereNet App. Table 6 (§4.2, Fig. 3a)        | 3×3, 64          | 64/96/128 × 5      |
| `resnet18`           | He et al. 2016; DCNet App. Table 9 (standard) | 7×7/2, 64; pool  | 64/…/512 × 2       |
| `resnet50`           | He et al. 2016, Table 1; CoMHE Table 6.7      | 7×7/2, 64; pool  | bottleneck 64/…/512 × 3/4/6/3 |
| `convnorm_resnet18`  | ConvNorm (NeurIPS 2021) §5, CIFAR variant     | 3×3, 64          | 64/…/512 × 2       |
| `sphere_resnet18_v1` | SphereNet App. Table 6, §4.6 (ImageNet)       | 7×7/2, 256; pool | 256/512/768/1024 × 2 |
| `sphere_resnet18_v2` | the same, ordinary 1×1 shortcut convs         | 7×7/2, 256; pool | 256/512/768/1024 × 2 |
| `modified_resnet18`  | DCNet App. Table 9 (SphereFace-style)         | 7×7/2, 128; pool | `build_modified_resnet18` |

The ConvNorm network follows shengliu66/ConvNorm `models/resnet.py`.

Basic block (He et al., "Deep Residual Learning", CVPR 2016): conv 3×3 → BN →
ReLU → conv 3×3 → BN, plus the shortcut, then ReLU. The first block of a stage
downsamples with stride 2 in its first conv; when the shape changes the
shortcut is a 1×1 conv (with `shortcut_operator`, default the model's
`operator`) → BN. Global average pooling feeds the head.

Bottleneck block (`block='bottleneck'`, ResNet-50; He et al. Fig. 5 right): 1×1
→ 3×3 → 1×1 (×4 channels) convs, each with BN, ReLU after the first two, the
stride in the first 1×1 conv; a 1×1 projection shortcut where the shape changes
(the first block of every stage). `operator` goes to all three convs,
`shortcut_operator` to the projections.

`stem='imagenet'` is the 7×7 stride-2 conv and 3×3 stride-2 max-pool of the
ImageNet papers; `stem='cifar'` is a 3×3 stride-1 conv without pooling (the
CIFAR ResNet-18 of ConvNorm, kuangliu/pytorch-cifar's layout).

Note: SphereNet does not say which shortcut its CIFAR ResNets use when the
width changes ("essentially the same as" He et al.); the 1×1 projection is the
default here, so that shortcut slot can carry SphereConv as in SphereResNet-18
v1; `shortcut='zero_pad'` gives He et al.'s parameter-free option A.
"""

import keras

from sphere_tf import validation
from sphere_tf.models import blocks
from sphere_tf.models import operators
from sphere_tf.models.registry import register_model

STEMS = blocks.STEMS
# Operator kinds whose 1×1 output at a position depends on the input at that position only (ConvNorm's
# preconditioning looks at the whole feature map, so its strided shortcut stays one strided conv).
_POINTWISE_KINDS = ("conv2d", "sphere", "decoupled", "opt")
SHORTCUTS = ("projection", "zero_pad")
# Output channels of a bottleneck block per bottleneck width (He et al. 2016, Table 1: 64 -> 256).
BOTTLENECK_EXPANSION = 4


def _stem(x, stem, width, operator, batch_norm, relu, activation):
    return blocks.stem_unit(x, stem, width, operator, batch_norm, relu, activation)


def zero_pad_shortcut(x, width, strides, name):
    """He et al.'s option-A shortcut: subsample by `strides`, append zero channels up to `width`.

    As `shortcutType 'A'` of facebook/fb.resnet.torch `models/resnet.lua` (the
    subsampled input concatenated with zeros); parameter-free.
    """
    extra = width - x.shape[-1]
    if extra < 0:
        raise ValueError(f"A zero-padding shortcut cannot reduce channels ({x.shape[-1]} -> {width}); "
                         "use shortcut='projection'.")
    if strides != 1:
        x = keras.layers.MaxPooling2D(1, strides=strides, name=f"{name}_subsample")(x)  # x[:, ::s, ::s]
    if extra:
        rows, cols, channels = x.shape[1:]
        x = keras.layers.Reshape((rows, cols, channels, 1), name=f"{name}_expand")(x)
        x = keras.layers.ZeroPadding3D(((0, 0), (0, 0), (0, extra)), name=f"{name}_pad")(x)
        x = keras.layers.Reshape((rows, cols, width), name=f"{name}_squeeze")(x)
    return x


def _pointwise_strided_input(x, operator, strides, name):
    """`(input, strides)` of a strided 1×1 conv of `operator` on `x`: for pointwise kinds `x[:, ::s, ::s]`
    (a 1×1 max-pool `{name}_subsample`) with stride 1, else `x` with `strides`.

    A strided 1×1 conv is the 1×1 conv of x[:, ::s, ::s]. Subsampling first avoids a heap corruption in
    TensorFlow 2.21's oneDNN Conv2DBackpropFilter for strided 1×1 convs over few channels (e.g. 8 -> 16 at
    56×56: ResNet-18 at width 1/8).
    """
    if strides != 1 and operators.kind(operator) in _POINTWISE_KINDS:
        return keras.layers.MaxPooling2D(1, strides=strides, name=f"{name}_subsample")(x), 1
    return x, strides


def _shortcut(x, width, strides, shortcut_operator, batch_norm, shortcut, name):
    """The block's shortcut: `x` itself, or where the shape changes a 1×1 projection conv → BN (He et al.'s
    option B) or the zero-padding shortcut (option A)."""
    if strides == 1 and x.shape[-1] == width:
        return x
    if shortcut == "zero_pad":
        return zero_pad_shortcut(x, width, strides, name=f"{name}_shortcut")
    x_in, shortcut_strides = _pointwise_strided_input(x, shortcut_operator, strides, f"{name}_shortcut")
    return blocks.conv_unit(x_in, shortcut_operator, width, 1, strides=shortcut_strides, batch_norm=batch_norm,
                            relu=False, name=f"{name}_shortcut")


def basic_block(x, width, strides, operator, shortcut_operator, batch_norm, relu, activation, name,
                shortcut="projection"):
    """One post-activation basic block; a projection (or zero-padding) shortcut when the shape changes."""
    shortcut_x = _shortcut(x, width, strides, shortcut_operator, batch_norm, shortcut, name)
    y = blocks.conv_unit(x, operator, width, 3, strides=strides, batch_norm=batch_norm, relu=relu,
                         activation=activation, name=f"{name}_conv1")
    y = blocks.conv_unit(y, operator, width, 3, batch_norm=batch_norm, relu=False, name=f"{name}_conv2")
    y = keras.layers.Add(name=f"{name}_add")([y, shortcut_x])
    if relu:
        y = blocks.activation_layer(y, activation, f"{name}_out")
    return y


def bottleneck_block(x, width, strides, operator, shortcut_operator, batch_norm, relu, activation, name,
                     shortcut="projection"):
    """One post-activation bottleneck block of He et al. (CVPR 2016, Fig. 5 right, Table 1):

    ```
    conv1 [1×1, width]/s → BN → ReLU → conv2 [3×3, width] → BN → ReLU → conv3 [1×1, 4·width] → BN,
    plus the shortcut (a 1×1/s projection → BN where the shape changes), then ReLU
    ```

    The stride sits in the first 1×1 conv, as in He et al.'s released Caffe models and
    `keras.applications.ResNet50` (torchvision's "v1.5" moves it to the 3×3 conv; the parameter count is
    the same). The block's output has `BOTTLENECK_EXPANSION · width` channels.
    """
    out_width = BOTTLENECK_EXPANSION * width
    shortcut_x = _shortcut(x, out_width, strides, shortcut_operator, batch_norm, shortcut, name)
    y, conv1_strides = _pointwise_strided_input(x, operator, strides, f"{name}_conv1")
    y = blocks.conv_unit(y, operator, width, 1, strides=conv1_strides, batch_norm=batch_norm, relu=relu,
                         activation=activation, name=f"{name}_conv1")
    y = blocks.conv_unit(y, operator, width, 3, batch_norm=batch_norm, relu=relu, activation=activation,
                         name=f"{name}_conv2")
    y = blocks.conv_unit(y, operator, out_width, 1, batch_norm=batch_norm, relu=False, name=f"{name}_conv3")
    y = keras.layers.Add(name=f"{name}_add")([y, shortcut_x])
    if relu:
        y = blocks.activation_layer(y, activation, f"{name}_out")
    return y


BLOCKS = {"basic": basic_block, "bottleneck": bottleneck_block}


def _per_stage(value, name, stages, minimum):
    """An int (every stage) or one int per stage, each >= `minimum`, as a tuple."""
    if not isinstance(value, (list, tuple)):
        return (validation.integer(value, name, minimum=minimum),) * stages
    if len(value) != stages:
        raise validation.invalid_argument(name, f"{stages} counts, one per stage", value)
    return tuple(validation.integer(n, f"{name}[{i}]", minimum=minimum) for i, n in enumerate(value))


def _trunk(input_shape, widths, stem, stem_width, operator, batch_norm, relu, activation, width_multiplier):
    """Checks the shared arguments; returns the image input, the stem's output and the scaled widths."""
    multiplier = blocks.check_common(batch_norm, relu, activation, width_multiplier)
    validation.one_of(stem, "stem", STEMS)
    widths = blocks.scale_widths(widths, multiplier)
    stem_width = widths[0] if stem_width is None else blocks.scale_widths(stem_width, multiplier, "stem_width")[0]
    operators.validate_operator(operator)
    images = blocks.images_input(input_shape)
    return images, _stem(blocks.pixels(images), stem, stem_width, operator, batch_norm, relu, activation), widths


def build_resnet(
    input_shape,
    num_classes,
    widths,
    blocks_per_stage,
    stem="cifar",
    stem_width=None,
    operator=None,
    shortcut_operator=None,
    shortcut="projection",
    batch_norm=True,
    relu=True,
    activation="relu",
    head=None,
    width_multiplier=1.0,
    name="resnet",
    block="basic",
):
    """Builds a ResNet of basic or bottleneck blocks: stem, `len(widths)` stages, global average pool, head.

    Args:
        input_shape: tuple, e.g. (32, 32, 3).
        num_classes: int, classifier width.
        widths: tuple of ints, the width of each stage (before `width_multiplier`); for bottleneck blocks
            the 3×3 convs' width (the stage outputs `BOTTLENECK_EXPANSION` times as many channels).
        blocks_per_stage: int or tuple of ints, blocks per stage.
        stem: 'cifar' (3×3 conv) or 'imagenet' (7×7/2 conv, 3×3/2 max-pool).
        stem_width: int, the stem's filters (None: `widths[0]`).
        operator: operator spec of every 3×3/7×7 conv (`sphere_tf.models.operators`).
        shortcut_operator: operator spec of the 1×1 shortcut convs (None: `operator`).
        shortcut: 'projection' (1×1 conv → BN where the shape changes) or 'zero_pad'
            (He et al.'s parameter-free option A; no shortcut convs then).
        batch_norm: bool, BatchNorm after every conv.
        relu: bool, the activations (off for the no-ReLU ablations).
        activation: 'relu' or 'prelu'.
        head: the classifier (`sphere_tf.models.blocks`): None (Dense), a dict or a layer.
        width_multiplier: float > 0, scales every width.
        name: str, the model's name.
        block: 'basic' (two 3×3 convs, `basic_block`) or 'bottleneck' (1×1, 3×3, 1×1 ×4,
            `bottleneck_block`; ResNet-50).

    Returns:
        A functional `keras.Model`.
    """
    block_fn = BLOCKS[validation.one_of(block, "block", tuple(BLOCKS))]
    if shortcut_operator is None:
        shortcut_operator = operator
    operators.validate_operator(shortcut_operator, "shortcut_operator")
    validation.one_of(shortcut, "shortcut", SHORTCUTS)
    images, x, widths = _trunk(input_shape, widths, stem, stem_width, operator, batch_norm, relu, activation,
                               width_multiplier)
    counts = _per_stage(blocks_per_stage, "blocks_per_stage", len(widths), minimum=1)
    for stage, (width, count) in enumerate(zip(widths, counts)):
        for i in range(count):
            strides = 2 if stage > 0 and i == 0 else 1
            x = block_fn(x, width, strides, operator, shortcut_operator, batch_norm, relu, activation,
                         name=f"stage{stage + 1}_block{i + 1}", shortcut=shortcut)
    x = keras.layers.GlobalAveragePooling2D(name="avg_pool")(x)
    return blocks.finish(images, x, head, num_classes, name)


def build_modified_resnet18(
    input_shape,
    num_classes,
    widths=(128, 256, 512, 1024),
    residual_units=(1, 2, 3, 0),
    stem="imagenet",
    stem_width=128,
    operator=None,
    batch_norm=True,
    relu=True,
    activation="relu",
    head=None,
    width_multiplier=1.0,
    name="modified_resnet18",
):
    """DCNet's modified ResNet-18 (App. Table 9), SphereFace-style stages.

    ```
    conv0 [7×7,128]/2, 3×3/2 max-pool
    stage s: conv [3×3, widths[s]]/2, then residual_units[s] × ([3×3; 3×3] + identity)
    1 + (1+2) + (1+4) + (1+6) + 1 = 17 convs, average pool, classifier = 18 layers
    ```
    Every shortcut is an identity (the stage's strided conv changes the shape), so
    there are no 1×1 convs. The arguments are those of `build_resnet`.
    """
    images, x, widths = _trunk(input_shape, widths, stem, stem_width, operator, batch_norm, relu, activation,
                               width_multiplier)
    units = _per_stage(residual_units, "residual_units", len(widths), minimum=0)
    for stage, (width, count) in enumerate(zip(widths, units)):
        x = blocks.conv_unit(x, operator, width, 3, strides=2, batch_norm=batch_norm, relu=relu,
                             activation=activation, name=f"stage{stage + 1}_down")
        for i in range(count):
            x = basic_block(x, width, 1, operator, operator, batch_norm, relu, activation,
                            name=f"stage{stage + 1}_block{i + 1}")
    x = keras.layers.GlobalAveragePooling2D(name="avg_pool")(x)
    return blocks.finish(images, x, head, num_classes, name)


def _register(name, doc, defaults, build=build_resnet, input_shape=(32, 32, 3)):
    def builder(input_shape=input_shape, num_classes=10, **kwargs):
        return build(input_shape, num_classes, name=name, **{**defaults, **kwargs})

    builder.__name__ = name
    builder.__doc__ = doc
    return register_model(builder, passes_kwargs_to=build)


_SPHERE_COSINE = {"layer": "sphere", "angular": "cosine"}

_register("resnet32", "ResNet-32 of DCNet App. Table 9 / SphereNet App. Table 6 (Sec. 4.3): 3×3,96 stem, "
          "5 basic blocks at 96/192/384.", dict(widths=(96, 192, 384), blocks_per_stage=5))
_register("spherenet_resnet32", "ResNet-32 of SphereNet App. Table 6 (Sec. 4.2, Table 2, Fig. 3a): 3×3,64 stem, "
          "5 basic blocks at 64/96/128.", dict(widths=(64, 96, 128), blocks_per_stage=5))
_register("resnet18", "Standard ResNet-18 (He et al. 2016; DCNet App. Table 9): 7×7/2 stem + max-pool, "
          "2 basic blocks at 64/128/256/512; `stem='cifar'` for 32×32 inputs.",
          dict(widths=(64, 128, 256, 512), blocks_per_stage=2, stem="imagenet"), input_shape=(224, 224, 3))
_register("resnet50", "Standard ResNet-50 (He et al. 2016, Table 1; CoMHE Table 6.7): 7×7/2 stem + max-pool, "
          "3/4/6/3 bottleneck blocks at 64/128/256/512 (outputs 256/…/2048), stride in the first 1×1 conv.",
          dict(widths=(64, 128, 256, 512), blocks_per_stage=(3, 4, 6, 3), stem="imagenet", block="bottleneck"),
          input_shape=(224, 224, 3))
_register("convnorm_resnet18", "ConvNorm's CIFAR ResNet-18 (shengliu66/ConvNorm `models/resnet.py`): 3×3 stem, "
          "no pool, 2 basic blocks at 64/128/256/512, ConvNorm2D (with its BN) in every conv, shortcuts "
          "included.", dict(widths=(64, 128, 256, 512), blocks_per_stage=2, stem="cifar",
                            operator={"layer": "conv_norm"}))
_register("sphere_resnet18_v1", "SphereResNet-18-v1 (SphereNet §4.6, App. Table 6): 7×7/2,256 stem, 2 blocks at "
          "256/512/768/1024, cosine SphereConv everywhere including the 1×1 shortcuts (the paper pairs it "
          "with cosine W-Softmax: head={'layer': 'margin', 'loss_type': 'wsoftmax'}).",
          dict(widths=(256, 512, 768, 1024), blocks_per_stage=2, stem="imagenet", stem_width=256,
               operator=_SPHERE_COSINE), input_shape=(224, 224, 3))
_register("sphere_resnet18_v2", "SphereResNet-18-v2 (SphereNet §4.6): as v1 with ordinary 1×1 shortcut convs "
          "and a softmax head.", dict(widths=(256, 512, 768, 1024), blocks_per_stage=2, stem="imagenet",
                                      stem_width=256, operator=_SPHERE_COSINE,
                                      shortcut_operator={"layer": "conv2d"}), input_shape=(224, 224, 3))
_register("modified_resnet18", build_modified_resnet18.__doc__.split("\n")[0], {}, build=build_modified_resnet18,
          input_shape=(224, 224, 3))
