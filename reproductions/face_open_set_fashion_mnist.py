r"""Open-set verification on Fashion-MNIST with the face pipeline: does the angular margin help?

Writes (once) the training images of classes 0-4 as an identity folder, the test
images of classes 5-9 as an LFW-style image folder and an LFW-format pairs.txt
(10 folds x (300 matched + 300 mismatched), drawn with seed 0), then runs
`python -m sphere_tf_cli.train_face --config sphere_tf/configs/face/fashion_mnist_open_set.py:...`
for every (head, seed) and collects `lfw_accuracy`, `tar_at_far`, the angular
Fisher score and the minimum inter-class angle into OUT/results.jsonl and a
Markdown table (mean ± std over seeds).

    PYTHONPATH=. nice -n 10 python reproductions/face_open_set_fashion_mnist.py --out runs/open_set --seeds 0,1,2

Results of that run: reproductions/results/face_open_set_fashion_mnist.jsonl, table in docs/face.md.
"""

import json
import os
import subprocess
import sys
import time

import numpy as np
from absl import app
from absl import flags

from sphere_tf.data import faces
from sphere_tf.data import fashion_mnist

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(ROOT, "sphere_tf", "configs", "face", "fashion_mnist_open_set.py")
CLASS_NAMES = ("T-shirt", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag",
               "Ankle_boot")
HEADS = {
    "softmax": "loss=softmax",
    "asoftmax_m2": "loss=asoftmax,m=2",
    "asoftmax_m3": "loss=asoftmax,m=3",
    "asoftmax_m4": "loss=asoftmax,m=4",
    "cosface": "loss=cosface",
    "arcface": "loss=arcface",
}

_OUT = flags.DEFINE_string("out", "runs/open_set", "Output folder (data/ and one workdir per run).")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Seeds.")
_HEADS = flags.DEFINE_list("heads", list(HEADS), "Heads to run.")
_EPOCHS = flags.DEFINE_integer("epochs", 2, "Training epochs (docs/face.md: 2).")


def prepare(data_dir):
    """Writes train/ (classes 0-4), test/ (classes 5-9) and pairs.txt under `data_dir` once."""
    pairs = os.path.join(data_dir, "pairs.txt")
    if os.path.isfile(pairs):
        return
    (x_train, y_train), (x_test, y_test) = fashion_mnist.load_fashion_mnist(allow_keras_fallback=False)
    seen = y_train < 5
    faces.write_identity_images(os.path.join(data_dir, "train"), x_train[seen], y_train[seen], CLASS_NAMES,
                                extension=".png")
    unseen = y_test >= 5
    counts = faces.write_identity_images(os.path.join(data_dir, "test"), x_test[unseen], y_test[unseen] - 5,
                                         CLASS_NAMES[5:], extension=".png")
    faces.write_pairs(pairs, faces.make_pairs(CLASS_NAMES[5:], counts, folds=10, per_kind=300, seed=0))


def main(argv):
    del argv
    out = os.path.abspath(_OUT.value)
    data_dir = os.path.join(out, "data")
    prepare(data_dir)
    log_path = os.path.join(out, "results.jsonl")
    done = set()
    if os.path.isfile(log_path):
        with open(log_path) as f:
            done = {(r["head"], r["seed"]) for r in map(json.loads, f)}
    for seed in _SEEDS.value:
        for head in _HEADS.value:
            if (head, int(seed)) in done:
                continue
            workdir = os.path.join(out, f"{head}_s{seed}")
            started, cpu = time.time(), os.times()
            proc = subprocess.run(
                [sys.executable, "-m", "sphere_tf_cli.train_face",
                 f"--config={CONFIG}:{HEADS[head]},seed={seed},epochs={_EPOCHS.value}", f"--workdir={workdir}",
                 f"--config.data.manual_dir={data_dir}/train",
                 f"--config.verification.pairs={data_dir}/pairs.txt",
                 f"--config.verification.images={data_dir}/test"],
                cwd=ROOT, capture_output=True, text=True,
            )
            if proc.returncode:
                print(proc.stderr[-3000:])
                raise SystemExit(f"run {head} seed {seed} failed")
            after = os.times()
            with open(os.path.join(workdir, "results.json")) as f:
                results = json.load(f)
            row = {"head": head, "seed": int(seed), "wall_s": time.time() - started,
                   "cpu_s": (after.children_user + after.children_system) - (cpu.children_user + cpu.children_system),
                   **{k: results.get(k) for k in ("lfw_accuracy", "lfw_std", "tar_at_far", "angular_fisher_score",
                                                   "min_interclass_angle_deg", "test_accuracy", "steps")}}
            print(json.dumps(row), flush=True)
            with open(log_path, "a") as f:
                f.write(json.dumps(row) + "\n")
    with open(log_path) as f:
        rows = [json.loads(line) for line in f]
    print("| head | 10-fold acc % | TAR@FAR=1e-3 % | AFS | min inter-class angle ° | seeds |")
    print("|---|---|---|---|---|---|")
    for head in HEADS:
        mine = [r for r in rows if r["head"] == head]
        if not mine:
            continue
        acc = np.array([r["lfw_accuracy"] for r in mine])
        tar = np.array([r["tar_at_far"]["0.001"] for r in mine])
        afs = np.array([r["angular_fisher_score"] for r in mine])
        ang = np.array([r["min_interclass_angle_deg"] for r in mine])
        print(f"| {head} | {acc.mean():.2f} ± {acc.std():.2f} | {tar.mean():.2f} ± {tar.std():.2f} | "
              f"{afs.mean():.3f} ± {afs.std():.3f} | {ang.mean():.1f} ± {ang.std():.1f} | {len(mine)} |")


if __name__ == "__main__":
    app.run(main)
