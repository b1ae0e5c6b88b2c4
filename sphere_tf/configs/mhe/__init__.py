"""The recipe shared by the MHE and CoMHE configs (CIFAR plain CNNs, ResNet-32, ImageNet ResNets).

Learning towards Minimum Hyperspherical Energy (Liu et al., NeurIPS 2018) and
Compressive Minimum Hyperspherical Energy (Lin et al., CVPR 2020), as chapters 5
and 6 and Appendices D.1 / E.1 of W. Liu's PhD thesis (2020). Where the thesis
and the authors' TF code (wy1iu/MHE `code/train.py`, `code/architecture.py`;
rmlin/CoMHE `random_projection/train.py`) differ, the code's numerics are used:

- CNN-6/9/15 (thesis Table D.1): [3×3] × 2/3/5 per stage at 64/128/256, 2×2
  max-pools, FC 256 (the code's `fc6`: no BatchNorm, no ReLU), then the classifier;
  BN + ReLU after every conv, He initialisation.
- Input (x − 127.5)/128; augmentation: 4-pixel symmetric pad, random 32×32
  crop, horizontal flip (`cifar_plus_symmetric`, the code's numpy loader).
- SGD momentum 0.9, batch 128, learning rate 0.1; weight decay 5e-4 on every
  kernel as the code's `l2_regularizer(5e-4)` (= Keras `L2(2.5e-4)`; the thesis
  says 1e-4); cross-entropy with label smoothing 0.01 (code).
- MHE: hidden term (λ_h = 1) on every conv and `fc`, output term (λ_o = 10,
  always full space) on the classifier `logits`, as `_add_thomson_constraint`
  and `_add_thomson_constraint_final`; the angular variants (`--power_s a0/a1/a2`)
  use θ/π (`distance='normalized_angular'`) with the code's 0.1 / 1 weights for
  s = 1, 2.

The per-table files choose data, depth, width, method and schedule.
"""

from sphere_tf.configs import common

# Thesis Table D.1: filters of the three stages of CNN-6/9/15, convs per stage.
CNN_WIDTHS = (64, 128, 256)
DEPTHS = {"cnn6": 2, "cnn9": 3, "cnn15": 5}
HE_CONV = {"layer": "conv2d", "kernel_initializer": "he_normal"}
# Regularized layers of the plain CNNs (`small_cnn` builder names) and of the ResNets.
PLAIN_HIDDEN = ["conv*", "fc"]
RESNET_HIDDEN = ["conv0", "stage*"]
OUTPUT = "logits"
# wy1iu/MHE `code/train.py`: 42,500 iterations, ×0.1 at 20k, 30k, 37.5k (thesis App. D.1 agrees).
MHE_STEPS, MHE_BOUNDARIES = 42500, [20000, 30000, 37500]
# rmlin/CoMHE `train.py`: 75,000 iterations, ×0.1 at 30k, 50k, 65k.
COMHE_STEPS, COMHE_BOUNDARIES = 75000, [30000, 50000, 65000]
CODE_WEIGHT_DECAY = 5e-4
# Thesis App. D.1 (ImageNet): batch 64, ×0.1 at 150k, 300k, 400k, stop at 500k; weight decay 1e-4.
IMAGENET_STEPS, IMAGENET_BOUNDARIES, IMAGENET_WEIGHT_DECAY = 500000, [150000, 300000, 400000], 1e-4
# Regularizer methods of the MHE tables (thesis Tables 5.1-5.7, D.3, D.6).
MHE_METHODS = ("baseline", "orthonormal", "orthogonal", "mhe", "half_space_mhe", "angular_mhe",
               "half_space_angular_mhe")
PLACEMENTS = ("hidden+output", "hidden", "output")
# Thesis (App. D.1, E.1): "orthonormal / orthogonal regularization 1e-5".
ORTHOGONALITY_FACTOR = 1e-5


def plain_cnn(depth="cnn9", widths=CNN_WIDTHS, operator=None):
    """The `model` section of the thesis's CNN-6/9/15 (Table D.1) at `widths`.

    `small_cnn` is the zoo's general plain-CNN builder (it takes `widths`,
    `convs_per_stage` and `dense_units`).
    """
    common.check(depth, "depth", DEPTHS)
    return dict(name="small_cnn", widths=tuple(widths), convs_per_stage=DEPTHS[depth], dense_units=256,
                feature_bn_relu=False, batch_norm=True, operator=dict(operator or HE_CONV))


