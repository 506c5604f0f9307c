"""funcgrad.experimental.sparse in its corners: what the flags of an array promise, elements
outside the array holding NaN or infinite data, arrays with no sparse dimensions or no
elements, boolean products, iterating over BCSR rows, CSR matrices read by spsolve, and
derivatives with respect to the older matrix formats. Values against NumPy on the dense forms,
derivatives against central finite differences in float64, jit on the NumPy and LLVM backends
against eager."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from checks import jit_backend
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sparse import dense_of_stored, dot_general_cases, einsum_dot_general, layouts

import funcgrad as fg
import funcgrad.numpy as fnp
from funcgrad.experimental import sparse
from funcgrad.experimental.sparse import BCOO


def numeric_grad(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central differences of the scalar function `f` at the float64 array `x`."""
    grad = np.zeros_like(x)
    for i in np.ndindex(*x.shape):
        step = np.zeros_like(x)
        step[i] = h
        grad[i] = (float(f(x + step)) - float(f(x - step))) / (2 * h)
    return grad


def messy_stored(rng, shape, n_batch: int, n_dense: int, nse: int, outside_value=None):
    """Data and indices of `nse` elements per batch, about a third of them outside the array
    (negative, the size, or past it) and holding `outside_value` if given."""
    n_sparse = len(shape) - n_batch - n_dense
    sparse_shape = np.array(shape[n_batch : n_batch + n_sparse], np.int32)
    lead = (*shape[:n_batch], nse)
    inside = rng.integers(0, np.maximum(sparse_shape, 1), size=(*lead, n_sparse))
    outside = rng.choice([-1, 0, 1], size=(*lead, n_sparse)) + sparse_shape
    indices = np.where(rng.random((*lead, 1)) < 0.65, inside, outside).astype(np.int32)
    data = rng.normal(size=(*lead, *shape[n_batch + n_sparse :]))
    if outside_value is not None:
        valid = np.all((indices >= 0) & (indices < sparse_shape), axis=-1)
        valid = valid.reshape(valid.shape + (1,) * (data.ndim - valid.ndim))
        data = np.where(valid, data, outside_value)
    return data, indices


def repeated_inside(mat: BCOO) -> bool:
    """Whether some batch of `mat` stores two elements at one index inside the array."""
    indices = np.asarray(mat.indices)
    sparse_shape = mat.shape[mat.n_batch : mat.n_batch + mat.n_sparse]
    for batch in np.ndindex(*indices.shape[: mat.n_batch]):
        inside = [
            tuple(index)
            for index in indices[batch].tolist()
            if all(0 <= i < s for i, s in zip(index, sparse_shape))
        ]
        if len(set(inside)) != len(inside):
            return True
    return False


def sorted_with_outside_last(mat: BCOO) -> bool:
    """Whether every batch of `mat` stores its elements inside the array in lexicographic order
    of index, before every element outside it."""
    indices = np.asarray(mat.indices)
    sparse_shape = mat.shape[mat.n_batch : mat.n_batch + mat.n_sparse]
    for batch in np.ndindex(*indices.shape[: mat.n_batch]):
        rows = indices[batch].tolist()
        inside = [all(0 <= i < s for i, s in zip(r, sparse_shape)) for r in rows]
        kept = [r for r, ok in zip(rows, inside) if ok]
        if kept != sorted(kept) or inside != sorted(inside, reverse=True):
            return False
    return True


# ---- what the flags promise


@settings(deadline=None)
@given(layouts(min_dims=1, max_dims=4), st.integers(0, 3))
def test_flags_promise_only_what_the_indices_hold(layout, extra_nse):
    # With no sparse dimensions every element has the one empty index, padding included:
    # fromdense and sum_duplicates used to promise unique indices there all the same.
    shape, n_batch, n_dense, seed = layout
    rng = np.random.default_rng(seed)
    dense = np.where(rng.random(shape) < 0.5, rng.normal(size=shape), 0.0)
    nse = int(rng.integers(0, 4)) + extra_nse
    messy = BCOO(messy_stored(rng, shape, n_batch, n_dense, nse), shape=shape)
    n_positional = len(shape) - n_dense
    candidates = [
        BCOO.fromdense(dense, n_batch=n_batch, n_dense=n_dense, nse=nse),
        sparse.empty(shape, n_batch=n_batch, n_dense=n_dense, nse=nse),
        messy.sum_duplicates(nse=nse),
        messy.sum_duplicates(nse=nse, remove_zeros=True),
        messy.sort_indices(),
    ]
    for mat in list(candidates):
        if 0 not in shape:  # every sparse dimension merged into one, or into none
            merged = shape[:n_batch] + (-1,) * (n_positional > n_batch) + shape[n_positional:]
            candidates.append(mat.reshape(merged))
    for mat in candidates:
        assert not (mat.unique_indices and repeated_inside(mat)), mat
        assert not mat.indices_sorted or sorted_with_outside_last(mat), mat


