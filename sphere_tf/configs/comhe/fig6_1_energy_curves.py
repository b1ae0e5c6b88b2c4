r"""CoMHE Fig. 6.1 and Figs. E.2–E.5: hyperspherical energy and test error during training of a small CNN.

Compressive Hyperspherical Energy Minimization (Lin, Liu, Chen, Weller, Song; CVPR 2020); W. Liu's PhD thesis
(2020), Fig. 6.1(c) and App. E.2 (Table E.3, Figs. E.2–E.5). Curves, no numbers (5 runs, mean ± std):

| figure           | arguments                         | the thesis's reading                                      |
|------------------|-----------------------------------|-----------------------------------------------------------|
| Fig. 6.1(c), E.2 | `model=cnn9,bn=on,data=cifar100`  | MHE and CoMHE: lower energy and error than the baseline   |
| Fig. E.3         | `model=cnn3,bn=on,data=cifar100`  | rotation training beats the baseline, close to HS-MHE     |
| Fig. E.4         | `model=cnn9,bn=off,data=cifar100` | the same without BatchNorm                                |
| Fig. E.5         | `model=cnn9,bn=on,data=cifar10`   | rotation beats the baseline and MHE, slightly below CoMHE |

The other cells of the grid (`model=cnn3` with `bn=off` or `data=cifar10`) are not in the thesis.

Methods (`method`, App. E.2.2): `baseline` (standard training), `rotation` (rotation training: every conv and
FC 64 is an OPT layer whose He-initialised neurons V stay fixed while an orthogonal R, Gram-Schmidt of a learned
matrix, rotates them, W = R·V; the classifier is a plain Dense trained as usual; the precursor of OPT, thesis
ch. 7), `hs_mhe`, `rp_comhe` (random projections) and `ap_comhe` (angle-preserving projection, unrolled: the
CoMHE default), the latter three with the CoMHE recipe's settings (sphere_tf/configs/comhe/__init__.py: λ = 1, s = 2,
half-space on the hidden layers, full-space MHE ×10 on the classifier, projection dimension 30, 5 projections).

Network (Table E.3): CNN-3 `[3×3, 32] – [3×3, 64] – [3×3, 64]`, 2×2 max-pool after each stage, FC 64, classifier;
CNN-9 the same with 3 convs per stage (`small_cnn` at widths 32/64/64). Recipe: the CIFAR-100 experiment of
App. E.1 and §6.6.1, as `sphere_tf/configs/comhe` (the rmlin/CoMHE code: SGD momentum 0.9, batch 128, lr 0.1, ×0.1 at
30k, 50k, 65k of 75k iterations, weight decay 5e-4, label smoothing 0.01, symmetric pad + crop + flip).

Logged (`train.energy_layers`, every `train.steps_per_epoch` = 500 iterations): `energy/<layer>` and
`energy/total`, the unprojected half-space energy with s = 1 of Eq. E.2 (the runner's default,
`train.energy_power` / `train.energy_half_space`), of OPT layers on W = R·V; and the test error
(`evaluation.eval_every_steps`, `results.json`'s `test_curve`).

Not stated in the thesis, chosen here:

- BN / ReLU after FC 64: neither (the authors' CoMHE code's `fc6` and OPT code's FC 64 have neither); with
  `bn=on`, BN after every conv.
- Weight decay: 5e-4 for standard, MHE and CoMHE training ("used by default"); none at all in rotation
  training ("no longer needed since it does not need to learn the weights for neurons"), the classifier
  included, although it is learned.
- Which layers the total sums: the thesis says "all the layers"; here the hidden ones (`conv*`, `fc`), without
  the classifier, which Fig. E.7 leaves out ("learned from scratch") and with which rotation training's energy
  would not stay constant as the thesis says it does.
- The logging interval (the figures plot every iteration) and the "same initial weights" of every method: for
  the same `seed`, baseline, HS-MHE and the CoMHEs start from the same weights (same layers, same draws);
  rotation training's V comes from the OPT layers' own He draw (same distribution, other numbers).
- One config is one run; the 5 runs of the figures are 5 `seed`s.

Run:
  sphere-tf train-classifier \
    --config comhe/fig6_1_energy_curves:method=rotation,model=cnn9,bn=on,data=cifar100 \
    --workdir runs/comhe_fig6_1 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import comhe
from sphere_tf.configs import common
from sphere_tf.configs import mhe

METHODS = ("baseline", "rotation", "hs_mhe", "rp_comhe", "ap_comhe")
# The CoMHE-table method of each regularized figure method (`comhe.entries`).
COMHE_METHODS = {"baseline": "baseline", "hs_mhe": "half_space_mhe", "rp_comhe": "random",
                 "ap_comhe": "angle_preserving_unrolled"}
# Table E.3: filters of the three stages and convs per stage; FC 64.
WIDTHS = (32, 64, 64)
DEPTHS = {"cnn3": 1, "cnn9": 3}
FC_UNITS = 64
# Rotation training (App. E.2.2): fixed He-initialised V, R by Gram-Schmidt, no weight decay on R.
ROTATION = {"layer": "opt", "orthogonalization": "gram_schmidt"}
# Energy and test error every this many iterations (75,000 / 500 = 150 points).
LOG_EVERY_STEPS = 500
VARIANTS = {"method": METHODS, "model": tuple(DEPTHS), "bn": ("on", "off"), "data": ("cifar10", "cifar100")}


def model_section(model, method, batch_norm):
    """`small_cnn` as Table E.3's CNN-3 / CNN-9: plain He convs, or OPT-GS convs and FC 64 for rotation."""
    section = dict(name="small_cnn", widths=WIDTHS, convs_per_stage=DEPTHS[model], dense_units=FC_UNITS,
                   batch_norm=batch_norm, feature_bn_relu=False, operator=dict(mhe.HE_CONV))
    if method == "rotation":
        section.update(operator=dict(ROTATION), fc_operator=dict(ROTATION))
    return section


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, method="rp_comhe", model="cnn9", bn="on", data="cifar100")
    common.check(arg.method, "method", METHODS)
    common.check(arg.model, "model", DEPTHS)
    common.check(arg.bn, "bn", ("on", "off"))
    common.check(arg.data, "data", ("cifar10", "cifar100"))
    config = comhe.cifar_config(dataset=arg.data, model=model_section(arg.model, arg.method, arg.bn == "on"),
                                method=COMHE_METHODS.get(arg.method, "baseline"))
    if arg.method == "rotation":
        config.regularizers = []  # no weight decay: the neurons are not learned
    config.train.energy_layers = list(mhe.PLAIN_HIDDEN)
    config.train.steps_per_epoch = LOG_EVERY_STEPS
    config.evaluation.eval_every_steps = LOG_EVERY_STEPS
    if arg.quick:
        common.quick_narrow(config)
        config.evaluation.eval_every_steps = config.train.steps_per_epoch
    return config
