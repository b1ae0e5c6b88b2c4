"""The JAX plug-in: the patch energy as an XLA reduce-window instead of a one-channel convolution.

The reference computes Σ_patch x² as the per-pixel channel energy convolved with a
`(kh, kw, 1, 1)` ones kernel. On a GPU that convolution is a cuDNN call with one
input and one output channel (poor occupancy, its own kernel launch forward and
two backward), where `lax.reduce_window` with `add` is a windowed sum that XLA
fuses with the channel reduction before it and lowers to one loop; its gradient
(a padded reduce-window of the upstream) fuses likewise. Same values as the
reference to float32 rounding (padded zeros counted as in the main convolution);
everything else runs on the reference. Importing this module registers the
accelerator for the JAX backend.
"""

from jax import lax
from keras import ops

from sphere_tf.ops import acceleration
from sphere_tf.ops import conv_geometry


class JaxAccelerator(acceleration.Accelerator):
    """Patch energy by `lax.reduce_window`; the rest is the reference."""

    name = "jax"

    def path(self, training, fusion):
        del fusion  # one path: XLA fuses the elementwise work itself
        return TRAINING if training else INFERENCE

    def patch_squared_norm(self, inputs, kernel_size, strides, padding, dilation_rate, path):
        return patch_squared_norm(inputs, kernel_size, strides, padding, dilation_rate)


ACCELERATOR = JaxAccelerator()
TRAINING = acceleration.Path("jax", accelerator=ACCELERATOR)
INFERENCE = acceleration.Path("jax_inference", inference=True, accelerator=ACCELERATOR)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def patch_squared_norm(inputs, kernel_size, strides=1, padding="valid", dilation_rate=1):
    """Σ_patch x² per output position, float32 `(N, H', W', 1)`: channel energy, then a windowed sum."""
    kernel_size, strides, dilation_rate = _pair(kernel_size), _pair(strides), _pair(dilation_rate)
    x = ops.cast(inputs, "float32")
    energy = ops.sum(ops.square(x), axis=-1, keepdims=True)
    pads = [(0, 0)]
    for axis in (0, 1):
        before, after, _ = conv_geometry.axis_geometry(
            inputs.shape[axis + 1], kernel_size[axis], strides[axis], dilation_rate[axis], padding.lower()
        )
        pads.append((before, after))
    pads.append((0, 0))
    return lax.reduce_window(
        energy, 0.0, lax.add, window_dimensions=(1, *kernel_size, 1), window_strides=(1, *strides, 1),
        padding=pads, window_dilation=(1, *dilation_rate, 1),
    )


acceleration.register_accelerator("jax", ACCELERATOR)