def weight_decay(decay=CODE_WEIGHT_DECAY):
    """The upstream `l2_regularizer(decay)` on every kernel: Keras `L2(decay / 2)` (its gradient is decay·w)."""
    return {"name": "weight_decay", "layers": "*", "factor": decay / 2}


def mhe_entries(method, power=2, hidden=PLAIN_HIDDEN, output=OUTPUT, placement="hidden+output"):
    """The `regularizers` entries of an MHE-table method (after the weight decay entry).

    Args:
        method: one of `MHE_METHODS`.
        power: the Riesz exponent s (0, 1 or 2).
        hidden, output: layer-name patterns of the hidden layers and of the classifier.
        placement: 'hidden+output', 'hidden' or 'output' (thesis Table 5.4).

    Raises:
        ValueError: a bad method / placement, or half-space MHE on the output layer only.
    """
    common.check(method, "method", MHE_METHODS)
    common.check(placement, "placement", PLACEMENTS)
    common.check(power, "s", (0, 1, 2))
    if method == "baseline":
        return []
    if method in ("orthonormal", "orthogonal"):
        return [{"name": "orthogonality", "layers": list(hidden), "mode": method, "factor": ORTHOGONALITY_FACTOR}]
    half_space = method.startswith("half_space")
    if half_space and placement == "output":
        raise ValueError(f"method={method!r} with placement='output' is N/A in the thesis (Table 5.4): the output "
                         "layer always uses full-space MHE.")
    angular = "angular" in method
    distance = "normalized_angular" if angular else "euclidean"
    scale = 0.1 if angular and power > 0 else 1.0  # the code's weights for --power_s a1/a2
    entries = []
    if placement != "output":
        entries.append({"name": "mhe", "layers": list(hidden), "role": "hidden", "power": power,
                        "half_space": half_space, "distance": distance, "factor": 1.0 * scale})
    if placement != "hidden":
        entries.append({"name": "mhe", "layers": output, "role": "output", "power": power, "distance": distance,
                        "factor": 10.0 * scale})
    return entries


def cifar_config(*, dataset, model, regularizers, steps, boundaries, decay=CODE_WEIGHT_DECAY, class_limits=(),
                 minority_classes=(), label_smoothing=0.01, augmentation="cifar_plus_symmetric"):
    """The CIFAR recipe of the module docstring around `model` and the method's `regularizers`; with
    `minority_classes`, `results.json` also records their error (`test_minority_error`)."""
    common.check(dataset, "data", ("cifar10", "cifar100"))
    return common.base_config(
        seed=0,
        data=dict(name=dataset, augmentation=augmentation,
                  class_limits=list(class_limits)),
        model=model,
        loss=dict(label_smoothing=label_smoothing),
        regularizers=[weight_decay(decay)] + list(regularizers),
        optimizer=dict(name="sgd", learning_rate=0.1, momentum=0.9),
        schedule=dict(name="step", boundaries=list(boundaries), decay_factor=0.1),
        train=dict(batch_size=128, steps=steps, steps_per_epoch=0, checkpoint_every_steps=1000),
        evaluation=dict(minority_classes=list(minority_classes)),
        export=True,
    )


def imagenet_config(*, model, regularizers, steps=IMAGENET_STEPS, boundaries=IMAGENET_BOUNDARIES, batch_size=64,
                    decay=IMAGENET_WEIGHT_DECAY):
    """ImageNet-2012 (thesis App. D.1): batch 64, SGD 0.1 momentum 0.9, ×0.1 at 150k/300k/400k, 500k steps.

    Augmentation: shorter side 256, random 224 crop, flip; single centre crop for
    testing (not stated in the thesis; we use the SphereNet/DCNet protocol).
    Input (x − 127.5)/128 as the authors' TF code.
    """
    return common.base_config(
        seed=0,
        data=dict(name="imagenet2012", augmentation="imagenet_train"),
        model=model,
        regularizers=[weight_decay(decay)] + list(regularizers),
        optimizer=dict(name="sgd", learning_rate=0.1, momentum=0.9),
        schedule=dict(name="step", boundaries=list(boundaries), decay_factor=0.1),
        train=dict(batch_size=batch_size, steps=steps, steps_per_epoch=10000, checkpoint_every_steps=1000),
        export=True,
    )
