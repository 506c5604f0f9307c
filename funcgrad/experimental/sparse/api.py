"""Format-independent entry points: `todense` of any array, and the constructors `empty` and
`eye` (of BCOO arrays)."""

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

__all__ = ["empty", "eye", "todense"]


def todense(arr) -> Array:
    """The dense form of a BCOO or BCSR array; a dense array is returned as it is."""
    return arr.todense() if isinstance(arr, (BCOO, BCSR)) else fnp.asarray(arr)


def _check_format(sparse_format: str, name: str, formats=("bcoo",)) -> None:
    if sparse_format not in formats:
        raise ValueError(
            f"{name}: sparse_format={sparse_format!r} is not supported; use one of {formats}"
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
) -> BCOO | BCSR:
    """An all-zero sparse array: `nse` padding elements per batch (BCOO), or `nse` slots past
    every row (BCSR, with two sparse dimensions)."""
    _check_format(sparse_format, "empty", ("bcoo", "bcsr"))
    shape = tuple(operator.index(s) for s in shape)
    n_sparse = _layout_split(shape, n_batch, n_dense, "empty")
    if nse < 0:
        raise ValueError(f"empty: nse must be non-negative, got {nse}")
    dtype = dtypes.default_float if dtype is None else np.dtype(dtype)
    batch_shape, sparse_shape = shape[:n_batch], shape[n_batch : n_batch + n_sparse]
    check_index_dtype(sparse_shape, index_dtype, "empty")
    data = fnp.zeros((*batch_shape, nse, *shape[n_batch + n_sparse :]), dtype)
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
) -> BCOO:
    """The N x M matrix with ones on diagonal `k` (above the main one for k > 0)."""
    _check_format(sparse_format, "eye")
    N = operator.index(N)
    M = N if M is None else operator.index(M)
    k = operator.index(k)
    _layout_split((N, M), n_batch, n_dense, "eye")
    dtype = dtypes.default_float if dtype is None else np.dtype(dtype)
    index_dtype = np.dtype(index_dtype)
    check_index_dtype((N, M)[n_batch : 2 - n_dense], index_dtype, "eye")
    if n_batch == 0 and n_dense == 0:
        rows = np.arange(max(-k, 0), min(N, M - k))
        indices = np.stack([rows, rows + k], axis=-1).astype(index_dtype).reshape(-1, 2)
        data = fnp.ones(len(rows), dtype)
        return BCOO((data, indices), shape=(N, M), indices_sorted=True, unique_indices=True)
    if n_batch == 1 and n_dense == 0:
        rows = np.arange(N)
        columns = rows + k
        on_diagonal = (columns >= 0) & (columns < M)
        indices = np.where(on_diagonal, columns, M).astype(index_dtype).reshape(N, 1, 1)
        data = fnp.asarray(on_diagonal.astype(dtype).reshape(N, 1))
        return BCOO((data, indices), shape=(N, M), indices_sorted=True, unique_indices=True)
    # Every other layout stores the zeros of its dense blocks anyway.
    return bcoo_fromdense(
        fnp.eye(N, M, k, dtype=dtype), n_batch=n_batch, n_dense=n_dense, index_dtype=index_dtype
    )
