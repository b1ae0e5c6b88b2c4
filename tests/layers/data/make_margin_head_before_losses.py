"""Writes margin_head_before_losses.keras/.npz with the MarginHead of main at e358490 (before the margin losses
moved into `sphere_tf.losses`); kept to show how the committed file was made. Run from a checkout of that commit:

    KERAS_BACKEND=tensorflow python tests/layers/data/make_margin_head_before_losses.py
"""

import os

import keras
import numpy as np

from sphere_tf.layers import MarginHead

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    features = keras.Input((4,), name="features")
    labels = keras.Input((), dtype="int32", name="labels")
    sphereface = MarginHead(5, loss_type="asoftmax", margin=4, annealing="sphereface", name="sphereface")
    cosface = MarginHead(5, loss_type="cosface", margin=0.35, scale=16.0, name="cosface")
    combined = MarginHead(5, loss_type="combined", margin=(1.0, 0.3, 0.2), scale=8.0, name="combined")
    outputs = [head(features, labels=labels) for head in (sphereface, cosface, combined)]
    model = keras.Model([features, labels], outputs)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile("sgd", [loss, loss, loss])
    x = rng.normal(size=(8, 4)).astype(np.float32)
    y = rng.integers(0, 5, size=8).astype(np.int32)
    model.fit([x, y], [y, y, y], batch_size=4, epochs=1, verbose=0)  # two steps: iteration = 2
    model.save(os.path.join(HERE, "margin_head_before_losses.keras"))
    # Training-mode logits (the margin on the target) without advancing the saved counters.
    train_logits = [keras.ops.convert_to_numpy(head._logits(x, y, head.current_lambda()))
                    for head in (sphereface, cosface, combined)]
    np.savez(
        os.path.join(HERE, "margin_head_before_losses.npz"),
        x=x,
        y=y,
        plain_logits=np.stack([keras.ops.convert_to_numpy(o) for o in model.predict([x, y], verbose=0)]),
        train_logits=np.stack(train_logits),
        iteration=int(keras.ops.convert_to_numpy(sphereface.iteration)),
    )


if __name__ == "__main__":
    main()
