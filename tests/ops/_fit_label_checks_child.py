"""Child of test_fit_label_checks.py: `model.fit` on a plain `keras.Model` with every head or loss that checks labels.

Run as `python _fit_label_checks_child.py CASE:BATCH:N_SAMPLES ...`. For each run it fits CASE on N_SAMPLES random
28×28 images at BATCH and prints `ok <run> <loss>`, then fits it on the first 128 of them with one label out of
range and prints `bad-label <run> raised <message>` (or `... loss <loss>` when nothing raised). The parent reads
the lines to tell which run hung.
"""

import sys

import keras
import numpy as np

import sphere_tf

NUM_CLASSES = 10
BAD_LABEL_SAMPLES = 128


def _features(images):
    h = keras.layers.Conv2D(32, 3, activation="relu")(images)  # the reported model: a step long enough to race
    h = keras.layers.GlobalAveragePooling2D()(h)
    return keras.layers.Dense(64)(h)


def margin_head(loss_type):
    def build():
        images, labels = keras.Input((28, 28, 1)), keras.Input((), dtype="int32")
        head = sphere_tf.layers.MarginHead(NUM_CLASSES, loss_type=loss_type)
        model = keras.Model([images, labels], head(_features(images), labels=labels))
        model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        return model
    return build


def partial_fc_head():
    images, labels = keras.Input((28, 28, 1)), keras.Input((), dtype="int32")
    head = sphere_tf.layers.PartialFCHead(NUM_CLASSES, loss_type="arcface", sample_rate=0.5, seed=0)
    model = keras.Model([images, labels], head(_features(images), labels=labels))
    model.compile(sphere_tf.optimizers.PartialFCOptimizer(keras.optimizers.SGD(0.1)), loss=None)  # the head's loss
    return model


def cosine_loss(loss_class):
    def build():
        images = keras.Input((28, 28, 1))
        model = keras.Model(images, sphere_tf.layers.SphereDense(NUM_CLASSES)(_features(images)))
        model.compile("adam", loss=loss_class())
        return model
    return build


CASES = {
    "MarginHead-arcface": margin_head("arcface"),
    "MarginHead-cosface": margin_head("cosface"),
    "MarginHead-asoftmax": margin_head("asoftmax"),
    "PartialFCHead": partial_fc_head,
    "CosFaceLoss": cosine_loss(sphere_tf.losses.CosFaceLoss),
    "ArcFaceLoss": cosine_loss(sphere_tf.losses.ArcFaceLoss),
}


def fit(build, images, labels, batch_size):
    """The last epoch's loss as a float (reading it waits for every step, and raises a step's error)."""
    model = build()
    takes_labels = len(model.inputs) == 2
    history = model.fit([images, labels] if takes_labels else images, None if model.loss is None else labels,
                        batch_size=batch_size, epochs=1, verbose=0)
    return float(history.history["loss"][-1])


def main(runs):
    rng = np.random.default_rng(0)
    for run in runs:
        name, batch_size, n_samples = run.split(":")
        batch_size, n_samples = int(batch_size), int(n_samples)
        images = rng.uniform(size=(n_samples, 28, 28, 1)).astype("float32")
        labels = rng.integers(0, NUM_CLASSES, n_samples).astype("int32")
        print(f"ok {run} {fit(CASES[name], images, labels, batch_size):.4f}", flush=True)
        images, labels = images[:BAD_LABEL_SAMPLES], labels[:BAD_LABEL_SAMPLES].copy()
        labels[len(labels) // 2] = NUM_CLASSES + 3
        try:
            loss = fit(CASES[name], images, labels, batch_size)
        except Exception as error:  # noqa: BLE001 (the parent checks the message)
            print(f"bad-label {run} raised {' '.join(str(error).split())[-300:]}", flush=True)
        else:
            print(f"bad-label {run} loss {loss}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
