"""A linear classifier and its FGSM / cross-entropy gradients in NumPy (the tests' independent reference)."""

import keras
import numpy as np


def linear_model(shape=(4, 4, 1), classes=3, seed=0, scale=1.0):
    """Functional `Flatten -> Dense(classes)` with seeded random weights (times `scale`); returns (model, W, b)."""
    rng = np.random.default_rng(seed)
    inputs = keras.Input(shape)
    dense = keras.layers.Dense(classes)
    model = keras.Model(inputs, dense(keras.layers.Flatten()(inputs)))
    w = (scale * rng.normal(size=(int(np.prod(shape)), classes))).astype(np.float32)
    b = rng.normal(size=(classes,)).astype(np.float32)
    dense.set_weights([w, b])
    return model, w, b


def softmax(z):
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


def logit_error(x, y, w, b):
    """softmax(z) − onehot(y) per example (∂CE/∂z), with z = x·W + b, in float64."""
    flat = x.reshape(len(x), -1).astype(np.float64)
    p = softmax(flat @ w + b)
    p[np.arange(len(y)), y] -= 1.0
    return flat, p


def input_gradient(x, y, w, b):
    """∂CE/∂x per example: (softmax(z) − e_y)·Wᵀ, reshaped like x."""
    _, err = logit_error(x, y, w, b)
    return (err @ w.T.astype(np.float64)).reshape(x.shape)


def fgsm_reference(x, y, w, b, eps, lower, upper):
    """Closed-form FGSM on the linear model: clip(x + ε·sign(∂CE/∂x), lower, upper)."""
    g = input_gradient(x, y, w, b)
    return np.clip(x + eps * np.sign(g), lower, upper)


def weight_gradient(x, y, w, b):
    """Mean over the batch of ∂CE/∂W and ∂CE/∂b."""
    flat, err = logit_error(x, y, w, b)
    return flat.T @ err / len(y), err.mean(axis=0)