def test_an_index_shared_by_every_element_is_counted_once():
    # fromdense with no sparse dimensions and room for two elements per batch
    row = np.array([1.0, -2.0, 3.0])
    mat = BCOO.fromdense(row, n_batch=1, nse=2)
    assert not mat.unique_indices
    other = np.array([7.0, 8.0, 9.0])
    np.testing.assert_array_equal(sparse.bcoo_extract(mat, other).todense(), other)
    # a reshape that leaves no sparse dimension (it used to keep the promise)
    scalar = BCOO.fromdense(np.array([5.0]), nse=3).reshape(())
    assert not scalar.unique_indices
    np.testing.assert_array_equal(sparse.bcoo_extract(scalar, fnp.asarray(7.0)).todense(), 7.0)
    # A custom_jvp rule (relu's) reads its tangent at the stored elements: after sum over a
    # batch dimension every element shares the one index, and the tangent counted once per
    # element doubled the gradient.
    weights = np.array([1.0, 2.0, 3.0])

    def loss(x):
        mat = BCOO.fromdense(x, n_batch=1, n_dense=1)
        summed = sparse.bcoo_reduce_sum(mat, axes=(0,))
        return fnp.sum(sparse.sparsify(fg.nn.relu)(summed).todense() * weights)

    x = np.array([[1.0, -2.0, 0.5], [0.5, 1.0, -3.0]])
    np.testing.assert_allclose(fg.grad(loss)(x), numeric_grad(loss, x), atol=1e-8)


# ---- NaN and infinite data outside the array


@settings(deadline=None)
@given(dot_general_cases(), st.sampled_from([np.nan, np.inf, -np.inf]), st.integers(1, 4))
def test_products_with_a_dense_operand_ignore_elements_outside_the_array(case, bad, nse):
    # An element outside the array meets only the zeros the gather reads there; NaN or infinite
    # data times those zeros reached the result where every sparse dimension was contracted,
    # or where its index was outside in a contracted dimension only.
    shape, n_batch, n_dense, seed, rhs_shape, dimension_numbers = case
    rng = np.random.default_rng(seed)
    data, indices = messy_stored(rng, shape, n_batch, n_dense, nse, outside_value=bad)
    mat = BCOO((data, indices), shape=shape)
    dense = dense_of_stored(data, indices, shape)
    other = rng.normal(size=rhs_shape)
    expected = einsum_dot_general(dense, other, dimension_numbers)

    def product(m, o):
        return sparse.bcoo_dot_general(m, o, dimension_numbers=dimension_numbers)

    np.testing.assert_allclose(product(mat, other), expected, rtol=1e-12, atol=1e-12)
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    swapped = ((rhs_contract, lhs_contract), (rhs_batch, lhs_batch))
    np.testing.assert_allclose(
        sparse.bcoo_dot_general(other, mat, dimension_numbers=swapped),
        einsum_dot_general(other, dense, swapped),
        rtol=1e-12,
        atol=1e-12,
    )
    for backend in ("numpy", "llvm"):
        with jit_backend(backend):
            jitted = fg.jit(product)(mat, other)
        np.testing.assert_allclose(jitted, expected, rtol=1e-12, atol=1e-12)


def test_matrix_products_ignore_nan_outside_the_array():
    ones = np.ones(3)
    vector = BCOO((np.array([1.0, np.nan]), np.array([[0], [3]])), shape=(3,))
    np.testing.assert_array_equal(vector @ ones, 1.0)
    np.testing.assert_array_equal(ones @ vector, 1.0)
    # (1, 5) is outside only along the contracted columns; its row is inside
    matrix = BCOO((np.array([2.0, np.inf]), np.array([[0, 0], [1, 5]])), shape=(3, 3))
    np.testing.assert_array_equal(matrix @ ones, [2.0, 0.0, 0.0])
    np.testing.assert_array_equal(matrix @ np.ones((3, 2)), [[2.0, 2.0], [0, 0], [0, 0]])


# ---- booleans, arrays with no elements


