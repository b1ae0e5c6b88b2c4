r"""OPT: stochastic OPT (S-OPT) on CNN-6, CIFAR-100 (the authors' code; no table in the thesis).

Orthogonal Over-Parameterized Training (Liu et al., CVPR 2021) and wy1iu/OPT `sopt_gs/`:
each episode learns an m×m orthogonal R̃ (Gram-Schmidt) on m randomly sampled rows of every
layer's fixed neurons, then merges V ← W and samples again. Paper's number: none in the
thesis; the authors' README reports S-OPT for scalability only (—).

Recipe (wy1iu/OPT `sopt_gs/train.py`): 400 episodes × 750 iterations (300k), lr 0.1 ×0.1 at
episodes 160 / 260 / 340 (iterations 120k / 195k / 255k), batch 128, SGD momentum 0.9,
weight decay 5e-4; the first conv (27 dimensions) has full OPT (GS); the other convs sample
m = 3·3·16 = 144 of 576 dimensions and FC 64 m = 4·4·16 = 256 of 1,024. The code declares
R̃ of (k·k·10)² while sampling k·k·16 rows and resets BN at every episode (bugs); here R̃
and the sample have the same size m and only R̃ is reset (`sphere_tf.layers.OPTConv2D`).

Run:
  sphere-tf train-classifier \
    --config opt/sopt_cnn6:method=gs \
    --workdir runs/opt_sopt --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import common
from sphere_tf.configs import opt

EPISODE = 750
METHODS = ("gs",)
VARIANTS = {"method": METHODS}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, method="gs")
    common.check(arg.method, "method", METHODS)
    model = opt.model_section("cnn6", arg.method, first={}, fc={"stochastic_dims": 256}, stochastic_dims=144)
    config = opt.cifar_config(model, arg.method, steps=400 * EPISODE,
                              boundaries=[160 * EPISODE, 260 * EPISODE, 340 * EPISODE], sopt_episode_length=EPISODE)
    return opt.quick(config) if arg.quick else config
