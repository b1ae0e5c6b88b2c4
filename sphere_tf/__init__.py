"""sphere_tf: deep learning on the hypersphere for Keras 3 / TensorFlow 2.

Subpackages: `ops` (pure maths), `layers`, `losses`, `regularizers`, `metrics`,
`callbacks`, `energy`, `training`, `models`, `data`, `attacks`, `export`.
"""

from sphere_tf import callbacks
from sphere_tf import data
from sphere_tf import energy
from sphere_tf import layers
from sphere_tf import losses
from sphere_tf import metrics
from sphere_tf import ops
from sphere_tf import optimizers
from sphere_tf import regularizers
from sphere_tf import training

__version__ = "0.1.0"
