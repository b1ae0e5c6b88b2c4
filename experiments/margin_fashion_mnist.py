"""Margin losses on Fashion-MNIST with low-dimensional features: angles, AFS, accuracy.

Trains the same small network (MLP 784-256-128-d, no ReLU on the d-dimensional
feature, as SphereFace App. A.1 recommends) with several `MarginHead` loss types
and reports, on held-out test images, the minimum inter-class angle between class
mean directions, the largest intra-class angle, the angular Fisher score [T-A.1]
and the accuracy of the plain (inference) logits. Each configuration runs for
several seeds; the table lists mean ± std. This is the long version of the
end-to-end check in tests/layers/test_margin_head_fashion_mnist.py.

Runtime: about 1 minute per (loss, seed) on one CPU core at the defaults.

    python experiments/margin_fashion_mnist.py --num_train 12000 --epochs 10 --seeds 0,1,2
"""

import json
import time

import keras
import numpy as np
from absl import app
from absl import flags

from sphere_tf import metrics
from sphere_tf.data import fashion_mnist
from sphere_tf.layers import MarginHead

# Fast annealing for short runs: λ = 100·(1 + 0.05 t)^−2, λ ≈ 1 after ~180 steps.
SHORT_ANNEALING = {"base": 100.0, "gamma": 0.05, "power": 2.0, "lambda_min": 0.0}

CONFIGS = {
    "softmax": dict(loss_type="lsoftmax", margin=1, use_bias=True),
    "modified_softmax": dict(loss_type="asoftmax", margin=1),
    "lsoftmax_m2": dict(loss_type="lsoftmax", margin=2, annealing=SHORT_ANNEALING),
    "asoftmax_m2": dict(loss_type="asoftmax", margin=2, annealing=SHORT_ANNEALING),
    "asoftmax_m4": dict(loss_type="asoftmax", margin=4, annealing=SHORT_ANNEALING),
    "asoftmax_m4_no_anneal": dict(loss_type="asoftmax", margin=4),
    "gasoftmax_linear_m4": dict(loss_type="gasoftmax", angular="linear", margin=4, annealing=SHORT_ANNEALING),
    "cosface": dict(loss_type="cosface", margin=0.35, scale=16.0),
    "arcface": dict(loss_type="arcface", margin=0.5, scale=16.0),
}

FLAGS = flags.FLAGS
flags.DEFINE_integer("num_train", 12000, "Training images (first N of the training set).")
flags.DEFINE_integer("num_test", 5000, "Test images used for the metrics.")
flags.DEFINE_integer("epochs", 10, "Training epochs.")
flags.DEFINE_integer("batch_size", 64, "Batch size.")
flags.DEFINE_integer("feature_dim", 3, "Feature dimension d.")
flags.DEFINE_float("learning_rate", 1e-3, "Adam learning rate.")
flags.DEFINE_list("seeds", ["0", "1", "2"], "Random seeds.")
flags.DEFINE_list("losses", list(CONFIGS), f"Configurations to run, from {sorted(CONFIGS)}.")
flags.DEFINE_string("results_file", None, "Optional JSON-lines file for the per-run rows.")


def build_models(head, feature_dim):
    """(train_model [images, labels] -> margin logits, feature_model, inference_model)."""
    images = keras.Input((784,), name="images")
    labels = keras.Input((), dtype="int32", name="labels")
    h = keras.layers.Dense(256, activation="relu")(images)
    h = keras.layers.Dense(128, activation="relu")(h)
    features = keras.layers.Dense(feature_dim, name="features")(h)
    train_model = keras.Model([images, labels], head(features, labels=labels))
    return train_model, keras.Model(images, features), keras.Model(images, head(features))


def load_data(num_train, num_test):
    (x_train, y_train), (x_test, y_test) = fashion_mnist.load_fashion_mnist()
    flat = lambda x: fashion_mnist.as_float_images(x).reshape(len(x), -1)  # noqa: E731
    return (
        (flat(x_train[:num_train]), y_train[:num_train].astype("int32")),
        (flat(x_test[:num_test]), y_test[:num_test].astype("int32")),
    )


def run_one(config, data, feature_dim, epochs, batch_size, learning_rate, seed):
    (x_train, y_train), (x_test, y_test) = data
    keras.utils.set_random_seed(seed)
    head = MarginHead(10, **config)
    train_model, feature_model, inference_model = build_models(head, feature_dim)
    train_model.compile(
        keras.optimizers.Adam(learning_rate), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    start = time.time()
    history = train_model.fit([x_train, y_train], y_train, batch_size=batch_size, epochs=epochs, verbose=0)
    seconds = time.time() - start
    features = feature_model.predict(x_test, verbose=0)
    accuracy = float(np.mean(inference_model.predict(x_test, verbose=0).argmax(-1) == y_test))
    return {
        "seed": seed,
        "min_interclass_deg": float(np.degrees(metrics.min_interclass_angle(features, y_test, 10))),
        "max_intraclass_deg": float(np.degrees(metrics.max_intraclass_angle(features, y_test, 10))),
        "afs": float(metrics.angular_fisher_score(features, y_test, 10)),
        "accuracy": accuracy,
        "final_loss": float(history.history["loss"][-1]),
        "final_lambda": float(head.current_lambda()),
        "steps": int(head.iteration.numpy()),
        "seconds": seconds,
    }


def main(argv):
    del argv
    unknown = sorted(set(FLAGS.losses) - set(CONFIGS))
    if unknown:
        raise app.UsageError(f"Unknown --losses {unknown}; expected names from {sorted(CONFIGS)}.")
    data = load_data(FLAGS.num_train, FLAGS.num_test)
    seeds = [int(s) for s in FLAGS.seeds]
    rows = []
    for name in FLAGS.losses:
        for seed in seeds:
            row = {"config": name, **run_one(
                CONFIGS[name], data, FLAGS.feature_dim, FLAGS.epochs, FLAGS.batch_size, FLAGS.learning_rate, seed
            )}
            rows.append(row)
            print(json.dumps(row), flush=True)
            if FLAGS.results_file:
                with open(FLAGS.results_file, "a") as f:
                    f.write(json.dumps(row) + "\n")
    keys = ("min_interclass_deg", "max_intraclass_deg", "afs", "accuracy")
    print("\n| loss | " + " | ".join(keys) + " |")
    print("|---" * (len(keys) + 1) + "|")
    for name in FLAGS.losses:
        sel = [r for r in rows if r["config"] == name]
        cells = [f"{np.mean([r[k] for r in sel]):.3f} ± {np.std([r[k] for r in sel]):.3f}" for k in keys]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    app.run(main)
