r"""Open-set verification check on Fashion-MNIST: train on classes 0-4, verify on pairs of classes 5-9.

The face pipeline end to end on the one real image set of this machine
(docs/face.md): `reproductions/face_open_set_fashion_mnist.py` writes the
training images of classes 0-4 as an identity folder (28x28 grayscale PNGs),
the test images of classes 5-9 as an LFW-style image folder
(`NAME/NAME_%04d.png`) and an LFW-format `pairs.txt` over them (10 folds x
(300 matched + 300 mismatched)); this config trains a SphereFace-4 at half width
(32/64/128/256 channels, FC 512 embedding) for 2 epochs (468 steps) of the 30,000
images and verifies with the flip-concatenated cosine protocol.

Budget-scaled recipe: Adam 1e-3 (not SGD 0.1: a few hundred steps), rate /10 at
4/7 and 6/7 of the run (the thesis's 16K/24K of 28K), batch 128, flip,
(p - 127.5)/128; A-Softmax's λ = max(5, 1000/(1 + γt)) with γ = 0.12·28000/steps
so that λ reaches 5 at the same fraction of the run as in the thesis.
Heads: softmax (Dense), asoftmax (m = 2, 3, 4), cosface (s = 64, m = 0.35),
arcface (s = 64, m = 0.5). Results (3 seeds): docs/face.md.

The thesis's claim to check (Table 2.8, Fig. 2.11): on LFW, A-Softmax beats
softmax (97.88 -> 99.42, SphereFace-64) and larger m helps (m=2 98.40, m=3 99.25,
m=4 99.42).

Run:
  PYTHONPATH=. python reproductions/face_open_set_fashion_mnist.py --out runs/open_set   (prepares data, runs all)
  sphere-tf train-face --config face/fashion_mnist_open_set:loss=asoftmax,m=4,seed=0 \
    --workdir runs/open_set/asoftmax_m4_s0 --config.data.manual_dir=runs/open_set/data/train \
    --config.verification.pairs=runs/open_set/data/pairs.txt \
    --config.verification.images=runs/open_set/data/test
"""

from sphere_tf.configs import common
from sphere_tf.configs.face import recipe

NUM_IMAGES = 30000  # the training images of classes 0-4
STEPS_PER_EPOCH = NUM_IMAGES // 128  # 234


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, loss="asoftmax", m=4, seed=0, epochs=2, width=0.5)
    steps = STEPS_PER_EPOCH * arg.epochs
    head = recipe.head(arg.loss, arg.m)
    if arg.loss in ("asoftmax", "lsoftmax"):
        head["annealing"] = {"base": 1000.0, "gamma": 0.12 * 28000 / steps, "power": 1.0, "lambda_min": 5.0}
    config = recipe.face_config(
        dict(name="sphereface4", width_multiplier=arg.width), head, quick=arg.quick, seed=arg.seed, steps=steps,
        boundaries=(steps * 4 // 7, steps * 6 // 7), learning_rate=1e-3, batch_size=128,
    )
    config.optimizer = dict(name="adam", learning_rate=1e-3)
    config.regularizers = []
    config.data.test_limit = 0 if arg.quick else 500
    config.train.steps_per_epoch = 0 if not arg.quick else 2
    config.train.checkpoint_every_steps = 0
    config.export = False
    config.verification.image_pattern = "{name}/{name}_{index:04d}.png"
    # The folder reproductions/face_open_set_fashion_mnist.py writes: the training images of classes 0-4.
    config.training_set = dict(name="Fashion-MNIST classes 0-4", images=NUM_IMAGES, identities=5,
                               image_shape=[28, 28, 1])
    if arg.quick:
        config.data.test_limit = 16
    return config
