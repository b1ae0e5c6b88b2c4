"""The SphereFace training recipe shared by the face configs (not a config itself).

W. Liu's thesis (2020) §2.3 "Face setup" / SphereFace (CVPR 2017) §4.1 and the
authors' Caffe solver (wy1iu/sphereface `train/code/sphereface_solver.prototxt`):
CASIA-WebFace crops 112x96, horizontal flip, (p - 127.5)/128, batch 128, SGD
momentum 0.9, learning rate 0.1 divided by 10 at 16K and 24K iterations, stop at
28K, weight decay 5e-4 (Caffe's decay adds 5e-4·w to the gradient; Keras's
`L2(f)` adds 2f·w, so f = 2.5e-4), A-Softmax m = 4 with λ = max(5, 1000/(1 + 0.12 t)).
"""

from sphere_tf.configs import common

HEADS = {
    "softmax": None,  # plain Dense with bias (the "Softmax" rows)
    "modified_softmax": {"layer": "margin", "loss_type": "asoftmax", "margin": 1},  # A-Softmax m=1 (Eq. 2.18)
    "lsoftmax": {"layer": "margin", "loss_type": "lsoftmax", "annealing": "sphereface"},
    "asoftmax": {"layer": "margin", "loss_type": "asoftmax", "annealing": "sphereface"},
    "cosface": {"layer": "margin", "loss_type": "cosface", "scale": 64.0, "margin": 0.35},
    "arcface": {"layer": "margin", "loss_type": "arcface", "scale": 64.0, "margin": 0.5},
    "combined": {"layer": "margin", "loss_type": "combined", "scale": 64.0, "margin": (1.0, 0.3, 0.2)},
}
WEIGHT_DECAY = 2.5e-4
# The published training sets, as a face config's `training_set` section states them (the dry run counts the steps
# with it when the identity folder is not on the machine; a run counts the folder). CASIA-WebFace: D. Yi et al.,
# "Learning Face Representation from Scratch", arXiv:1411.7923, 494,414 images of 10,575 subjects, here as the
# SphereFace 112x96 crops. MS1M-ArcFace ("emore"): the insightface data set of `partial_fc_ms1m.py`'s docstring,
# 112x112 crops.
CASIA_WEBFACE = {"name": "CASIA-WebFace", "images": 494414, "identities": 10575, "image_shape": [112, 96, 3]}
MS1M_ARCFACE = {"name": "MS1M-ArcFace", "images": 5822653, "identities": 85742, "image_shape": [112, 112, 3]}


def head(loss, margin=0):
    """The head spec of `loss` (a key of `HEADS`); `margin` > 0 overrides the multiplicative m."""
    if loss not in HEADS:
        raise ValueError(f"Unknown loss {loss!r}; expected one of {sorted(HEADS)}.")
    spec = None if HEADS[loss] is None else dict(HEADS[loss])
    if margin and spec is not None and loss in ("lsoftmax", "asoftmax"):
        spec["margin"] = int(margin)
    return spec


def face_config(model, head_spec, *, quick=False, seed=0, steps=28000, boundaries=(16000, 24000),
                learning_rate=0.1, batch_size=128, data_dependent_mhe=0.0, pretrained=""):
    """A runner config on `face_folder` with the thesis recipe, plus the `verification` section.

    `quick`: two steps of batch 8 on the first 64 images of the folder (CI on a synthetic folder),
    the network at 1/8 width.
    """
    config = common.base_config(
        seed=seed,
        data=dict(name="face_folder", source="manual", augmentation="flip"),
        model=dict(model, head=head_spec),
        loss=dict(data_dependent_mhe=data_dependent_mhe),
        regularizers=[dict(name="weight_decay", layers=["conv*", "embedding"], factor=WEIGHT_DECAY)],
        paradigm=dict(pretrained=pretrained),
        optimizer=dict(name="sgd", learning_rate=learning_rate, momentum=0.9),
        schedule=dict(name="step", boundaries=list(boundaries), decay_factor=0.1),
        train=dict(batch_size=batch_size, steps=steps, checkpoint_every_steps=1000),
        export=True,
        export_class_matrix=False,  # face serving needs the embeddings, not the (d, C) class matrix
    )
    # The runner's end-of-run test pass reads the first images of the training folder (a closed-set check);
    # 10,000 of CASIA-WebFace's 494,414 keep it short.
    config.data.test_limit = 10000
    config.verification = dict(pairs="", images="", image_pattern="{name}/{name}_{index:04d}.jpg", batch_size=64,
                               far_targets=[1e-3, 1e-4])
    config.training_set = dict(CASIA_WEBFACE)
    config.task = "face"  # the runner's task (`sphere-tf run`): train, then verify
    if quick:
        config.data.train_limit = 64
        config.data.test_limit = 16
        config.train.batch_size = 8
        config.train.steps = 2
        config.train.steps_per_epoch = 2
        config.schedule.boundaries = [1]
        config.model.width_multiplier = 0.125
        config.export = False
    return config


# Partial FC (X. An et al., "Partial FC: Training 10 Million Identities on a Single Machine", ICCV Workshops 2021,
# arXiv:2010.05222; deepinsight/insightface `recognition/arcface_torch/partial_fc_v2.py` and its configs): ArcFace
# s = 64, m = 0.5 on a 512-d embedding, the class centres sampled at r = 0.1 and split over the devices.
PARTIAL_FC_HEAD = {"layer": "margin", "loss_type": "arcface", "scale": 64.0, "margin": 0.5, "sample_rate": 0.1,
                   "shard_classes": True}


def partial_fc_config(model, *, quick=False, seed=0, steps, boundaries, learning_rate, batch_size,
                      sample_rate=0.1, shard_classes=True):
    """The face recipe (`face_config`) with the Partial FC head of `PARTIAL_FC_HEAD`.

    `quick`: two steps of batch 8 on the first 64 images of any identity folder (the synthetic one of
    `bench/synthetic_identities.py:write_identity_folder` in the tests), the network at 1/8 width.
    """
    head = dict(PARTIAL_FC_HEAD, sample_rate=sample_rate, shard_classes=shard_classes)
    config = face_config(model, head, quick=quick, seed=seed, steps=steps, boundaries=boundaries,
                         learning_rate=learning_rate, batch_size=batch_size)
    if quick:
        config.train.checkpoint_every_steps = 1
    return config
