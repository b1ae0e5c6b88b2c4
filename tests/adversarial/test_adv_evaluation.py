"""White-box / black-box accuracies, the no-target-gradient guarantee, Table 7/8 formatting (every backend)."""

import keras
import numpy as np
import pytest

from sphere_tf.adversarial import black_box
from sphere_tf.adversarial import markdown_table
from sphere_tf.adversarial import pixel_space
from sphere_tf.adversarial import white_box
from tests.adversarial import _linear

SPACE = pixel_space("centered_128", 1)
LO, HI = SPACE.lower[0], SPACE.upper[0]
NO_GRADIENT = "a gradient of the black-box target was taken"


def _no_gradient_identity():
    """The identity of the active backend whose gradient raises (a custom gradient in its own autodiff)."""
    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf  # noqa: PLC0415

        @tf.custom_gradient
        def forward(t):
            def grad(upstream):
                raise AssertionError(NO_GRADIENT)

            return tf.identity(t), grad

        return forward
    if backend == "jax":
        import jax  # noqa: PLC0415

        @jax.custom_vjp
        def identity(t):
            return t

        def backward(residual, upstream):
            raise AssertionError(NO_GRADIENT)

        identity.defvjp(lambda t: (t, None), backward)
        return identity
    import torch  # noqa: PLC0415

    class Identity(torch.autograd.Function):
        @staticmethod
        def forward(ctx, t):
            return t.clone()

        @staticmethod
        def backward(ctx, upstream):
            raise AssertionError(NO_GRADIENT)

    return Identity.apply


class _NoGradient(keras.layers.Layer):
    """Identity whose gradient raises: any gradient taken through it fails the test."""

    def call(self, x):
        return _no_gradient_identity()(x)


def _data(n=20, seed=0):
    rng = np.random.default_rng(seed)
    return SPACE.from_pixels(rng.uniform(0, 255, size=(n, 4, 4, 1))), rng.integers(0, 3, n).astype(np.int32)


def _predict(x, w, b):
    return np.argmax(x.reshape(len(x), -1) @ w + b, axis=1)


def test_white_box_accuracy_matches_numpy():
    model, w, b = _linear.linear_model(seed=2, scale=0.5)
    x, y = _data()
    accs = white_box(model, x, y, SPACE, attacks=("none", "fgsm"), batch_size=7, epsilon=8)
    adv = _linear.fgsm_reference(x, y, w, b, 8 / 128, LO, HI)
    assert accs["none"] == pytest.approx(100 * np.mean(_predict(x, w, b) == y))
    assert accs["fgsm"] == pytest.approx(100 * np.mean(_predict(adv, w, b) == y))


def test_black_box_never_takes_a_target_gradient():
    source, ws, bs = _linear.linear_model(seed=3, scale=0.5)
    inputs = keras.Input((4, 4, 1))
    dense = keras.layers.Dense(3)
    target = keras.Model(inputs, dense(keras.layers.Flatten()(_NoGradient()(inputs))))
    wt, bt = ws + 0.3 * np.random.default_rng(4).normal(size=ws.shape).astype(np.float32), bs
    dense.set_weights([wt, bt])
    x, y = _data(seed=5)
    with pytest.raises(Exception, match=NO_GRADIENT):  # the spy does fire
        white_box(target, x, y, SPACE, attacks=("fgsm",))
    accs = black_box(source, {"baseline": target}, x, y, SPACE, attacks=("none", "fgsm", "bim"), batch_size=8,
                     epsilon=8, step=2, iterations=3)["baseline"]
    adv = _linear.fgsm_reference(x, y, ws, bs, 8 / 128, LO, HI)  # crafted on the source
    assert accs["none"] == pytest.approx(100 * np.mean(_predict(x, wt, bt) == y))
    assert accs["fgsm"] == pytest.approx(100 * np.mean(_predict(adv, wt, bt) == y))
    assert 0.0 <= accs["bim"] <= 100.0


def test_markdown_table_mean_std_and_bold_best():
    per_seed = {"natural": {"baseline": {"none": [80.0, 82.0]}, "sphereconv": {"none": [90.0, 91.0]}}}
    text = markdown_table(per_seed, "T", attacks=("none",), paper={"natural": {"none": (1, 2, 3, 4)}})
    row = [line for line in text.splitlines() if line.startswith("| natural | None")][0]
    std = np.sqrt(((80 - 81) ** 2 + (82 - 81) ** 2) / 1)
    assert f"81.00 ± {std:.2f} (1.00)" in row
    assert "**90.50 ± 0.71** (2.00)" in row
    assert row.count("–") == 2  # BallConv and TanhConv missing


def test_bad_data_is_named():
    model, _, _ = _linear.linear_model()
    with pytest.raises(ValueError, match="images"):
        white_box(model, np.zeros((3, 16)), [0, 1, 2], SPACE)
    with pytest.raises(ValueError, match="targets"):
        black_box(model, {}, np.zeros((1, 4, 4, 1)), [0], SPACE)


def test_deepfool_rates_per_norm_and_undefined_medians_are_none():
    pytest.importorskip("foolbox")
    from sphere_tf.adversarial import deepfool_strength  # noqa: PLC0415

    x, _ = _data(n=5)
    # Fooled by both attacks: a linear model whose decision boundaries lie inside the pixel box.
    model, w, b = _linear.linear_model(seed=2, scale=0.5)
    y = _predict(x, w, b).astype(np.int32)
    strength = deepfool_strength(model, x, y, SPACE, steps=3)
    for norm in ("l2", "linf"):
        assert strength[f"{norm}_fooled"] == len(strength[norm])
        assert strength[f"{norm}_success_rate"] == pytest.approx(100 * len(strength[norm]) / 5)
        assert strength[f"{norm}_median"] == pytest.approx(np.median(strength[norm]))
    assert "note" not in strength and "success_rate" not in strength
    # A constant model (zero kernel): every image is classified correctly and none can be fooled.
    constant, _, _ = _linear.linear_model(scale=0.0)
    constant.layers[-1].set_weights([np.zeros((16, 3), np.float32), np.array([10.0, 0.0, 0.0], np.float32)])
    strength = deepfool_strength(constant, x, np.zeros(5, np.int32), SPACE, steps=3)
    assert strength["attacked"] == 5
    for norm in ("l2", "linf"):
        assert strength[f"{norm}_success_rate"] == 0.0 and strength[f"{norm}_median"] is None
        assert f"the {norm} attack fooled none of the 5 attacked images" in strength["note"]
