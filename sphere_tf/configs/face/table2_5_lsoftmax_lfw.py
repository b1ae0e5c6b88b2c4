r"""Thesis Table 2.5 (L-Softmax, ICML 2016, Table 4): LFW accuracy of softmax vs L-Softmax, trained on WebFace.

Paper's numbers (LFW %, single model, WebFace): Softmax 96.53, Softmax+Contrastive 97.31,
L-Softmax m=2 97.81, m=3 98.27, m=4 98.71. The paper's face network is a 17-layer
CNN with PReLU; here it is SphereFace-20 (`depth`), so the numbers are the
target of the comparison, not of this exact network. `m=1` is softmax; m > 1
is L-Softmax with the λ schedule of `recipe.py`.

Run:
  sphere-tf train-face --config face/table2_5_lsoftmax_lfw:m=4 --workdir runs/t25_m4 \
    --config.data.manual_dir=CASIA-WebFace-112x96 \
    --config.verification.pairs=lfw/pairs.txt --config.verification.images=lfw-112x96
"""

from sphere_tf.configs import common
from sphere_tf.configs.face import recipe

PAPER_LFW = {1: 96.53, 2: 97.81, 3: 98.27, 4: 98.71}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, m=4, depth=20, seed=0)
    head = recipe.head("softmax") if arg.m == 1 else recipe.head("lsoftmax", arg.m)
    return recipe.face_config(dict(name=f"sphereface{arg.depth}"), head, quick=arg.quick, seed=arg.seed)
