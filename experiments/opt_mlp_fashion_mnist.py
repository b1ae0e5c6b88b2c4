"""OPT MLP (784-256-256-10) vs the same plain MLP on real Fashion-MNIST.

The thesis's Table 7.3 setting (MNIST MLP 784-256-256-10, ReLU, momentum SGD lr
0.01 / momentum 0.9 / batch 100, OPT on the two hidden layers, not on the
classifier), scaled down: a subset of the training set and a few epochs, on
Fashion-MNIST (Debian's `dataset-fashion-mnist`).  Every variant shares the data
order and the V / classifier seeds; the plain MLP's hidden kernels start from the
same N(0, 2/fan_in) distribution as OPT's fixed V.

Run (about 5–10 minutes on 2 CPU cores):

    python experiments/opt_mlp_fashion_mnist.py --train_size 20000 --epochs 5

Writes the accuracy table between the `opt-mlp-results` markers of docs/opt.md
and a JSON copy to experiments/results/opt_mlp_fashion_mnist.json.
"""

import json
import os
import time

from absl import app
from absl import flags
import keras
import numpy as np

from sphere_tf import layers as sphere_layers
from sphere_tf import optimizers as sphere_optimizers
from sphere_tf.data import fashion_mnist
from sphere_tf.ops import orthogonal

FLAGS = flags.FLAGS
flags.DEFINE_integer("train_size", 20000, "Training examples used (first N of the shuffled training set).")
flags.DEFINE_integer("epochs", 5, "Epochs.")
flags.DEFINE_integer("batch_size", 100, "Batch size (thesis: 100).")
flags.DEFINE_float("learning_rate", 0.01, "Momentum-SGD learning rate (thesis: 0.01).")
flags.DEFINE_integer("seed", 0, "Seed of the data order and of every initialiser.")
flags.DEFINE_list(
    "variants", ["plain", "gram_schmidt", "cayley", "ogd"],
    "Variants: 'plain' or an orthogonalization name, optionally suffixed ':unit_norm' (unit-norm V) or "
    "':identity_init' (raw rotation initialised to I).",
)
flags.DEFINE_string("docs_file", "docs/opt.md", "Markdown file with the result markers ('' to skip).")
flags.DEFINE_string("results_file", "experiments/results/opt_mlp_fashion_mnist.json", "JSON output ('' to skip).")

_BEGIN, _END = "<!-- opt-mlp-results:begin -->", "<!-- opt-mlp-results:end -->"


def _he_normal(seed):
    return keras.initializers.VarianceScaling(2.0, "fan_in", "untruncated_normal", seed=seed)


def build_mlp(variant, seed):
    def hidden(i):
        if variant == "plain":
            return keras.layers.Dense(256, activation="relu", kernel_initializer=_he_normal(seed + 10 * i))
        orth = variant.split(":")[0]
        return sphere_layers.OPTDense(
            256, activation="relu", orthogonalization=orth, seed=seed + 10 * i,
            normalize_fixed_kernel=variant.endswith(":unit_norm"),
            # ":identity_init" starts the raw P at I (rows of unit norm) instead of upstream N(0, 1).
            rotation_initializer="identity" if variant.endswith(":identity_init") else None,
        )

    return keras.Sequential(
        [
            keras.Input((784,)),
            hidden(1),
            hidden(2),
            keras.layers.Dense(10, kernel_initializer=keras.initializers.GlorotUniform(seed + 100)),
        ],
        name="mlp_" + variant.replace(":", "_"),
    )


def run_variant(variant, data, seed):
    (x_train, y_train), (x_test, y_test) = data
    keras.utils.set_random_seed(seed)
    model = build_mlp(variant, seed)
    sgd = keras.optimizers.SGD(FLAGS.learning_rate, momentum=0.9)
    optimizer = sphere_optimizers.OPTOptimizer(sgd) if variant == "ogd" else sgd
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    start = time.time()
    history = model.fit(
        x_train, y_train, batch_size=FLAGS.batch_size, epochs=FLAGS.epochs, shuffle=True, verbose=2,
        validation_data=(x_test, y_test),
    )
    seconds = time.time() - start
    _, test_acc = model.evaluate(x_test, y_test, batch_size=1000, verbose=0)
    orth_err = [
        float(orthogonal.orthogonality_error(layer.rotation())) for layer in sphere_layers.opt_layers(model)
    ]
    return {
        "variant": variant,
        "test_accuracy": float(test_acc),
        "train_accuracy_last_epoch": float(history.history["accuracy"][-1]),
        "test_accuracy_per_epoch": [float(a) for a in history.history["val_accuracy"]],
        "max_orthogonality_error": max(orth_err) if orth_err else None,
        "seconds": seconds,
    }


def _table(rows):
    lines = [
        f"Fashion-MNIST, {FLAGS.train_size} training images, full 10k test set, {FLAGS.epochs} epochs, "
        f"SGD lr {FLAGS.learning_rate} momentum 0.9, batch {FLAGS.batch_size}, seed {FLAGS.seed} "
        "(`python experiments/opt_mlp_fashion_mnist.py`).",
        "",
        "| MLP 784-256-256-10 | test accuracy | train accuracy (last epoch) | max ‖RᵀR − I‖ | wall time (s) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        err = "–" if r["max_orthogonality_error"] is None else f"{r['max_orthogonality_error']:.1e}"
        lines.append(
            f"| {r['variant']} | {100 * r['test_accuracy']:.2f}% | {100 * r['train_accuracy_last_epoch']:.2f}% "
            f"| {err} | {r['seconds']:.0f} |"
        )
    return "\n".join(lines)


def main(argv):
    del argv
    (x_train, y_train), (x_test, y_test) = fashion_mnist.load_fashion_mnist()
    order = np.random.default_rng(FLAGS.seed).permutation(len(x_train))[: FLAGS.train_size]
    x_train = x_train[order].reshape(-1, 784).astype("float32") / 255.0
    y_train = y_train[order].astype("int32")
    x_test = x_test.reshape(-1, 784).astype("float32") / 255.0
    y_test = y_test.astype("int32")
    data = ((x_train, y_train), (x_test, y_test))
    rows = []
    for variant in FLAGS.variants:
        row = run_variant(variant, data, FLAGS.seed)
        print(json.dumps(row))
        rows.append(row)
    table = _table(rows)
    print(table)
    if FLAGS.results_file:
        os.makedirs(os.path.dirname(FLAGS.results_file), exist_ok=True)
        with open(FLAGS.results_file, "w") as f:
            json.dump({"flags": {k: FLAGS[k].value for k in ("train_size", "epochs", "batch_size", "learning_rate", "seed")},
                       "rows": rows}, f, indent=1)
    if FLAGS.docs_file and os.path.exists(FLAGS.docs_file):
        text = open(FLAGS.docs_file).read()
        if _BEGIN in text and _END in text:
            head, rest = text.split(_BEGIN, 1)
            _, tail = rest.split(_END, 1)
            with open(FLAGS.docs_file, "w") as f:
                f.write(f"{head}{_BEGIN}\n{table}\n{_END}{tail}")


if __name__ == "__main__":
    app.run(main)
