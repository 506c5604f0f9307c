"""funcgrad.experimental.sparse's older matrix formats COO, CSR and CSC: conversions, products
and transposes against NumPy, derivatives against central finite differences, jit against
eager, and the errors that name a bad argument."""

from __future__ import annotations

import numpy as np
import pytest

import funcgrad as fg
from funcgrad.experimental import sparse
from funcgrad.experimental.sparse import COO, CSC, CSR
from funcgrad.test_util import check_grads


def sparse_matrix(rng, shape=(4, 5), density=0.4):
    values = rng.normal(size=shape)
    return np.where(rng.random(shape) < density, values, 0.0)


FORMATS = [COO, CSR, CSC]


@pytest.mark.parametrize("fmt", FORMATS)
def test_fromdense_todense_products_and_transposes_match_numpy(fmt):
    rng = np.random.default_rng(0)
    dense = sparse_matrix(rng)
    count = int(np.count_nonzero(dense))
    v, B, u = rng.normal(size=5), rng.normal(size=(5, 3)), rng.normal(size=4)
    for nse in (None, count + 2):
        mat = fmt.fromdense(dense, nse=nse)
        assert mat.nse == (count if nse is None else nse) and mat.shape == dense.shape
        np.testing.assert_array_equal(mat.todense(), dense)
        np.testing.assert_array_equal(sparse.todense(mat), dense)
        transposed = mat.T
        assert type(transposed) is {COO: COO, CSR: CSC, CSC: CSR}[fmt]
        np.testing.assert_array_equal(transposed.todense(), dense.T)
        np.testing.assert_allclose(mat @ v, dense @ v, rtol=1e-12)
        np.testing.assert_allclose(mat @ B, dense @ B, rtol=1e-12)
        np.testing.assert_allclose(transposed @ u, dense.T @ u, rtol=1e-12)
    # An int32 matrix times a float vector is float.
    integers = fmt.fromdense(np.array([[0, 2], [3, 0]], np.int32))
    out = integers @ np.array([0.5, 1.0])
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, [2.0, 1.5])


def test_padding_matches_the_layout_of_the_dense_nonzeros():
    dense = np.array([[0.0, 1.0, 0.0], [2.0, 0.0, 3.0]])
    coo = sparse.coo_fromdense(dense, nse=5)
    np.testing.assert_array_equal(coo.data, [1, 2, 3, 0, 0])
    np.testing.assert_array_equal(coo.row, [0, 1, 1, 0, 0])
    np.testing.assert_array_equal(coo.col, [1, 0, 2, 0, 0])
    csr = sparse.csr_fromdense(dense, nse=5)
    np.testing.assert_array_equal(csr.indices, [1, 0, 2, 0, 0])
    np.testing.assert_array_equal(csr.indptr, [0, 1, 3])
    csc = CSC.fromdense(dense)
    np.testing.assert_array_equal(csc.data, [2, 1, 3])
    np.testing.assert_array_equal(csc.indices, [1, 0, 1])
    np.testing.assert_array_equal(csc.indptr, [0, 1, 2, 3])


def test_matvec_and_matmat_functions_with_transpose():
    rng = np.random.default_rng(1)
    dense = sparse_matrix(rng)
    coo, csr = sparse.coo_fromdense(dense), sparse.csr_fromdense(dense)
    v, u = rng.normal(size=5), rng.normal(size=4)
    B, C = rng.normal(size=(5, 2)), rng.normal(size=(4, 2))
    for matvec, matmat, mat in (
        (sparse.coo_matvec, sparse.coo_matmat, coo),
        (sparse.csr_matvec, sparse.csr_matmat, csr),
    ):
        np.testing.assert_allclose(matvec(mat, v), dense @ v, rtol=1e-12)
        np.testing.assert_allclose(matvec(mat, u, transpose=True), dense.T @ u, rtol=1e-12)
        np.testing.assert_allclose(matmat(mat, B), dense @ B, rtol=1e-12)
        np.testing.assert_allclose(matmat(mat, C, transpose=True), dense.T @ C, rtol=1e-12)
    np.testing.assert_array_equal(sparse.coo_todense(coo), dense)
    np.testing.assert_array_equal(sparse.csr_todense(csr), dense)


@pytest.mark.parametrize("fmt", FORMATS)
def test_grad_and_jit_of_products(fmt):
    rng = np.random.default_rng(2)
    mat = fmt.fromdense(sparse_matrix(rng), nse=10)
    leaves, treedef = fg.tree_util.tree_flatten(mat)

    def f(data, v):
        rebuilt = fg.tree_util.tree_unflatten(treedef, [data, *leaves[1:]])
        return rebuilt @ v

    v = rng.normal(size=5)
    check_grads(f, (mat.data, v), order=2)
    np.testing.assert_allclose(fg.jit(f)(mat.data, v), f(mat.data, v), rtol=1e-12)
    nse = mat.nse
    jitted = fg.jit(lambda d: fmt.fromdense(d, nse=nse).todense())(mat.todense())
    np.testing.assert_array_equal(jitted, mat.todense())


@pytest.mark.parametrize("fmt", ["coo", "csr", "csc"])
def test_empty_and_eye_in_the_matrix_formats(fmt):
    for n, m, k in [(3, None, 0), (3, 5, 1), (4, 3, -2), (3, 3, 5)]:
        eye = sparse.eye(n, m, k, sparse_format=fmt)
        assert type(eye).__name__ == fmt.upper()
        np.testing.assert_array_equal(eye.todense(), np.eye(n, m, k))
    empty = sparse.empty((2, 3), sparse_format=fmt, nse=2)
    np.testing.assert_array_equal(empty.todense(), np.zeros((2, 3)))
    with pytest.raises(ValueError, match="two sparse dimensions and no batch"):
        sparse.empty((2, 3, 4), sparse_format=fmt)
    with pytest.raises(ValueError, match="two sparse dimensions and no batch"):
        sparse.eye(3, sparse_format=fmt, n_batch=1)


def test_constructors_name_bad_arguments():
    with pytest.raises(ValueError, match="must be 2-D"):
        COO((np.ones(2), np.zeros(2, np.int32), np.zeros(2, np.int32)), shape=(2, 2, 2))
    with pytest.raises(TypeError, match="must be integers"):
        COO((np.ones(2), np.zeros(2), np.zeros(2)), shape=(2, 2))
    with pytest.raises(ValueError, match="one length"):
        COO((np.ones(2), np.zeros(3, np.int32), np.zeros(2, np.int32)), shape=(2, 2))
    with pytest.raises(ValueError, match="indptr"):
        CSR((np.ones(2), np.zeros(2, np.int32), np.array([0, 2], np.int32)), shape=(2, 2))
    with pytest.raises(ValueError, match="expected a matrix"):
        sparse.csr_fromdense(np.ones(3))
    with pytest.raises(ValueError, match="cannot multiply"):
        sparse.coo_matvec(COO.fromdense(np.eye(2)), np.ones(3))
    with pytest.raises(NotImplementedError, match="another sparse matrix"):
        CSR.fromdense(np.eye(2)) @ CSR.fromdense(np.eye(2))
