"""Data sets from local files (published archives or a tensorflow-datasets folder); nothing downloads unless asked.

`get_datasets` feeds every Keras backend through one of two pipelines: Grain (`grain_pipeline`, NumPy
augmentations in `numpy_preprocessing`; the default off TensorFlow, no TensorFlow needed) or tf.data
(`tf_pipeline`, TensorFlow augmentations in `preprocessing`; the TensorFlow backend's default). Every name below is
imported on first access; where TensorFlow is not installed, a name that needs it (`preprocessing`, `tf_pipeline`,
`tfds_source`, `pipeline`) raises one `ImportError` saying so (`sphere_tf.dependencies`).
"""

from sphere_tf import dependencies

# name -> the module that defines it (imported on first access).
_LAZY = {
    "DATASETS": "sphere_tf.data.datasets",
    "DatasetSpec": "sphere_tf.data.datasets",
    "check_class_limits": "sphere_tf.data.datasets",
    "get_datasets": "sphere_tf.data.datasets",
    "register_dataset": "sphere_tf.data.datasets",
    "CorruptDataError": "sphere_tf.data.errors",
    "DataNotFoundError": "sphere_tf.data.errors",
    "load_fashion_mnist": "sphere_tf.data.fashion_mnist",
    "add_label_noise": "sphere_tf.data.label_noise",
    "fashion_mnist_datasets": "sphere_tf.data.pipeline",
}
_SUBMODULES = ("archive_writers", "cifar", "datasets", "errors", "faces", "fashion_mnist", "grain_pipeline", "imagenet",
               "label_noise", "mnist", "normalization", "numpy_preprocessing", "pipeline", "preprocessing", "splits",
               "tf_pipeline", "tfds_source", "untrusted")


def __getattr__(name):
    if name in _LAZY:
        return getattr(dependencies.import_for(f"{__name__}.{name}", _LAZY[name]), name)
    if name in _SUBMODULES:
        return dependencies.import_for(f"{__name__}.{name}", f"sphere_tf.data.{name}")
    raise AttributeError(f"module 'sphere_tf.data' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + list(_LAZY) + list(_SUBMODULES))
