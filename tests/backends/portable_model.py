"""Saves and loads a `.keras` file holding every kind of sphere_tf layer, on the backend this process runs.

    python tests/backends/portable_model.py save DIR   # DIR/model.keras, DIR/inputs.npy, DIR/outputs_<backend>.npy
    python tests/backends/portable_model.py load DIR   # prints the max |difference| to the saved outputs as JSON

`tests/backends/test_portable_keras.py` runs it under each pair of Keras backends (one process per
backend, since a process has one backend). The model holds every operator layer (conv and dense, decoupled,
SphereConv with learnable k, weighted), a ConvNorm layer, OPT conv and dense layers, a margin head, and MHE
and CoMHE kernel regularizers; outputs are inference logits (plain cosine logits of the margin head).
"""

import json
import os
import sys

import keras
import numpy as np

from sphere_tf import layers
from sphere_tf import regularizers


def build_model():
    keras.utils.set_random_seed(7)
    images = keras.Input((8, 8, 3), name="images")
    x = layers.DecoupledConv2D(6, 3, padding="same", magnitude="tanh", angular="cosine",
                               kernel_regularizer=regularizers.MHE(factor=0.1))(images)
    x = layers.SphereConv2D(6, 3, padding="same", angular="sigmoid", learnable_k=True,
                            kernel_regularizer=regularizers.CoMHE(factor=0.1, projection_dim=4, num_projections=2))(x)
    x = layers.DecoupledConv2D(6, 3, padding="same", magnitude="ball", angular="linear", weighted="linear")(x)
    x = layers.ConvNorm2D(6, 3, padding="same")(x)
    x = keras.layers.ReLU()(x)
    x = layers.OPTConv2D(8, 3, strides=2, padding="same")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    x = layers.DecoupledDense(8, magnitude="seg", angular="sqcosine")(x)
    x = layers.SphereDense(8, angular="linear")(x)
    x = layers.OPTDense(8)(x)
    logits = layers.MarginHead(5, loss_type="arcface")(x)
    return keras.Model(images, logits)


def _train_a_little(model, rng):
    """A few steps so that moving averages, ρ, k and rotations leave their initial values."""
    x = rng.normal(size=(16, 8, 8, 3)).astype(np.float32)
    y = rng.integers(0, 5, size=(16,))
    model.compile(optimizer=keras.optimizers.SGD(0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=8, epochs=1, verbose=0)


def save(directory):
    os.makedirs(directory, exist_ok=True)
    rng = np.random.default_rng(0)
    model = build_model()
    _train_a_little(model, rng)
    inputs = rng.normal(size=(4, 8, 8, 3)).astype(np.float32)
    outputs = keras.ops.convert_to_numpy(model(inputs, training=False))
    model.save(os.path.join(directory, "model.keras"))
    np.save(os.path.join(directory, "inputs.npy"), inputs)
    np.save(os.path.join(directory, f"outputs_{keras.backend.backend()}.npy"), outputs)


def load(directory, reference):
    # compile=False: a model compiled on PyTorch records its optimizer as Keras's PyTorch-only class
    # (keras.src.backend.torch.optimizers.torch_sgd.SGD), which no other backend can import; the weights,
    # layers and sphere_tf state load either way (docs/backends.md).
    model = keras.saving.load_model(os.path.join(directory, "model.keras"), compile=False)
    inputs = np.load(os.path.join(directory, "inputs.npy"))
    expected = np.load(os.path.join(directory, reference))
    got = keras.ops.convert_to_numpy(model(inputs, training=False))
    return {"backend": keras.backend.backend(), "max_abs_diff": float(np.max(np.abs(got - expected))),
            "scale": float(np.max(np.abs(expected))), "finite": bool(np.all(np.isfinite(got)))}


if __name__ == "__main__":
    # save DIR | load DIR REFERENCE [DIR REFERENCE ...] (one JSON report per line; one process, one import)
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "save":
        save(args[0])
    else:
        for folder, reference in zip(args[::2], args[1::2]):
            print(json.dumps({"directory": folder, **load(folder, reference)}))
