r"""DCNet's adversarial experiment on CIFAR-10 (Tables 7 and 8), the paper's recipe.

Decoupled Networks (Liu et al., CVPR 2018, https://arxiv.org/abs/1804.08071),
§6.2 and App. A.2/A.3: CNN-9 of App. Table 9 for the adversarial experiments
(`dcnet_cnn9_adv`: [3×3]×3 at 32/64/128, FC 256, no BN), ADAM, standard
gradients (no weight projection, no weighted gradients); Baseline conv,
SphereConv, BallConv and TanhConv (cosine angular function, inferred: the paper
does not name g). Attacks through cleverhans: FGSM and BIM with ε = 8, τ = 2,
N = 20 on the 0–255 scale, mapped to the (x − 127.5)/128 inputs; FGSM adversarial
training with ε = 8 and 0.5·J(x) + 0.5·J(x̃) (ratio not stated; Goodfellow et
al.'s). Black-box examples come from a separately trained baseline of the same
architecture (seed + 1000), naturally trained (the paper does not say which
source the FGSM-trained targets were attacked with; `black_box.source_training=
'matched'` uses an FGSM-trained one for them).

The iteration count of the adversarial runs is not given ("learning rates are
divided by 10 when the error plateaus"); this config reuses SphereNet's CIFAR
schedule, 64k steps of batch 128 with Adam 1e-3 divided by 10 at 34k and 54k,
and the CIFAR pad-crop-flip augmentation of the paper's other CIFAR runs.

The paper's numbers (CIFAR-10 test accuracy %):

Table 7, white-box:

| Training | Attack | Baseline | SphereConv | BallConv | TanhConv |
|---|---|---|---|---|---|
| natural | None | 85.35 | 88.58 | 91.13 | 91.45 |
| natural | FGSM | 18.82 | 43.64 | 50.47 | 52.60 |
| natural | BIM | 8.67 | 8.89 | 7.74 | 10.18 |
| FGSM-adv | None | 83.70 | 87.41 | 87.47 | 87.54 |
| FGSM-adv | FGSM | 78.96 | 85.98 | 82.20 | 81.46 |
| FGSM-adv | BIM | 7.96 | 35.07 | 17.38 | 19.86 |

Table 8, black-box:

| Training | Attack | Baseline | SphereConv | BallConv | TanhConv |
|---|---|---|---|---|---|
| natural | None | 85.35 | 88.58 | 91.13 | 91.45 |
| natural | FGSM | 50.90 | 56.71 | 49.50 | 50.61 |
| natural | BIM | 36.22 | 43.10 | 27.48 | 29.06 |
| FGSM-adv | None | 83.70 | 87.41 | 87.47 | 87.54 |
| FGSM-adv | FGSM | 77.57 | 76.29 | 78.67 | 80.38 |
| FGSM-adv | BIM | 78.55 | 77.79 | 80.59 | 82.47 |

Needs a GPU (9 CNN-9 trainings per seed, four of them adversarial).

Run:
  sphere-tf train-adversarial --config adversarial/cifar10_cnn9 \
      --workdir runs/adversarial_cifar10 --config.data.manual_dir=/path/to/folder/of/cifar-10-binary.tar.gz
  (`:quick` for a seconds-long smoke run on `data.manual_dir`'s archive; `:seeds=3` for seeds 0, 1, 2.)
"""

from sphere_tf.configs import common
from sphere_tf.configs.adversarial import _base


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, seeds=1)
    config = _base.adversarial_config(
        seeds=list(range(arg.seeds)),
        data=dict(name="cifar10", augmentation="cifar_plus"),
        model=dict(name="dcnet_cnn9_adv"),
        optimizer=dict(name="adam", learning_rate=1e-3),
        schedule=dict(name="step", boundaries=[34000, 54000], decay_factor=0.1),
        train=dict(batch_size=128, epochs=1, steps=64000, steps_per_epoch=1000, verbose="auto"),
        deepfool=dict(images=1000, steps=50),
    )
    if arg.quick:
        _base.quick_adversarial(config)
    return config
