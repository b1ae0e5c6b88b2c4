r"""DCNet (TanhConv + cosine) small CNN on Fashion-MNIST (the README's first command).

Decoupled Networks (CVPR 2018, https://arxiv.org/abs/1804.08071): TanhConv
h = tanh(‖x‖/(ρ·E‖x‖)) with learnable ρ, cosine g, BN + ReLU, Adam 1e-3 as in
the paper's CIFAR recipe, on Fashion-MNIST from Debian's `dataset-fashion-mnist`. Two stages of
two 3×3 convs (32, 64), FC 128; 2 epochs of the 60k training images.

Expected: about 90.8–91.9% test accuracy after the default 2 epochs, depending on the CPU's
instruction set (91.90% on an AVX-512 host without FP16, 90.80% on an AVX-512 FP16 host; each
host is deterministic run to run), about two minutes on 2 CPU cores with the compiled training kernels (measured runs: docs/performance.md, "The README's
first command").

Run:
  sphere-tf train-classifier \
    --config dcnet/fashion_mnist_tanh_cosine --workdir runs/fashion_mnist
  (`:quick` for a two-step smoke run; `:epochs=5` etc. to change the variant.)
"""

from sphere_tf.configs import common


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, epochs=2)
    config = common.base_config(
        seed=0,
        data=dict(name="fashion_mnist", train_limit=0, test_limit=0),
        model=dict(
            name="small_cnn",
            widths=(32, 64),
            convs_per_stage=2,
            dense_units=128,
            batch_norm=True,
            operator=dict(layer="decoupled", magnitude="tanh", angular="cosine"),
        ),
        optimizer=dict(name="adam", learning_rate=1e-3),
        train=dict(batch_size=128, epochs=arg.epochs, steps_per_epoch=0, verbose="auto"),
        export=True,
    )
    if arg.quick:
        common.quick_train(config)
    return config
