"""OPT training step for step against NumPy, on the current Keras backend.

`fit` with `OPTOptimizer` (Cayley SGD on the OGD rotation, momentum SGD on the rest) and with
`SOPTEpisodes` (S-OPT: merge, reset R̃ = I and its momentum, new rows every episode) must leave
exactly the weights that a float64 NumPy re-implementation leaves after the same steps from the
same weights. The NumPy side writes out the forward pass, its backward pass by hand, Keras's
momentum SGD and the Cayley SGD step of Li, Li & Todorovic, "Efficient Riemannian optimization
on the Stiefel manifold via the Cayley transform" (ICLR 2020), Algorithm 2 (`testing.numpy_cayley_sgd_step`).
"""

import keras
import numpy as np
from keras import ops

from sphere_tf import testing
from sphere_tf.callbacks import SOPTEpisodes
from sphere_tf.layers import opt as opt_lib
from sphere_tf.optimizers import CayleySGD
from sphere_tf.optimizers import OPTOptimizer

D_IN, UNITS, CLASSES, BATCH = 6, 4, 3, 8
LR, MOMENTUM, ROTATION_LR = 0.1, 0.9, 0.05
# float32 on the backend against float64 NumPy, a handful of steps.
TOLERANCE = {"rtol": 1e-4, "atol": 2e-5}


def _data(steps):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((steps * BATCH, D_IN)).astype("float32")
    return x, rng.integers(0, CLASSES, steps * BATCH).astype("int32")


def _model(stochastic_dims=None):
    model = keras.Sequential([
        keras.Input((D_IN,)),
        opt_lib.OPTDense(UNITS, orthogonalization="ogd", activation="tanh", stochastic_dims=stochastic_dims,
                         seed=3, name="opt"),
        keras.layers.Dense(CLASSES, name="head"),
    ])
    model.compile(OPTOptimizer(keras.optimizers.SGD(LR, momentum=MOMENTUM), CayleySGD(ROTATION_LR, momentum=0.8)),
                  keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _weights(model):
    """The model's state as float64 NumPy arrays, by name."""
    opt, head = model.get_layer("opt"), model.get_layer("head")
    state = {"rotation": opt.rotation_param, "v": opt.fixed_kernel, "b1": opt.bias, "w2": head.kernel,
             "b2": head.bias}
    state = {k: ops.convert_to_numpy(v).astype(np.float64) for k, v in state.items()}
    state["rows"] = ops.convert_to_numpy(opt.stochastic_indices) if opt.stochastic_dims else None
    return state


def np_kernel(s):
    """W = R·V (full OPT), or V with rows R̃·V[rows] (S-OPT)."""
    if s["rows"] is None:
        return s["rotation"] @ s["v"]
    w = s["v"].copy()
    w[s["rows"]] = s["rotation"] @ s["v"][s["rows"]]
    return w


def np_gradients(s, x, y):
    """∂L/∂(R, b1, W2, b2) of the mean softmax cross-entropy of tanh(x·W + b1)·W2 + b2, by hand."""
    h = np.tanh(x @ np_kernel(s) + s["b1"])
    logits = h @ s["w2"] + s["b2"]
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    d_logits = (p - np.eye(CLASSES)[y]) / len(x)
    d_z = (d_logits @ s["w2"].T) * (1.0 - h**2)
    d_w = x.T @ d_z
    if s["rows"] is None:
        d_rotation = d_w @ s["v"].T
    else:
        d_rotation = d_w[s["rows"]] @ s["v"][s["rows"]].T
    return {"rotation": d_rotation, "b1": d_z.sum(0), "w2": h.T @ d_logits, "b2": d_logits.sum(0)}


def np_fit(s, x, y, steps, episode_length=None, seed=None):
    """`steps` steps of batch BATCH: Cayley SGD on R, Keras momentum SGD elsewhere, S-OPT episodes."""
    s = dict(s)
    slots = {k: np.zeros_like(s[k]) for k in ("rotation", "b1", "w2", "b2")}
    for step in range(steps):
        xb, yb = x[step * BATCH:(step + 1) * BATCH].astype(np.float64), y[step * BATCH:(step + 1) * BATCH]
        grads = np_gradients(s, xb, yb)
        s["rotation"], slots["rotation"] = testing.numpy_cayley_sgd_step(
            s["rotation"], slots["rotation"], grads["rotation"], ROTATION_LR, momentum=0.8)
        for k in ("b1", "w2", "b2"):  # keras.optimizers.SGD: m ← μm − lr·g, w ← w + m
            slots[k] = MOMENTUM * slots[k] - LR * grads[k]
            s[k] = s[k] + slots[k]
        if episode_length and (step + 1) % episode_length == 0:
            # Liu et al., "Orthogonal Over-Parameterized Training" (CVPR 2021), S-OPT: merge R̃ into V, R̃ = I,
            # new rows (here from the generator keyed by (seed, episode)), and R̃'s momentum restarts.
            s["v"] = np_kernel(s)
            s["rotation"] = np.eye(len(s["rotation"]))
            rng = np.random.default_rng([seed, (step + 1) // episode_length])
            s["rows"] = np.sort(rng.choice(D_IN, len(s["rows"]), replace=False))
            slots["rotation"] = np.zeros_like(slots["rotation"])
    return s


def _assert_state_close(model, expected):
    actual = _weights(model)
    for k in ("rotation", "v", "b1", "w2", "b2"):
        np.testing.assert_allclose(actual[k], expected[k], err_msg=k, **TOLERANCE)
    if expected["rows"] is not None:
        np.testing.assert_array_equal(actual["rows"], expected["rows"])


def test_opt_optimizer_fit_matches_numpy_step_for_step():
    steps = 5
    x, y = _data(steps)
    model = _model()
    start = _weights(model)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    expected = np_fit(start, x, y, steps)
    assert np.abs(expected["rotation"] - np.eye(D_IN)).max() > 1e-3  # the rotation moved
    _assert_state_close(model, expected)


def test_sopt_episodes_fit_matches_numpy_step_for_step():
    steps, episode_length, seed = 7, 3, 5  # episodes end after steps 3 and 6; step 7 starts the third
    x, y = _data(steps)
    model = _model(stochastic_dims=3)
    start = _weights(model)
    callback = SOPTEpisodes(episode_length=episode_length, seed=seed)
    model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0, callbacks=[callback])
    expected = np_fit(start, x, y, steps, episode_length=episode_length, seed=seed)
    assert callback.episodes_completed == 2
    assert np.abs(expected["v"] - start["v"]).max() > 1e-3  # V changed through the merges
    _assert_state_close(model, expected)
