r"""MHE thesis Table D.3: SphereNet (cosine SphereConv) CNN-9 with MHE, CIFAR-10+ / CIFAR-100+.

W. Liu's PhD thesis (2020), App. D, Table D.3 (Learning towards Minimum Hyperspherical
Energy, NeurIPS 2018, appendix): the CNN-9 of Table 5.1 with every conv a cosine
SphereConv (Deep Hyperspherical Learning, NIPS 2017). Error % (paper):

| method                 | C10 s=2 | C10 s=1 | C10 s=0 | C100 s=2 | C100 s=1 | C100 s=0 |
|------------------------|---------|---------|---------|----------|----------|----------|
| mhe                    | 5.71    | 5.99    | 5.95    | 27.28    | 26.99    | 27.03    |
| half_space_mhe         | 6.12    | 6.33    | 6.31    | 27.17    | 27.77    | 27.46    |
| angular_mhe            | 5.91    | 5.98    | 6.06    | 27.07    | 27.27    | 26.70    |
| half_space_angular_mhe | 6.14    | 5.87    | 6.11    | 27.35    | 27.68    | 27.58    |
| orthonormal            | 6.13    |         |         | 27.95    |          |          |
| baseline (SphereNet)   | 6.37    |         |         | 28.10    |          |          |

Recipe: as sphere_tf/configs/mhe/table5_1_cnn9.py (SGD 0.1, batch 128, ×0.1 at 20k/30k/37.5k,
42.5k iterations, weight decay 5e-4, symmetric pad + crop + flip) with
`operator={"layer": "sphere", "angular": "cosine"}`. Not stated: the SphereNet loss
(we keep the softmax classifier of the MHE runs, which the MHE output term regularizes).

Run:
  sphere-tf train-classifier \
    --config mhe/tableD3_spherenet:data=cifar10,method=mhe,s=2 \
    --workdir runs/mhe_tD3 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import common
from sphere_tf.configs import mhe

METHODS = ("baseline", "orthonormal", "mhe", "half_space_mhe", "angular_mhe",
           "half_space_angular_mhe")
VARIANTS = {"data": ("cifar10", "cifar100"), "method": METHODS, "s": (0, 1, 2)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, data="cifar100", method="mhe", s=2)
    common.check(arg.method, "method", METHODS)
    model = mhe.plain_cnn("cnn9", operator={"layer": "sphere", "angular": "cosine"})
    config = mhe.cifar_config(
        dataset=arg.data, model=model, regularizers=mhe.mhe_entries(arg.method, arg.s),
        steps=mhe.MHE_STEPS, boundaries=mhe.MHE_BOUNDARIES,
    )
    return common.quick_narrow(config) if arg.quick else config
