"""``python -m sphere_tf.kernels``: build the compiled kernels now (retrying a recorded failure)."""

import sys

from sphere_tf.kernels import build

sys.exit(build.main())
