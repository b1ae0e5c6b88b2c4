"""The recipe shared by the OPT configs (Orthogonal Over-Parameterized Training, Liu et al., CVPR 2021).

W. Liu's PhD thesis (2020), ch. 7 and App. F.1/F.3, with the numerics of the authors'
TF code (wy1iu/OPT `opt_*/train.py`, `architecture.py`):

- CNN-6/9 (Table F.1): [3×3, 64] × 2 or 3 per stage, 2×2 max-pools, FC 64, classifier;
  BN after every conv (not after FC 64), ReLU; OPT in every conv and in FC 64.
- CIFAR-100, 4-pixel symmetric pad + random crop + flip, (x − 127.5)/128.
- SGD momentum 0.9, batch 128, lr 0.1, ×0.1 at 30k, 50k, 65k, 75k iterations (code; the
  thesis: "divide when performance saturates"); weight decay 5e-4 on everything (the
  raw rotations of OPT layers included, Keras `L2(2.5e-4)`); label smoothing 0.01 (code).
- OPT variants: 'gs' Gram-Schmidt, 'hr' Householder, 'ls' Löwdin, 'cp' Cayley, 'ogd'
  orthogonality-preserving gradient descent (Cayley SGD on R, `paradigm.opt_optimizer`),
  'or' soft orthogonality (β = 0.1); 'upt' an unconstrained R (soft with β = 0).
- Averaged over 10 runs in the paper; a config is one run (change `seed`).
"""

from sphere_tf.configs import common
from sphere_tf.configs import mhe

ORTHOGONALIZATIONS = {"gs": "gram_schmidt", "hr": "householder", "ls": "lowdin", "cp": "cayley", "ogd": "ogd",
                      "or": "soft", "upt": "soft"}
MODELS = ("cnn6", "cnn9")
STEPS, BOUNDARIES = 75000, [30000, 50000, 65000]
WEIGHT_DECAY = 5e-4


def opt_operator(method, **options):
    """The OPT operator spec of `method` (a key of `ORTHOGONALIZATIONS`) with `options`."""
    common.check(method, "method", ORTHOGONALIZATIONS)
    spec = {"layer": "opt", "orthogonalization": ORTHOGONALIZATIONS[method], **options}
    if method == "upt":
        spec["soft_penalty"] = 0.0
    if method != "ogd":  # OGD keeps R orthogonal by its own optimizer; a decay would pull it off
        spec["rotation_regularizer"] = {"class_name": "L2", "config": {"l2": WEIGHT_DECAY / 2}}
    return spec


def model_section(model="cnn6", method="baseline", batch_norm=True, first=None, fc=None, **options):
    """The `model` section: `opt_cnn6` / `opt_cnn9` with plain He convs ('baseline', 'half_space_mhe') or OPT.

    `first` / `fc`: extra options of the first conv's / FC 64's OPT spec (PE-OPT, S-OPT).
    """
    common.check(model, "model", MODELS)
    section = dict(name=f"opt_{model}", batch_norm=batch_norm, feature_bn_relu=False)
    if method in ("baseline", "half_space_mhe"):
        section["operator"] = dict(mhe.HE_CONV)
        return section
    section["operator"] = opt_operator(method, **options)
    section["fc_operator"] = opt_operator(method, **(options if fc is None else fc))
    if first is not None:
        section["first_operator"] = opt_operator(method, **first)
    return section


def cifar_config(model, method="baseline", steps=STEPS, boundaries=BOUNDARIES, sopt_episode_length=0):
    """The CIFAR-100 recipe of the module docstring around a `model_section`."""
    regularizers = mhe.mhe_entries("half_space_mhe", 2) if method == "half_space_mhe" else []
    return common.base_config(
        seed=0,
        data=dict(name="cifar100", augmentation="cifar_plus_symmetric"),
        model=model,
        loss=dict(label_smoothing=0.01),
        regularizers=[mhe.weight_decay(WEIGHT_DECAY)] + regularizers,
        paradigm=dict(opt_optimizer=method == "ogd", sopt_episode_length=sopt_episode_length),
        optimizer=dict(name="sgd", learning_rate=0.1, momentum=0.9),
        schedule=dict(name="step", boundaries=list(boundaries), decay_factor=0.1),
        train=dict(batch_size=128, steps=steps, steps_per_epoch=0, checkpoint_every_steps=1000),
        export=True,
    )


def quick(config):
    """`common.quick_narrow` (1/8 widths, 8-image batches, two steps), with a 2-step energy pre-processing."""
    common.quick_narrow(config)
    for key in ("operator", "fc_operator", "first_operator"):
        spec = config.model.get(key)
        if spec is not None and spec.get("energy_init"):
            spec.energy_init_steps = 2
        if spec is not None and spec.get("stochastic_dims"):
            spec.stochastic_dims = max(1, spec.stochastic_dims // 16)
    if config.paradigm.sopt_episode_length:
        config.paradigm.sopt_episode_length = 1
    return config
