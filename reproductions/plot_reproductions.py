r"""Figures and feature statistics of the Fashion-MNIST reproductions (docs/reproductions.md).

Reads the run folders `sphere_tf_cli/sweep.py` wrote (`<runs>/<claim>/<variant>/seed_<n>/`) and writes

* `docs/img/repro_no_relu_curves.png`: training loss / accuracy per 25-step interval (SphereNet Fig. 3(b));
* `docs/img/repro_convnorm_curves.png`: training loss per interval, BN vs ConvNorm + BN;
* `docs/img/repro_mhe_energy.png`: hidden-layer energy (half-space, s = 1, thesis Eq. E.2) per interval;
* `docs/img/repro_margin_2d.png`: 2-D test features of seed 0 per loss (L-Softmax Fig. 2);
* `reproductions/results/fashion_mnist_{no_relu,convnorm_scarcity}_batch_statistics.json`: per run, the test
  accuracy with BatchNorm's moving statistics (as evaluated) and with batch statistics (batches of 1000 test
  images), to separate lagging moving statistics from what the network learned;
* `reproductions/results/fashion_mnist_margin_2d_features.json`: per seed and loss, the angular Fisher score
  (thesis Eq. A.1; `sphere_tf.metrics.angular_fisher_score`) and the minimum inter-class angle of the 10k
  test features, with mean ± std.

Curves show the mean over seeds with a ±1 std band. Missing claims are skipped with a message.

    python reproductions/plot_reproductions.py --runs runs/repro
"""

import glob
import json
import os

from absl import app
from absl import flags
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


_RUNS = flags.DEFINE_string("runs", "runs/repro", "Folder holding one sweep workdir per claim.")
_IMG = flags.DEFINE_string("img_dir", "docs/img", "Where the PNGs go.")
_RESULTS = flags.DEFINE_string("results_dir", "reproductions/results", "Where the feature statistics go.")


def _runs(claim_dir):
    """{variant folder: [results dicts ordered by seed]} of one sweep workdir."""
    out = {}
    for variant_dir in sorted(glob.glob(os.path.join(claim_dir, "*"))):
        seeds = sorted(glob.glob(os.path.join(variant_dir, "seed_*", "results.json")),
                       key=lambda p: int(p.split("seed_")[-1].split(os.sep)[0]))
        if seeds:
            out[os.path.basename(variant_dir)] = [json.load(open(p)) for p in seeds]
    return out


def _mean_std(values):
    """Mean and sample std (ddof 1), as sphere_tf_cli/sweep.py's summaries."""
    values = np.asarray(values, np.float64)
    return {"mean": float(values.mean()), "std": float(values.std(ddof=1)) if len(values) > 1 else 0.0,
            "n": int(len(values))}


def _band(ax, steps, series, label):
    series = np.asarray(series, np.float64)
    mean = series.mean(axis=0)
    std = series.std(axis=0, ddof=1) if len(series) > 1 else np.zeros_like(mean)
    line, = ax.plot(steps, mean, label=f"{label} (n={len(series)})")
    ax.fill_between(steps, mean - std, mean + std, color=line.get_color(), alpha=0.2)


def _curves(runs, keys, path, title, select=None):
    fig, axes = plt.subplots(1, len(keys), figsize=(5 * len(keys), 3.6))
    axes = np.atleast_1d(axes)
    for variant, results in runs.items():
        if select and not select(variant):
            continue
        steps = results[0]["steps_per_epoch"] * np.arange(1, len(results[0]["history"]["loss"]) + 1)
        for ax, (key, fn) in zip(axes, keys.items()):
            _band(ax, steps, [fn(r["history"]) for r in results], variant)
    for ax, key in zip(axes, keys):
        ax.set_xlabel("step")
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    print(f"wrote {path}")


def _hidden_energy(history):
    keys = [k for k in history if k.startswith("energy/") and k not in ("energy/total", "energy/logits")]
    return np.sum([history[k] for k in keys], axis=0)


def _margin_features(claim_dir, img_path, json_path):
    import keras  # noqa: PLC0415
    from sphere_tf import metrics  # noqa: PLC0415
    from sphere_tf import models  # noqa: PLC0415
    images, labels = _test_images()
    variants = sorted((d for d in os.listdir(claim_dir) if os.path.isdir(os.path.join(claim_dir, d))),
                      key=lambda d: (not d.endswith("-softmax"), d))  # the softmax baseline first
    fig, axes = plt.subplots(1, len(variants), figsize=(4 * len(variants), 4))
    axes = np.atleast_1d(axes)
    stats = {}
    for ax, variant in zip(axes, variants):
        rows = []
        for seed_dir in sorted(glob.glob(os.path.join(claim_dir, variant, "seed_*"))):
            model = keras.models.load_model(os.path.join(seed_dir, "checkpoints", "model.keras"))
            logits = model.get_layer("logits")
            feature_model = keras.Model(model.inputs, model.get_layer("fc").output)
            inputs = models.pack_inputs(images, np.zeros_like(labels)) if models.needs_labels(model) else images
            features = feature_model.predict(inputs, batch_size=1000, verbose=0)
            assert features.shape[1] == 2, (logits.name, features.shape)
            seed = int(seed_dir.split("seed_")[-1])
            rows.append({
                "seed": seed,
                "angular_fisher_score": float(metrics.angular_fisher_score(features, labels, 10)),
                "min_interclass_angle_deg": float(np.degrees(metrics.min_interclass_angle(features, labels, 10))),
            })
            if seed == 0:
                for c in range(10):
                    pts = features[labels == c][:300]
                    ax.scatter(pts[:, 0], pts[:, 1], s=2, label=str(c))
                ax.set_title(variant, fontsize=9)
                ax.set_aspect("equal", "datalim")
        stats[variant] = {"runs": rows, "aggregate": {
            key: _mean_std([r[key] for r in rows]) for key in ("angular_fisher_score", "min_interclass_angle_deg")}}
    axes[0].legend(markerscale=4, fontsize=6, ncol=2)
    fig.suptitle("2-D test features (Fashion-MNIST, seed 0, 300 per class)", fontsize=10)
    fig.tight_layout()
    fig.savefig(img_path, dpi=110)
    plt.close(fig)
    with open(json_path, "w") as f:
        json.dump(stats, f, indent=1)
    print(f"wrote {img_path} and {json_path}")
    for variant, entry in stats.items():
        afs, ang = entry["aggregate"]["angular_fisher_score"], entry["aggregate"]["min_interclass_angle_deg"]
        print(f"| `{variant}` | {afs['mean']:.4f} ± {afs['std']:.4f} | {ang['mean']:.1f} ± {ang['std']:.1f} |")


