"""``python -m sphere_tf.backends.tensorflow.kernels``: build the compiled kernels now (retrying a recorded failure)."""

import sys

from sphere_tf.backends.tensorflow.kernels import build

sys.exit(build.main())
