"""Data loaders that work from local files; nothing downloads unless asked."""

from sphere_tf.data import fashion_mnist
from sphere_tf.data.fashion_mnist import DataNotFoundError
from sphere_tf.data.fashion_mnist import load_fashion_mnist
from sphere_tf.data.pipeline import fashion_mnist_datasets