@pytest.mark.parametrize("n_dense", [0, 1])
def test_boolean_products_contracting_every_sparse_dimension(n_dense):
    # The products' sum was a reduce_sum, which takes no booleans.
    rng = np.random.default_rng(3)
    dense = rng.random((4, 3)) < 0.4
    other = rng.random((4, 3)) < 0.6
    mat = BCOO.fromdense(dense, n_dense=n_dense, nse=6 if n_dense == 0 else 4)
    dimension_numbers = (((0, 1), (0, 1)), ((), ()))
    out = sparse.bcoo_dot_general(mat, other, dimension_numbers=dimension_numbers)
    assert out.dtype == np.bool_
    assert bool(out) == bool(np.any(dense & other))
    vector = BCOO.fromdense(dense[:, 0])
    assert bool(vector @ other[:, 0]) == bool(np.any(dense[:, 0] & other[:, 0]))


@settings(deadline=None)
@given(layouts(min_dims=1, max_dims=4), st.data())
def test_indexing_and_reshaping_arrays_with_no_elements(layout, data):
    # NumPy's indexing of an empty array is a slice and a reshape to the result's shape, which
    # the batch and dense dimensions of the sparse reshape could not always follow.
    shape, n_batch, n_dense, seed = layout
    zero_at = data.draw(st.integers(0, len(shape) - 1))
    shape = shape[:zero_at] + (0,) + shape[zero_at + 1 :]
    mat = sparse.empty(shape, n_batch=n_batch, n_dense=n_dense, nse=2)
    dense = np.zeros(shape)
    if shape[0]:
        index = np.array([0, shape[0] - 1, 0])
        taken = mat[index]
        assert isinstance(taken, BCOO) and taken.shape == dense[index].shape
        np.testing.assert_array_equal(taken.todense(), dense[index])
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
    new_shape = tuple(sizes[:-1]) + (0,)
    reshaped = sparse.bcoo_reshape(mat, new_sizes=new_shape)
    assert reshaped.shape == new_shape
    np.testing.assert_array_equal(reshaped.todense(), np.zeros(new_shape))


# ---- BCSR rows, CSR solves


def test_iterating_over_bcsr_rows_ends_and_out_of_bounds_indices_raise():
    # The rows were read through the dense indexing rules, which clamp an index out of bounds:
    # a loop over the rows never ended.
    dense = np.arange(6.0).reshape(3, 2)
    mat = sparse.BCSR.fromdense(dense)
    rows = list(itertools.islice(mat, 10))
    assert len(rows) == 3
    for row, expected in zip(rows, dense):
        np.testing.assert_array_equal(row.todense(), expected)
    for item in (3, -4, (0, 2), (Ellipsis, -3)):
        with pytest.raises(IndexError, match="BCSR indexing: index -?[0-9] is out of bounds"):
            mat[item]
    np.testing.assert_array_equal(mat[-1, 1].todense(), 5.0)


def test_spsolve_reads_the_matrix_as_csr_does():
    # A column outside the matrix is padding for CSR.todense; spsolve used to wrap a negative
    # one around to the last column.
    data = np.array([2.0, 1.0, 3.0, 5.0, 7.0])
    indices = np.array([0, 0, 1, -1, 2], np.int32)
    indptr = np.array([0, 2, 4, 5], np.int32)
    b = np.array([1.0, 2.0, 3.0])
    matrix = sparse.CSR((data, indices, indptr), shape=(3, 3)).todense()
    np.testing.assert_array_equal(matrix, [[3.0, 0, 0], [0, 3.0, 0], [0, 0, 7.0]])
    np.testing.assert_allclose(
        sparse.linalg.spsolve(data, indices, indptr, b), np.linalg.solve(matrix, b), rtol=1e-12
    )


# ---- derivatives with respect to the older matrix formats


@pytest.mark.parametrize("fmt", [sparse.COO, sparse.CSR, sparse.CSC])
def test_sparse_grad_with_respect_to_matrix_formats(fmt):
    # They were differentiated through every leaf, integer indices included, which refused.
    rng = np.random.default_rng(5)
    dense = np.where(rng.random((4, 3)) < 0.5, rng.normal(size=(4, 3)), 0.0)
    mat = fmt.fromdense(dense, nse=7)
    v = rng.normal(size=3)

    def loss(m):
        return fnp.sum(fnp.sin(m @ v))

    grad = sparse.grad(loss)(mat)
    assert type(grad) is fmt
    for kept, got in zip(fg.tree_util.tree_leaves(mat)[1:], fg.tree_util.tree_leaves(grad)[1:]):
        np.testing.assert_array_equal(got, kept)

    def data_loss(data):
        leaves = fg.tree_util.tree_leaves(mat)
        return loss(
            fg.tree_util.tree_unflatten(fg.tree_util.tree_structure(mat), [data, *leaves[1:]])
        )

    np.testing.assert_allclose(grad.data, numeric_grad(data_loss, np.asarray(mat.data)), atol=1e-8)
    with pytest.raises(NotImplementedError, match=f"Jacobian with respect to a {fmt.__name__}"):
        sparse.jacfwd(lambda m: m @ v)(mat)


