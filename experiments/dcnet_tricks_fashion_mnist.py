"""DCNet optimisation tricks on real Fashion-MNIST: a short sanity run [D §4, Table 1 in miniature].

Trains the README job's `small_cnn` (two stages of two 3×3 convs, 32/64, FC 128, BN)
five ways from the same seed and reports test accuracy and the mean operator
kernel norm at the end:

* `cnn`:         plain Conv2D/Dense (keras.Model);
* `standard`:    TanhConv + cosine operators, no tricks (SphereModel, both off);
* `projection`:  the same with weight projection every `--every` steps, s = 1;
* `weighted`:    the same with weighted gradients [D-18];
* `pretrained`:  `projection`, initialised from the trained `cnn` run [D §4.3].

BatchNorm momentum is 0.9 here: with Keras' 0.99 the moving variance keeps
0.99^steps of its initial value 1, and after a few hundred steps that is still far
above the tiny variance of bounded operator outputs (|f| ≤ 1), so inference-mode
accuracy of a short DCNet run is near chance although training accuracy is fine
(the plain CNN does not show it). Full-length runs do not need this.

Not a reproduction of the paper's numbers (CIFAR-100, ResNet-32, 42.5k steps);
it checks that the tricks train on real data and shows their effect on ‖w‖.
Results go to stdout as a Markdown table (copied into docs/training.md).

    python experiments/dcnet_tricks_fashion_mnist.py --train_limit=6000 --epochs=2 --every=20
"""

import time

import keras
import numpy as np
from absl import app
from absl import flags

from sphere_tf import data as data_lib
from sphere_tf import models
from sphere_tf import training

FLAGS = flags.FLAGS
flags.DEFINE_integer("train_limit", 12000, "Training images (random subset; 0 = all 60k).")
flags.DEFINE_integer("test_limit", 0, "Test images (0 = all 10k).")
flags.DEFINE_integer("epochs", 1, "Epochs per run.")
flags.DEFINE_integer("batch_size", 64, "Batch size.")
flags.DEFINE_integer("every", 100, "Weight projection period (upstream: 100).")
flags.DEFINE_string("optimizer", "adam", "'adam' (the paper's CIFAR recipe) or 'sgd' (momentum 0.9).")
flags.DEFINE_float("learning_rate", 1e-3, "Learning rate.")
flags.DEFINE_integer("seed", 0, "Seed.")
flags.DEFINE_float("bn_momentum", 0.9, "BatchNorm momentum (Keras default 0.99; see the docstring).")

OPERATOR = {"layer": "decoupled", "magnitude": "tanh", "angular": "cosine"}


def _optimizer():
    if FLAGS.optimizer == "adam":
        return keras.optimizers.Adam(FLAGS.learning_rate)
    return keras.optimizers.SGD(FLAGS.learning_rate, momentum=0.9)


def _mean_kernel_norm(model):
    norms = []
    for layer in training.find_operator_layers(model):
        w = layer.kernel.numpy()
        norms.append(np.sqrt((w.reshape(-1, w.shape[-1]) ** 2).sum(0)).mean())
    return float(np.mean(norms)) if norms else float("nan")


def _run(name, model, train_ds, test_ds):
    model.compile(_optimizer(), keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    start = time.time()
    history = model.fit(train_ds, epochs=FLAGS.epochs, verbose=0)
    seconds = time.time() - start
    _, accuracy = model.evaluate(test_ds, verbose=0)
    row = {"run": name, "train_accuracy": float(history.history["accuracy"][-1]), "test_accuracy": float(accuracy), "kernel_norm": _mean_kernel_norm(model),
           "seconds": seconds}
    print(row, flush=True)
    return row


def main(argv):
    del argv
    train_ds, test_ds, info = data_lib.fashion_mnist_datasets(
        FLAGS.batch_size, train_limit=FLAGS.train_limit, test_limit=FLAGS.test_limit, seed=FLAGS.seed)

    def build(operator):
        keras.utils.set_random_seed(FLAGS.seed)
        model = models.create_model("small_cnn", input_shape=info["input_shape"], num_classes=10,
                                    operator=operator)
        for layer in model.layers:
            if isinstance(layer, keras.layers.BatchNormalization):
                layer.momentum = FLAGS.bn_momentum
        return model

    rows = []
    cnn = build(None)
    rows.append(_run("cnn", cnn, train_ds, test_ds))
    variants = {
        "standard": dict(weight_projection_every=None),
        "projection": dict(weight_projection_every=FLAGS.every),
        "weighted": dict(weight_projection_every=None, weighted_gradients=True),
    }
    for name, settings in variants.items():
        rows.append(_run(name, training.wrap(build(OPERATOR), **settings), train_ds, test_ds))
    target = build(OPERATOR)
    calibration = next(iter(train_ds))[0]
    report = training.initialize_from_pretrained(target, cnn, match="name", projection_scale=1.0,
                                                 calibration_data=calibration, verbose=False)
    print(report.summary())
    rows.append(_run("pretrained", training.wrap(target, weight_projection_every=FLAGS.every), train_ds, test_ds))

    print(f"\n{info['train_size']} training images, {FLAGS.epochs} epoch(s), batch {FLAGS.batch_size}, "
          f"{FLAGS.optimizer} lr {FLAGS.learning_rate}, projection every {FLAGS.every}, "
          f"{info['test_size']} test images\n")
    print("| run | train accuracy (last epoch) | test accuracy | mean operator ‖w‖ at the end | train time (s) |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['run']} | {row['train_accuracy']:.4f} | {row['test_accuracy']:.4f} | "
              f"{row['kernel_norm']:.3f} | {row['seconds']:.0f} |")


if __name__ == "__main__":
    app.run(main)
