"""CSR and CSC, the older compressed formats of sparse matrices: `data`, `indices` (each stored
element's column, or row for CSC) and `indptr` (where each row's, or column's, elements start).
A CSR matrix is a BCSR array with no batch or dense dimensions, and a CSC matrix is the CSR
form of its transpose; their operations go through those forms. BCOO and BCSR are the formats
to prefer.

Padding slots (past indptr's last entry) hold 0 at index 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from funcgrad import numpy as fnp
from funcgrad import tree_util
from funcgrad.array import Array
from funcgrad.experimental.sparse._convert import unpacked
from funcgrad.experimental.sparse.bcsr import BCSR, bcsr_fromdense
from funcgrad.experimental.sparse.coo import SparseMatrix, check_matrix, matrix_product

__all__ = ["CSC", "CSR", "csr_fromdense", "csr_matmat", "csr_matvec", "csr_todense"]


class _Compressed(SparseMatrix):
    """What CSR and CSC share: three buffers, a 2-D shape, and the BCSR form of the matrix
    (CSR) or of its transpose (CSC)."""

    __array_ufunc__ = None  # NumPy arrays defer to the reflected operators
    _compressed_axis: int  # 0: rows (CSR), 1: columns (CSC)

    def __init__(self, args: tuple[Any, Any, Any], *, shape: Sequence[int]):
        name = type(self).__name__
        data, indices, indptr = (
            fnp.asarray(x) for x in unpacked(args, 3, "data, indices, indptr", name)
        )
        self.shape = check_matrix(data, (indices, indptr), shape, "indices and indptr", name)
        self.data, self.indices, self.indptr = data, indices, indptr
        self._rows_form()  # checks the buffers' lengths and indptr

    def _rows_form(self) -> BCSR:
        """The BCSR matrix whose rows are this matrix's compressed axis."""
        shape = self.shape if self._compressed_axis == 0 else self.shape[::-1]
        return BCSR((self.data, self.indices, self.indptr), shape=shape)

    def tree_flatten(self):
        return (self.data, self.indices, self.indptr), self.shape

    @classmethod
    def tree_unflatten(cls, shape, children):
        mat = object.__new__(cls)
        mat.data, mat.indices, mat.indptr = children
        mat.shape = shape
        return mat

    @property
    def T(self):
        return self.transpose()

    def block_until_ready(self):
        for buffer in (self.data, self.indices, self.indptr):
            buffer.block_until_ready()
        return self

    def __matmul__(self, other) -> Array:
        if hasattr(other, "nse"):
            name = type(self).__name__
            raise NotImplementedError(f"{name} @ another sparse matrix is not implemented")
        transpose = self._compressed_axis == 1
        return matrix_product(self._rows_form().to_bcoo(), other, transpose, type(self).__name__)


@tree_util.register_pytree_node_class
class CSR(_Compressed):
    """A sparse matrix in compressed-row format: row r stores the elements indptr[r] to
    indptr[r + 1] - 1, each at column indices[k]."""

    _compressed_axis = 0

    @classmethod
    def fromdense(cls, mat, *, nse: int | None = None, index_dtype=np.int32) -> CSR:
        return csr_fromdense(mat, nse=nse, index_dtype=index_dtype)

    def todense(self) -> Array:
        return csr_todense(self)

    def transpose(self, axes: Sequence[int] | None = None) -> CSC:
        _check_axes(axes, "CSR")
        return CSC((self.data, self.indices, self.indptr), shape=self.shape[::-1])


@tree_util.register_pytree_node_class
class CSC(_Compressed):
    """A sparse matrix in compressed-column format: column c stores the elements indptr[c] to
    indptr[c + 1] - 1, each at row indices[k]."""

    _compressed_axis = 1

    @classmethod
    def fromdense(cls, mat, *, nse: int | None = None, index_dtype=np.int32) -> CSC:
        return csr_fromdense(fnp.asarray(mat).T, nse=nse, index_dtype=index_dtype).T

    def todense(self) -> Array:
        return self._rows_form().todense().T

    def transpose(self, axes: Sequence[int] | None = None) -> CSR:
        _check_axes(axes, "CSC")
        return CSR((self.data, self.indices, self.indptr), shape=self.shape[::-1])


def _check_axes(axes, name: str) -> None:
    if axes is not None and tuple(axes) != (1, 0):
        raise NotImplementedError(f"{name}.transpose: axes must be None or (1, 0), got {axes}")


def csr_fromdense(mat, *, nse: int | None = None, index_dtype=np.int32) -> CSR:
    """The CSR form of a dense matrix: its nonzeros in row-major order, then `nse` minus their
    count padding slots (0 at column 0). `nse` defaults to the count of nonzeros, which needs
    concrete values: under jit, pass it."""
    mat = fnp.asarray(mat)
    if mat.ndim != 2:
        raise ValueError(f"csr_fromdense: expected a matrix, got an array of shape {mat.shape}")
    rows = bcsr_fromdense(mat, nse=nse, index_dtype=index_dtype)
    slot = fnp.arange(rows.nse, dtype=rows.indptr.dtype)
    indices = fnp.where(slot < rows.indptr[-1], rows.indices, fnp.zeros((), rows.indices.dtype))
    return CSR((rows.data, indices, rows.indptr), shape=mat.shape)


def csr_todense(mat: CSR) -> Array:
    """The dense matrix: zeros, with every stored element added at its position."""
    if not isinstance(mat, CSR):
        raise TypeError(f"csr_todense: expected a CSR matrix, got {type(mat).__name__}")
    return mat._rows_form().todense()


def csr_matvec(mat: CSR, v, transpose: bool = False) -> Array:
    """`mat @ v` (or `mat.T @ v`) for a dense vector `v`."""
    v = fnp.asarray(v)
    if v.ndim != 1:
        raise ValueError(f"csr_matvec: v must be a vector, got shape {v.shape}")
    return matrix_product(mat._rows_form().to_bcoo(), v, transpose, "csr_matvec")


def csr_matmat(mat: CSR, B, *, transpose: bool = False) -> Array:
    """`mat @ B` (or `mat.T @ B`) for a dense matrix `B`."""
    B = fnp.asarray(B)
    if B.ndim != 2:
        raise ValueError(f"csr_matmat: B must be a matrix, got shape {B.shape}")
    return matrix_product(mat._rows_form().to_bcoo(), B, transpose, "csr_matmat")
