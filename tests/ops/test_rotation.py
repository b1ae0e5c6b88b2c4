"""sphere_tf.ops.rotation (PE-OPT channel groups, S-OPT rows) against explicit NumPy constructions."""

import numpy as np
import pytest

from sphere_tf.ops import orthogonal
from sphere_tf.ops import rotation


def np_channel_group_matrix(blocks, kh, kw, cin, k):
    """Full d×d R: for each channel group g, block g acts on the rows (h, w, c ∈ g) in (h, w, c) order."""
    d, group = kh * kw * cin, cin // k
    blocks = np.asarray(blocks, np.float64)
    if blocks.ndim == 2:
        blocks = np.stack([blocks] * k)
    r = np.zeros((d, d))
    for g in range(k):
        rows = [(h * kw + w) * cin + c for h in range(kh) for w in range(kw) for c in range(g * group, (g + 1) * group)]
        for a, row_a in enumerate(rows):
            for b, row_b in enumerate(rows):
                r[row_a, row_b] = blocks[g, a, b]
    return r


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("kh,kw,cin,k", [(3, 3, 4, 2), (2, 1, 6, 3), (1, 1, 4, 4)])
def test_rotate_channel_groups_is_the_block_matrix_in_hwio_order(shared, kh, kw, cin, k):
    rng = np.random.default_rng(kh * 10 + cin)
    b = kh * kw * cin // k
    blocks = rng.standard_normal((b, b) if shared else (k, b, b)).astype(np.float32)
    v = rng.standard_normal((kh * kw * cin, 5)).astype(np.float32)
    got = rotation.rotate_channel_groups(blocks, v, k, kh * kw)
    expected = np_channel_group_matrix(blocks, kh, kw, cin, k) @ v
    np.testing.assert_allclose(np.asarray(got), expected, atol=1e-5)


def np_cayley(p):
    s = np.triu(p) - np.triu(p).T
    eye = np.eye(len(p))
    return (eye + s) @ np.linalg.inv(eye - s)


@pytest.mark.parametrize("shared", [False, True])
def test_rotate_channel_groups_with_a_direct_product_of_raw_blocks(shared):
    """With `product=cayley_product` the raw blocks act as their Cayley rotations (a shared block once over all
    groups' columns)."""
    kh, kw, cin, k = 3, 3, 4, 2
    rng = np.random.default_rng(5)
    b = kh * kw * cin // k
    raw = rng.standard_normal((b, b) if shared else (k, b, b)).astype(np.float32)
    v = rng.standard_normal((kh * kw * cin, 5)).astype(np.float32)
    got = rotation.rotate_channel_groups(raw, v, k, kh * kw, orthogonal.cayley_product)
    cayley_blocks = np_cayley(raw) if shared else np.stack([np_cayley(block) for block in raw])
    np.testing.assert_allclose(np.asarray(got), np_channel_group_matrix(cayley_blocks, kh, kw, cin, k) @ v, atol=1e-4)


def test_rotate_rows_with_a_direct_product():
    rng = np.random.default_rng(6)
    v = rng.standard_normal((9, 4)).astype(np.float32)
    rows = np.array([0, 5, 6, 8], np.int32)
    raw = rng.standard_normal((4, 4)).astype(np.float32)
    expected = v.astype(np.float64).copy()
    expected[rows] = np_cayley(raw) @ v[rows]
    got = rotation.rotate_rows(raw, v, rows, orthogonal.cayley_product)
    np.testing.assert_allclose(np.asarray(got), expected, atol=1e-5)


def test_rotate_rows_changes_only_the_sampled_rows():
    rng = np.random.default_rng(3)
    v = rng.standard_normal((9, 4)).astype(np.float32)
    rows = np.array([1, 4, 7], np.int32)
    r = rng.standard_normal((3, 3)).astype(np.float32)
    expected = v.astype(np.float64).copy()
    expected[rows] = r @ v[rows]
    np.testing.assert_allclose(np.asarray(rotation.rotate_rows(r, v, rows)), expected, atol=1e-5)


def test_sample_rows_are_sorted_distinct_and_seeded():
    a = rotation.sample_rows(np.random.default_rng(0), 20, 7)
    b = rotation.sample_rows(np.random.default_rng(0), 20, 7)
    np.testing.assert_array_equal(a, b)
    assert a.dtype == np.int32 and len(set(a.tolist())) == 7 and np.all(np.diff(a) > 0) and a.max() < 20
