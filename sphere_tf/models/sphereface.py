"""SphereFace residual networks for face recognition (4/10/20/36/64 layers) with a 512-d embedding.

Liu et al., "SphereFace: Deep Hypersphere Embedding for Face Recognition"
(CVPR 2017), Table 2 = W. Liu's thesis (2020) Table 2.7; the authors' Caffe
model wy1iu/sphereface `train/code/sphereface_model.prototxt` (SphereFace-20)::

    stage s (widths 64, 128, 256, 512):
        conv [3x3, w]/2 + PReLU                       (xavier init, bias)
        residual_units[s] x ([3x3, w] + PReLU, [3x3, w] + PReLU) + identity  (gaussian 0.01, no bias)
    FC 512 (the embedding, no activation: thesis App. A.1 removes the "last ReLU")
    classifier (head)

| name           | residual units per stage | conv layers |
|----------------|--------------------------|-------------|
| `sphereface4`  | (0, 0, 0, 0)             | 4           |
| `sphereface10` | (0, 1, 2, 0)             | 10          |
| `sphereface20` | (1, 2, 4, 1)             | 20          |
| `sphereface36` | (2, 4, 8, 2)             | 36          |
| `sphereface64` | (3, 8, 16, 3)            | 64          |

Unlike `resnet.basic_block`, each residual unit is two conv+PReLU followed by
an identity addition with no activation after it, and there is no BatchNorm
(the prototxt has none; `batch_norm=True` adds one after every conv). PReLU
slopes start at 0.25 (Caffe's default; one slope per channel). The embedding
layer is named 'embedding', the classifier 'logits' (with `head=` any
`sphere_tf.models.blocks` head: `{'layer': 'margin', 'loss_type': 'asoftmax',
'annealing': 'sphereface'}` is SphereFace). Input: aligned 112x96 crops,
(p - 127.5)/128; any size works (4 stride-2 stages, flattened).

`embedding_relu=True` puts the "last ReLU" back after the embedding (layer
'embedding_relu'): row A of the thesis's Table A.1 (4-layer CNN, LFW 95.13,
angular Fisher score 0.3477), the standard CNN whose features are confined to
the non-negative orthant before App. A.1 removes that ReLU (row B, 96.37). The
classifier and face verification (`evaluation.verification.embedding_model`)
then see the rectified features.
"""

import keras

from sphere_tf import validation
from sphere_tf.models import blocks
from sphere_tf.models import operators
from sphere_tf.models.registry import register_model

WIDTHS = (64, 128, 256, 512)
RESIDUAL_UNITS = {
    4: (0, 0, 0, 0),
    10: (0, 1, 2, 0),
    20: (1, 2, 4, 1),
    36: (2, 4, 8, 2),
    64: (3, 8, 16, 3),
}
EMBEDDING_DIM = 512
INPUT_SHAPE = (112, 96, 3)  # the aligned crops of wy1iu/sphereface
PRELU_INIT = 0.25  # Caffe PReLU filler default


def _conv_spec(operator, upstream):
    """`operator` with the upstream initialiser/bias defaults for a plain conv (the user's keys win)."""
    kind = operators.kind(operator)
    spec = {"layer": kind}
    if kind == "conv2d":
        spec.update(upstream)
    if isinstance(operator, dict):
        spec.update(operator)
    return spec


def _prelu(x, name):
    return keras.layers.PReLU(
        alpha_initializer=keras.initializers.Constant(PRELU_INIT), shared_axes=(1, 2), name=name
    )(x)


def _conv(x, spec, filters, strides, batch_norm, name):
    x = operators.conv_layer(spec, filters, 3, strides=strides, padding="same", name=name)(x)
    if batch_norm:
        x = keras.layers.BatchNormalization(name=f"bn_{name}")(x)
    return _prelu(x, f"prelu_{name}")