def _test_images():
    from sphere_tf.data import fashion_mnist  # noqa: PLC0415

    (_, _), (x_test, y_test) = fashion_mnist.load_fashion_mnist()
    return ((x_test.astype(np.float32) - 127.5) / 128.0)[..., None], y_test.astype(np.int64)


def _batch_statistics(claim_dir, json_path):
    import keras  # noqa: PLC0415

    images, labels = _test_images()
    stats = {}
    for variant in sorted(d for d in os.listdir(claim_dir) if os.path.isdir(os.path.join(claim_dir, d))):
        rows = []
        for seed_dir in sorted(glob.glob(os.path.join(claim_dir, variant, "seed_*"))):
            model = keras.models.load_model(os.path.join(seed_dir, "checkpoints", "model.keras"))
            moving = np.argmax(model.predict(images, batch_size=1000, verbose=0), axis=1)
            # training=True: BatchNormalization normalises with the batch's own statistics (the loaded copy's
            # moving averages change, which does not matter: it is discarded).
            batch = np.concatenate([np.argmax(np.asarray(model(images[i:i + 1000], training=True)), axis=1)
                                    for i in range(0, len(images), 1000)])
            rows.append({"seed": int(seed_dir.split("seed_")[-1]),
                         "moving_statistics_accuracy": 100.0 * float(np.mean(moving == labels)),
                         "batch_statistics_accuracy": 100.0 * float(np.mean(batch == labels))})
        stats[variant] = {"runs": rows, "aggregate": {
            key: _mean_std([r[key] for r in rows]) for key in ("moving_statistics_accuracy",
                                                               "batch_statistics_accuracy")}}
        agg = stats[variant]["aggregate"]
        print(f"| `{variant}` | {agg['moving_statistics_accuracy']['mean']:.2f} ± "
              f"{agg['moving_statistics_accuracy']['std']:.2f} | {agg['batch_statistics_accuracy']['mean']:.2f} ± "
              f"{agg['batch_statistics_accuracy']['std']:.2f} |")
    with open(json_path, "w") as f:
        json.dump(stats, f, indent=1)
    print(f"wrote {json_path}")


def main(argv):
    del argv
    os.makedirs(_IMG.value, exist_ok=True)
    claims = {name: os.path.join(_RUNS.value, name) for name in ("no_relu", "convnorm", "mhe", "margin_2d")}
    missing = [n for n, d in claims.items() if not os.path.isdir(d)]
    if missing:
        print(f"no run folders for {missing} under {_RUNS.value}; skipped")
    if "no_relu" not in missing:
        _curves(_runs(claims["no_relu"]),
                {"training loss": lambda h: h["loss"], "training accuracy": lambda h: h["accuracy"]},
                os.path.join(_IMG.value, "repro_no_relu_curves.png"),
                "small CNN 16/32 on 6k Fashion-MNIST, Adam 1e-3, batch 64 (mean ± std over seeds)")
        _batch_statistics(claims["no_relu"], os.path.join(_RESULTS.value, "fashion_mnist_no_relu_batch_statistics.json"))
    if "convnorm" not in missing:
        _curves(_runs(claims["convnorm"]),
                {"training loss": lambda h: h["loss"], "training accuracy": lambda h: h["accuracy"]},
                os.path.join(_IMG.value, "repro_convnorm_curves.png"),
                "10% of Fashion-MNIST (6k), SGD 0.05 m 0.9, batch 128 (mean ± std over seeds)")
        _batch_statistics(claims["convnorm"], os.path.join(
            _RESULTS.value, "fashion_mnist_convnorm_scarcity_batch_statistics.json"))
    if "mhe" not in missing:
        _curves(_runs(claims["mhe"]),
                {"hidden-layer energy (half-space, s=1)": _hidden_energy,
                 "training accuracy": lambda h: h["accuracy"]},
                os.path.join(_IMG.value, "repro_mhe_energy.png"),
                "narrow CNN on 12k Fashion-MNIST: tracked energy, thesis Eq. E.2 (mean ± std over seeds)")
    if "margin_2d" not in missing:
        _margin_features(claims["margin_2d"], os.path.join(_IMG.value, "repro_margin_2d.png"),
                         os.path.join(_RESULTS.value, "fashion_mnist_margin_2d_features.json"))


if __name__ == "__main__":
    app.run(main)
