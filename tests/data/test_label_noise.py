"""Symmetric label noise (ConvNorm, NeurIPS 2021, Table 6) against NumPy counts: the exact redrawn fraction,
uniform targets, the test split untouched, determinism per seed, and bad values named at validation."""

import math

import numpy as np
import pytest

from sphere_tf.configs import common
from sphere_tf.data import archive_writers
from sphere_tf.data import datasets
from sphere_tf.data import label_noise
from sphere_tf.runners import classifier

# A class count so large that a redrawn label keeps its class with probability ~5e-10: every redrawn label
# changes, so the changed count is the redrawn count.
HUGE = 2**31 - 1


@pytest.mark.parametrize("n,fraction", [(45000, 0.2), (45000, 0.4), (45000, 0.6), (45000, 0.8), (7, 0.5), (10, 0.0)])
def test_exactly_the_ceiling_of_the_fraction_is_redrawn(n, fraction):
    # The authors' loop redraws index i of the permutation while i < fraction·n: ⌈fraction·n⌉ labels.
    expected = sum(1 for i in range(n) if i < fraction * n)
    labels = np.zeros(n, np.int64)
    noisy = label_noise.symmetric_label_noise(labels, fraction, HUGE, seed=3)
    assert int(np.count_nonzero(noisy != labels)) == expected == math.ceil(fraction * n)
    assert noisy.dtype == labels.dtype and not labels.any()  # a new array; the input is kept


@pytest.mark.parametrize("fraction", [0.2, 0.8])
def test_changed_fraction_and_uniform_targets(fraction):
    k, n = 10, 40000
    labels = np.random.default_rng(0).integers(0, k, n)
    noisy = label_noise.symmetric_label_noise(labels, fraction, k, seed=1)
    changed = noisy != labels
    redrawn = math.ceil(fraction * n)
    # A redrawn label lands on one of the other k − 1 classes with probability (k − 1)/k: Binomial(redrawn, 0.9).
    mean, std = redrawn * (k - 1) / k, math.sqrt(redrawn * (k - 1) / k**2)
    assert abs(changed.sum() - mean) < 5 * std
    # The shift (noisy − clean) mod k of a changed label is uniform over 1 … k − 1 whatever the class mix:
    # a chi-square with k − 2 = 8 degrees of freedom, below its 0.999 quantile (26.12) for this fixed seed.
    shifts = np.bincount((noisy[changed] - labels[changed]) % k, minlength=k)[1:]
    expected = changed.sum() / (k - 1)
    assert ((shifts - expected) ** 2 / expected).sum() < 26.12
    # Symmetric: every class loses about the same share of its labels.
    per_class = np.array([changed[labels == c].mean() for c in range(k)])
    assert np.abs(per_class - fraction * (k - 1) / k).max() < 0.05


def test_deterministic_per_seed_and_zero_is_the_labels_themselves():
    labels = np.arange(1000) % 10
    a = label_noise.add_label_noise(labels, 0.4, 10, seed=5)
    np.testing.assert_array_equal(a, label_noise.add_label_noise(labels, 0.4, 10, seed=5))
    assert not np.array_equal(a, label_noise.add_label_noise(labels, 0.4, 10, seed=6))
    assert label_noise.add_label_noise(labels, 0.0, 10, seed=5) is labels


@pytest.fixture(scope="module")
def cifar_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cifar")
    return str(folder), archive_writers.write_cifar10(str(folder), per_batch=40, n_test=30)


def _epoch_labels(train_ds, info, seed):
    """The labels of the first epoch, put back in file order (`epoch_order` is the visiting order)."""
    steps = info["steps_per_epoch"]
    labels = np.concatenate([y.numpy() for _, y in train_ds.take(steps)])
    order = datasets.epoch_order(seed, 0, info["train_size"]).numpy()
    in_file_order = np.empty_like(labels)
    in_file_order[order] = labels
    return in_file_order


def test_get_datasets_noises_the_training_labels_only(cifar_dir):
    folder, data = cifar_dir
    kwargs = dict(manual_dir=folder, batch_size=20, normalization="none", seed=4)
    train, test, info = datasets.get_datasets("cifar10", label_noise=0.6, **kwargs)
    got = _epoch_labels(train, info, 4)
    np.testing.assert_array_equal(got, label_noise.symmetric_label_noise(data["y_train"], 0.6, 10, seed=4))
    assert (got != data["y_train"]).mean() > 0.4  # ~0.6 · 0.9 of 200
    np.testing.assert_array_equal(np.concatenate([y.numpy() for _, y in test]), data["y_test"])
    # Same seed, same noisy labels; the clean run sees the files' labels; another seed, other labels.
    again, _, _ = datasets.get_datasets("cifar10", label_noise=0.6, **kwargs)
    np.testing.assert_array_equal(_epoch_labels(again, info, 4), got)
    clean, _, _ = datasets.get_datasets("cifar10", **kwargs)
    np.testing.assert_array_equal(_epoch_labels(clean, info, 4), data["y_train"])
    other, _, _ = datasets.get_datasets("cifar10", label_noise=0.6, **{**kwargs, "seed": 5})
    assert not np.array_equal(_epoch_labels(other, info, 5), got)


def test_noise_comes_after_the_training_subset(cifar_dir):
    folder, data = cifar_dir
    kwargs = dict(manual_dir=folder, batch_size=10, normalization="none", seed=2, train_limit=50)
    clean, _, info = datasets.get_datasets("cifar10", **kwargs)
    noisy, _, _ = datasets.get_datasets("cifar10", label_noise=0.4, **kwargs)
    subset = _epoch_labels(clean, info, 2)  # the subset does not move when the noise is switched on
    np.testing.assert_array_equal(_epoch_labels(noisy, info, 2),
                                  label_noise.symmetric_label_noise(subset, 0.4, 10, seed=2))


@pytest.mark.parametrize("fraction", [1.0, -0.1, float("nan"), "0.2", True])
def test_bad_fraction_is_named(cifar_dir, fraction):
    with pytest.raises(ValueError, match=r"`label_noise`: expected a (float in \[0, 1\)|finite float)"):
        datasets.get_datasets("cifar10", manual_dir=cifar_dir[0], batch_size=4, label_noise=fraction)
    config = common.base_config(data=dict(name="cifar10", label_noise=fraction))
    with pytest.raises(ValueError, match=r"`data.label_noise`: expected a (float in \[0, 1\)|finite float)"):
        classifier.validate(config)


def test_unknown_noise_type_is_named():
    with pytest.raises(ValueError, match=r"`label_noise_type`: expected one of \('symmetric',\).*'asymmetric'"):
        label_noise.add_label_noise(np.zeros(4, int), 0.2, 10, seed=0, noise_type="asymmetric")
    config = common.base_config(data=dict(name="cifar10", label_noise=0.2, label_noise_type="asymetric"))
    with pytest.raises(ValueError, match=r"`data.label_noise_type`.*Did you mean 'symmetric'"):
        classifier.validate(config)
    config = common.base_config(data=dict(name="imagenet2012", source="tfds", data_dir="/nowhere", label_noise=0.2))
    with pytest.raises(ValueError, match=r"`data.label_noise`: expected 0 for imagenet2012 from tfds"):
        classifier.validate(config)
