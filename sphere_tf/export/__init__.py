"""Export helpers: TensorFlow Serving folders (`export_model`), ONNX/TFLite files, plain SavedModels, OPT and BN folding.

Every export writes TensorFlow graphs, so this package needs TensorFlow installed, whatever the Keras backend
(a model trained on JAX or PyTorch exports from its `.keras` file: `export_model_file`).
"""

import importlib.util

import keras

if importlib.util.find_spec("tensorflow") is None:
    raise ImportError(
        f"sphere_tf.export writes TensorFlow SavedModels and needs TensorFlow, which is not installed (Keras backend "
        f"{keras.backend.backend()!r}). Install it beside your backend: pip install tensorflow (or "
        "pip install -e '.[tensorflow]'); the model's .keras file then exports from any backend "
        "(sphere_tf.export.export_model_file)."
    )

from sphere_tf.export.base import EMBEDDINGS_SIGNATURE
from sphere_tf.export.base import SERVING_SIGNATURE
from sphere_tf.export.base import ExportError
from sphere_tf.export.base import sample_pixels
from sphere_tf.export.fold import FoldedBatchNormalization
from sphere_tf.export.fold import fold_batch_norm
from sphere_tf.export.fold import fold_opt_model
from sphere_tf.export.formats import FORMATS
from sphere_tf.export.formats import FormatError
from sphere_tf.export.formats import export_formats
from sphere_tf.export.formats import export_onnx
from sphere_tf.export.formats import export_tflite
from sphere_tf.export.formats import format_path
from sphere_tf.export.formats import tflite_ops
from sphere_tf.export.reload import export_model_file
from sphere_tf.export.saved_model import export_saved_model
from sphere_tf.export.serving import DEFAULT_WARMUP_BATCH_SIZES
from sphere_tf.export.serving import ExportResult
from sphere_tf.export.serving import WARMUP_FILE
from sphere_tf.export.serving import existing_versions
from sphere_tf.export.serving import export_model
from sphere_tf.export.serving import inference_model
from sphere_tf.export.serving import input_normalization
from sphere_tf.export.serving import read_models_config
from sphere_tf.export.serving import read_warmup_requests
from sphere_tf.export.serving import write_models_config
from sphere_tf.export.serving import write_warmup_requests
