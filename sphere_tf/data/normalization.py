"""The pixel normalisations of the data pipelines, `fn(image, channel_mean) -> image`, free of TensorFlow.

The registry lives in `sphere_tf.ops.pixel_normalization` (below the layers, so that the model's first layer,
`sphere_tf.layers.PixelNormalization`, applies the same functions without importing the data pipelines); this
module is its name for the pipelines. They are plain arithmetic, so the same function normalises a `tf.data`
element, a NumPy array (the in-memory loops of `bench/gpu/reproduce.py`), the serving graph's input and a Keras
tensor inside a model:

- `none`: pixels 0..255 as float32;
- `centered_128` (`DEFAULT_NORMALIZATION`): (x − 127.5)/128, the authors' TF repositories
  (`feat = (rgb - 127.5) / 128.0`);
- `mean_subtraction`: x − per-channel mean (the L-Softmax recipe the papers follow subtracts the training set's
  mean, `mean_file` in the authors' Caffe prototxts);
- `unit_interval`: x/255 in [0, 1], TensorFlow's MNIST tutorial reader (`input_data.read_data_sets`), which the MLP
  repository OPT's MNIST experiment follows (thesis App. F.3) reads its images with.
"""

from sphere_tf.ops.pixel_normalization import DEFAULT_NORMALIZATION
from sphere_tf.ops.pixel_normalization import MEAN_NORMALIZATIONS
from sphere_tf.ops.pixel_normalization import NORMALIZATIONS
from sphere_tf.ops.pixel_normalization import get_normalization
from sphere_tf.ops.pixel_normalization import register_normalization
from sphere_tf.ops.pixel_normalization import uses_channel_mean

__all__ = ["DEFAULT_NORMALIZATION", "MEAN_NORMALIZATIONS", "NORMALIZATIONS", "get_normalization",
           "register_normalization", "uses_channel_mean"]
