r"""OPT Table 7.9: CNN-10 on ImageNet-2012.

Orthogonal Over-Parameterized Training (Liu et al., CVPR 2021), Table 7; W. Liu's PhD
thesis (2020), Table 7.9 and App. F.3. Top-1 / top-5 error % (paper):

| method   | top-1 | top-5 |
|----------|-------|-------|
| baseline | 44.32 | 21.13 |
| cp       | 43.67 | 20.26 |

`results.json` reports the top-1 error (`test_error`) and the top-5 error (`test_top5_error`).

CNN-10 (Table F.1): 7×7, 64, stride 2 → 3×3 max-pool stride 2 → [3×3, 64] × 3 →
[3×3, 128] × 3 → [3×3, 256] × 3 → FC 256 (the zoo's plain CNN with `stem='imagenet'`).
Recipe: batch 128, SGD momentum 0.9, lr 0.1 ÷10 "on plateau", 700k iterations, OPT (CP)
in the convs. Not stated in the paper, our choices: 2×2 max-pools after each stage (as
every CNN of the paper), `ReduceLROnPlateau` on the training loss over intervals of 10k
iterations with patience 5, weight decay 5e-4 (the CIFAR value), shorter side 256 +
random 224 crop + flip, centre crop for testing, (x − 127.5)/128 input, and plain FC 256
(an OPT FC on the 12,544-dimensional features would need a 157M-entry R; the paper uses
a "memory-efficient" OPT it does not describe).

Run:
  sphere-tf train-classifier \
    --config opt/table7_9_imagenet:method=cp \
    --workdir runs/opt_t7_9 --config.data.manual_dir=/path/to/ILSVRC2012 \
    --config.data.val_labels_file=/path/to/LOC_val_solution.csv
"""

from sphere_tf.configs import common
from sphere_tf.configs import mhe
from sphere_tf.configs import opt

METHODS = ("baseline", "cp")
VARIANTS = {"method": METHODS}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, method="cp")
    common.check(arg.method, "method", METHODS)
    operator = dict(mhe.HE_CONV) if arg.method == "baseline" else opt.opt_operator(arg.method)
    config = common.base_config(
        seed=0,
        data=dict(name="imagenet2012", augmentation="imagenet_train"),
        model=dict(name="small_cnn", widths=(64, 128, 256), convs_per_stage=3, dense_units=256, stem="imagenet",
                   batch_norm=True, operator=operator),
        regularizers=[mhe.weight_decay(opt.WEIGHT_DECAY)],
        optimizer=dict(name="sgd", learning_rate=0.1, momentum=0.9),
        schedule=dict(name="plateau", monitor="loss", decay_factor=0.1, patience=5),
        train=dict(batch_size=128, steps=700000, steps_per_epoch=10000, checkpoint_every_steps=1000),
        export=True,
    )
    return opt.quick(config) if arg.quick else config
