"""COO, the older coordinate format of sparse matrices: `data`, `row` and `col`, one entry per
stored element. Its operations go through the BCOO form of the same elements (two sparse
dimensions, no batch or dense ones); BCOO is the format to prefer.

Padding entries (past the nonzeros of `fromdense(..., nse=...)`) hold 0 at position (0, 0),
so they add nothing wherever they land.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from funcgrad import dtypes, tree_util
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.experimental.sparse._convert import checked_shape, in_range, unpacked
from funcgrad.experimental.sparse.bcoo import BCOO, bcoo_fromdense, bcoo_todense
from funcgrad.experimental.sparse.bcoo_products import bcoo_dot_general

__all__ = ["COO", "coo_fromdense", "coo_matmat", "coo_matvec", "coo_todense"]


def check_matrix(data, indices: Sequence, shape, names: str, name: str) -> tuple[int, ...]:
    """`shape` as a checked 2-D shape for one-dimensional `data` and integer `indices` of its
    length, or an error naming the buffers."""
    shape = checked_shape(shape, name)
    if len(shape) != 2:
        raise ValueError(f"{name}: the shape must be 2-D (a matrix), got {shape}")
    if not all(dtypes.is_int(x.dtype) for x in indices):
        raise TypeError(f"{name}: {names} must be integers, got {[x.dtype.name for x in indices]}")
    if data.ndim != 1 or any(x.ndim != 1 for x in indices):
        raise ValueError(
            f"{name}: data and {names} must be one-dimensional, got shapes {data.shape} and "
            f"{[x.shape for x in indices]}"
        )
    return shape


def promoted_product(data, other):
    """`data` and the dense `other` in their common dtype, as a product of them would be."""
    other = fnp.asarray(other)
    dtype = fnp.result_type(data, other)
    return data.astype(dtype), other.astype(dtype)


def matrix_product(mat: BCOO, other, transpose: bool, name: str) -> Array:
    """`mat @ other` (or `mat.T @ other`) for a dense vector or matrix `other`."""
    data, other = promoted_product(mat.data, other)
    mat = BCOO((data, mat.indices), shape=mat.shape)
    if other.ndim not in (1, 2):
        raise NotImplementedError(f"{name}: matmul with an operand of shape {other.shape}")
    contracted = 0 if transpose else 1
    if other.shape[0] != mat.shape[contracted]:
        raise ValueError(
            f"{name}: a matrix of shape {mat.shape}{' (transposed)' if transpose else ''} "
            f"cannot multiply an operand of shape {other.shape}"
        )
    return bcoo_dot_general(mat, other, dimension_numbers=(((contracted,), (0,)), ((), ())))


class SparseMatrix:
    """What a two-dimensional sparse matrix of the older formats (COO, CSR, CSC) says of
    itself, from its `data` and `shape`."""

    @property
    def nse(self) -> int:
        return self.data.size

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return 2

    @property
    def size(self) -> int:
        return self.shape[0] * self.shape[1]

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dtype.name}{list(self.shape)}, nse={self.nse})"


@tree_util.register_pytree_node_class
class COO(SparseMatrix):
    """A sparse matrix in coordinate format: `data[k]` lies at (`row[k]`, `col[k]`), and
    elements at one position add up."""

    __array_ufunc__ = None  # NumPy arrays defer to COO's reflected operators

    def __init__(
        self,
        args: tuple[Any, Any, Any],
        *,
        shape: Sequence[int],
        rows_sorted: bool = False,
        cols_sorted: bool = False,
    ):
        data, row, col = (fnp.asarray(x) for x in unpacked(args, 3, "data, row, col", "COO"))
        self.shape = check_matrix(data, (row, col), shape, "row and col", "COO")
        if not data.shape == row.shape == col.shape:
            raise ValueError(
                f"COO: data, row and col must have one length, got shapes {data.shape}, "
                f"{row.shape} and {col.shape}"
            )
        self.data, self.row, self.col = data, row, col
        self._rows_sorted, self._cols_sorted = bool(rows_sorted), bool(cols_sorted)

    def tree_flatten(self):
        return (self.data, self.row, self.col), (
            self.shape,
            self._rows_sorted,
            self._cols_sorted,
        )

    @classmethod
    def tree_unflatten(cls, aux, children) -> COO:
        mat = object.__new__(cls)
        mat.data, mat.row, mat.col = children
        mat.shape, mat._rows_sorted, mat._cols_sorted = aux
        return mat

    @classmethod
    def fromdense(cls, mat, *, nse: int | None = None, index_dtype=np.int32) -> COO:
        return coo_fromdense(mat, nse=nse, index_dtype=index_dtype)

    def to_bcoo(self) -> BCOO:
        return BCOO((self.data, fnp.stack([self.row, self.col], axis=-1)), shape=self.shape)

    def todense(self) -> Array:
        return coo_todense(self)

    def transpose(self, axes: Sequence[int] | None = None) -> COO:
        if axes is not None and tuple(axes) != (1, 0):
            raise NotImplementedError(f"COO.transpose: axes must be None or (1, 0), got {axes}")
        return COO(
            (self.data, self.col, self.row),
            shape=self.shape[::-1],
            rows_sorted=self._cols_sorted,
            cols_sorted=self._rows_sorted,
        )

    @property
    def T(self) -> COO:
        return self.transpose()

    def block_until_ready(self) -> COO:
        for buffer in (self.data, self.row, self.col):
            buffer.block_until_ready()
        return self

    def __matmul__(self, other) -> Array:
        if hasattr(other, "nse"):
            raise NotImplementedError("COO @ another sparse matrix is not implemented")
        return matrix_product(self.to_bcoo(), other, False, "COO")


def coo_fromdense(mat, *, nse: int | None = None, index_dtype=np.int32) -> COO:
    """The COO form of a dense matrix: its nonzeros in row-major order, then `nse` minus their
    count padding entries (0 at (0, 0)). `nse` defaults to the count of nonzeros, which needs
    concrete values: under jit, pass it."""
    mat = fnp.asarray(mat)
    if mat.ndim != 2:
        raise ValueError(f"coo_fromdense: expected a matrix, got an array of shape {mat.shape}")
    coo = bcoo_fromdense(mat, nse=nse, index_dtype=index_dtype)
    valid = in_range(coo.indices, mat.shape)[:, None]
    indices = fnp.where(valid, coo.indices, fnp.zeros((), coo.indices.dtype))
    return COO((coo.data, indices[:, 0], indices[:, 1]), shape=mat.shape, rows_sorted=True)


def coo_todense(mat: COO) -> Array:
    """The dense matrix: zeros, with every stored element added at its position."""
    if not isinstance(mat, COO):
        raise TypeError(f"coo_todense: expected a COO matrix, got {type(mat).__name__}")
    return bcoo_todense(mat.to_bcoo())


def coo_matvec(mat: COO, v, transpose: bool = False) -> Array:
    """`mat @ v` (or `mat.T @ v`) for a dense vector `v`."""
    v = fnp.asarray(v)
    if v.ndim != 1:
        raise ValueError(f"coo_matvec: v must be a vector, got shape {v.shape}")
    return matrix_product(mat.to_bcoo(), v, transpose, "coo_matvec")


def coo_matmat(mat: COO, B, *, transpose: bool = False) -> Array:
    """`mat @ B` (or `mat.T @ B`) for a dense matrix `B`."""
    B = fnp.asarray(B)
    if B.ndim != 2:
        raise ValueError(f"coo_matmat: B must be a matrix, got shape {B.shape}")
    return matrix_product(mat.to_bcoo(), B, transpose, "coo_matmat")
