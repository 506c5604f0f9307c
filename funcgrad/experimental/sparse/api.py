"""Format-independent entry points: `todense` of any array, and the constructors `empty` and
`eye` in any of the formats."""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

from funcgrad import dtypes
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.experimental.sparse._convert import check_index_dtype
from funcgrad.experimental.sparse.bcoo import BCOO, bcoo_fromdense
from funcgrad.experimental.sparse.bcsr import BCSR
from funcgrad.experimental.sparse.coo import COO
from funcgrad.experimental.sparse.csr import CSC, CSR

__all__ = ["empty", "eye", "todense"]


_FORMATS = (BCOO, BCSR, COO, CSR, CSC)


def todense(arr) -> Array:
    """The dense form of a sparse array of any format; a dense array is returned as it is."""
    return arr.todense() if isinstance(arr, _FORMATS) else fnp.asarray(arr)


def _check_format(sparse_format: str, name: str, formats=("bcoo",)) -> None:
    if sparse_format not in formats:
        raise ValueError(
            f"{name}: sparse_format={sparse_format!r} is not supported; use one of {formats}"
        )


# The older matrix formats: two sparse dimensions, no batch or dense ones.
_MATRIX_FORMATS = {"coo": COO, "csr": CSR, "csc": CSC}


def _check_matrix_layout(shape, n_batch: int, n_dense: int, sparse_format: str, name: str):
    if sparse_format in _MATRIX_FORMATS and (len(shape) != 2 or n_batch or n_dense):
        raise ValueError(
            f"{name}: a {sparse_format.upper()} matrix has two sparse dimensions and no batch "
            f"or dense ones, got shape {tuple(shape)} with n_batch={n_batch} and "
            f"n_dense={n_dense}"
        )


def _layout_split(shape, n_batch: int, n_dense: int, name: str) -> int:
    n_sparse = len(shape) - n_batch - n_dense
    if n_batch < 0 or n_dense < 0 or n_sparse < 0:
        raise ValueError(
            f"{name}: n_batch={n_batch} and n_dense={n_dense} must be non-negative and together "
            f"at most the rank of shape {tuple(shape)}"
        )
    return n_sparse


def empty(
    shape: Sequence[int],
    dtype=None,
    index_dtype="int32",
    sparse_format: str = "bcoo",
    *,
    n_batch: int = 0,
    n_dense: int = 0,
    nse: int = 0,
) -> BCOO | BCSR | COO | CSR | CSC:
    """An all-zero sparse array: `nse` padding elements per batch (BCOO), or `nse` slots past
    every row (BCSR, with two sparse dimensions), or `nse` padding entries of a matrix (COO,
    CSR, CSC)."""
    _check_format(sparse_format, "empty", ("bcoo", "bcsr", *_MATRIX_FORMATS))
    shape = tuple(operator.index(s) for s in shape)
    n_sparse = _layout_split(shape, n_batch, n_dense, "empty")
    if nse < 0:
        raise ValueError(f"empty: nse must be non-negative, got {nse}")
    dtype = dtypes.default_float if dtype is None else np.dtype(dtype)
    batch_shape, sparse_shape = shape[:n_batch], shape[n_batch : n_batch + n_sparse]
    check_index_dtype(sparse_shape, index_dtype, "empty")
    data = fnp.zeros((*batch_shape, nse, *shape[n_batch + n_sparse :]), dtype)
    _check_matrix_layout(shape, n_batch, n_dense, sparse_format, "empty")
    if sparse_format in _MATRIX_FORMATS:
        zeros = fnp.zeros(nse, index_dtype)
        if sparse_format == "coo":
            return COO((data, zeros, zeros), shape=shape, rows_sorted=True, cols_sorted=True)
        compressed = shape[0] if sparse_format == "csr" else shape[1]
        indptr = fnp.zeros(compressed + 1, index_dtype)
        return _MATRIX_FORMATS[sparse_format]((data, zeros, indptr), shape=shape)
    if sparse_format == "bcsr":
        if n_sparse != 2:
            raise ValueError(
                f"empty: a BCSR array needs two sparse dimensions, got shape {shape} with "
                f"n_batch={n_batch} and n_dense={n_dense}"
            )
        columns = fnp.zeros((*batch_shape, nse), index_dtype)
        indptr = fnp.zeros((*batch_shape, sparse_shape[0] + 1), index_dtype)
        return BCSR((data, columns, indptr), shape=shape)
    padding = np.array(sparse_shape, np.dtype(index_dtype))
    indices = fnp.asarray(np.broadcast_to(padding, (*batch_shape, nse, n_sparse)))
    return BCOO((data, indices), shape=shape, indices_sorted=True, unique_indices=True)


def eye(
    N: int,
    M: int | None = None,
    k: int = 0,
    dtype=None,
    index_dtype="int32",
    sparse_format: str = "bcoo",
    *,
    n_batch: int = 0,
    n_dense: int = 0,
) -> BCOO | COO | CSR | CSC:
    """The N x M matrix with ones on diagonal `k` (above the main one for k > 0)."""
    _check_format(sparse_format, "eye", ("bcoo", *_MATRIX_FORMATS))
    N = operator.index(N)
    M = N if M is None else operator.index(M)
    k = operator.index(k)
    _layout_split((N, M), n_batch, n_dense, "eye")
    dtype = dtypes.default_float if dtype is None else np.dtype(dtype)
    index_dtype = np.dtype(index_dtype)
    check_index_dtype((N, M)[n_batch : 2 - n_dense], index_dtype, "eye")
    _check_matrix_layout((N, M), n_batch, n_dense, sparse_format, "eye")
    if sparse_format == "csc":
        return eye(M, N, -k, dtype, index_dtype, "csr").T
    if n_batch == 0 and n_dense == 0:
        rows = np.arange(max(-k, 0), min(N, M - k))
        indices = np.stack([rows, rows + k], axis=-1).astype(index_dtype).reshape(-1, 2)
        data = fnp.ones(len(rows), dtype)
        if sparse_format == "coo":
            row, col = indices.T
            return COO((data, row, col), shape=(N, M), rows_sorted=True, cols_sorted=True)
        diagonal = BCOO((data, indices), shape=(N, M), indices_sorted=True, unique_indices=True)
        if sparse_format == "csr":
            rows_form = BCSR.from_bcoo(diagonal)
            return CSR((rows_form.data, rows_form.indices, rows_form.indptr), shape=(N, M))
        return diagonal
    if n_batch == 1 and n_dense == 0:
        rows = np.arange(N)
        columns = rows + k
        on_diagonal = (columns >= 0) & (columns < M)
        indices = np.where(on_diagonal, columns, M).astype(index_dtype).reshape(N, 1, 1)
        data = fnp.asarray(on_diagonal.astype(dtype).reshape(N, 1))
        return BCOO((data, indices), shape=(N, M), indices_sorted=True, unique_indices=True)
    # Every other layout stores the zeros of its dense blocks anyway. The number of stored
    # elements is counted in NumPy, so that it is known under jit too.
    ones = np.eye(N, M, k, dtype=bool)
    stored = np.any(ones, axis=tuple(range(2 - n_dense, 2)))
    nse = int(np.max(np.sum(stored, axis=tuple(range(n_batch, stored.ndim))), initial=0))
    return bcoo_fromdense(
        fnp.eye(N, M, k, dtype=dtype),
        nse=nse,
        n_batch=n_batch,
        n_dense=n_dense,
        index_dtype=index_dtype,
    )
