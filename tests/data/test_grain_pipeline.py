"""The Grain input pipeline (`get_datasets(..., pipeline='grain')`): every backend, no TensorFlow.

References are the archives' own arrays: an epoch must visit every training example once in whole batches, a
flip must be the image or its mirror, the same example in the same epoch must be augmented the same way
whichever batch or process reads it, and a stream started at step s must be the full stream from step s.
"""

import itertools

import numpy as np
import pytest

from sphere_tf.data import archive_writers as archives
from sphere_tf.data import datasets
from sphere_tf.data import grain_pipeline


def _batches(dataset, n):
    return [(np.asarray(x), np.asarray(y)) for x, y in itertools.islice(iter(dataset), n)]


@pytest.fixture(scope="module")
def cifar_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cifar")
    return str(folder), archives.write_cifar10(str(folder), per_batch=3, n_test=5)  # 15 train, 5 test


def grain(folder, **kwargs):
    return datasets.get_datasets("cifar10", manual_dir=folder, pipeline="grain", **{"batch_size": 5, **kwargs})


def _source_index(image, images):
    """The index of the training image `image` is (or is the mirror of), and whether it is mirrored."""
    for i, candidate in enumerate(images):
        if np.array_equal(image, candidate):
            return i, False
        if np.array_equal(image, candidate[:, ::-1]):
            return i, True
    raise AssertionError("not a training image nor its mirror")


def test_info_and_the_test_split_in_file_order(cifar_dir):
    folder, data = cifar_dir
    train, test, info = grain(folder, batch_size=4)
    assert info == {"input_shape": (32, 32, 3), "num_classes": 10, "train_size": 15, "test_size": 5,
                    "steps_per_epoch": 3, "channel_mean": None, "normalization": "centered_128",
                    "test_steps": 2, "process_count": 1}
    batches = _batches(test, 10)
    assert [len(y) for _, y in batches] == [4, 1] and len(test) == info["test_steps"]
    x = np.concatenate([b[0] for b in batches])
    np.testing.assert_array_equal(x, (data["x_test"].astype(np.float32) - 127.5) / 128)
    np.testing.assert_array_equal(np.concatenate([b[1] for b in batches]), data["y_test"])
    assert all(b[0].dtype == np.float32 and b[1].dtype == np.int32 for b in batches)


def test_every_epoch_visits_each_example_once_in_its_own_order_with_keyed_flips(cifar_dir):
    folder, data = cifar_dir
    train, _, info = grain(folder, augmentation="flip", normalization="none", seed=7)
    steps = info["steps_per_epoch"]
    batches = _batches(train, 3 * steps)
    orders, flips = [], []
    for epoch in range(3):
        x = np.concatenate([b[0] for b in batches[epoch * steps:(epoch + 1) * steps]])
        y = np.concatenate([b[1] for b in batches[epoch * steps:(epoch + 1) * steps]])
        found = [_source_index(image, data["x_train"]) for image in x]
        order = [i for i, _ in found]
        assert sorted(order) == list(range(15))
        np.testing.assert_array_equal(y, data["y_train"][order])
        orders.append(order)
        flips.append({i: mirrored for i, mirrored in found})
    assert orders[0] != orders[1] != orders[2]
    assert 0 < sum(flips[0].values()) < 15  # both outcomes occur
    assert flips[0] != flips[1]  # redrawn every epoch
    # Keyed by (seed, epoch, example), not by the batch: batches of 3 see the same flips in each epoch.
    small = _batches(grain(folder, batch_size=3, augmentation="flip", normalization="none", seed=7)[0], 10)
    for epoch in range(2):
        x = np.concatenate([b[0] for b in small[epoch * 5:(epoch + 1) * 5]])
        assert {i: mirrored for i, mirrored in map(lambda im: _source_index(im, data["x_train"]), x)} == flips[epoch]