def build_sphereface(
    input_shape,
    num_classes,
    residual_units=RESIDUAL_UNITS[20],
    widths=WIDTHS,
    embedding_dim=EMBEDDING_DIM,
    operator=None,
    batch_norm=False,
    head=None,
    width_multiplier=1.0,
    embedding_relu=False,
    name="sphereface",
):
    """Builds a SphereFace residual network (see the module docstring).

    Args:
        input_shape: (height, width, channels), e.g. (112, 96, 3).
        num_classes: int, the identities of the training set.
        residual_units: 4 ints >= 0, residual units per stage.
        widths: 4 ints, the stage widths (before `width_multiplier`).
        embedding_dim: int > 0, the FC embedding width (512).
        operator: operator spec of every conv (`sphere_tf.models.operators`); None: Conv2D with the
            upstream initialisers (xavier + bias for the stride-2 convs, N(0, 0.01) without bias in
            the residual units).
        batch_norm: bool, BatchNorm after every conv (not in the paper's nets).
        head: the classifier (`sphere_tf.models.blocks`): None (Dense), a dict or a layer.
        width_multiplier: float > 0, scales `widths` (not the embedding).
        embedding_relu: bool, a ReLU after the embedding FC (the "last ReLU" of thesis App. A.1 and
            Table A.1 row A; the SphereFace nets have none).
        name: str, the model's name.

    Returns:
        A functional `keras.Model` (two inputs with a margin head, see `blocks.finish`).

    Raises:
        ValueError: a bad argument, named.
    """
    multiplier = float(validation.positive_float(width_multiplier, "width_multiplier"))
    validation.one_of(batch_norm, "batch_norm", (True, False))
    validation.one_of(embedding_relu, "embedding_relu", (True, False))
    widths = blocks.scale_widths(widths, multiplier)
    if len(widths) != 4:
        raise validation.invalid_argument("widths", "4 stage widths", widths)
    try:
        units = tuple(residual_units)
    except TypeError:
        units = ()
    if len(units) != 4:
        raise validation.invalid_argument("residual_units", "4 counts, one per stage", residual_units)
    units = tuple(validation.integer(u, f"residual_units[{i}]", minimum=0) for i, u in enumerate(units))
    embedding_dim = validation.positive_int(embedding_dim, "embedding_dim")
    operators.validate_operator(operator)
    down = _conv_spec(operator, {"kernel_initializer": "glorot_uniform", "use_bias": not batch_norm})
    unit = _conv_spec(operator, {"kernel_initializer": keras.initializers.RandomNormal(stddev=0.01),
                                 "use_bias": False})
    images = blocks.images_input(input_shape)
    x = blocks.pixels(images)
    for stage, (width, count) in enumerate(zip(widths, units), start=1):
        x = _conv(x, down, width, 2, batch_norm, f"conv{stage}_1")
        for i in range(count):
            y = _conv(x, unit, width, 1, batch_norm, f"conv{stage}_{2 * i + 2}")
            y = _conv(y, unit, width, 1, batch_norm, f"conv{stage}_{2 * i + 3}")
            x = keras.layers.Add(name=f"res{stage}_{i + 1}")([x, y])
    x = keras.layers.Flatten(name="flatten")(x)
    features = keras.layers.Dense(embedding_dim, kernel_initializer="glorot_uniform", name="embedding")(x)
    if embedding_relu:
        features = keras.layers.ReLU(name="embedding_relu")(features)
    return blocks.finish(images, features, head, num_classes, name)


def _register(depth):
    model_name = f"sphereface{depth}"

    def builder(input_shape=INPUT_SHAPE, num_classes=10575, **kwargs):
        kwargs.setdefault("residual_units", RESIDUAL_UNITS[depth])
        return build_sphereface(input_shape, num_classes, name=model_name, **kwargs)

    builder.__name__ = model_name
    builder.__doc__ = (f"SphereFace-{depth} (SphereFace CVPR 2017 Table 2 / thesis Table 2.7): residual units "
                       f"{RESIDUAL_UNITS[depth]} at widths {WIDTHS}, PReLU, FC {EMBEDDING_DIM} embedding; the "
                       "keyword arguments of `build_sphereface`.")
    return register_model(builder, passes_kwargs_to=build_sphereface)


for _depth in RESIDUAL_UNITS:
    _register(_depth)
