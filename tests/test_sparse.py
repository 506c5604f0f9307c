"""funcgrad.experimental.sparse: BCOO arrays against their dense forms in NumPy (conversions,
products for drawn shapes and dimension numbers, sums, transposes, duplicates, padding),
derivatives against central finite differences, jit against eager, vmap against a loop of the
lanes, and the errors that name a bad argument."""

from __future__ import annotations

import math
import string

import numpy as np
import pytest
import scipy.sparse
from hypothesis import given, settings
from hypothesis import strategies as st

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.errors import ConcretizationTypeError
from funcgrad.experimental import sparse
from funcgrad.experimental.sparse import BCOO
from funcgrad.test_util import check_grads


def sparse_array(rng, shape, density=0.4, dtype=np.float64):
    """A dense NumPy array with about `density` of its entries nonzero."""
    values = rng.normal(size=shape).astype(dtype)
    return np.where(rng.random(shape) < density, values, 0).astype(dtype)


def einsum_dot_general(lhs, rhs, dimension_numbers):
    """dot_general of two NumPy arrays, written as an einsum."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    letters = iter(string.ascii_letters)
    lhs_names = [next(letters) for _ in range(lhs.ndim)]
    rhs_names = [next(letters) for _ in range(rhs.ndim)]
    for lhs_dim, rhs_dim in zip(lhs_contract + lhs_batch, rhs_contract + rhs_batch):
        rhs_names[rhs_dim] = lhs_names[lhs_dim]
    paired_lhs, paired_rhs = set(lhs_contract + lhs_batch), set(rhs_contract + rhs_batch)
    out = (
        [lhs_names[d] for d in lhs_batch]
        + [n for d, n in enumerate(lhs_names) if d not in paired_lhs]
        + [n for d, n in enumerate(rhs_names) if d not in paired_rhs]
    )
    spec = f"{''.join(lhs_names)},{''.join(rhs_names)}->{''.join(out)}"
    return np.einsum(spec, lhs, rhs)


@st.composite
def layouts(draw, min_dims=1, max_dims=4, min_side=0):
    """A shape with its n_batch and n_dense, and a seed for its values."""
    ndim = draw(st.integers(min_dims, max_dims))
    shape = tuple(draw(st.lists(st.integers(min_side, 4), min_size=ndim, max_size=ndim)))
    n_batch = draw(st.integers(0, ndim))
    n_dense = draw(st.integers(0, ndim - n_batch))
    return shape, n_batch, n_dense, draw(st.integers(0, 2**16))


# ---- conversions


@settings(deadline=None, max_examples=25)
@given(layouts(), st.integers(0, 2))
def test_fromdense_todense_round_trip(layout, extra_nse):
    shape, n_batch, n_dense, seed = layout
    dense = sparse_array(np.random.default_rng(seed), shape)
    n_sparse = len(shape) - n_batch - n_dense
    nonzero = np.any(dense != 0, axis=tuple(range(n_batch + n_sparse, len(shape))))
    counts = nonzero.sum(axis=tuple(range(n_batch, n_batch + n_sparse)))
    nse = int(np.max(counts, initial=0))

    mat = BCOO.fromdense(dense, n_batch=n_batch, n_dense=n_dense)
    assert (mat.nse, mat.n_batch, mat.n_sparse, mat.n_dense) == (nse, n_batch, n_sparse, n_dense)
    assert mat.shape == shape and mat.ndim == len(shape) and mat.size == dense.size
    assert mat.dtype == np.float64 and mat.indices.dtype == np.int32
    np.testing.assert_array_equal(mat.todense(), dense)

    padded = BCOO.fromdense(dense, nse=nse + extra_nse, n_batch=n_batch, n_dense=n_dense)
    assert padded.data.shape == (*shape[:n_batch], nse + extra_nse, *shape[n_batch + n_sparse :])
    np.testing.assert_array_equal(sparse.todense(padded), dense)
    # Per batch: the nonzero positions in row-major order, then padding at the sparse shape.
    sparse_shape = shape[n_batch : n_batch + n_sparse]
    batch_size = math.prod(shape[:n_batch])
    indices = np.asarray(padded.indices).reshape(batch_size, nse + extra_nse, n_sparse)
    for batch, batch_indices in zip(nonzero.reshape(batch_size, *sparse_shape), indices):
        expected = np.argwhere(batch) if n_sparse else np.zeros((int(batch), 0))
        count = len(expected)
        np.testing.assert_array_equal(batch_indices[:count], expected)
        np.testing.assert_array_equal(
            batch_indices[count:],
            np.broadcast_to(sparse_shape, (nse + extra_nse - count, n_sparse)),
        )


def test_fromdense_keeps_the_first_nse_nonzeros():
    dense = np.array([[0.0, 2.0, 0.0], [1.0, 0.0, 4.0]])
    mat = BCOO.fromdense(dense, nse=2)
    np.testing.assert_array_equal(mat.indices, [[0, 1], [1, 0]])
    np.testing.assert_array_equal(mat.todense(), [[0.0, 2.0, 0.0], [1.0, 0.0, 0.0]])


def test_constructor_and_layout_properties():
    data = np.array([1.0, 3.0, 5.0], np.float32)
    indices = np.array([[0, 0], [1, 1], [2, 2]])
    mat = BCOO((data, indices), shape=(3, 3))
    assert repr(mat) == "BCOO(float32[3, 3], nse=3)"
    np.testing.assert_array_equal(mat.todense(), np.diag([1.0, 3.0, 5.0]))
    assert sparse.todense(np.eye(2)).shape == (2, 2)  # a dense array passes through
    batched = BCOO.fromdense(np.ones((2, 3, 4)), n_batch=1, n_dense=1)
    assert repr(batched) == "BCOO(float64[2, 3, 4], nse=3, n_batch=1, n_dense=1)"
    assert len(batched) == 2


def test_empty_and_eye_match_numpy():
    empty = sparse.empty((3, 4), dtype=np.float32, n_batch=1, nse=2)
    assert empty.data.shape == (3, 2) and empty.dtype == np.float32
    np.testing.assert_array_equal(empty.todense(), np.zeros((3, 4)))
    for n, m, k in [(3, None, 0), (3, 5, 1), (4, 3, -2), (3, 3, 5)]:
        for n_batch, n_dense in [(0, 0), (1, 0), (0, 1), (2, 0)]:
            eye = sparse.eye(n, m, k, n_batch=n_batch, n_dense=n_dense)
            assert (eye.n_batch, eye.n_dense) == (n_batch, n_dense)
            np.testing.assert_array_equal(eye.todense(), np.eye(n, m, k))


def test_random_bcoo_draws_distinct_indices_in_range():
    mat = sparse.random_bcoo(fg.random.key(3), (2, 5, 6, 3), nse=0.3, n_batch=1, n_dense=1)
    assert mat.data.shape == (2, 9, 3) and mat.indices.shape == (2, 9, 2)
    indices = np.asarray(mat.indices)
    assert np.all((indices >= 0) & (indices < [5, 6]))
    for batch in indices:
        assert len({tuple(i) for i in batch}) == 9
    assert np.all((np.asarray(mat.data) >= 0) & (np.asarray(mat.data) < 1))
    ordered = sparse.random_bcoo(fg.random.key(3), (7, 7), nse=10, sorted_indices=True)
    flat = np.ravel_multi_index(np.asarray(ordered.indices).T, (7, 7))
    assert np.all(np.diff(flat) > 0)


# ---- products


@st.composite
def dot_general_cases(draw):
    """A BCOO layout, a dense operand and dimension numbers pairing them."""
    shape, n_batch, n_dense, seed = draw(layouts(min_dims=1, max_dims=4, min_side=1))
    roles = draw(
        st.lists(
            st.sampled_from(["contract", "batch", "free"]), min_size=len(shape), max_size=len(shape)
        )
    )
    paired = [d for d, r in enumerate(roles) if r != "free"]
    n_free = draw(st.integers(0, 2))
    rhs_rank = len(paired) + n_free
    placement = draw(st.permutations(range(rhs_rank)))
    rhs_shape = [0] * rhs_rank
    pair_to_rhs = {}
    for lhs_dim, rhs_dim in zip(paired, placement):
        rhs_shape[rhs_dim] = shape[lhs_dim]
        pair_to_rhs[lhs_dim] = rhs_dim
    for rhs_dim in placement[len(paired) :]:
        rhs_shape[rhs_dim] = draw(st.integers(1, 3))
    lhs_contract = tuple(d for d in paired if roles[d] == "contract")
    lhs_batch = tuple(draw(st.permutations([d for d in paired if roles[d] == "batch"])))
    dimension_numbers = (
        (lhs_contract, tuple(pair_to_rhs[d] for d in lhs_contract)),
        (lhs_batch, tuple(pair_to_rhs[d] for d in lhs_batch)),
    )
    return shape, n_batch, n_dense, seed, tuple(rhs_shape), dimension_numbers


@settings(deadline=None, max_examples=40)
@given(dot_general_cases())
def test_dot_general_matches_dense_product(case):
    shape, n_batch, n_dense, seed, rhs_shape, dimension_numbers = case
    rng = np.random.default_rng(seed)
    dense = sparse_array(rng, shape)
    other = rng.normal(size=rhs_shape)
    mat = BCOO.fromdense(dense, n_batch=n_batch, n_dense=n_dense)
    out = sparse.bcoo_dot_general(mat, other, dimension_numbers=dimension_numbers)
    expected = einsum_dot_general(dense, other, dimension_numbers)
    assert out.shape == expected.shape and out.dtype == np.float64
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    # The same product with the dense operand on the left.
    (lc, rc), (lb, rb) = dimension_numbers
    swapped = ((rc, lc), (rb, lb))
    out = sparse.bcoo_dot_general(other, mat, dimension_numbers=swapped)
    np.testing.assert_allclose(
        out, einsum_dot_general(other, dense, swapped), rtol=1e-12, atol=1e-12
    )


@pytest.mark.parametrize(
    "sparse_shape, dense_shape, n_batch",
    [
        ((3, 4), (4,), 0),
        ((3, 4), (4, 2), 0),
        ((4,), (4, 2), 0),
        ((4,), (4,), 0),
        ((3, 4), (2, 4, 5), 0),
        ((2, 3, 4), (2, 4, 5), 1),
        ((2, 3, 4), (4, 5), 1),
        ((2, 3, 4), (4,), 1),
    ],
)
def test_matmul_follows_numpy_shapes(sparse_shape, dense_shape, n_batch):
    rng = np.random.default_rng(0)
    dense = sparse_array(rng, sparse_shape)
    mat = BCOO.fromdense(dense, n_batch=n_batch)
    other = rng.normal(size=dense_shape)
    np.testing.assert_allclose(mat @ other, dense @ other, rtol=1e-12)
    np.testing.assert_allclose(mat @ fnp.asarray(other), dense @ other, rtol=1e-12)
    transposed = np.swapaxes(other, -1, -2) if other.ndim > 1 else other
    flipped = np.swapaxes(dense, -1, -2) if dense.ndim > 1 else dense
    mat_t = BCOO.fromdense(flipped, n_batch=n_batch)
    np.testing.assert_allclose(transposed @ mat_t, transposed @ flipped, rtol=1e-12)
    np.testing.assert_allclose(fnp.asarray(transposed) @ mat_t, transposed @ flipped, rtol=1e-12)


def test_matmul_promotes_dtypes():
    mat = BCOO.fromdense(np.eye(3, dtype=np.float32))
    assert (mat @ np.ones(3, np.float64)).dtype == np.float64
    assert (mat @ fnp.ones(3, np.int32)).dtype == np.float32


def test_elementwise_operators_stay_sparse():
    rng = np.random.default_rng(1)
    dense = sparse_array(rng, (3, 4, 2))
    mat = BCOO.fromdense(dense, n_batch=1, n_dense=1)
    scale = rng.normal(size=(4, 1))
    for result, expected in [
        (mat * 2.5, dense * 2.5),
        (3 * mat, 3 * dense),
        (mat * scale, dense * scale),
        (scale * mat, dense * scale),
        (-mat, -dense),
        (mat + mat, 2 * dense),
        (mat - 2 * mat, -dense),
    ]:
        assert isinstance(result, BCOO) and result.shape == dense.shape
        np.testing.assert_allclose(result.todense(), expected, rtol=1e-12)
    np.testing.assert_allclose(mat + dense, 2 * dense)  # with a dense array: dense
    position = np.minimum(np.asarray(mat.indices)[..., 0], 3)  # padding holds 0 anyway
    np.testing.assert_allclose(sparse.bcoo_multiply_dense(mat, scale), mat.data * scale[position])
    # Arrays with other indices store both sets of elements; with the same indices, the
    # sums of their data (the number of stored elements stays).
    other = BCOO((mat.data, mat.indices[:, ::-1]), shape=mat.shape)
    assert (mat + other).nse == 2 * mat.nse
    assert (mat + mat).nse == (mat - 2 * mat).nse == mat.nse
    assert mat.astype(np.float32).dtype == np.float32


# ---- padding


def padded_matrix():
    """A 3x4 matrix with two real elements and three entries whose indices lie outside (the
    usual padding at the shape, one past it and a negative one), all holding nonzero data."""
    data = np.array([1.0, 2.0, 7.0, 8.0, 9.0])
    indices = np.array([[0, 1], [2, 3], [3, 4], [1, 4], [-1, 0]], np.int32)
    dense = np.zeros((3, 4))
    dense[0, 1], dense[2, 3] = 1.0, 2.0
    return BCOO((data, indices), shape=(3, 4)), dense


def test_out_of_range_entries_are_ignored():
    mat, dense = padded_matrix()
    np.testing.assert_array_equal(mat.todense(), dense)
    x, y = np.arange(4.0) + 1, np.arange(3.0) + 1
    np.testing.assert_allclose(mat @ x, dense @ x)
    np.testing.assert_allclose(y @ mat, y @ dense)
    np.testing.assert_allclose(mat.T @ y, dense.T @ y)
    np.testing.assert_allclose((mat * np.arange(4.0)).todense(), dense * np.arange(4.0))
    for axis in (0, 1):
        np.testing.assert_allclose(mat.sum(axis).todense(), dense.sum(axis))
    assert float(mat.sum()) == dense.sum()
    np.testing.assert_allclose(mat.reshape(2, 6).todense(), dense.reshape(2, 6))
    deduplicated = mat.sum_duplicates(remove_zeros=False)
    assert deduplicated.nse == 2
    np.testing.assert_array_equal(deduplicated.indices, [[0, 1], [2, 3]])


def test_padding_has_no_gradient():
    mat, _ = padded_matrix()

    def loss(data):
        return fnp.sum(BCOO((data, mat.indices), shape=mat.shape) @ fnp.arange(4.0))

    np.testing.assert_allclose(fg.grad(loss)(mat.data), [1.0, 3.0, 0.0, 0.0, 0.0])


# ---- ordering and duplicates


def test_sum_duplicates_merges_sorts_and_pads():
    data = np.array([[1.0, 2.0, 3.0, 5.0, 0.0], [4.0, 4.0, 4.0, 4.0, 4.0]])
    indices = np.array(
        [[[1, 0], [0, 1], [1, 0], [2, 2], [0, 0]], [[0, 0], [0, 0], [0, 0], [0, 0], [0, 0]]],
        np.int32,
    )
    mat = BCOO((data, indices), shape=(2, 2, 3))
    expected_dense = mat.todense()
    summed = sparse.bcoo_sum_duplicates(mat)
    assert summed.nse == 3 and summed.unique_indices and summed.indices_sorted
    np.testing.assert_array_equal(summed.indices[0], [[0, 0], [0, 1], [1, 0]])
    np.testing.assert_array_equal(summed.data[0], [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(summed.indices[1], [[0, 0], [2, 3], [2, 3]])
    np.testing.assert_array_equal(summed.data[1], [20.0, 0.0, 0.0])
    np.testing.assert_array_equal(summed.todense(), expected_dense)
    # The method drops zeros too; a larger nse pads, a smaller one cuts.
    assert mat.sum_duplicates().nse == 2
    np.testing.assert_array_equal(mat.sum_duplicates(nse=5).todense(), expected_dense)
    assert mat.sum_duplicates(nse=5).nse == 5
    cut = sparse.bcoo_sum_duplicates(mat, nse=1)
    np.testing.assert_array_equal(cut.indices[:, 0], [[0, 0], [0, 0]])


@settings(deadline=None, max_examples=20)
@given(layouts(min_dims=1, max_dims=3, min_side=1), st.integers(1, 6))
def test_sum_duplicates_and_sort_indices_keep_the_array(layout, nse):
    shape, n_batch, n_dense, seed = layout
    rng = np.random.default_rng(seed)
    n_sparse = len(shape) - n_batch - n_dense
    sparse_shape = shape[n_batch : n_batch + n_sparse]
    batch_shape, dense_shape = shape[:n_batch], shape[n_batch + n_sparse :]
    # Indices from a small range so that they repeat, and some one past the end.
    indices = rng.integers(0, np.array(sparse_shape) + 1, size=(*batch_shape, nse, n_sparse))
    data = rng.normal(size=(*batch_shape, nse, *dense_shape))
    mat = BCOO((data, indices.astype(np.int32)), shape=shape)
    expected = np.asarray(mat.todense())
    batch_size = math.prod(batch_shape)
    for result in (mat.sum_duplicates(remove_zeros=False), mat.sort_indices()):
        np.testing.assert_allclose(result.todense(), expected, rtol=1e-12, atol=1e-12)
        assert result.indices_sorted
        for batch in np.asarray(result.indices).reshape(batch_size, result.nse, n_sparse):
            inside = np.all(batch < sparse_shape, axis=-1)
            assert np.all(inside[:-1] >= inside[1:])  # valid first, then padding
            keys = [tuple(i) for i in batch[inside]]
            assert keys == sorted(keys)
    deduplicated = mat.sum_duplicates(remove_zeros=False)
    for batch in np.asarray(deduplicated.indices).reshape(batch_size, deduplicated.nse, n_sparse):
        keys = [tuple(i) for i in batch if np.all(i < sparse_shape)]
        assert len(keys) == len(set(keys))


def test_extract_reads_dense_values_at_the_indices():
    data = np.array([1.0, 2.0, 3.0])
    indices = np.array([[0, 1], [0, 1], [1, 0]], np.int32)
    mat = BCOO((data, indices), shape=(2, 2))
    dense = np.array([[5.0, 6.0], [7.0, 8.0]])
    np.testing.assert_array_equal(
        sparse.bcoo_extract(mat, dense, assume_unique=True).data, [6.0, 6.0, 7.0]
    )
    once = sparse.bcoo_extract(mat, dense)  # indices not known to be unique: first copy only
    np.testing.assert_array_equal(once.data, [6.0, 0.0, 7.0])
    np.testing.assert_array_equal(once.todense(), [[0.0, 6.0], [7.0, 0.0]])


# ---- structure


@settings(deadline=None, max_examples=20)
@given(layouts(min_dims=1, max_dims=4), st.data())
def test_transpose_permutes_within_groups(layout, data):
    shape, n_batch, n_dense, seed = layout
    dense = sparse_array(np.random.default_rng(seed), shape)
    mat = BCOO.fromdense(dense, n_batch=n_batch, n_dense=n_dense)
    n_positional = len(shape) - n_dense
    permutation = (
        data.draw(st.permutations(range(n_batch)))
        + data.draw(st.permutations(range(n_batch, n_positional)))
        + data.draw(st.permutations(range(n_positional, len(shape))))
    )
    out = sparse.bcoo_transpose(mat, permutation=permutation)
    np.testing.assert_array_equal(out.todense(), np.transpose(dense, permutation))
    assert out.unique_indices


def test_transpose_property_and_matrix_transpose():
    dense = sparse_array(np.random.default_rng(2), (3, 5))
    mat = BCOO.fromdense(dense)
    np.testing.assert_array_equal(mat.T.todense(), dense.T)
    assert mat.indices_sorted and not mat.T.indices_sorted


@settings(deadline=None, max_examples=20)
@given(layouts(min_dims=1, max_dims=4), st.data())
def test_reduce_sum_matches_numpy(layout, data):
    shape, n_batch, n_dense, seed = layout
    dense = sparse_array(np.random.default_rng(seed), shape)
    mat = BCOO.fromdense(dense, n_batch=n_batch, n_dense=n_dense)
    axes = tuple(data.draw(st.sets(st.integers(0, len(shape) - 1))))
    out = sparse.bcoo_reduce_sum(mat, axes=axes)
    assert isinstance(out, BCOO)
    np.testing.assert_allclose(out.todense(), dense.sum(axis=axes), rtol=1e-12, atol=1e-12)


def test_sum_method_and_negative_axes():
    dense = sparse_array(np.random.default_rng(3), (2, 3, 4))
    mat = BCOO.fromdense(dense, n_batch=1)
    np.testing.assert_allclose(mat.sum(-1).todense(), dense.sum(-1))
    np.testing.assert_allclose(mat.sum((0, 2)).todense(), dense.sum((0, 2)))
    np.testing.assert_allclose(mat.sum(), dense.sum())


def test_reshape_and_batch_indexing():
    dense = sparse_array(np.random.default_rng(4), (2, 3, 4, 2))
    mat = BCOO.fromdense(dense, n_batch=1, n_dense=1)
    for new_shape in [(2, 12, 2), (1, 2, 2, 6, 2), (2, 4, 3, 2), (2, -1, 2)]:
        out = mat.reshape(new_shape)
        np.testing.assert_array_equal(out.todense(), dense.reshape(new_shape))
    np.testing.assert_array_equal(mat[1].todense(), dense[1])
    np.testing.assert_array_equal(mat[-1:].todense(), dense[-1:])
    batched = BCOO.fromdense(dense, n_batch=2)
    np.testing.assert_array_equal(batched[0, 1:].todense(), dense[0, 1:])
    np.testing.assert_array_equal(batched[:, 2].todense(), dense[:, 2])


def test_reshape_drops_padding_with_the_last_sparse_dimension_and_splits_empty_batches():
    # A padding element (index 1 of a sparse dimension of size 1) must stay inert when the
    # reshape leaves no sparse dimension to mark it.
    data = np.array([[5.0, 2.0], [3.0, 7.0]])
    indices = np.array([[[1], [0]], [[0], [-1]]])
    mat = BCOO((data, indices), shape=(2, 1))
    expected = np.array([[2.0], [3.0]])
    np.testing.assert_array_equal(mat.todense(), expected)
    np.testing.assert_array_equal(mat.reshape(2).todense(), expected.reshape(2))
    # With an empty batch, (0, 0, 1, 1) splits into batch (0, 0) and sparse (1, 1) only.
    empty_batch = BCOO.fromdense(np.zeros((4, 3, 0)), n_batch=3)
    out = empty_batch.reshape(0, 0, 1, 1)
    assert out.shape == (0, 0, 1, 1) and (out.n_batch, out.n_sparse) == (2, 2)


# ---- transformations


def test_grad_through_matmul_matches_finite_differences():
    rng = np.random.default_rng(5)
    dense = sparse_array(rng, (4, 5))
    mat = BCOO.fromdense(dense, nse=9)
    x = rng.normal(size=(5, 2))

    def loss(data, x):
        product = BCOO((data, mat.indices), shape=mat.shape) @ x
        return fnp.sum(fnp.sin(product) * product)

    check_grads(loss, (mat.data, x), order=2, modes=("fwd", "rev"))
    grad_data, grad_x = fg.grad(loss, argnums=(0, 1))(mat.data, x)
    product = dense @ x
    outer = np.cos(product) * product + np.sin(product)
    np.testing.assert_allclose(grad_x, dense.T @ outer, rtol=1e-10)
    rows, cols = np.asarray(mat.indices).T
    expected = np.where(rows < 4, (outer @ x.T)[np.minimum(rows, 3), np.minimum(cols, 4)], 0)
    np.testing.assert_allclose(grad_data, expected, rtol=1e-10)


def test_grad_through_the_other_operations():
    rng = np.random.default_rng(6)
    dense = sparse_array(rng, (2, 3, 4), density=0.6)
    mat = BCOO.fromdense(dense, n_batch=1, nse=8)
    weights = rng.normal(size=(3, 4))

    def through_structure(data):
        a = BCOO((data, mat.indices), shape=mat.shape)
        summed = a.sum(0).T.reshape(12) * fnp.arange(12.0)
        merged = (a + a * 2.0).sum_duplicates(nse=8, remove_zeros=False)
        return fnp.sum(summed.todense() ** 2) + fnp.sum(merged.todense() * weights)

    check_grads(through_structure, (mat.data,), order=2)
    # Without zeros the pattern stays put under the finite differences' steps.
    full = rng.normal(size=(2, 3, 4))
    check_grads(lambda m: BCOO.fromdense(m, nse=12, n_batch=1).data, (full,), order=1)
    check_grads(lambda m: sparse.bcoo_extract(mat, m).data, (dense,), order=1)


def test_jit_matches_eager():
    rng = np.random.default_rng(7)
    dense = sparse_array(rng, (2, 4, 5))
    mat = BCOO.fromdense(dense, n_batch=1)
    x = rng.normal(size=(5, 3))

    def f(mat, x):
        product = mat @ x
        deduplicated = (mat + mat).sum_duplicates(nse=mat.nse, remove_zeros=False)
        return product, deduplicated, mat.transpose((0, 2, 1)).sum(1)

    eager = f(mat, x)
    jitted = fg.jit(f)(mat, x)
    for a, b in zip(fg.tree_util.tree_leaves(eager), fg.tree_util.tree_leaves(jitted)):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)
    assert fg.tree_util.tree_structure(eager) == fg.tree_util.tree_structure(jitted)
    roundtrip = fg.jit(lambda m: BCOO.fromdense(m, nse=mat.nse, n_batch=1).todense())(dense)
    np.testing.assert_array_equal(roundtrip, dense)


def test_nse_must_be_static_under_jit():
    dense = np.eye(3)
    with pytest.raises(ConcretizationTypeError, match="pass nse="):
        fg.jit(lambda m: BCOO.fromdense(m))(dense)
    mat = BCOO.fromdense(dense)
    with pytest.raises(ConcretizationTypeError, match="pass nse="):
        fg.jit(lambda m: m.sum_duplicates())(mat)
    with pytest.raises(ConcretizationTypeError, match="nse sets the shapes"):
        fg.jit(lambda m, n: BCOO.fromdense(m, nse=n))(dense, 3)


def test_vmap_over_a_dense_operand_matches_a_loop():
    rng = np.random.default_rng(8)
    dense = sparse_array(rng, (3, 4))
    mat = BCOO.fromdense(dense)
    xs = rng.normal(size=(5, 4))
    batched = fg.vmap(lambda x: mat @ x)(xs)
    np.testing.assert_allclose(batched, np.stack([np.asarray(mat @ x) for x in xs]), rtol=1e-12)
    batched = fg.vmap(lambda x: x @ mat.T, in_axes=1)(xs.T)
    np.testing.assert_allclose(batched, xs @ dense.T, rtol=1e-12)


def test_vmap_over_data_and_over_batch_dimensions_matches_a_loop():
    rng = np.random.default_rng(9)
    dense = sparse_array(rng, (3, 4, 5))
    mat = BCOO.fromdense(dense, n_batch=1)
    x = rng.normal(size=(3, 5))

    def apply(m, v):
        return (m * 2.0).sum_duplicates(nse=m.nse, remove_zeros=False) @ v

    batched = fg.vmap(apply)(mat, x)
    lanes = [np.asarray(apply(mat[i], x[i])) for i in range(3)]
    np.testing.assert_allclose(batched, np.stack(lanes), rtol=1e-12)
    # One sparsity pattern, many values: data mapped, indices shared.
    flat = BCOO.fromdense(dense[0])
    datas = rng.normal(size=(4, flat.nse))
    batched = fg.vmap(lambda d: BCOO((d, flat.indices), shape=flat.shape).todense())(datas)
    lanes = [np.asarray(BCOO((d, flat.indices), shape=flat.shape).todense()) for d in datas]
    np.testing.assert_array_equal(batched, np.stack(lanes))
    # A BCOO result stacks into a new batch dimension.
    stacked = fg.vmap(lambda m: BCOO.fromdense(m, nse=20))(dense)
    assert stacked.n_batch == 1 and stacked.shape == dense.shape
    np.testing.assert_array_equal(stacked.todense(), dense)


# ---- errors


def test_errors_name_the_shapes():
    mat = BCOO.fromdense(np.eye(3))
    with pytest.raises(ValueError, match=r"\(3, 3\) and \(4,\) do not align"):
        mat @ np.ones(4)
    with pytest.raises(TypeError, match="contracting dimension sizes must match"):
        sparse.bcoo_dot_general(mat, np.ones((4, 2)), dimension_numbers=(((1,), (0,)), ((), ())))
    with pytest.raises(NotImplementedError, match=r"lhs dim 1 \(dense\) with rhs dim 0 \(sparse\)"):
        batched = BCOO.fromdense(np.ones((3, 3)), n_dense=1)
        sparse.bcoo_dot_general(batched, mat, dimension_numbers=(((0,), (1,)), ((1,), (0,))))
    with pytest.raises(ValueError, match="do not describe an array of shape"):
        BCOO((np.ones(3), np.zeros((2, 2), np.int32)), shape=(3, 3))
    with pytest.raises(TypeError, match="indices must be integers"):
        BCOO((np.ones(2), np.zeros((2, 2))), shape=(3, 3))
    with pytest.raises(ValueError, match="kept among themselves"):
        BCOO.fromdense(np.ones((2, 3, 4)), n_batch=1).transpose((1, 0, 2))
    with pytest.raises(IndexError, match="out of bounds for dimension 1"):
        mat[0, 3]
    with pytest.raises(IndexError, match="too many indices"):
        mat[0, 1, 2]
    with pytest.raises(ValueError, match="must agree in every dimension but 0"):
        sparse.bcoo_concatenate([mat, BCOO.fromdense(np.eye(2))], dimension=0)
    with pytest.raises(sparse.SparseEfficiencyError, match="sizes \\(3,\\)"):
        sparse.bcoo_update_layout(mat, n_batch=1)
    with pytest.raises(ValueError, match="must all have size 1"):
        sparse.bcoo_squeeze(mat, dimensions=(0,))
    with pytest.raises(ValueError, match="sparse dimensions \\(1,\\) of size > 1"):
        sparse.bcoo_broadcast_in_dim(mat, shape=(3, 2, 3), broadcast_dimensions=(0, 2))
    with pytest.raises(ValueError, match="operands must have one shape"):
        mat * BCOO.fromdense(np.eye(2))
    with pytest.raises(ValueError, match="must broadcast"):
        mat * np.ones(4)
    with pytest.raises(ValueError, match="n_batch=3 and n_dense=0"):
        BCOO.fromdense(np.eye(3), n_batch=3)
    with pytest.raises(ValueError, match="one shape and layout"):
        mat + BCOO.fromdense(np.eye(3), n_batch=1)


# ---- sparsify


def test_sparsify_runs_dense_code_on_sparse_arguments():
    rng = np.random.default_rng(10)
    dense = sparse_array(rng, (3, 4))
    mat = BCOO.fromdense(dense)
    x, y = rng.normal(size=4), rng.normal(size=3)

    def f(a, x, y):
        return (
            2.0 * (a @ x),
            y @ a,
            fnp.sum(a, axis=0),
            fnp.sum(a),
            (-a).T,
            a * x,
            a + a - a,
            a.astype(np.float32),
        )

    expected = f(fnp.asarray(dense), x, y)
    results = sparse.sparsify(f)(mat, x, y)
    for result, want in zip(results, expected):
        np.testing.assert_allclose(sparse.todense(result), want, rtol=1e-12, atol=1e-12)
        assert sparse.todense(result).dtype == want.dtype
    assert [isinstance(r, BCOO) for r in results] == [False, False, True, False] + [True] * 4
    # Under jit and grad, through the data.
    jitted = fg.jit(sparse.sparsify(f))(mat, x, y)
    for a, b in zip(fg.tree_util.tree_leaves(results), fg.tree_util.tree_leaves(jitted)):
        np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-12)

    def loss(data, x):
        a = BCOO((data, mat.indices), shape=mat.shape)
        return sparse.sparsify(lambda a, x: fnp.sum((a @ x) ** 2))(a, x)

    check_grads(loss, (mat.data, x), order=2)


def test_sparsify_names_a_primitive_without_a_sparse_rule():
    mat = BCOO.fromdense(np.eye(2))
    with pytest.raises(NotImplementedError, match="primitive 'exp' has no sparse rule"):
        sparse.sparsify(fnp.exp)(mat)


# ---- products of two sparse arrays


SPDOT_CASES = [
    # (lhs shape, lhs n_batch, rhs shape, rhs n_batch, dimension_numbers)
    ((3, 4), 0, (4, 5), 0, (((1,), (0,)), ((), ()))),
    ((4, 3), 0, (4, 5), 0, (((0,), (0,)), ((), ()))),
    ((4,), 0, (4,), 0, (((0,), (0,)), ((), ()))),
    ((3, 4), 0, (4,), 0, (((1,), (0,)), ((), ()))),
    ((3, 4), 0, (5, 2), 0, (((), ()), ((), ()))),
    ((2, 3, 4), 1, (2, 4, 5), 1, (((2,), (1,)), ((0,), (0,)))),
    ((2, 3, 4), 1, (4, 5), 0, (((2,), (0,)), ((), ()))),
]


@pytest.mark.parametrize("case", range(len(SPDOT_CASES)))
def test_spdot_general_matches_dense_product(case):
    lhs_shape, lhs_n_batch, rhs_shape, rhs_n_batch, dimension_numbers = SPDOT_CASES[case]
    rng = np.random.default_rng(case)
    lhs, rhs = sparse_array(rng, lhs_shape), sparse_array(rng, rhs_shape)
    lhs_mat = BCOO.fromdense(lhs, n_batch=lhs_n_batch)
    rhs_mat = BCOO.fromdense(rhs, n_batch=rhs_n_batch)
    out = sparse.bcoo_dot_general(lhs_mat, rhs_mat, dimension_numbers=dimension_numbers)
    assert isinstance(out, BCOO)
    want = einsum_dot_general(lhs, rhs, dimension_numbers)
    np.testing.assert_allclose(out.todense(), want, rtol=1e-12, atol=1e-12)
    out_n_sparse = out.n_sparse
    # nse: the pairs of stored elements, counting 1 for a side with every sparse dim contracted
    pairs = (lhs_mat.nse if lhs_mat.n_sparse > len(dimension_numbers[0][0]) else 1) * (
        rhs_mat.nse if rhs_mat.n_sparse > len(dimension_numbers[0][1]) else 1
    )
    assert out.nse == min(pairs, math.prod(out.shape[out.n_batch :]))
    assert out_n_sparse == len(out.shape) - out.n_batch

    def product(lhs_data, rhs_data):
        a = BCOO((lhs_data, lhs_mat.indices), shape=lhs_shape)
        b = BCOO((rhs_data, rhs_mat.indices), shape=rhs_shape)
        return sparse.bcoo_dot_general(a, b, dimension_numbers=dimension_numbers).todense()

    check_grads(product, (lhs_mat.data, rhs_mat.data), order=1)
    jitted = fg.jit(product)(lhs_mat.data, rhs_mat.data)
    np.testing.assert_allclose(jitted, out.todense(), rtol=1e-12, atol=1e-12)


def test_sparse_matmul_counts_duplicates_and_ignores_padding():
    # Duplicated indices add up and padding (index = shape) is no element.
    lhs = BCOO(
        (np.array([1.0, 2.0, 5.0]), np.array([[0, 1], [0, 1], [2, 3]], np.int32)), shape=(2, 3)
    )
    rhs = BCOO((np.array([3.0, 7.0]), np.array([[1, 0], [3, 0]], np.int32)), shape=(3, 1))
    np.testing.assert_array_equal((lhs @ rhs).todense(), [[9.0], [0.0]])


def test_spdot_general_with_an_operand_storing_nothing():
    # An operand with every sparse dimension contracted and nse=0 contributes nothing.
    empty = sparse.empty((3,), nse=0)
    other = BCOO.fromdense(np.arange(6.0).reshape(3, 2))
    for lhs, rhs, dimension_numbers in [
        (empty, other, (((0,), (0,)), ((), ()))),
        (other, empty, (((0,), (0,)), ((), ()))),
    ]:
        out = sparse.bcoo_dot_general(lhs, rhs, dimension_numbers=dimension_numbers)
        np.testing.assert_array_equal(out.todense(), np.zeros(2))


@settings(deadline=None, max_examples=20)
@given(layouts(max_dims=3), st.integers(0, 3), st.integers(0, 3))
def test_multiply_sparse_matches_numpy(layout, rhs_n_batch, rhs_n_dense):
    shape, n_batch, n_dense, seed = layout
    rhs_n_batch = min(rhs_n_batch, len(shape))
    rhs_n_dense = min(rhs_n_dense, len(shape) - rhs_n_batch)
    rng = np.random.default_rng(seed)
    lhs, rhs = sparse_array(rng, shape), sparse_array(rng, shape, density=0.6)
    lhs_mat = BCOO.fromdense(lhs, n_batch=n_batch, n_dense=n_dense)
    rhs_mat = BCOO.fromdense(rhs, n_batch=rhs_n_batch, n_dense=rhs_n_dense)
    out = lhs_mat * rhs_mat
    assert isinstance(out, BCOO)
    assert (out.n_batch, out.n_dense) == (min(n_batch, rhs_n_batch), min(n_dense, rhs_n_dense))
    np.testing.assert_allclose(out.todense(), lhs * rhs, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        sparse.bcoo_multiply_sparse(rhs_mat, lhs_mat).todense(), lhs * rhs, rtol=1e-12
    )


def test_multiply_sparse_grad_and_jit():
    rng = np.random.default_rng(20)
    lhs_mat = BCOO.fromdense(sparse_array(rng, (3, 4), density=0.7))
    rhs_mat = BCOO.fromdense(sparse_array(rng, (3, 4), density=0.7))

    def product(lhs_data, rhs_data):
        a = BCOO((lhs_data, lhs_mat.indices), shape=lhs_mat.shape)
        b = BCOO((rhs_data, rhs_mat.indices), shape=rhs_mat.shape)
        return (a * b).todense()

    check_grads(product, (lhs_mat.data, rhs_mat.data), order=1)
    np.testing.assert_allclose(
        fg.jit(product)(lhs_mat.data, rhs_mat.data),
        product(lhs_mat.data, rhs_mat.data),
        rtol=1e-12,
    )


# ---- structure: layout, concatenation, slices, broadcasting, indexing


@settings(deadline=None, max_examples=25)
@given(layouts(max_dims=3), st.data())
def test_update_layout_keeps_the_array(layout, data):
    shape, n_batch, n_dense, seed = layout
    dense = sparse_array(np.random.default_rng(seed), shape)
    mat = BCOO.fromdense(dense, n_batch=n_batch, n_dense=n_dense)
    new_n_batch = data.draw(st.integers(0, len(shape)))
    new_n_dense = data.draw(st.integers(0, len(shape) - new_n_batch))
    out = sparse.bcoo_update_layout(
        mat, n_batch=new_n_batch, n_dense=new_n_dense, on_inefficient=None
    )
    assert (out.n_batch, out.n_dense, out.shape) == (new_n_batch, new_n_dense, shape)
    np.testing.assert_array_equal(out.todense(), dense)


@settings(deadline=None, max_examples=25)
@given(layouts(min_dims=1, max_dims=3, min_side=1), st.data())
def test_concatenate_matches_numpy(layout, data):
    shape, n_batch, n_dense, seed = layout
    rng = np.random.default_rng(seed)
    dimension = data.draw(st.integers(0, len(shape) - 1))
    other_shape = shape[:dimension] + (data.draw(st.integers(0, 3)),) + shape[dimension + 1 :]
    first, second = sparse_array(rng, shape), sparse_array(rng, other_shape)
    other_n_batch = data.draw(st.integers(0, n_batch))
    operands = [
        BCOO.fromdense(first, n_batch=n_batch, n_dense=n_dense),
        BCOO.fromdense(second, n_batch=other_n_batch, n_dense=n_dense),
    ]
    out = sparse.bcoo_concatenate(operands, dimension=dimension)
    np.testing.assert_array_equal(out.todense(), np.concatenate([first, second], dimension))


@settings(deadline=None, max_examples=25)
@given(layouts(min_dims=1, max_dims=3, min_side=1), st.data())
def test_slice_and_dynamic_slice_match_numpy(layout, data):
    shape, n_batch, n_dense, seed = layout
    dense = sparse_array(np.random.default_rng(seed), shape)
    mat = BCOO.fromdense(dense, n_batch=n_batch, n_dense=n_dense)
    start = [data.draw(st.integers(0, s)) for s in shape]
    limit = [data.draw(st.integers(lo, s)) for lo, s in zip(start, shape)]
    strides = [data.draw(st.integers(1, 3)) for _ in shape]
    out = sparse.bcoo_slice(mat, start_indices=start, limit_indices=limit, strides=strides)
    want = dense[tuple(slice(*w) for w in zip(start, limit, strides))]
    np.testing.assert_array_equal(out.todense(), want)
    sizes = [hi - lo for lo, hi in zip(start, limit)]
    # As lax.dynamic_slice's: negative starts count from the end, then starts clamp.
    offsets = [data.draw(st.integers(-s - 1, s + 1)) for s in shape]
    clamped = [min(max(o + s if o < 0 else o, 0), s - w) for o, s, w in zip(offsets, shape, sizes)]
    want = dense[tuple(slice(c, c + w) for c, w in zip(clamped, sizes))]
    np.testing.assert_array_equal(fg.lax.dynamic_slice(dense, offsets, sizes), want)
    dynamic = fg.jit(lambda m, o: sparse.bcoo_dynamic_slice(m, list(o), sizes).todense())
    np.testing.assert_array_equal(dynamic(mat, np.array(offsets)), want)
    eager = sparse.bcoo_dynamic_slice(mat, offsets, sizes).todense()
    np.testing.assert_array_equal(eager, want)


def test_dynamic_slice_counts_negative_starts_from_the_end():
    # Start -1 of a window of 3 in 4 is 3, clamped to 1: the dense array's window, not [0, 3).
    mat = BCOO.fromdense(np.array([4.0, 3.0, 0.0, 5.0]))
    want = [3.0, 0.0, 5.0]
    np.testing.assert_array_equal(sparse.bcoo_dynamic_slice(mat, [-1], [3]).todense(), want)
    jitted = fg.jit(lambda m, s: sparse.bcoo_dynamic_slice(m, [s], [3]).todense())
    np.testing.assert_array_equal(jitted(mat, -1), want)

    def first(data):
        window = sparse.bcoo_dynamic_slice(BCOO((data, mat.indices), shape=(4,)), [-1], [3])
        return window.todense()[0]

    grad = fg.grad(first)
    np.testing.assert_array_equal(grad(mat.data), [0.0, 1.0, 0.0])


def test_getitem_on_any_dimension_matches_numpy():
    dense = sparse_array(np.random.default_rng(21), (3, 5, 4))
    items = [
        1,
        -1,
        (slice(0, 2), 2),
        (Ellipsis, 1),
        (-1, slice(1, 5, 2), slice(None, None, 3)),
        (slice(1, 3), 4, 1),
        (0, 0, 0),
        # read through sparsify's rules: integer arrays, new axes and negative steps
        np.array([2, 0, 2]),
        (slice(None), np.array([[4, 0], [1, 1]])),
        (np.array([0, 2]), slice(None), np.array([3, -1])),
        (None, 1, slice(None, None, -2)),
        (Ellipsis, None),
    ]
    for n_batch, n_dense in [(0, 0), (1, 0), (0, 1), (1, 1), (2, 1), (0, 2)]:
        mat = BCOO.fromdense(dense, n_batch=n_batch, n_dense=n_dense)
        for item in items:
            np.testing.assert_array_equal(mat[item].todense(), dense[item])
        traced = fg.jit(lambda m, i: m[1, i].todense())
        for i in (2, -1):
            np.testing.assert_array_equal(traced(mat, i), dense[1, i])
        rows = fg.jit(lambda m, i: m[i].todense())(mat, np.array([2, 1]))
        np.testing.assert_array_equal(rows, dense[[2, 1]])
    compressed = sparse.BCSR.fromdense(dense[0])
    np.testing.assert_array_equal(compressed[np.array([4, 1])].todense(), dense[0][[4, 1]])
    np.testing.assert_array_equal(compressed[1:3].todense(), dense[0][1:3])


def test_squeeze_and_broadcast_in_dim_match_numpy():
    dense = sparse_array(np.random.default_rng(22), (2, 1, 3, 1), density=0.7)
    for n_batch, n_dense in [(0, 0), (1, 0), (2, 0), (1, 1), (0, 2)]:
        mat = BCOO.fromdense(dense, n_batch=n_batch, n_dense=n_dense)
        out = sparse.bcoo_squeeze(mat, dimensions=(1, -1))
        np.testing.assert_array_equal(out.todense(), dense[:, 0, :, 0])
        # A new leading batch dimension; batch and dense dimensions of size 1 grow.
        shape = (4, 2, 1, 3, 5) if n_dense else (4, 2, 1, 3, 1)
        grown = sparse.bcoo_broadcast_in_dim(mat, shape=shape, broadcast_dimensions=(1, 2, 3, 4))
        np.testing.assert_array_equal(grown.todense(), np.broadcast_to(dense, shape))
    vector = dense[0, 0, :, 0]
    out = sparse.bcoo_broadcast_in_dim(
        BCOO.fromdense(vector), shape=(3, 1), broadcast_dimensions=(0,)
    )
    assert (out.n_batch, out.n_sparse) == (0, 2)  # the new trailing dimension is sparse
    np.testing.assert_array_equal(out.todense(), vector[:, None])


def test_grad_through_structure_operations():
    rng = np.random.default_rng(23)
    mat = BCOO.fromdense(sparse_array(rng, (3, 4, 2), density=0.7), n_batch=1)
    other = BCOO.fromdense(sparse_array(rng, (3, 2, 2), density=0.7), n_batch=1)

    def f(data, other_data):
        a = BCOO((data, mat.indices), shape=mat.shape)
        b = BCOO((other_data, other.indices), shape=other.shape)
        joined = sparse.bcoo_concatenate([a, b], dimension=1)
        window = sparse.bcoo_slice(joined, start_indices=(0, 1, 0), limit_indices=(3, 6, 2))
        relaid = sparse.bcoo_update_layout(window, n_batch=0, n_dense=1, on_inefficient=None)
        return relaid[1:, ::2].todense() * 2.0

    check_grads(f, (mat.data, other.data), order=1)
    np.testing.assert_array_equal(fg.jit(f)(mat.data, other.data), f(mat.data, other.data))


# ---- BCSR


def test_bcsr_fromdense_matches_scipy_csr():
    dense = sparse_array(np.random.default_rng(30), (4, 6))
    mat = sparse.BCSR.fromdense(dense)
    reference = scipy.sparse.csr_matrix(dense)
    np.testing.assert_array_equal(mat.indptr, reference.indptr)
    np.testing.assert_array_equal(mat.indices, reference.indices)
    np.testing.assert_array_equal(mat.data, reference.data)
    np.testing.assert_array_equal(mat.todense(), dense)
    np.testing.assert_array_equal(sparse.todense(mat), dense)
    padded = sparse.bcsr_fromdense(dense, nse=mat.nse + 3)
    np.testing.assert_array_equal(padded.indptr, reference.indptr)
    np.testing.assert_array_equal(sparse.bcsr_todense(padded), dense)


def test_bcsr_batches_dense_blocks_and_bcoo_round_trip():
    dense = sparse_array(np.random.default_rng(31), (2, 3, 4, 2))
    mat = sparse.BCSR.fromdense(dense, n_batch=1, n_dense=1)
    assert (mat.shape, mat.n_batch, mat.n_dense) == (dense.shape, 1, 1)
    np.testing.assert_array_equal(mat.todense(), dense)
    for b in range(2):
        reference = scipy.sparse.csr_matrix(np.any(dense[b] != 0, axis=-1))
        np.testing.assert_array_equal(mat.indptr[b], reference.indptr)
    # From a BCOO array with unsorted, duplicated and out-of-range elements.
    coo = BCOO(
        (np.array([1.0, 2.0, 3.0, 4.0]), np.array([[2, 1], [0, 3], [2, 1], [1, 9]], np.int32)),
        shape=(3, 4),
    )
    csr = sparse.BCSR.from_bcoo(coo)
    np.testing.assert_array_equal(csr.todense(), coo.todense())
    np.testing.assert_array_equal(csr.to_bcoo().todense(), coo.todense())


def test_bcsr_products_grad_and_jit():
    rng = np.random.default_rng(32)
    dense = sparse_array(rng, (3, 4))
    mat = sparse.BCSR.fromdense(dense)
    x, y = rng.normal(size=(4, 2)), rng.normal(size=3)
    np.testing.assert_allclose(mat @ x, dense @ x, rtol=1e-12)
    np.testing.assert_allclose(y @ mat, y @ dense, rtol=1e-12)
    dimension_numbers = (((0,), (0,)), ((), ()))
    out = sparse.bcsr_dot_general(mat, y, dimension_numbers=dimension_numbers)
    np.testing.assert_allclose(out, y @ dense, rtol=1e-12)

    def f(data, x):
        return (sparse.BCSR((data, mat.indices, mat.indptr), shape=mat.shape) @ x) ** 2

    check_grads(f, (mat.data, x), order=1)
    np.testing.assert_allclose(fg.jit(f)(mat.data, x), f(mat.data, x), rtol=1e-12)
    # A pytree: through jit whole, with nse fixed for tracing.
    fromdense = fg.jit(lambda d: sparse.BCSR.fromdense(d, nse=mat.nse))
    np.testing.assert_array_equal(fromdense(dense).indptr, mat.indptr)
    with pytest.raises(ValueError, match="exactly two sparse dimensions"):
        sparse.BCSR.fromdense(np.ones(3))


def test_sort_indices_with_dense_dimensions():
    # The bounds that send out-of-range elements last are the sparse shape alone.
    dense = sparse_array(np.random.default_rng(33), (3, 4, 2), density=0.6)
    mat = BCOO.fromdense(dense, n_dense=1)
    shuffled = BCOO((mat.data[::-1], mat.indices[::-1]), shape=mat.shape)
    ordered = shuffled.sort_indices()
    np.testing.assert_array_equal(ordered.indices, mat.indices)
    np.testing.assert_array_equal(ordered.todense(), dense)


def test_sparsify_covers_sparse_products_and_structure_and_traces_once():
    rng = np.random.default_rng(40)
    a, b = sparse_array(rng, (3, 4)), sparse_array(rng, (3, 4))
    traces = []

    def f(a, b):
        traces.append(None)
        return (
            a * b,
            a @ b.T,
            fnp.concatenate([a, b], axis=1),
            a[1:, ::2],
            a[2],
            fnp.broadcast_to(b[1], (2, 4)),  # a new leading (batch) dimension
        )

    expected = f(fnp.asarray(a), fnp.asarray(b))
    sparsified = sparse.sparsify(f)
    for _ in range(2):
        results = sparsified(BCOO.fromdense(a), BCOO.fromdense(b))
        assert all(isinstance(r, BCOO) for r in results)
        for result, want in zip(results, expected):
            np.testing.assert_allclose(result.todense(), want, rtol=1e-12, atol=1e-12)
    assert len(traces) == 2  # the dense call, then one staging for both sparse calls
    sparsified(BCOO.fromdense(a, nse=12), BCOO.fromdense(b))  # a new nse: same program
    assert len(traces) == 2
    sparsified(BCOO.fromdense(a[:2]), BCOO.fromdense(b[:2]))  # a new shape: staged again
    assert len(traces) == 3
    with pytest.raises(NotImplementedError, match="concatenating sparse and dense"):
        sparse.sparsify(lambda a, x: fnp.concatenate([a, x]))(BCOO.fromdense(a), a)


# ---- vmap of the sparse products and structure operations, against a loop over the lanes


def bcoo_lane(mat, i):
    """Lane `i` of a BCOO array batched along its first dimension, built from its leaves."""
    return BCOO((mat.data[i], mat.indices[i]), shape=mat.shape[1:])


def assert_vmap_matches_loop(f, args, in_axes):
    """vmap of `f` over the leading dimension of the arguments whose axis is 0, against `f`
    applied to each lane; both sides compared in dense form."""
    size = next(a.shape[0] for a, axis in zip(args, in_axes) if axis == 0)

    def lane(a, axis, i):
        if axis is None:
            return a
        return bcoo_lane(a, i) if isinstance(a, BCOO) else a[i]

    def dense(out):
        return np.asarray(out.todense() if isinstance(out, BCOO) else out)

    batched = dense(fg.vmap(f, in_axes=in_axes)(*args))
    lanes = [dense(f(*(lane(a, ax, i) for a, ax in zip(args, in_axes)))) for i in range(size)]
    np.testing.assert_allclose(batched, np.stack(lanes), rtol=1e-12, atol=1e-12)


def stacked_bcoo(rng, shape, n_batch=0, n_dense=0, density=0.5, lanes=3):
    """A BCOO array of `lanes` stacked arrays of `shape` (one more batch dimension)."""
    dense = sparse_array(rng, (lanes, *shape), density)
    return BCOO.fromdense(dense, n_batch=n_batch + 1, n_dense=n_dense)


@pytest.mark.parametrize("case", range(len(SPDOT_CASES)))
def test_vmap_of_spdot_general_matches_a_loop(case):
    lhs_shape, lhs_n_batch, rhs_shape, rhs_n_batch, dimension_numbers = SPDOT_CASES[case]
    rng = np.random.default_rng(40 + case)
    lhs = stacked_bcoo(rng, lhs_shape, n_batch=lhs_n_batch)
    rhs = stacked_bcoo(rng, rhs_shape, n_batch=rhs_n_batch)

    def product(a, b):
        return sparse.bcoo_spdot_general(a, b, dimension_numbers=dimension_numbers)

    assert_vmap_matches_loop(product, (lhs, rhs), (0, 0))
    assert_vmap_matches_loop(product, (lhs, bcoo_lane(rhs, 1)), (0, None))
    assert_vmap_matches_loop(product, (bcoo_lane(lhs, 2), rhs), (None, 0))


@pytest.mark.parametrize(
    "lhs_layout, rhs_layout", [((0, 0), (0, 0)), ((1, 0), (0, 1)), ((0, 1), (1, 1))]
)
def test_vmap_of_multiply_sparse_matches_a_loop(lhs_layout, rhs_layout):
    rng = np.random.default_rng(50)
    lhs = stacked_bcoo(rng, (3, 4), *lhs_layout)
    rhs = stacked_bcoo(rng, (3, 4), *rhs_layout, density=0.7)
    assert_vmap_matches_loop(sparse.bcoo_multiply_sparse, (lhs, rhs), (0, 0))
    assert_vmap_matches_loop(sparse.bcoo_multiply_sparse, (lhs, bcoo_lane(rhs, 0)), (0, None))


@pytest.mark.parametrize("n_batch, n_dense", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_vmap_of_structure_operations_matches_a_loop(n_batch, n_dense):
    rng = np.random.default_rng(51)
    mat = stacked_bcoo(rng, (3, 4, 2), n_batch, n_dense)
    other = stacked_bcoo(rng, (3, 2, 2), n_batch, n_dense)
    assert_vmap_matches_loop(
        lambda a, b: sparse.bcoo_concatenate([a, b], dimension=1), (mat, other), (0, 0)
    )
    assert_vmap_matches_loop(
        lambda a, b: sparse.bcoo_concatenate([a, b], dimension=1),
        (mat, bcoo_lane(other, 1)),
        (0, None),
    )
    assert_vmap_matches_loop(
        lambda a: sparse.bcoo_slice(
            a, start_indices=(1, 0, 0), limit_indices=(3, 4, 2), strides=(1, 2, 1)
        ),
        (mat,),
        (0,),
    )
    # A start per lane, traced, with one past the end (it clamps).
    starts = np.array([[0, 1, 0], [2, 3, 1], [1, 0, 0]])
    assert_vmap_matches_loop(
        lambda a, s: sparse.bcoo_dynamic_slice(a, s, (2, 2, 1)), (mat, starts), (0, 0)
    )
    assert_vmap_matches_loop(
        lambda a, s: sparse.bcoo_dynamic_slice(a, s, (2, 2, 1)),
        (bcoo_lane(mat, 0), starts),
        (None, 0),
    )
    for new_n_batch, new_n_dense in [(0, 0), (1, 0), (0, 1), (2, 1)]:
        assert_vmap_matches_loop(
            lambda a, b=new_n_batch, d=new_n_dense: sparse.bcoo_update_layout(
                a, n_batch=b, n_dense=d, on_inefficient=None
            ),
            (mat,),
            (0,),
        )
    column = stacked_bcoo(rng, (3, 1, 2), n_batch, n_dense)
    assert_vmap_matches_loop(lambda a: sparse.bcoo_squeeze(a, dimensions=(1,)), (column,), (0,))
    assert_vmap_matches_loop(
        lambda a: sparse.bcoo_broadcast_in_dim(
            a, shape=(2, 3, 1, 2), broadcast_dimensions=(1, 2, 3)
        ),
        (column,),
        (0,),
    )


@pytest.mark.parametrize("n_batch, n_dense", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_vmap_of_getitem_with_a_traced_integer_matches_a_loop(n_batch, n_dense):
    rng = np.random.default_rng(52)
    mat = stacked_bcoo(rng, (3, 5, 2), n_batch, n_dense)
    positions = np.array([0, 4, -1])
    assert_vmap_matches_loop(lambda a, i: a[1, i], (mat, positions), (0, 0))
    assert_vmap_matches_loop(lambda a, i: a[i], (bcoo_lane(mat, 1), positions % 3), (None, 0))
    assert_vmap_matches_loop(lambda a, i: a[:, i], (mat, positions), (0, 0))


def test_vmap_of_bcsr_matmul_matches_a_loop():
    rng = np.random.default_rng(53)
    dense = sparse_array(rng, (3, 4, 5))
    x = rng.normal(size=(3, 5, 2))
    single = sparse.BCSR.fromdense(dense[0])
    batched = fg.vmap(lambda v: single @ v)(x)
    np.testing.assert_allclose(batched, np.stack([single @ v for v in x]), rtol=1e-12)
    np.testing.assert_allclose(batched, dense[0] @ x, rtol=1e-12)
    stack = sparse.BCSR.fromdense(dense, n_batch=1)
    batched = fg.vmap(lambda m, v: m @ v)(stack, x)
    lanes = [
        sparse.BCSR((stack.data[i], stack.indices[i], stack.indptr[i]), shape=dense.shape[1:])
        @ x[i]
        for i in range(3)
    ]
    np.testing.assert_allclose(batched, np.stack(lanes), rtol=1e-12)
    np.testing.assert_allclose(batched, dense @ x, rtol=1e-12)


def test_vmap_over_a_dimension_that_is_not_a_batch_dimension_raises():
    # The treedef holds only the non-batch shape; mapping the nse axis (or stacking lanes
    # after the batch dimensions) used to give leaves of another array, silently.
    dense = sparse_array(np.random.default_rng(54), (2, 3, 4))
    batched = BCOO.fromdense(dense, n_batch=1, nse=12)
    with pytest.raises(ValueError, match="only along its batch dimensions"):
        fg.vmap(lambda a: a.todense(), in_axes=1)(batched)
    with pytest.raises(ValueError, match="only along its batch dimensions"):
        fg.vmap(lambda a: a.todense())(BCOO.fromdense(dense))
    with pytest.raises(ValueError, match="only along its batch dimensions"):
        fg.vmap(lambda a: a, out_axes=1)(batched)
    with pytest.raises(ValueError, match="only along its batch dimensions"):
        # (nse = rows + 1, so that vmap finds the mapped axes of one size)
        fg.vmap(lambda a: a.todense(), in_axes=1)(sparse.BCSR.fromdense(dense, n_batch=1, nse=4))
    # Batch dimensions map and stack anywhere among the batch dimensions.
    twice = BCOO.fromdense(dense, n_batch=2)
    lanes = fg.vmap(lambda a: a.todense(), in_axes=1)(twice)
    np.testing.assert_array_equal(lanes, np.swapaxes(dense, 0, 1))
    restacked = fg.vmap(lambda a: a, out_axes=1)(twice)
    np.testing.assert_array_equal(restacked.todense(), np.swapaxes(dense, 0, 1))


def test_index_dtypes_too_narrow_for_the_shape_raise():
    # int8 indices cannot hold positions 128..199 nor the padding index 200; eye used to wrap
    # them around silently (its trace came out 128).
    np.testing.assert_array_equal(sparse.eye(127, index_dtype=np.int8).todense(), np.eye(127))
    narrow = "int8 indices cannot hold the positions of a sparse dimension of size 200"
    for make in [
        lambda: sparse.eye(200, index_dtype=np.int8),
        lambda: sparse.eye(200, index_dtype=np.int8, n_batch=1),
        lambda: sparse.empty((200,), index_dtype=np.int8),
        lambda: BCOO.fromdense(np.ones(200), index_dtype=np.int8),
        lambda: BCOO((np.ones(1), np.zeros((1, 1), np.int8)), shape=(200,)),
        lambda: BCOO.fromdense(np.ones((10, 20)), index_dtype=np.int8).reshape(200),
        lambda: sparse.bcoo_concatenate(
            [BCOO.fromdense(np.ones(100), index_dtype=np.int8)] * 2, dimension=0
        ),
    ]:
        with pytest.raises(ValueError, match=narrow):
            make()


def test_astype_to_integers_and_bool_sums_duplicates_first():
    # Truncation and bool conversion do not distribute over the sum of duplicated elements:
    # the dense form holds 1.2 and 0.0, so int gives [1, 0, 0] and bool [True, False, False].
    data, indices = np.array([0.6, 0.6, 0.5, -0.5]), np.array([[0], [0], [2], [2]], np.int32)
    mat = BCOO((data, indices), shape=(3,))
    dense = np.asarray(mat.todense())
    for dtype in [np.int32, np.uint8, bool]:
        want = dense.astype(dtype)
        np.testing.assert_array_equal(mat.astype(dtype).todense(), want)
        np.testing.assert_array_equal(fg.jit(lambda m, t=dtype: m.astype(t).todense())(mat), want)
        sparsified = sparse.sparsify(lambda m, t=dtype: m.astype(t))(mat)
        np.testing.assert_array_equal(sparsified.todense(), want)
    # Conversions that distribute keep the stored elements as they are.
    assert mat.astype(np.float32).nse == 4
    np.testing.assert_array_equal(mat.astype(np.complex64).todense(), dense.astype(np.complex64))


# ---- arrays with duplicated, unsorted, padding and out-of-range indices


def dense_of_stored(data, indices, shape):
    """The dense form by a loop over the stored elements: each one inside the array adds its
    data at its batch position and index; the others (padding, negative, too large) add
    nothing."""
    n_batch = indices.ndim - 2
    sparse_shape = shape[n_batch : n_batch + indices.shape[-1]]
    out = np.zeros(shape, data.dtype)
    for position in np.ndindex(*indices.shape[:-1]):
        index = indices[position]
        if all(0 <= i < size for i, size in zip(index, sparse_shape)):
            out[position[:-1] + tuple(index)] += data[position]
    return out


@st.composite
def messy_bcoo(draw):
    """A BCOO array whose indices are drawn freely: unsorted, repeated, padding (the size),
    negative or past the size; with its dense form from the loop above."""
    shape, n_batch, n_dense, seed = draw(layouts(min_dims=1, max_dims=4))
    rng = np.random.default_rng(seed)
    nse = draw(st.integers(0, 5))
    n_sparse = len(shape) - n_batch - n_dense
    sparse_shape = np.array(shape[n_batch : n_batch + n_sparse], np.int32)
    lead = (*shape[:n_batch], nse)
    inside = rng.integers(0, np.maximum(sparse_shape, 1), size=(*lead, n_sparse))
    outside = rng.choice([-1, 0, 1], size=(*lead, n_sparse)) + sparse_shape
    indices = np.where(rng.random(lead + (1,)) < 0.7, inside, outside).astype(np.int32)
    data = rng.normal(size=(*lead, *shape[n_batch + n_sparse :]))
    return BCOO((data, indices), shape=shape), dense_of_stored(data, indices, shape), rng


@settings(deadline=None)
@given(messy_bcoo())
def test_operations_on_messy_indices_match_numpy(case):
    mat, dense, rng = case
    np.testing.assert_allclose(mat.todense(), dense, atol=1e-12)
    merged = sparse.bcoo_sum_duplicates(mat, nse=mat.nse)
    np.testing.assert_allclose(merged.todense(), dense, atol=1e-12)
    np.testing.assert_allclose(mat.sort_indices().todense(), dense, atol=1e-12)
    axes = tuple(d for d in range(mat.ndim) if rng.random() < 0.5)
    summed = sparse.bcoo_reduce_sum(mat, axes=axes).todense()
    np.testing.assert_allclose(summed, dense.sum(axes), atol=1e-12)
    # Every reshape that keeps the batch size leading and the dense dimensions trailing.
    n_positional = mat.n_batch + mat.n_sparse
    sparse_size = math.prod(mat.shape[mat.n_batch : n_positional])
    new_shape = (math.prod(mat.shape[: mat.n_batch]), sparse_size, *mat.shape[n_positional:])
    shapes = [new_shape, new_shape[:1] + (1,) + new_shape[1:]]
    if new_shape[0] == 1:  # a batch of one may vanish
        shapes.append(new_shape[1:])
    for shape in shapes:
        np.testing.assert_allclose(mat.reshape(shape).todense(), dense.reshape(shape))
    sizes = [int(rng.integers(0, s + 1)) for s in mat.shape]
    starts = [int(rng.integers(-s - 1, s + 2)) for s in mat.shape]
    window = np.asarray(fg.lax.dynamic_slice(dense, starts, sizes))
    np.testing.assert_allclose(sparse.bcoo_dynamic_slice(mat, starts, sizes).todense(), window)
    other = rng.normal(size=mat.shape[-1:])
    product = sparse.bcoo_dot_general(
        mat, other, dimension_numbers=(((mat.ndim - 1,), (0,)), ((), ()))
    )
    np.testing.assert_allclose(product, dense @ other, atol=1e-12)


def test_bcsr_counts_more_stored_elements_than_its_index_dtype_holds():
    # 400 elements of a 20 x 20 matrix with int8 columns: indptr and the slots it bounds
    # run past 127 and used to wrap around (rows 7 on came out wrong).
    dense = np.arange(1.0, 401.0).reshape(20, 20)
    for index_dtype in [np.int8, np.uint8]:
        mat = sparse.bcsr_fromdense(dense, index_dtype=index_dtype)
        assert mat.indices.dtype == index_dtype
        np.testing.assert_array_equal(mat.todense(), dense)
    assert sparse.bcsr_fromdense(np.eye(3), index_dtype=np.int8).indptr.dtype == np.int8
    # Slots past indptr's last entry are padding, however many there are.
    data, columns = np.ones(200), np.zeros(200, np.int8)
    mat = sparse.BCSR((data, columns, np.array([0, 2], np.int8)), shape=(1, 3))
    np.testing.assert_array_equal(mat.todense(), [[2.0, 0.0, 0.0]])


# ---- products of two sparse arrays with dense dimensions


@st.composite
def sparse_dot_general_cases(draw):
    """Two BCOO layouts (any batch and dense dimensions) and dimension numbers pairing them."""
    shape, n_batch, n_dense, seed, rhs_shape, dimension_numbers = draw(dot_general_cases())
    rhs_n_batch = draw(st.integers(0, len(rhs_shape)))
    rhs_n_dense = draw(st.integers(0, len(rhs_shape) - rhs_n_batch))
    return shape, (n_batch, n_dense), rhs_shape, (rhs_n_batch, rhs_n_dense), dimension_numbers, seed


@settings(deadline=None, max_examples=40)
@given(sparse_dot_general_cases())
def test_spdot_general_with_any_layouts_matches_dense_product(case):
    lhs_shape, lhs_layout, rhs_shape, rhs_layout, dimension_numbers, seed = case
    rng = np.random.default_rng(seed)
    lhs, rhs = sparse_array(rng, lhs_shape), sparse_array(rng, rhs_shape)
    lhs_mat = BCOO.fromdense(lhs, n_batch=lhs_layout[0], n_dense=lhs_layout[1])
    rhs_mat = BCOO.fromdense(rhs, n_batch=rhs_layout[0], n_dense=rhs_layout[1])
    try:
        out = sparse.bcoo_dot_general(lhs_mat, rhs_mat, dimension_numbers=dimension_numbers)
    except NotImplementedError as error:
        # The one refusal: a batch pair that is not batch with batch nor dense with dense.
        assert "batch dimensions must pair batch with batch" in str(error)
        assert dimension_numbers[1][0]
        return
    assert isinstance(out, BCOO)
    want = einsum_dot_general(lhs, rhs, dimension_numbers)
    assert out.shape == want.shape
    np.testing.assert_allclose(out.todense(), want, rtol=1e-12, atol=1e-12)


SPDOT_DENSE_CASES = [
    # (lhs shape, lhs (n_batch, n_dense), rhs shape, rhs (n_batch, n_dense), dimension_numbers)
    ((3, 4), (0, 1), (4, 5), (0, 0), (((1,), (0,)), ((), ()))),  # dense with sparse
    ((3, 4), (0, 0), (4, 5), (0, 1), (((1,), (0,)), ((), ()))),  # a dense result dimension
    ((3, 4, 2), (0, 1), (4, 2), (0, 1), (((1, 2), (0, 1)), ((), ()))),  # dense with dense
    ((2, 3, 4), (0, 1), (5, 4), (0, 1), (((2,), (1,)), ((), ()))),
    ((2, 3, 4), (0, 1), (3, 4), (0, 0), (((1,), (0,)), ((), ()))),  # lhs free dense
    ((3, 4, 2), (0, 1), (5, 2), (0, 1), (((), ()), ((2,), (1,)))),  # dense batch pair
    ((2, 3, 4), (1, 0), (2, 4, 5), (0, 0), (((0,), (0,)), ((), ()))),  # batch contracted
    ((3, 4), (1, 0), (2, 5), (1, 0), (((), ()), ((), ()))),  # unpaired batch on both
    ((2, 3, 4), (1, 1), (2, 4, 5), (1, 1), (((2,), (1,)), ((0,), (0,)))),
]


@pytest.mark.parametrize("case", range(len(SPDOT_DENSE_CASES)))
def test_spdot_general_with_dense_dimensions(case):
    lhs_shape, lhs_layout, rhs_shape, rhs_layout, dimension_numbers = SPDOT_DENSE_CASES[case]
    rng = np.random.default_rng(60 + case)
    lhs, rhs = sparse_array(rng, lhs_shape), sparse_array(rng, rhs_shape)
    lhs_mat = BCOO.fromdense(lhs, n_batch=lhs_layout[0], n_dense=lhs_layout[1])
    rhs_mat = BCOO.fromdense(rhs, n_batch=rhs_layout[0], n_dense=rhs_layout[1])
    out = sparse.bcoo_dot_general(lhs_mat, rhs_mat, dimension_numbers=dimension_numbers)
    want = einsum_dot_general(lhs, rhs, dimension_numbers)
    np.testing.assert_allclose(out.todense(), want, rtol=1e-12, atol=1e-12)

    def product(lhs_data, rhs_data):
        a = BCOO((lhs_data, lhs_mat.indices), shape=lhs_shape)
        b = BCOO((rhs_data, rhs_mat.indices), shape=rhs_shape)
        return sparse.bcoo_dot_general(a, b, dimension_numbers=dimension_numbers).todense()

    check_grads(product, (lhs_mat.data, rhs_mat.data), order=1)
    jitted = fg.jit(product)(lhs_mat.data, rhs_mat.data)
    np.testing.assert_allclose(jitted, want, rtol=1e-12, atol=1e-12)


def test_spdot_general_keeps_a_free_dense_dimension_dense():
    # A sparse matrix times one with dense columns: the result's columns stay dense, and it
    # stores one element per stored row of the left operand, not one per product entry.
    lhs = BCOO.fromdense(np.diag([1.0, 2.0, 0.0]))
    rhs = BCOO.fromdense(np.arange(12.0).reshape(3, 4), n_dense=1)
    out = lhs @ rhs
    assert (out.n_dense, out.nse) == (1, 2)
    np.testing.assert_allclose(
        out.todense(), np.diag([1.0, 2.0, 0.0]) @ np.arange(12.0).reshape(3, 4)
    )


@pytest.mark.parametrize("case", [0, 2, 5, 8])
def test_vmap_of_spdot_general_with_dense_dimensions_matches_a_loop(case):
    lhs_shape, lhs_layout, rhs_shape, rhs_layout, dimension_numbers = SPDOT_DENSE_CASES[case]
    rng = np.random.default_rng(70 + case)
    lhs = stacked_bcoo(rng, lhs_shape, *lhs_layout)
    rhs = stacked_bcoo(rng, rhs_shape, *rhs_layout)

    def product(a, b):
        return sparse.bcoo_spdot_general(a, b, dimension_numbers=dimension_numbers)

    assert_vmap_matches_loop(product, (lhs, rhs), (0, 0))
    assert_vmap_matches_loop(product, (lhs, bcoo_lane(rhs, 1)), (0, None))


# ---- checks on the arrays a user builds


def test_bcsr_rejects_row_pointers_that_do_not_describe_rows():
    data, columns = np.array([1.0, 2.0, 3.0]), np.array([0, 2, 1])
    assert sparse.BCSR((data, columns, np.array([0, 2, 3])), shape=(2, 3)).nse == 3
    for indptr in ([0, 3, 2], [1, 2, 3], [-1, 2, 3], [0, 2, 4]):
        # These used to give some other array silently: rows overlapping, or slots before
        # the first row given to it.
        with pytest.raises(ValueError, match="must start at 0, never decrease and end at most"):
            sparse.BCSR((data, columns, np.array(indptr)), shape=(2, 3))
    with pytest.raises(ValueError, match=r"\(batch \(1,\)\)"):
        sparse.BCSR(
            (np.ones((2, 2)), np.zeros((2, 2), np.int32), np.array([[0, 1, 2], [0, 2, 1]])),
            shape=(2, 2, 3),
        )
    with pytest.raises(ValueError, match=r"indptr must have shape \(\*batch, rows \+ 1\)"):
        sparse.BCSR((data, columns, np.array([0, 3])), shape=(2, 3))
    with pytest.raises(TypeError, match=r"the tuple \(data, indices, indptr\)"):
        sparse.BCSR((data, columns), shape=(2, 3))
    with pytest.raises(ValueError, match="negative size"):
        sparse.BCSR((data, columns, np.array([0, 2, 3])), shape=(2, -3))
    # Traced row pointers are taken as given: the check needs values.
    mat = sparse.BCSR.fromdense(np.eye(3))
    rebuilt = fg.jit(lambda p: sparse.BCSR((mat.data, mat.indices, p), shape=(3, 3)).todense())
    np.testing.assert_array_equal(rebuilt(mat.indptr), np.eye(3))


def test_bcoo_constructor_names_bad_arguments():
    data, indices = np.ones(2), np.array([[0], [1]])
    with pytest.raises(TypeError, match=r"the tuple \(data, indices\), got a tuple of length 3"):
        BCOO((data, indices, indices), shape=(2,))
    with pytest.raises(TypeError, match="shape must be a sequence of integers, got None"):
        BCOO((data, indices), shape=None)
    with pytest.raises(TypeError, match="shape must be a sequence of integers"):
        BCOO((data, indices), shape=(2.0,))
    with pytest.raises(ValueError, match=r"shape \(-2,\) has a negative size"):
        BCOO((data, indices), shape=(-2,))


# ---- elementwise operators and reversal, with padding and duplicated indices


@settings(deadline=None)
@given(messy_bcoo())
def test_elementwise_operators_and_rev_on_messy_indices_match_numpy(case):
    mat, dense, rng = case
    divisor = rng.uniform(0.5, 2.0, size=mat.shape[-1:]) * rng.choice([-1, 1], mat.shape[-1:])
    for result, expected in [
        (abs(mat), np.abs(dense)),
        (mat**2, dense**2),
        (abs(mat) ** 1.5, np.abs(dense) ** 1.5),
        (mat / 4.0, dense / 4.0),
        (mat / divisor, dense / divisor),
    ]:
        assert isinstance(result, BCOO)
        np.testing.assert_allclose(result.todense(), expected, rtol=1e-12, atol=1e-12)
    dimensions = [d for d in range(mat.ndim) if rng.random() < 0.5]
    flipped = sparse.bcoo_rev(mat, dimensions)
    np.testing.assert_allclose(flipped.todense(), np.flip(dense, dimensions), atol=1e-12)


def test_elementwise_operators_refuse_dense_results_and_keep_padding_out_of_gradients():
    mat = BCOO((np.array([4.0, 9.0, 5.0]), np.array([[0], [2], [3]])), shape=(3,))  # padding
    for bad in (lambda: mat**0, lambda: mat**-1.0, lambda: 2.0**mat):
        with pytest.raises(NotImplementedError, match="dense"):
            bad()
    for bad in (lambda: 1.0 / mat, lambda: mat / mat):
        with pytest.raises(NotImplementedError, match="dividing by a BCOO array"):
            bad()
    with pytest.raises(ValueError, match="must broadcast"):
        mat / np.ones(2)

    # sqrt's derivative is infinite at 0, the data padding gets: it must not reach padding.
    def root_sum(data):
        a = BCOO((data, mat.indices), shape=(3,), unique_indices=True)
        return fnp.sum((a**0.5).todense())

    np.testing.assert_allclose(fg.grad(root_sum)(np.array([4.0, 9.0, 0.0])), [0.25, 1 / 6, 0.0])
    # Elements that share an index are merged before a nonlinear map: |-1 + 1| = 0.
    duplicated = BCOO((np.array([-1.0, 1.0]), np.array([[1], [1]])), shape=(3,))
    np.testing.assert_array_equal(abs(duplicated).todense(), [0.0, 0.0, 0.0])


def test_bcoo_rev_keeps_batch_and_dense_dimensions_and_checks_them():
    dense = sparse_array(np.random.default_rng(80), (2, 3, 4, 2))
    mat = BCOO.fromdense(dense, n_batch=1, n_dense=1)
    for dimensions in [(0,), (1, 2), (3,), (0, 1, 2, 3), ()]:
        out = sparse.bcoo_rev(mat, dimensions)
        assert (out.n_batch, out.n_dense, out.nse) == (1, 1, mat.nse)
        np.testing.assert_array_equal(out.todense(), np.flip(dense, dimensions))
    with pytest.raises(ValueError, match="must be distinct dimensions"):
        sparse.bcoo_rev(mat, (4,))


def test_bcoo_and_bcsr_methods_of_the_array_api():
    rng = np.random.default_rng(81)
    dense = sparse_array(rng, (4, 5))
    mat = BCOO.fromdense(dense)
    assert mat.block_until_ready() is mat
    relaid = mat.update_layout(n_batch=1, on_inefficient=None)
    assert relaid.n_batch == 1
    np.testing.assert_array_equal(relaid.todense(), dense)
    reference = scipy.sparse.random(4, 5, density=0.5, format="csc", random_state=1)
    reference = reference + reference  # (canonical, but any order is read)
    for index_dtype in (None, np.int16):
        coo = BCOO.from_scipy_sparse(reference, index_dtype=index_dtype)
        assert coo.indices.dtype == (index_dtype or np.int32)
        np.testing.assert_allclose(coo.todense(), reference.toarray())
        csr = sparse.BCSR.from_scipy_sparse(reference, index_dtype=index_dtype)
        np.testing.assert_array_equal(csr.indptr, reference.tocsr().indptr)
        np.testing.assert_allclose(csr.todense(), reference.toarray())
    with pytest.raises(NotImplementedError, match="n_batch=1"):
        BCOO.from_scipy_sparse(reference, n_batch=1)
    csr = sparse.BCSR.fromdense(dense)
    assert (csr.size, len(csr), csr.block_until_ready()) == (20, 4, csr)
    # Duplicated columns within a row: summed, sorted and counted once.
    duplicated = sparse.BCSR(
        (np.array([1.0, 2.0, 3.0, 0.0]), np.array([3, 1, 3, 0]), np.array([0, 3, 4, 4, 4])),
        shape=(4, 5),
    )
    expected = np.zeros((4, 5))
    expected[0, 3], expected[0, 1] = 4.0, 2.0
    merged = sparse.bcsr_sum_duplicates(duplicated)
    assert merged.nse == 3  # the stored zero stays (sum_duplicates keeps zeros)
    np.testing.assert_array_equal(merged.todense(), expected)
    np.testing.assert_array_equal(merged.indptr, [0, 2, 3, 3, 3])
    assert duplicated.sum_duplicates().nse == 2  # the method drops zeros
    np.testing.assert_array_equal(sparse.bcsr_extract(csr.indices, csr.indptr, dense), csr.data)
    np.testing.assert_array_equal(
        sparse.bcsr_extract(csr.indices, csr.indptr, 2 * dense), 2 * csr.data
    )


def test_empty_bcsr_and_the_efficiency_warning():
    empty = sparse.empty((2, 3, 4, 2), sparse_format="bcsr", n_batch=1, n_dense=1, nse=3)
    assert isinstance(empty, sparse.BCSR) and empty.data.shape == (2, 3, 2)
    np.testing.assert_array_equal(empty.todense(), np.zeros((2, 3, 4, 2)))
    with pytest.raises(ValueError, match="two sparse dimensions"):
        sparse.empty((3, 4, 5), sparse_format="bcsr")
    with pytest.raises(ValueError, match="sparse_format='dia' is not supported"):
        sparse.empty((3, 4), sparse_format="dia")
    with pytest.raises(ValueError, match="sparse_format='bcsr' is not supported"):
        sparse.eye(3, sparse_format="bcsr")
    mat = BCOO.fromdense(np.eye(3))
    with pytest.warns(sparse.SparseEfficiencyWarning, match="sizes \\(3,\\)"):
        relaid = mat.update_layout(n_batch=1, on_inefficient="warn")
    np.testing.assert_array_equal(relaid.todense(), np.eye(3))


# ---- sampled products, gathers, convolutions and BCSR structure


@settings(deadline=None, max_examples=30)
@given(dot_general_cases(), st.data())
def test_dot_general_sampled_reads_the_product_at_the_indices(case, data):
    lhs_shape, _, _, seed, rhs_shape, dimension_numbers = case
    rng = np.random.default_rng(seed)
    A, B = rng.normal(size=lhs_shape), rng.normal(size=rhs_shape)
    product = einsum_dot_general(A, B, dimension_numbers)
    n_batch = data.draw(st.integers(0, product.ndim))
    n_dense = data.draw(st.integers(0, product.ndim - n_batch))
    pattern = BCOO.fromdense(
        sparse_array(rng, product.shape), n_batch=n_batch, n_dense=n_dense, nse=None
    )
    padded = BCOO.fromdense(
        np.asarray(pattern.todense()), n_batch=n_batch, n_dense=n_dense, nse=pattern.nse + 1
    )
    for mat in (pattern, padded):
        out = sparse.bcoo_dot_general_sampled(
            A, B, mat.indices, dimension_numbers=dimension_numbers
        )
        # every stored element, duplicates included, reads the product at its index
        expected = sparse.bcoo_extract(mat, product, assume_unique=True).data
        np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


def test_dot_general_sampled_grad_and_errors():
    rng = np.random.default_rng(60)
    A, B = rng.normal(size=(3, 4)), rng.normal(size=(4, 5))
    indices = BCOO.fromdense(sparse_array(rng, (3, 5)), n_batch=1).indices
    numbers = (((1,), (0,)), ((), ()))

    def f(A, B):
        return sparse.bcoo_dot_general_sampled(A, B, indices, dimension_numbers=numbers)

    check_grads(f, (A, B), order=2)
    np.testing.assert_allclose(fg.jit(f)(A, B), f(A, B), rtol=1e-12)
    with pytest.raises(ValueError, match="not the indices of a BCOO array"):
        sparse.bcoo_dot_general_sampled(A, B, indices[:2], dimension_numbers=numbers)


GATHER_CASES = [
    # operand shape, n_batch, n_dense, indices, dimension numbers, slice sizes
    ((5, 4), 0, 0, [[1], [4], [0]], ((1,), (0,), (0,)), (1, 4)),
    ((5, 4), 1, 0, [[3, 1], [0, 2]], ((), (0, 1), (0, 1)), (1, 1)),
    ((5, 4), 0, 1, [[[2]], [[1]]], ((2,), (1,), (1,)), (5, 1)),
    ((5, 4, 3), 1, 1, [[1, 0], [3, 2]], ((1, 2), (0,), (0, 1)), (1, 2, 3)),
    ((5, 4, 3), 0, 0, [[2, 1], [0, 0], [4, 3]], ((1, 2, 3), (), (0, 2)), (2, 3, 2)),
]


@pytest.mark.parametrize("case", range(len(GATHER_CASES)))
def test_bcoo_gather_matches_the_dense_gather(case):
    shape, n_batch, n_dense, index, numbers, slice_sizes = GATHER_CASES[case]
    offset_dims, collapsed, start_index_map = numbers
    numbers = fg.lax.GatherDimensionNumbers(offset_dims, collapsed, start_index_map)
    rng = np.random.default_rng(61 + case)
    dense = sparse_array(rng, shape)
    mat = BCOO.fromdense(dense, n_batch=n_batch, n_dense=n_dense)
    index = np.asarray(index, np.int32)
    out = sparse.bcoo_gather(mat, index, numbers, slice_sizes)
    expected = fg.lax.gather(dense, index, numbers, slice_sizes)
    assert isinstance(out, BCOO)
    np.testing.assert_allclose(out.todense(), expected, rtol=1e-12)
    jitted = fg.jit(lambda m, i: sparse.bcoo_gather(m, i, numbers, slice_sizes))(mat, index)
    np.testing.assert_allclose(jitted.todense(), expected, rtol=1e-12)


def test_bcoo_conv_general_dilated_with_other_layouts():
    rng = np.random.default_rng(62)
    signal, kernel = sparse_array(rng, (7,)), rng.normal(size=3)
    numbers = ("NWC", "WIO", "NWC")
    lhs = BCOO.fromdense(signal.reshape(1, 7, 1), n_dense=1)
    out = sparse.bcoo_conv_general_dilated(
        lhs, kernel.reshape(3, 1, 1), window_strides=(1,), padding="SAME", dimension_numbers=numbers
    )
    assert isinstance(out, BCOO) and out.shape == (1, 7, 1)
    expected = np.convolve(signal, kernel[::-1], "same")
    np.testing.assert_allclose(out.todense()[0, :, 0], expected, atol=1e-12)


def test_bcsr_concatenate_and_broadcast_in_dim_match_numpy():
    rng = np.random.default_rng(63)
    dense = sparse_array(rng, (2, 3, 4, 2))
    mat = sparse.BCSR.fromdense(dense, n_batch=1, n_dense=1)
    other = sparse.BCSR.fromdense(dense[::-1], n_batch=1, n_dense=1)
    for dimension in range(4):
        out = sparse.bcsr_concatenate([mat, other], dimension=dimension)
        assert isinstance(out, sparse.BCSR) and out.n_batch == 1 and out.n_dense == 1
        np.testing.assert_allclose(out.todense(), np.concatenate([dense, dense[::-1]], dimension))
    out = sparse.bcsr_broadcast_in_dim(
        mat, shape=(5, 2, 3, 4, 2), broadcast_dimensions=(1, 2, 3, 4)
    )
    assert isinstance(out, sparse.BCSR) and out.n_batch == 2
    np.testing.assert_allclose(out.todense(), np.broadcast_to(dense, (5, 2, 3, 4, 2)))
    out = sparse.bcsr_broadcast_in_dim(
        mat, shape=(2, 3, 4, 2, 6), broadcast_dimensions=(0, 1, 2, 3)
    )
    np.testing.assert_allclose(out.todense(), np.broadcast_to(dense[..., None], out.shape))
    with pytest.raises(TypeError, match="expected a BCSR array"):
        sparse.bcsr_concatenate([mat, mat.to_bcoo()], dimension=0)
    with pytest.raises(ValueError, match="has 3 sparse dimensions"):
        sparse.bcsr_broadcast_in_dim(
            sparse.BCSR.fromdense(dense[0, ..., 0]), shape=(3, 1, 4), broadcast_dimensions=(0, 2)
        )