def test_a_stream_started_at_step_s_is_the_full_stream_from_s(cifar_dir):
    folder, _ = cifar_dir
    kwargs = dict(batch_size=4, augmentation="spherenet_cifar_plus", seed=3)
    full = _batches(grain(folder, **kwargs)[0], 8)
    again = _batches(grain(folder, **kwargs)[0], 8)
    other = _batches(grain(folder, **{**kwargs, "seed": 4})[0], 8)
    for (xa, ya), (xb, yb) in zip(full, again):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    assert not np.array_equal(full[0][0], other[0][0])
    for step in (2, 3, 5):  # inside epoch 0, on the boundary, inside epoch 1
        resumed = _batches(grain(folder, initial_step=step, **kwargs)[0], 8 - step)
        for (xa, ya), (xb, yb) in zip(full[step:], resumed):
            np.testing.assert_array_equal(xa, xb)
            np.testing.assert_array_equal(ya, yb)


def test_processes_read_equal_parts_of_every_global_batch(cifar_dir):
    folder, _ = cifar_dir
    kwargs = dict(batch_size=6, augmentation="cifar_plus", seed=5, test_limit=4)
    whole = _batches(grain(folder, **kwargs)[0], 5)
    parts = [_batches(grain(folder, process_index=p, process_count=2, **kwargs)[0], 5) for p in range(2)]
    for step, (x, y) in enumerate(whole):
        np.testing.assert_array_equal(np.concatenate([parts[0][step][0], parts[1][step][0]]), x)
        np.testing.assert_array_equal(np.concatenate([parts[0][step][1], parts[1][step][1]]), y)
    tests = [_batches(grain(folder, process_index=p, process_count=2, **kwargs)[1], 5) for p in range(2)]
    np.testing.assert_array_equal(np.concatenate([tests[0][0][1], tests[1][0][1]]),
                                  _batches(grain(folder, **kwargs)[1], 1)[0][1])


def test_subsets_label_noise_and_class_limits_match_the_tf_data_pipeline_arrays(cifar_dir):
    """The arrays both pipelines batch come from the same shared step: the same examples and labels."""
    folder, data = cifar_dir
    kwargs = dict(batch_size=2, train_limit=8, label_noise=0.5, class_limits=[1, 1], normalization="none", seed=2)
    train, _, info = grain(folder, **kwargs)
    x = np.concatenate([b[0] for b in _batches(train, info["steps_per_epoch"])])
    y = np.concatenate([b[1] for b in _batches(train, info["steps_per_epoch"])])
    rng = np.random.default_rng(2)
    arrays = datasets._class_subset((data["x_train"], data["y_train"]), (1, 1), rng)  # noqa: SLF001
    arrays = datasets._subset(arrays, 8, rng)  # noqa: SLF001
    noisy = datasets.label_noise_lib.add_label_noise(arrays[1], 0.5, 10, 2, "symmetric")
    expected = {arrays[0][k].tobytes(): int(noisy[k]) for k in range(len(noisy))}
    assert info["train_size"] == len(expected) == len(x)
    assert {image.astype(np.uint8).tobytes(): int(label) for image, label in zip(x, y)} == expected


def test_bad_requests_fail_naming_the_argument(cifar_dir):
    folder, _ = cifar_dir
    with pytest.raises(ValueError, match="`pipeline`"):
        datasets.get_datasets("cifar10", manual_dir=folder, batch_size=4, pipeline="tfdata")
    with pytest.raises(ValueError, match="`batch_size`.*3 processes"):
        grain(folder, batch_size=4, process_count=3)
    with pytest.raises(ValueError, match="`process_index`"):
        grain(folder, batch_size=4, process_index=2, process_count=2)
    with pytest.raises(ValueError, match="`process_count`.*tf.distribute"):
        datasets.get_datasets("cifar10", manual_dir=folder, batch_size=4, pipeline="tf_data", process_count=2)
    with pytest.raises(ValueError, match="`source`.*pipeline='grain'"):
        datasets.get_datasets("cifar10", source="tfds", data_dir=folder, batch_size=4, pipeline="grain")
    with pytest.raises(ValueError, match="`test_limit`.*2 processes"):
        grain(folder, batch_size=4, process_count=2, test_limit=5)
    with pytest.raises(ValueError, match="`augmentation`"):
        grain(folder, augmentation="cifar_plus_plus")


def test_element_rng_is_keyed_by_seed_epoch_and_index():
    draws = {key: grain_pipeline.element_rng(*key).random() for key in itertools.product((0, 1), (0, 1), (0, 7))}
    assert len(set(draws.values())) == len(draws)
    assert grain_pipeline.element_rng(1, 0, 7).random() == draws[(1, 0, 7)]
