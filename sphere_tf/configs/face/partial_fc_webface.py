r"""Partial FC on a CASIA-WebFace-sized identity folder (10,575 identities): ArcFace, r = 0.1, sharded classes.

The sampled, class-sharded margin head of Partial FC (X. An et al., "Partial FC: Training 10 Million
Identities on a Single Machine", ICCV Workshops 2021, arXiv:2010.05222; deepinsight/insightface
`recognition/arcface_torch/partial_fc_v2.py`): ArcFace (s = 64, m = 0.5) on SphereFace-20's 512-d embedding,
each step's softmax over the batch's classes plus a uniform sample of the others, r = 0.1 of each block
(`model.head.sample_rate`), the class centres split over every device (`model.head.shard_classes`: JAX
`keras.distribution`; on TensorFlow each replica of `--strategy` samples the same blocks).
The rest is the SphereFace CASIA-WebFace recipe of `recipe.py` (112x96 crops, batch 128, SGD 0.1 momentum 0.9,
/10 at 16K and 24K of 28K steps, weight decay 5e-4): the Partial FC paper trains on MS1M / Glint360K /
WebFace, not CASIA, so this config answers "the same head on the thesis's data set"; no paper number to match.
At 10,575 classes r = 0.1 keeps 1,058 classes a step (at least the batch's 128).

Run:
  sphere-tf train-face --config face/partial_fc_webface --workdir runs/pfc_webface \
    --config.data.manual_dir=CASIA-WebFace-112x96 \
    [--config.verification.pairs=lfw/pairs.txt --config.verification.images=lfw-112x96]
  KERAS_BACKEND=jax ...    (the classes sharded over the JAX devices)
  (`:quick` for a two-step smoke run on any identity folder, e.g. a synthetic one:
   `python -m bench.synthetic_identities DIR`.)
"""

from sphere_tf.configs import common
from sphere_tf.configs.face import recipe

NUM_IDENTITIES = recipe.CASIA_WEBFACE["identities"]  # 10,575 (the recipe's `training_set`)


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, seed=0, depth=20, sample_rate=0.1, shard_classes=True)
    return recipe.partial_fc_config(
        dict(name=f"sphereface{arg.depth}"), quick=arg.quick, seed=arg.seed, steps=28000,
        boundaries=(16000, 24000), learning_rate=0.1, batch_size=128, sample_rate=arg.sample_rate,
        shard_classes=arg.shard_classes,
    )
