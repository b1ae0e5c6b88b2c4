"""A user's model family, registered from outside the package: `list_models` lists it, the zoo's tiny-build
helpers handle it without an entry of their own, and the runner's config builds it by name."""

import keras
import numpy as np
import pytest

from sphere_tf import models
from sphere_tf.models import blocks
from sphere_tf.runners import recipe
from tests.models._tiny import tiny_input_shape
from tests.models._tiny import tiny_kwargs


def build_user_net(input_shape, num_classes, depth, width_multiplier=1.0, operator="conv2d", head=None,
                   name="user_net"):
    """The family: `depth` 3×3 convs (the zoo's operator slots), global pooling, the zoo's heads."""
    images = blocks.images_input(input_shape)
    x = images
    for i in range(depth):
        x = blocks.conv_unit(x, operator, max(1, int(32 * width_multiplier)), 3, name=f"conv{i + 1}")
    features = keras.layers.GlobalAveragePooling2D()(x)
    return blocks.finish(images, features, head, num_classes, name)


@pytest.fixture
def user_family():
    names = []
    for depth in (2, 3):  # one registered builder per variant, as the zoo's families
        def builder(input_shape=(24, 24, 3), num_classes=4, depth=depth, **kwargs):
            return build_user_net(input_shape, num_classes, depth, name=f"user_net{depth}", **kwargs)

        builder.__name__ = f"user_net{depth}"
        models.register_model(builder)
        names.append(builder.__name__)
    yield names
    for name in names:
        models.MODELS.pop(name)


def test_a_registered_family_is_listed_and_builds_tiny(user_family):
    assert models.list_models("user_net*") == user_family
    for name in user_family:
        shape = tiny_input_shape(name)
        assert shape == (24, 24, 3) and tiny_kwargs(name) == {"width_multiplier": 1 / 16}
        model = models.create_model(name, input_shape=shape, num_classes=5, operator={"layer": "sphere"},
                                    **tiny_kwargs(name))
        out = model(np.zeros((2,) + shape, np.float32), training=False)
        assert tuple(out.shape) == (2, 5)


@pytest.mark.tensorflow_only  # the runner's validation lives beside its tf.data input (sphere_tf.runners.classifier)
def test_the_runner_config_builds_a_registered_family(user_family):
    from sphere_tf.runners import classifier  # noqa: PLC0415  (imports TensorFlow; this module runs on every backend)

    config = classifier.validate({
        "data": {"name": "cifar10"},
        "model": {"name": "user_net3", "operator": {"layer": "decoupled", "magnitude": "tanh"},
                  "width_multiplier": 0.25, "head": {"layer": "margin", "loss_type": "cosface"}},
    })
    model, _ = recipe.build_model(config, {"input_shape": (12, 12, 3), "num_classes": 10})
    assert model.name == "user_net3" and models.needs_labels(model)
    assert len([layer for layer in model.layers if "conv" in layer.name and layer.weights]) >= 3
    with pytest.raises(ValueError, match="Unknown model 'user_net4'.*'user_net2', 'user_net3'"):
        classifier.validate({"data": {"name": "cifar10"}, "model": {"name": "user_net4"}})
