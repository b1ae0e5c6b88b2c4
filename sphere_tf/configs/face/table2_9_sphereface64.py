r"""Thesis Tables 2.8 / 2.9: SphereFace-64 on WebFace, LFW and YTF accuracy by loss and margin.

Paper's numbers (same 64-layer CNN, CASIA-WebFace, LFW / YTF %):
Table 2.9: Softmax 97.88 / 93.1, Softmax+Contrastive 98.78 / 93.5, Triplet 98.70 / 93.4,
L-Softmax 99.10 / 94.0, Softmax+Center 99.05 / 94.4, SphereFace 99.42 / 95.0.
Table 2.8 (A-Softmax margin): original softmax 97.88 / 93.1, m=1 97.90 / 93.2,
m=2 98.40 / 93.8, m=3 99.25 / 94.4, m=4 99.42 / 95.0.
`loss` is softmax, lsoftmax or asoftmax (`m` its margin; m=1 with asoftmax is the
modified softmax). LFW is evaluated with the `verification` section or
`sphere_tf_cli.eval_verification`; the YTF column with `sphere_tf_cli.eval_verification
--protocol=ytf` on the YouTube Faces frames and `splits.txt` (docs/face.md).

Run:
  sphere-tf train-face --config face/table2_9_sphereface64:loss=asoftmax,m=4 \
    --workdir runs/sf64 --config.data.manual_dir=CASIA-WebFace-112x96 \
    --config.verification.pairs=lfw/pairs.txt --config.verification.images=lfw-112x96
"""

from sphere_tf.configs import common
from sphere_tf.configs.face import recipe

PAPER_LFW_YTF = {"softmax": (97.88, 93.1), "lsoftmax": (99.10, 94.0), "asoftmax": (99.42, 95.0)}
PAPER_MARGIN_LFW_YTF = {1: (97.90, 93.2), 2: (98.40, 93.8), 3: (99.25, 94.4), 4: (99.42, 95.0)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, loss="asoftmax", m=4, seed=0)
    head = recipe.head(arg.loss, arg.m)
    if arg.loss == "asoftmax" and arg.m == 1:
        head = recipe.head("modified_softmax")
    return recipe.face_config(dict(name="sphereface64"), head, quick=arg.quick, seed=arg.seed)
