r"""MHE Table 5.7 (imbalanced CIFAR-10) and thesis Table D.6 (imbalanced CIFAR-100), CNN-9.

Learning towards Minimum Hyperspherical Energy (Liu et al., NeurIPS 2018), Table 7;
W. Liu's PhD thesis (2020), Table 5.7 and App. D.1 / Table D.6. The training set is
made imbalanced with `data.class_limits` (the test set is untouched):

- cifar10 single: class 0 keeps 10% (500 images; 45,500 in all);
- cifar10 multiple: class c keeps 500·(c + 1) images (27,500 in all);
- cifar100 single: classes 0-9 keep 10% (50 images each);
- cifar100 multiple: class c keeps 5·(c + 1) images.

Error % (paper); Err.(S) is the error on the minority class (class 0) alone:

| method                 | C10 single | C10 Err.(S) | C10 multiple | C100 single | C100 multiple |
|------------------------|------------|-------------|--------------|-------------|---------------|
| baseline               | 9.80       | 30.40       | 12.00        | 31.43       | 38.39         |
| orthonormal            | 8.34       | 26.80       | 10.80        | 30.75       | 37.89         |
| mhe                    | 7.98       | 25.80       | 10.25        | 29.30       | 37.07         |
| half_space_mhe         | 7.90       | 26.40       | 9.59         | 29.40       | 36.52         |
| angular_mhe            | 7.96       | 26.00       | 9.88         | 30.16       | 37.54         |
| half_space_angular_mhe | 7.59       | 25.90       | 9.89         | 29.60       | 37.07         |

`results.json` reports the whole test set's error as `test_error` and, in the single
setting, the minority-class error as `test_minority_error`: the error over the test
images of the classes kept at 10% (thesis §5.5.1: "the error rate (denoted by Err. (S)) on
the imbalance class (single imbalance setting) in the full testing set"; class 0 for CIFAR-10, classes 0-9
for CIFAR-100, whose Table D.6 reports no such column). `test_per_class_error` lists
every class's error. The multiple setting names no minority classes (every class but
the last is cut).

Recipe: as sphere_tf/configs/mhe/table5_1_cnn9.py (thesis App. D.1 / wy1iu/MHE code: SGD 0.1,
batch 128, ×0.1 at 20k/30k/37.5k, 42.5k iterations, weight decay 5e-4, orthonormal
regularization 1e-5). s is not stated for these tables; we use s = 2.

Run:
  sphere-tf train-classifier \
    --config mhe/table5_7_imbalanced:data=cifar10,setting=single,method=mhe \
    --workdir runs/mhe_t5_7 --config.data.manual_dir=/path/to/cifar
"""

from sphere_tf.configs import common
from sphere_tf.configs import mhe

CLASS_LIMITS = {
    ("cifar10", "single"): [500],
    ("cifar10", "multiple"): [500 * (c + 1) for c in range(10)],
    ("cifar100", "single"): [50] * 10,
    ("cifar100", "multiple"): [5 * (c + 1) for c in range(100)],
}

# The classes whose error `test_minority_error` reports (App. D.1 / D.8.1: the classes kept at 10%).
MINORITY_CLASSES = {
    ("cifar10", "single"): [0],
    ("cifar10", "multiple"): [],
    ("cifar100", "single"): list(range(10)),
    ("cifar100", "multiple"): [],
}

METHODS = ("baseline", "orthonormal", "mhe", "half_space_mhe", "angular_mhe",
           "half_space_angular_mhe")
VARIANTS = {"data": ("cifar10", "cifar100"), "setting": ("single", "multiple"), "method": METHODS}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, data="cifar10", setting="single", method="half_space_mhe", s=2)
    common.check(arg.setting, "setting", ("single", "multiple"))
    common.check(arg.method, "method", METHODS)
    common.check(arg.data, "data", ("cifar10", "cifar100"))
    config = mhe.cifar_config(
        dataset=arg.data, model=mhe.plain_cnn("cnn9"), regularizers=mhe.mhe_entries(arg.method, arg.s),
        steps=mhe.MHE_STEPS, boundaries=mhe.MHE_BOUNDARIES, class_limits=CLASS_LIMITS[arg.data, arg.setting],
        minority_classes=MINORITY_CLASSES[arg.data, arg.setting],
    )
    return common.quick_narrow(config) if arg.quick else config
