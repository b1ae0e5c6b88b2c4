r"""SphereNet §4.6 / Fig. 6: SphereResNet-18-v1, -v2 and ResNet-18 on ImageNet-2012.

Deep Hyperspherical Learning (Liu et al., NIPS 2017), §4.6, Fig. 6, App. B and App. Table 6 (thesis §3.4.6,
App. B.2).

Recipe (§4.6, App. B): the wide ResNet-18 of App. Table 6 (7×7/2,256 stem, 3×3/2 max-pool, 2 basic blocks at
256/512/768/1024, average pool); v1 = cosine SphereConv everywhere including the 1×1 shortcut convs + cosine
W-Softmax; v2 = cosine SphereConv with ordinary 1×1 shortcut convs + softmax; the baseline ResNet-18 is the
same net with ordinary convs + softmax. SGD, momentum 0.9, learning rate 0.1, ÷10 at 200K and 375K
iterations, stop at 550K ("55K" in the NIPS text is a typo: the 375K step implies 550K), batch 40 for every
method; "minimum data augmentation": resize to 256×256, random 224×224 crop, random horizontal flip
(`imagenet_train_square`); single centre-crop evaluation (`imagenet_eval_square`). Not stated in the paper;
we use: mean subtraction with the ILSVRC-2012 RGB mean, He-normal initialisation, no weight decay.

Variants: `model` = v1, v2, resnet18.

Paper: top-1 single-crop validation error curves only (Fig. 6, no numbers): both SphereResNet-18s converge much
faster than ResNet-18; v1 is fastest but ends slightly worse, v2 ends slightly better than ResNet-18.

Run (ILSVRC2012_img_train.tar, ILSVRC2012_img_val.tar in DIR, validation labels in LABELS):
  sphere-tf train-classifier \
    --config spherenet/imagenet_sphere_resnet18:model=v2 --workdir runs/spherenet_imagenet \
    --config.data.manual_dir=DIR --config.data.val_labels_file=LABELS
  (`quick` for a two-step smoke run: batch 2, widths ÷16, one block per stage.)
"""

from sphere_tf.configs import common
from sphere_tf.configs import spherenet

_WIDE = dict(widths=(256, 512, 768, 1024), stem_width=256)
MODELS = {
    "v1": dict(name="sphere_resnet18_v1", operator=spherenet.OPERATORS["cosine"],
               head=spherenet.LOSSES["wsoftmax_cosine"]),
    "v2": dict(name="sphere_resnet18_v2", operator=spherenet.OPERATORS["cosine"],
               shortcut_operator=spherenet.OPERATORS["conv"], head=None),
    "resnet18": dict(name="resnet18", operator=spherenet.OPERATORS["conv"], head=None, **_WIDE),
}
VARIANTS = {"model": tuple(MODELS)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, model="v2")
    model = dict(MODELS[common.choose(arg, "model", VARIANTS["model"])])
    config = common.base_config(
        data=dict(name="imagenet2012", augmentation="imagenet_train_square",
                  eval_augmentation="imagenet_eval_square", normalization="mean_subtraction"),
        model=model,
        optimizer=dict(name="sgd", learning_rate=0.1, momentum=0.9),
        schedule=dict(name="step", boundaries=[200000, 375000], decay_factor=0.1),
        train=dict(batch_size=40, steps=550000, steps_per_epoch=5000),
    )
    if arg.quick:
        common.quick(config, batch_size=2, width_multiplier=1 / 16, blocks_per_stage=1)
    return config