# ---- layouts and axes


def test_batch_and_dense_dimensions_made_sparse_widen_narrow_indices():
    # 200 batches of int8 indices: as a sparse dimension their positions did not fit, and
    # relaying them out (update_layout, or a product with an operand of another layout) failed.
    dense = np.zeros((200, 2))
    dense[150, 1], dense[3, 0] = 5.0, 1.0
    batched = BCOO.fromdense(dense, n_batch=1, index_dtype=np.int8)
    flat = sparse.bcoo_update_layout(batched, n_batch=0)
    assert flat.indices.dtype == np.int16
    np.testing.assert_array_equal(flat.todense(), dense)
    other = BCOO.fromdense(dense, index_dtype=np.uint8)
    np.testing.assert_array_equal(sparse.bcoo_multiply_sparse(batched, other).todense(), dense**2)
    blocks = BCOO.fromdense(dense.T, n_dense=1, index_dtype=np.int8)
    np.testing.assert_array_equal(sparse.bcoo_update_layout(blocks, n_dense=0).todense(), dense.T)
    with jit_backend("llvm"):
        jitted = fg.jit(lambda m: sparse.bcoo_update_layout(m, n_batch=0).todense())(batched)
    np.testing.assert_array_equal(jitted, dense)


def test_sums_refuse_repeated_axes_and_transpose_takes_negative_axes():
    dense = np.arange(6.0).reshape(2, 3)
    mat = BCOO.fromdense(dense)
    # a repeated axis was summed once, where NumPy refuses it
    for axes in [(0, 0), (1, -1)]:
        with pytest.raises(ValueError, match="repeated axis"):
            mat.sum(axes)
        with pytest.raises(ValueError, match="repeated axis"):
            sparse.bcoo_reduce_sum(mat, axes=axes)
    np.testing.assert_array_equal(mat.sum(np.int64(1)).todense(), dense.sum(1))
    np.testing.assert_array_equal(mat.transpose((-1, 0)).todense(), dense.T)
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        mat.transpose((2, 0))


@pytest.mark.parametrize("n_batch, n_dense", [(2, 0), (1, 1), (0, 1), (0, 2)])
def test_eye_in_every_layout_under_jit(n_batch, n_dense):
    # These layouts counted their stored elements from the values of a traced identity.
    for n, m, k in [(3, 5, 1), (4, 2, -1), (2, 2, 3), (0, 3, 0)]:
        expected = np.eye(n, m, k)

        def identity(n=n, m=m, k=k):
            return sparse.eye(n, m, k, n_batch=n_batch, n_dense=n_dense).todense()

        np.testing.assert_array_equal(fg.jit(identity)(), expected)
        np.testing.assert_array_equal(identity(), expected)


@pytest.mark.parametrize("fmt", [sparse.BCOO, sparse.BCSR, sparse.CSR, sparse.COO])
def test_lobpcg_takes_a_sparse_matrix(fmt):
    # A sparse matrix was refused ("cannot make a funcgrad array from BCOO").
    n, k = 30, 2
    rng = np.random.default_rng(7)
    upper = np.triu(np.where(rng.random((n, n)) < 0.15, rng.normal(size=(n, n)), 0.0), 1)
    dense = upper + upper.T + np.diag(np.arange(1.0, n + 1))
    x = rng.normal(size=(n, k))
    matrix = fmt.fromdense(dense)
    expected = np.sort(np.linalg.eigvalsh(dense))[::-1][:k]
    theta, u, _ = sparse.linalg.lobpcg_standard(matrix, x, m=300)
    np.testing.assert_allclose(theta, expected, rtol=1e-9)
    np.testing.assert_allclose(dense @ np.asarray(u), np.asarray(u) * expected, atol=1e-6)
    jitted = fg.jit(lambda a, x: sparse.linalg.lobpcg_standard(a, x, m=300)[0])(matrix, x)
    np.testing.assert_allclose(jitted, expected, rtol=1e-9)
    with pytest.raises(ValueError, match=r"A of shape \(30, 30\) does not act on X"):
        sparse.linalg.lobpcg_standard(matrix, np.ones((20, 2)))
