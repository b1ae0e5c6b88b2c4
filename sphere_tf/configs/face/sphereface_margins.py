r"""SphereFace-20 (or any depth) on CASIA-WebFace with one of the margin heads, evaluated on LFW.

SphereFace (CVPR 2017) / W. Liu's thesis (2020) §2.3; recipe in `recipe.py`.
`loss=asoftmax` is SphereFace (A-Softmax m = 4, λ annealed to 5): the authors'
SphereFace-20 Caffe model reaches 99.30% on LFW (best of 5 runs, 99.13–99.30;
wy1iu/sphereface README), thesis Table 5.8 lists 99.26% (SphereFace-20, m = 4).
`cosface` (s = 64, m = 0.35; thesis Table 5.10 "CosineFace" 99.10% with
SphereFace-64), `arcface` (s = 64, m = 0.5), `combined` (insightface's
(m1, m2, m3) = (1, 0.3, 0.2)), `softmax`, `modified_softmax` (A-Softmax m = 1)
and `lsoftmax` are the other heads.

Run:
  sphere-tf train-face --config face/sphereface_margins:loss=asoftmax,depth=20 \
    --workdir runs/sf20 --config.data.manual_dir=CASIA-WebFace-112x96 \
    --config.verification.pairs=lfw/pairs.txt --config.verification.images=lfw-112x96
  (`:quick` for a two-step smoke run on any identity folder.)
"""

from sphere_tf.configs import common
from sphere_tf.configs.face import recipe


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, loss="asoftmax", margin=0, depth=20, seed=0)
    return recipe.face_config(dict(name=f"sphereface{arg.depth}"), recipe.head(arg.loss, arg.margin),
                              quick=arg.quick, seed=arg.seed)
