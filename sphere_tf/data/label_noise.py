"""Noisy training labels: the symmetric label noise of ConvNorm's Table 6 (NumPy only).

Convolutional Normalization (Liu et al., NeurIPS 2021), §4 "robustness to label noise" and Table 6 train on
CIFAR-10 with 20 / 40 / 60 / 80 % symmetric label noise. The authors' code (shengliu66/ConvNorm,
`data_loader/cifar10.py`, `CIFAR10_train.symmetric_noise`, switched on by the `trainer.sym` flag with the
rate `trainer.percent`) does::

    indices = np.random.permutation(len(self.train_data))
    for i, idx in enumerate(indices):
        if i < self.cfg_trainer['percent'] * len(self.train_data):
            self.train_labels[idx] = np.random.randint(self.num_classes, dtype=np.int32)

that is, an exact number ⌈p·n⌉ of the n training labels (not each label with probability p) is redrawn
uniformly over **all** K classes, so a redrawn label keeps its class with probability 1/K and the expected
fraction of labels that actually change is p·(K − 1)/K (72 % at p = 0.8 on CIFAR-10). `symmetric_label_noise`
does the same with a seeded NumPy generator of its own (the authors' global NumPy state is unseeded there).

Only the training labels are changed: the data pipelines (`datasets.get_datasets`, `bench/gpu/full_data.py`)
apply it to the training split after the subsets (`class_limits`, `train_limit`), never to the test split.
The authors also noise their 5,000 held-out validation images; the runner holds those out unused.
"""

import math

import numpy as np

from sphere_tf import validation

# `label_noise_type` values. 'symmetric': the authors' `sym` flag (above); their `asym` flag (CIFAR-10's
# class-pair flips truck → automobile, bird → airplane, ...) has no table in the paper.
LABEL_NOISE_TYPES = ("symmetric",)
# Keys the noise's generator apart from the other draws made from the same seed (the data subsets use
# `np.random.default_rng(seed)`), so switching the noise on leaves the subset unchanged.
_NOISE_STREAM = 0x4C4E


def check_label_noise(fraction, noise_type, prefix=""):
    """`(fraction, noise_type)` checked: a float in [0, 1) and a name in `LABEL_NOISE_TYPES`.

    Args:
        fraction: float, the fraction of training labels redrawn.
        noise_type: str, the kind of noise.
        prefix: str, put before the argument names in messages ('data.' for the runner's config).

    Raises:
        ValueError: a bad value, naming `label_noise` or `label_noise_type`.
    """
    fraction = validation.real(fraction, f"{prefix}label_noise", low=0.0, high=1.0, high_open=True)
    noise_type = validation.one_of(noise_type, f"{prefix}label_noise_type", LABEL_NOISE_TYPES)
    return fraction, noise_type


def symmetric_label_noise(labels, fraction, num_classes, seed):
    """`labels` with ⌈fraction·n⌉ of them, chosen at random, redrawn uniformly over all `num_classes`.

    As the authors' `symmetric_noise` (module docstring): the count is exact, and a redrawn label may land on
    its own class (probability 1/num_classes), so about fraction·(num_classes − 1)/num_classes of the labels
    change. The same `seed` gives the same noisy labels.

    Args:
        labels: 1-D int array of class indices in [0, num_classes).
        fraction: float in [0, 1).
        num_classes: int > 0.
        seed: int >= 0.

    Returns:
        A new array of the dtype of `labels`; `labels` is not modified.
    """
    labels = np.asarray(labels)
    fraction, _ = check_label_noise(fraction, "symmetric")
    num_classes = validation.positive_int(num_classes, "num_classes")
    seed = validation.integer(seed, "seed", minimum=0)
    noisy = labels.copy()
    n = len(labels)
    # The authors' `i < percent * n` over i = 0, ..., n − 1 holds for ⌈percent·n⌉ values of i (same float product).
    count = min(n, math.ceil(fraction * n))
    if count == 0:
        return noisy
    rng = np.random.default_rng([seed, _NOISE_STREAM])
    chosen = rng.permutation(n)[:count]
    noisy[chosen] = rng.integers(num_classes, size=count)
    return noisy


def add_label_noise(labels, fraction, num_classes, seed, noise_type="symmetric"):
    """The noisy training labels of `noise_type` (a name in `LABEL_NOISE_TYPES`); `labels` itself at fraction 0.

    Raises:
        ValueError: `fraction` outside [0, 1) or an unknown `noise_type` (named `label_noise`,
            `label_noise_type`).
    """
    fraction, noise_type = check_label_noise(fraction, noise_type)
    if not fraction:
        return labels
    return symmetric_label_noise(labels, fraction, num_classes, seed)
