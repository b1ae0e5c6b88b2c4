r"""OPT Table 7.3: the MNIST MLP, every orthogonalization under Normal and Xavier initialization.

Orthogonal Over-Parameterized Training (Liu et al., CVPR 2021), §5.2 "Multi-Layer Perceptrons";
W. Liu's PhD thesis (2020), §7.5.2, Table 7.3, App. F.3. Test error % (paper, mean of 10 runs):

| method   | normal | xavier |
|----------|--------|--------|
| baseline | 6.05   | 2.14   |
| gs       | 5.11   | 1.45   |
| hr       | 5.31   | 1.60   |
| ls       | 5.32   | 1.54   |
| cp       | 5.14   | 1.49   |
| ogd      | 5.38   | 1.56   |
| or       | 5.41   | 1.78   |

Network (App. F.3; zoo `opt_mlp`): 784 → 256 → 256 → 10, ReLU, softmax cross-entropy, following
hwalsuklee/tensorflow-mnist-MLP-batch_normalization-weight_initializers (`MLPwoBN`: biases, zero
bias init). OPT (W = R·V, R initialized N(0, 1), thesis App. F.3) in the two hidden layers; the
output layer stays a plain Dense. `init` is the initialization of the neurons: of the weights for
the baseline, of the fixed V for OPT, and of the output layer in both: 'normal' is that
repository's `tf.random_normal` (N(0, 1), std 1.0), 'xavier' its `xavier_initializer()`
(Glorot uniform).

Recipe (App. F.3): momentum SGD, lr 0.01, momentum 0.9, batch 100, 100 epochs. OGD: Cayley SGD
on R (`paradigm.opt_optimizer`); OR: β = 0.1 (wy1iu/OPT `opt_or`).
Not stated in the paper, our choices: no BatchNorm (the repository has both; Table 7.3's Normal
baseline, 6.05 %, fits its run without BN, 94.85 % accuracy); no weight decay, no label smoothing
and a constant learning rate (none is mentioned); pixels scaled to [0, 1]
(`normalization='unit_interval'`, the repository's TF `input_data` reader); all 60,000 training
images (the reader holds 5,000 out), so 100 epochs are 60,000 steps.

Run:
  sphere-tf train-classifier \
    --config opt/table7_3_mnist_mlp:method=gs,init=xavier \
    --workdir runs/opt_t7_3 --config.data.manual_dir=/path/to/mnist
"""

from sphere_tf.configs import common
from sphere_tf.configs import opt

METHODS = ("baseline", "gs", "hr", "ls", "cp", "ogd", "or")
# The neurons' initialization (hwalsuklee's `weight_initializer` choices 'normal' and 'xavier').
INITS = {
    "normal": {"class_name": "RandomNormal", "config": {"mean": 0.0, "stddev": 1.0}},
    "xavier": "glorot_uniform",
}
VARIANTS = {"method": METHODS, "init": tuple(INITS)}
BATCH, EPOCHS, TRAIN_IMAGES = 100, 100, 60000


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, method="gs", init="xavier")
    common.check(arg.method, "method", METHODS)
    common.check(arg.init, "init", INITS)
    init = INITS[arg.init]
    if arg.method == "baseline":
        operator = {"layer": "conv2d", "kernel_initializer": init}  # a plain Dense in the FC slots
    else:
        operator = opt.opt_operator(arg.method, fixed_kernel_initializer=init)
        operator.pop("rotation_regularizer", None)  # no weight decay in this recipe
    steps_per_epoch = TRAIN_IMAGES // BATCH
    config = common.base_config(
        seed=0,
        data=dict(name="mnist", augmentation="none", normalization="unit_interval"),
        model=dict(name="opt_mlp", operator=operator, batch_norm=False,
                   head={"layer": "dense", "kernel_initializer": init}),
        paradigm=dict(opt_optimizer=arg.method == "ogd"),
        optimizer=dict(name="sgd", learning_rate=0.01, momentum=0.9),
        schedule=dict(name="constant"),
        train=dict(batch_size=BATCH, steps=EPOCHS * steps_per_epoch, steps_per_epoch=steps_per_epoch,
                   checkpoint_every_steps=1000),
        export=True,
    )
    return common.quick_narrow(config) if arg.quick else config
