"""Helpers shared by the adversarial-experiment configs (`sphere_tf.runners.adversarial.DEFAULTS` schema)."""

import copy

import ml_collections

from sphere_tf.configs import common


def adversarial_config(**sections):
    """A ConfigDict holding every key of `sphere_tf.runners.adversarial.DEFAULTS`, with `sections` over it.

    Dict sections replace the defaults key by key (`model`, `operators` and
    `optimizer` wholly); unknown sections or keys raise, naming the valid ones.
    """
    from sphere_tf.runners import adversarial as experiment  # noqa: PLC0415 (TensorFlow only when a config is built)

    config = common.config_over(experiment.DEFAULTS, sections, whole=("model", "operators", "optimizer"))
    config.task = "adversarial"  # the runner's task (`sphere-tf run`)
    return config


def quick_adversarial(config):
    """Shrinks a config for a seconds-long end-to-end smoke run (the `quick` variants, CI).

    Two training steps of 16 images per model, 24 test images, BIM-2, a
    two-conv stand-in for CNN-9 (`small_cnn` at 4/8 with one conv per stage, FC 16,
    no BN: nine CNN-9 graphs would take most of a minute to trace), a two-point ε
    curve, DeepFool on 4 images.
    """
    config.seeds = [0]
    config.data.train_limit = 32
    config.data.test_limit = 24
    config.data.augmentation = "none"
    config.model = ml_collections.ConfigDict(
        {"name": "small_cnn", "widths": (4, 8), "convs_per_stage": 1, "dense_units": 16, "batch_norm": False})
    config.schedule = ml_collections.ConfigDict(copy.deepcopy(_default_schedule()))
    config.train.batch_size = 16
    config.train.epochs = 1
    config.train.steps = 0
    config.train.steps_per_epoch = 2
    config.attack.iterations = 2
    config.attack.batch_size = 16
    config.curve.epsilons = [0.0, 8.0]
    config.deepfool.images = 4
    config.deepfool.steps = 5
    return config


def _default_schedule():
    from sphere_tf.runners import adversarial as experiment  # noqa: PLC0415

    return experiment.DEFAULTS["schedule"]
