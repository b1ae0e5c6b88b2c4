r"""Partial FC on an MS1M-sized identity folder (MS1M-ArcFace / "emore": 85,742 identities, 5.8M images).

The setting of Partial FC (X. An et al., "Partial FC: Training 10 Million Identities on a Single Machine",
ICCV Workshops 2021, arXiv:2010.05222) as deepinsight/insightface `recognition/arcface_torch` trains it
(`partial_fc_v2.py`; the `emore` data set of its configs: 85,742 classes, 5,822,653 images, 16 epochs, the
rate /10 after epochs 8 and 14, SGD 0.1 for a global batch of 512, momentum 0.9, weight decay 5e-4, 512-d
embedding, ArcFace s = 64, m = 0.5), with the paper's sampling rate r = 0.1 (`model.head.sample_rate`) and
the class centres split over every device (`model.head.shard_classes`). Departures: the backbone is
SphereFace-20 from this library's zoo (upstream: IResNet-50/100, not in the zoo), and Keras's L2 factor is
2.5e-4 (torch's weight_decay 5e-4 adds 5e-4·w to the gradient; `recipe.WEIGHT_DECAY`). Upstream's figures for
IResNet-50 on MS1MV2 (insightface model zoo, r = 1): LFW 99.8%; no claim is made for this backbone.

Steps: 16 epochs of 5,822,653 / 512 = 11,372 steps = 181,952 steps, boundaries at 8 and 14 epochs.

Run:
  sphere-tf train-face --config face/partial_fc_ms1m --workdir runs/pfc_ms1m \
    --config.data.manual_dir=MS1M-112x112 --strategy=mirrored
  KERAS_BACKEND=jax sphere-tf train-face --config face/partial_fc_ms1m ...
  (`:quick` for a two-step smoke run on any identity folder.)
"""

from sphere_tf.configs import common
from sphere_tf.configs.face import recipe

NUM_IDENTITIES = recipe.MS1M_ARCFACE["identities"]  # 85,742
NUM_IMAGES = recipe.MS1M_ARCFACE["images"]  # 5,822,653
BATCH_SIZE = 512
STEPS_PER_EPOCH = NUM_IMAGES // BATCH_SIZE  # 11,372
EPOCHS, DECAY_EPOCHS = 16, (8, 14)


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, seed=0, depth=20, sample_rate=0.1, shard_classes=True)
    config = recipe.partial_fc_config(
        dict(name=f"sphereface{arg.depth}"), quick=arg.quick, seed=arg.seed, steps=EPOCHS * STEPS_PER_EPOCH,
        boundaries=tuple(e * STEPS_PER_EPOCH for e in DECAY_EPOCHS), learning_rate=0.1, batch_size=BATCH_SIZE,
        sample_rate=arg.sample_rate, shard_classes=arg.shard_classes,
    )
    config.training_set = dict(recipe.MS1M_ARCFACE)
    if not arg.quick:
        config.train.steps_per_epoch = STEPS_PER_EPOCH
        config.train.checkpoint_every_steps = 2000
    return config
