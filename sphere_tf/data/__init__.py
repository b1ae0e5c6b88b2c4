"""Data sets from local files (published archives or a tensorflow-datasets folder); nothing downloads unless asked."""

from sphere_tf.data import archive_writers
from sphere_tf.data import cifar
from sphere_tf.data import faces
from sphere_tf.data import fashion_mnist
from sphere_tf.data import imagenet
from sphere_tf.data import mnist
from sphere_tf.data import preprocessing
from sphere_tf.data import tfds_source
from sphere_tf.data.datasets import DATASETS
from sphere_tf.data.datasets import DatasetSpec
from sphere_tf.data.datasets import check_class_limits
from sphere_tf.data.datasets import get_datasets
from sphere_tf.data.datasets import register_dataset
from sphere_tf.data.errors import CorruptDataError
from sphere_tf.data.errors import DataNotFoundError
from sphere_tf.data.fashion_mnist import load_fashion_mnist
from sphere_tf.data.pipeline import fashion_mnist_datasets
