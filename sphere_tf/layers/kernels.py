"""A layer's effective kernel: the weights whose columns are its neurons, whatever parameterises them.

The energy tracking (`sphere_tf.callbacks.HypersphericalEnergy`, the runner's `train.energy_layers`) measures
neurons, not variables, so it asks each layer for its effective kernel through a small protocol:

* a layer whose neurons are computed from other weights implements a method `effective_kernel()` returning
  them in the Keras kernel layout (neurons along the last axis: Conv2D `(kh, kw, C_in, C_out)`, Dense
  `(in, out)`). `OPTConv2D` / `OPTDense` do: ``W = R·V`` (Orthogonal Over-Parameterized Training, CVPR 2021,
  Eq. 7.1 of W. Liu's PhD thesis, 2020), the product their forward pass uses;
* every other layer with a `kernel` of rank >= 2 needs nothing: that kernel is its neurons (`Conv2D`, `Dense`,
  `SphereConv2D`, `DecoupledConv2D`, `MarginHead`, and `ConvNorm2D`, whose normaliser filters the
  convolution's output and leaves its kernel the learned neurons).

So a new layer type with derived neurons is tracked once it implements `effective_kernel()`.
"""

from sphere_tf import walk


def _plain_kernel(layer):
    kernel = getattr(layer, "kernel", None)
    if kernel is None or len(getattr(kernel, "shape", ())) < 2:
        return None
    return kernel


def has_effective_kernel(layer):
    """Whether `layer` has neurons to measure: an `effective_kernel()` method or a rank >= 2 `kernel`."""
    return callable(getattr(layer, "effective_kernel", None)) or _plain_kernel(layer) is not None


def effective_kernel(layer):
    """The neurons of a built `layer` as a kernel (neurons along the last axis; module docstring).

    Args:
        layer: a built `keras.layers.Layer` with `has_effective_kernel(layer)`.

    Returns:
        `layer.effective_kernel()` when the layer implements it, else `layer.kernel`.

    Raises:
        ValueError: the layer has neither.
    """
    method = getattr(layer, "effective_kernel", None)
    if callable(method):
        return method()
    kernel = _plain_kernel(layer)
    if kernel is None:
        raise ValueError(
            f"Layer {layer.name!r} ({type(layer).__name__}) has no neurons to measure: it implements no "
            "`effective_kernel()` and has no `kernel` of rank >= 2."
        )
    return kernel


def kernel_layers(root):
    """Every layer under `root` with an effective kernel, in model order.

    Nested models and layers held by custom blocks are searched (`sphere_tf.walk`); the walk does not
    descend into a layer that has an effective kernel, so a wrapper's inner kernel is not counted twice.
    """
    return walk.find_layers(root, has_effective_kernel, descend=lambda layer: not has_effective_kernel(layer))
