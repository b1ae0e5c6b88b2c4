r"""MHE Fig. 5.4: MNIST with only 100 images of digit 0, a 2-D output feature.

Learning towards Minimum Hyperspherical Energy (Liu et al., NeurIPS 2018), Fig. 3;
W. Liu's PhD thesis (2020), Fig. 5.4 and App. D.1: "keep 100 images of digit 0 (2%)",
a 6-layer CNN whose output feature is 2-D. Paper's number: full-test accuracy 88.5%
without MHE, 98% with MHE (text; no table).

Not stated in the paper, our choices: the 6-layer CNN is the zoo's `mnist_2d`
(L-Softmax Table 2.1's MNIST visualisation net: [5×5] × 2 at 32/64/128, PReLU, BN, FC 2),
and the L-Softmax MNIST recipe of sphere_tf/configs/losses/lsoftmax_table2_1.py (SGD momentum
0.9, batch 256, lr 0.1, ×0.1 at 12k and 15k, 18k iterations, weight decay 5e-4, mean
subtraction, no augmentation). `method=mhe` puts full-space MHE (s = 2, the code's
weights λ_h = 1, λ_o = 10) on the hidden layers and on the classifier.

`results.json` adds the error on digit 0 (`test_minority_error`; the paper gives only the
full-test accuracy) and every digit's (`test_per_class_error`).

Run:
  sphere-tf train-classifier \
    --config mhe/fig5_4_mnist_imbalance:method=mhe \
    --workdir runs/mhe_fig5_4 --config.data.manual_dir=/path/to/mnist
"""

from sphere_tf.configs import common
from sphere_tf.configs import mhe

METHODS = ("baseline", "mhe", "half_space_mhe")
VARIANTS = {"method": METHODS, "s": (0, 1, 2)}


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, method="mhe", s=2)
    common.check(arg.method, "method", METHODS)
    config = common.base_config(
        seed=0,
        data=dict(name="mnist", augmentation="none", normalization="mean_subtraction", class_limits=[100]),
        model=dict(name="mnist_2d", operator=dict(mhe.HE_CONV)),
        regularizers=[mhe.weight_decay()] + mhe.mhe_entries(arg.method, arg.s),
        optimizer=dict(name="sgd", learning_rate=0.1, momentum=0.9),
        schedule=dict(name="step", boundaries=[12000, 15000], decay_factor=0.1),
        train=dict(batch_size=256, steps=18000, steps_per_epoch=0, checkpoint_every_steps=1000),
        evaluation=dict(minority_classes=[0]),  # test_minority_error: the error on digit 0
        export=True,
    )
    return common.quick_narrow(config) if arg.quick else config
