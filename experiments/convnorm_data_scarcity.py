"""ConvNorm + BN vs BN alone with 10% of Fashion-MNIST (the paper's data-scarcity claim, Table 7).

[C] Table 7 (CIFAR-10, ResNet-18, 10% of the training set): ConvNorm + BN 77.96 vs BN 67.10.
This is a CPU-sized analogue on the real data available here: a random 10% of the
Fashion-MNIST training set (6,000 images, same subset for both models and seed),
a small CNN (3 conv layers 16/32/32, strides 1/2/2, global average pool, dense 10),
SGD with momentum 0.9 (lr 0.05, no weight decay, no augmentation), batch 128. The
two models differ only in the conv layer:

* "bn":          Conv2D(use_bias=False) -> BatchNormalization (PyTorch momentum/eps as upstream)
* "convnorm_bn": ConvNorm2D(batch_norm=True)  (conv -> ConvNorm -> affine -> BN)

Test accuracy on the full 10k test set is logged per epoch; we report the final
and the best epoch (the paper reports the best-validation model). Results go to
docs/conv_norm.md by hand.

    python experiments/convnorm_data_scarcity.py --epochs 4 --seeds 0
"""

import json
import time

import keras
import numpy as np
from absl import app
from absl import flags

from sphere_tf.data import fashion_mnist
from sphere_tf.layers import conv_norm

FLAGS = flags.FLAGS
flags.DEFINE_float("fraction", 0.1, "Fraction of the training set used.")
flags.DEFINE_integer("epochs", 10, "Training epochs.")
flags.DEFINE_integer("batch_size", 128, "Batch size.")
flags.DEFINE_float("learning_rate", 0.05, "SGD learning rate (momentum 0.9).")
flags.DEFINE_list("seeds", ["0"], "Seeds (subset, init and shuffling).")
flags.DEFINE_string("results_file", None, "Optional JSON-lines output.")

WIDTHS = ((16, 1), (32, 2), (32, 2))


def build_model(kind):
    inputs = keras.Input((28, 28, 1))
    h = inputs
    for width, stride in WIDTHS:
        if kind == "convnorm_bn":
            h = conv_norm.ConvNorm2D(width, 3, strides=stride, padding="same")(h)
        else:
            h = keras.layers.Conv2D(width, 3, strides=stride, padding="same", use_bias=False)(h)
            h = keras.layers.BatchNormalization(momentum=conv_norm.BN_MOMENTUM, epsilon=conv_norm.BN_EPSILON)(h)
        h = keras.layers.ReLU()(h)
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.Model(inputs, keras.layers.Dense(10)(h), name=kind)


def run(kind, seed, x_train, y_train, x_test, y_test):
    keras.utils.set_random_seed(seed)
    model = build_model(kind)
    model.compile(
        optimizer=keras.optimizers.SGD(FLAGS.learning_rate, momentum=0.9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    accs = []
    start = time.time()
    for epoch in range(FLAGS.epochs):
        hist = model.fit(x_train, y_train, batch_size=FLAGS.batch_size, epochs=1, verbose=0, shuffle=True)
        _, acc = model.evaluate(x_test, y_test, batch_size=1000, verbose=0)
        accs.append(float(acc))
        print(f"{kind} seed={seed} epoch={epoch + 1} loss={hist.history['loss'][-1]:.4f} test_acc={acc:.4f}",
              flush=True)
    return {"kind": kind, "seed": seed, "final_acc": accs[-1], "best_acc": max(accs),
            "accs": accs, "seconds": time.time() - start}


def main(argv):
    del argv
    (x_train, y_train), (x_test, y_test) = fashion_mnist.load_fashion_mnist()
    x_test = fashion_mnist.as_float_images(x_test)
    rows = []
    for seed in (int(s) for s in FLAGS.seeds):
        idx = np.random.default_rng(seed).permutation(len(x_train))[: int(FLAGS.fraction * len(x_train))]
        xs, ys = fashion_mnist.as_float_images(x_train[idx]), y_train[idx]
        for kind in ("bn", "convnorm_bn"):
            rows.append(run(kind, seed, xs, ys, x_test, y_test))
            print(json.dumps(rows[-1]), flush=True)
    for kind in ("bn", "convnorm_bn"):
        final = [r["final_acc"] for r in rows if r["kind"] == kind]
        best = [r["best_acc"] for r in rows if r["kind"] == kind]
        print(f"{kind}: final {100 * np.mean(final):.2f} ± {100 * np.std(final):.2f}  "
              f"best {100 * np.mean(best):.2f} ± {100 * np.std(best):.2f}  (n={len(final)})")
    if FLAGS.results_file:
        with open(FLAGS.results_file, "w") as f:
            f.write("\n".join(json.dumps(r) for r in rows) + "\n")


if __name__ == "__main__":
    app.run(main)
