r"""DCNet Table 6: standard and modified ResNet-18 on ImageNet-2012, with and without BatchNorm.

Decoupled Networks (Liu et al., CVPR 2018), Table 6, §4.3 and §6.1 (thesis Table 4.6).

Recipe (§6, App. A, App. B): SGD, momentum 0.9, learning rate 0.1, batch 40; the standard ResNet-18 (He et al.;
7×7/2,64 stem, 2 basic blocks at 64/128/256/512) or DCNet's modified ResNet-18 of App. Table 9 (7×7/2,128
stem, per stage a strided 3×3 conv then 1/2/3/0 residual units at 128/256/512/1024), with or without BN;
SphereConv, LinearConv or TanhConv (ρ learnable, init 1), all with the cosine g, softmax, weight projection
(s = 1); SphereNet's ImageNet augmentation (resize to 256×256, random 224×224 crop, horizontal flip; single
centre crop for evaluation). The starred standard-ResNet-18 DCNet entries are initialised from a CNN
pre-trained on the same data (§4.3): run the baseline first, then pass its workdir as `pretrained=` (the
runner copies its kernels and BN parameters by position). Not stated in the paper; we use: SphereNet's
ImageNet schedule (÷10 at 200K and 375K iterations, stop at 550K), projection after every step, the
initialisation of SphereFace / He et al. (He-normal), (x − 127.5)/128 preprocessing (the authors' TF code).

Variants: `arch` = standard_bn, modified_bn, modified_no_bn; `operator` = baseline, sphere, linear, tanh;
`pretrained` = '' or the workdir of a finished run (the baseline) to initialise from.

Paper's centre-crop **top-5** error (%) (* initialised from the pre-trained CNN; N/C: does not converge);
`results.json` holds it as `test_top5_error` (the runner records it for every data set of more than 5
classes), beside the top-1 `test_error`:

| operator | standard_bn | modified_bn | modified_no_bn |
|---|---|---|---|
| baseline | 12.63 | 12.10 | N/C |
| sphere | 12.68* | 11.55 | 13.30 |
| linear | 11.99* | 11.50 | N/C |
| tanh | 12.47* | 11.10 | 12.79 |

Run (ILSVRC2012_img_train.tar, ILSVRC2012_img_val.tar in DIR, validation labels in LABELS):
  sphere-tf train-classifier \
    --config dcnet/table6_imagenet_resnet18:arch=standard_bn,operator=baseline \
    --workdir runs/dcnet_t6_baseline --config.data.manual_dir=DIR --config.data.val_labels_file=LABELS
  sphere-tf train-classifier \
    --config dcnet/table6_imagenet_resnet18:arch=standard_bn,operator=tanh,pretrained=runs/dcnet_t6_baseline \
    --workdir runs/dcnet_t6_tanh --config.data.manual_dir=DIR --config.data.val_labels_file=LABELS
  (`quick` for a two-step smoke run: batch 2, widths ÷16, one block per stage.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import dcnet

ARCHS = {"standard_bn": ("resnet18", True), "modified_bn": ("modified_resnet18", True),
         "modified_no_bn": ("modified_resnet18", False)}
OPERATORS = ("baseline", "sphere", "linear", "tanh")
VARIANTS = {"arch": tuple(ARCHS), "operator": OPERATORS}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, arch="modified_bn", operator="tanh", pretrained="")
    name, batch_norm = ARCHS[common.choose(arg, "arch", VARIANTS["arch"])]
    operator = common.choose(arg, "operator", VARIANTS["operator"])
    spec = dcnet.BASELINE if operator == "baseline" else dcnet.decoupled(operator, "cosine")
    config = common.base_config(
        data=dict(name="imagenet2012", augmentation="imagenet_train_square",
                  eval_augmentation="imagenet_eval_square"),
        model=dict(name=name, operator=spec, batch_norm=batch_norm, head=None),
        paradigm=dict(weight_projection_every=0 if operator == "baseline" else 1, pretrained=arg.pretrained),
        optimizer=dict(name="sgd", learning_rate=0.1, momentum=0.9),
        schedule=dict(name="step", boundaries=[200000, 375000], decay_factor=0.1),
        train=dict(batch_size=40, steps=550000, steps_per_epoch=5000),
    )
    if arg.quick:
        shallow = {"blocks_per_stage": 1} if name == "resnet18" else {"residual_units": (1, 0, 0, 0)}
        common.quick(config, batch_size=2, width_multiplier=1 / 16, **shallow)
    return config
