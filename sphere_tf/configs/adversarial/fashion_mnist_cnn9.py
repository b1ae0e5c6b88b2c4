r"""DCNet's adversarial experiment (Tables 7 and 8 layout) on Fashion-MNIST, sized for a CPU.

The protocol of `sphere_tf/configs/adversarial/cifar10_cnn9.py` (Decoupled Networks,
CVPR 2018, §6.2: CNN-9 32/64/128 + FC 256 without BN, ADAM, standard gradients;
Baseline / SphereConv / BallConv / TanhConv with cosine g; FGSM and BIM with
ε = 8, τ = 2, N = 20 on the 0–255 scale; FGSM adversarial training with ε = 8,
mix 0.5; black-box examples from a separately trained, naturally trained
baseline) on 28×28 grey Fashion-MNIST (Debian's `dataset-fashion-mnist`,
(x − 127.5)/128 inputs), shrunk to fit a shared 2-core CPU: CNN-9 at half
width (16/32/64, FC 128: `width=0.5`), a seeded random `train_images` subset of
the 60k training images, `epochs` epochs, the first `test_images` test images
for the attacks, three seeds.

Defaults: 6 000 training images, 2 epochs (92 steps of batch 128), 300 test
images, DeepFool on 50 of them, seeds 0, 1, 2. Measured (docs/adversarial.md):
results next to the paper's CIFAR-10 numbers, and which of the paper's
orderings held. `:width=1.0,dense=256,train_images=60000,epochs=10,test_images=10000`
is the full-size network on all the data.

Run:
  sphere-tf train-adversarial --config adversarial/fashion_mnist_cnn9 \
      --workdir runs/adversarial_fashion_mnist
  (`:quick` for a seconds-long smoke run; `:seeds=1,epochs=3` etc. to change it.)
"""

from sphere_tf.configs import common
from sphere_tf.configs.adversarial import _base


def get_config(arg=None):
    arg = common.parse_arg(arg, quick=False, seeds=3, train_images=6000, test_images=300, epochs=2,
                           deepfool_images=50, width=0.5, dense=128)
    config = _base.adversarial_config(
        seeds=list(range(arg.seeds)),
        data=dict(name="fashion_mnist", augmentation="none",
                  train_limit=arg.train_images, test_limit=arg.test_images),
        model=dict(name="dcnet_cnn9_adv", width_multiplier=arg.width, dense_units=arg.dense),
        optimizer=dict(name="adam", learning_rate=1e-3),
        train=dict(batch_size=128, epochs=arg.epochs, steps=0, steps_per_epoch=0, verbose="auto"),
        deepfool=dict(images=arg.deepfool_images, steps=30),
    )
    if arg.quick:
        _base.quick_adversarial(config)
    return config
