"""Output size and padding of a 2-D convolution, TensorFlow / Keras rules (one home for every layer).

```
'valid':  out = ⌊(H − span)/s⌋ + 1,                     span = (k − 1)·d + 1
'same' :  out = ⌈H/s⌉,   pad = max((out − 1)·s + span − H, 0),
          ⌊pad/2⌋ before, the rest after                 (TF 'SAME')
```

`keras.layers.Conv2D` (through `keras.src.ops.operation_utils.compute_conv_output_shape`)
and `tf.nn.conv2d` follow the same rules; the sliding-window patch energy, the
OPT and ConvNorm layers and the Fourier-domain ConvNorm crop all read them from here.
"""

from sphere_tf import validation


def axis_geometry(size, kernel, stride=1, dilation=1, padding="valid"):
    """`(pad_before, pad_after, out_size)` of one spatial axis.

    Args:
        size: int, the input size along the axis.
        kernel, stride, dilation: ints.
        padding: 'valid' or 'same'.

    Returns:
        Three ints; `out_size` may be <= 0 for a 'valid' window larger than the input
        (`output_shape` turns that into an error).
    """
    span = (kernel - 1) * dilation + 1
    if padding == "same":
        out = -(-size // stride)
        total = max((out - 1) * stride + span - size, 0)
        return total // 2, total - total // 2, out
    if padding == "valid":
        return 0, 0, (size - span) // stride + 1
    raise validation.invalid_argument("padding", "'valid' or 'same'", padding)


def output_shape(input_shape, filters, kernel_size, strides=(1, 1), padding="valid", dilation_rate=(1, 1)):
    """NHWC output shape of a conv with `filters` channels; unknown sizes stay None.

    Raises:
        ValueError: the window does not fit in the input (an output size of zero or
            less), with the message of `keras.layers.Conv2D`.
    """
    spatial = []
    for size, k, s, d in zip(input_shape[1:3], kernel_size, strides, dilation_rate):
        if size is None:
            spatial.append(None)
            continue
        out = axis_geometry(size, k, s, d, padding)[2]
        if out <= 0:
            raise ValueError(
                "Computed output size would be zero or negative: the input is smaller than the kernel "
                f"window. Received inputs shape={tuple(input_shape)}, kernel_size={tuple(kernel_size)}, "
                f"strides={tuple(strides)}, dilation_rate={tuple(dilation_rate)}, padding={padding!r}."
            )
        spatial.append(out)
    return (input_shape[0], *spatial, filters)
