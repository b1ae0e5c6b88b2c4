"""2-D deep features under softmax vs L-Softmax (m = 2, 3, 4) on Fashion-MNIST (thesis Fig. 2.2).

Trains one small network per loss (MLP 784-256-128-2, the 2-D feature feeding a
`MarginHead(loss_type='lsoftmax')`; m = 1 is the plain softmax without bias, as in
the thesis) and scatters the 2-D features of test images, one colour per class,
with the test accuracy of the plain logits and the minimum inter-class angle in
each panel title; a second row shows, per class, the histogram of the feature
angle atan2(f_2, f_1), where the angular margins between classes are visible. The margins use a short λ annealing (λ = 100·(1 + 0.05 t)^−2,
λ < 1 after ~180 steps), the short-run stand-in for the upstream MNIST preset.

    python examples/feature_picture.py                    # writes runs/feature_picture.png
    python examples/feature_picture.py --output docs/img/feature_picture.png   # the committed figure

The PNG goes to `runs/feature_picture.png` under the repository root (found from
this file, so any working directory works; `runs/` is git-ignored): the committed
`docs/img/feature_picture.png` is only replaced when `--output` names it. A
relative `--output` is taken from the working directory; its folder is created
before any training, so a bad path fails at once instead of after the run.

Runtime: 1–3 minutes on a CPU at the defaults.
"""

import os

import keras
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from absl import app  # noqa: E402
from absl import flags  # noqa: E402

from sphere_tf import metrics  # noqa: E402
from sphere_tf.data import fashion_mnist  # noqa: E402
from sphere_tf.layers import MarginHead  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = flags.FLAGS
flags.DEFINE_string("output", os.path.join(REPO, "runs", "feature_picture.png"),
                    "PNG to write (relative: to the working directory). The committed figure is "
                    "docs/img/feature_picture.png.")
flags.DEFINE_integer("num_train", 10000, "Training images.")
flags.DEFINE_integer("num_test", 2000, "Test images to plot.")
flags.DEFINE_integer("epochs", 8, "Epochs per model.")
flags.DEFINE_list("margins", ["1", "2", "3", "4"], "L-Softmax margins m (1 = softmax).")
flags.DEFINE_integer("seed", 0, "Random seed.")

SHORT_ANNEALING = {"base": 100.0, "gamma": 0.05, "power": 2.0, "lambda_min": 0.0}


def train_features(m, x_train, y_train, x_test, epochs, seed):
    keras.utils.set_random_seed(seed)
    images = keras.Input((784,))
    labels = keras.Input((), dtype="int32")
    h = keras.layers.Dense(256, activation="relu")(images)
    h = keras.layers.Dense(128, activation="relu")(h)
    features = keras.layers.Dense(2)(h)
    head = MarginHead(10, loss_type="lsoftmax", margin=m, annealing=SHORT_ANNEALING if m > 1 else None)
    model = keras.Model([images, labels], head(features, labels=labels))
    model.compile(keras.optimizers.Adam(1e-3), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit([x_train, y_train], y_train, batch_size=64, epochs=epochs, verbose=0)
    f = keras.Model(images, features).predict(x_test, verbose=0)
    logits = keras.Model(images, head(features)).predict(x_test, verbose=0)
    return f, logits.argmax(-1)


def main(argv):
    del argv
    output = os.path.abspath(FLAGS.output)
    os.makedirs(os.path.dirname(output), exist_ok=True)  # fail before training, not after
    if not os.access(os.path.dirname(output), os.W_OK):
        raise app.UsageError(f"--output={FLAGS.output}: folder {os.path.dirname(output)} is not writable.")
    (x_train, y_train), (x_test, y_test) = fashion_mnist.load_fashion_mnist()
    flat = lambda x: fashion_mnist.as_float_images(x).reshape(len(x), -1)  # noqa: E731
    x_train, y_train = flat(x_train[: FLAGS.num_train]), y_train[: FLAGS.num_train].astype("int32")
    x_test, y_test = flat(x_test[: FLAGS.num_test]), y_test[: FLAGS.num_test].astype("int32")
    margins = [int(m) for m in FLAGS.margins]
    fig, grid = plt.subplots(2, len(margins), figsize=(4.2 * len(margins), 7.0),
                             gridspec_kw={"height_ratios": [3, 1.2]}, squeeze=False)
    cmap = plt.get_cmap("tab10")
    bins = np.linspace(-180, 180, 121)
    for ax, hist_ax, m in zip(grid[0], grid[1], margins):
        f, pred = train_features(m, x_train, y_train, x_test, FLAGS.epochs, FLAGS.seed)
        acc = float(np.mean(pred == y_test))
        angle = float(np.degrees(metrics.min_interclass_angle(f, y_test, 10)))
        for c in range(10):
            pts = f[y_test == c]
            ax.scatter(pts[:, 0], pts[:, 1], s=2, color=cmap(c), label=fashion_mnist.CLASS_NAMES[c])
            hist_ax.hist(np.degrees(np.arctan2(pts[:, 1], pts[:, 0])), bins=bins, color=cmap(c), alpha=0.7)
        hist_ax.set_xlim(-180, 180)
        hist_ax.set_xticks([-180, -90, 0, 90, 180])
        hist_ax.set_xlabel("feature angle (degrees)", fontsize=9)
        hist_ax.set_yticks([])
        lim = np.percentile(np.abs(f), 99) * 1.1
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        ax.set_aspect("equal")
        title = "softmax" if m == 1 else f"L-Softmax m={m}"
        ax.set_title(f"{title}\nacc {acc:.3f}, min inter-class angle {angle:.1f}°", fontsize=10)
        print(f"m={m}: accuracy {acc:.4f}, min inter-class angle {angle:.2f} deg", flush=True)
    handles, names = grid[0][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=10, markerscale=5, fontsize=8)
    fig.suptitle("Fashion-MNIST test features (2-D), softmax vs L-Softmax", fontsize=12)
    fig.tight_layout(rect=(0, 0.04, 1, 0.96))
    fig.savefig(output, dpi=110)
    print(f"wrote {output}")


if __name__ == "__main__":
    app.run(main)
