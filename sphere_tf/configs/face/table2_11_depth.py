r"""Thesis Fig. 2.11 / Table A.2: depth study, softmax vs SphereFace with 4/10/20/36/64-layer nets.

Paper's numbers: LFW, softmax 96.60 (4 layers) -> 97.75 (64); A-Softmax 98.20 -> 99.42.
YTF: softmax 91.1 -> 93.1; A-Softmax 93.4 -> 95.0. MegaFace Rank-1 / Ver@1e-6 of
SphereFace (Table A.2): 4 layers 57.529 / 68.547, 10: 65.335 / 78.069,
20: 69.623 / 83.159, 36: 71.257 / 84.052, 64: 72.729 / 85.561.

Thesis Table A.1 (4-layer CNN, LFW accuracy / angular Fisher score; App. A.1-A.5 add one
modification per row):

| row | modification | variants | LFW | AFS |
|---|---|---|---|---|
| A | standard CNN: ReLU after FC1, softmax with bias | `depth=4,loss=softmax,last_relu=true` | 95.13 | 0.3477 |
| B | last ReLU removed | `depth=4,loss=softmax` | 96.37 | 0.2835 |
| C | biases removed | `depth=4,loss=lsoftmax,m=1` | 96.40 | 0.2815 |
| D | weights normalised | `depth=4,loss=modified_softmax` | 96.63 | 0.2462 |
| E-G | A-Softmax m = 2, 3, 4 | `depth=4,loss=asoftmax,m=2` (3, 4) | 97.67, 97.82, 98.20 | 0.2277, 0.1791, 0.1709 |

`last_relu=true` puts a ReLU after the 512-d embedding FC ("Standard CNNs usually connect ReLU
to the bottom of FC1", App. A.1; `build_sphereface(embedding_relu=True)`); the classifier and the
verification features are then the rectified ones. `angular_fisher_score` is in the
verification results.

Run:
  sphere-tf train-face --config face/table2_11_depth:depth=36,loss=asoftmax \
    --workdir runs/depth36 --config.data.manual_dir=CASIA-WebFace-112x96 \
    --config.verification.pairs=lfw/pairs.txt --config.verification.images=lfw-112x96
  (Table A.1 row A: `:depth=4,loss=softmax,last_relu=true`.)
"""

from sphere_tf.configs import common
from sphere_tf.configs.face import recipe

PAPER_LFW = {"softmax": {4: 96.60, 64: 97.75}, "asoftmax": {4: 98.20, 64: 99.42}}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, depth=20, loss="asoftmax", m=4, seed=0, last_relu=False)
    if arg.depth not in (4, 10, 20, 36, 64):
        raise ValueError(f"depth must be one of 4, 10, 20, 36, 64 (thesis Table 2.7), got {arg.depth}.")
    model = dict(name=f"sphereface{arg.depth}")
    if arg.last_relu:
        model["embedding_relu"] = True
    return recipe.face_config(model, recipe.head(arg.loss, arg.m), quick=arg.quick, seed=arg.seed)
