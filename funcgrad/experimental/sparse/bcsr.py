"""BCSR, the batched compressed-row format, and its conversions and products.

`BCSR((data, indices, indptr), shape=shape)` is a (batch of) matrices with dense blocks:
`data` has shape (*batch, nse, *dense), `indices` (*batch, nse) holds each stored element's
column, and `indptr` (*batch, rows + 1) says where each row's elements start: row r stores the
elements indptr[r] to indptr[r + 1] - 1, and the slots from indptr[rows] on are padding. Like
BCOO it is a pytree of its three arrays; its operations go through the BCOO form, which is
the same elements with their rows written out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from funcgrad import core, dtypes, lax, tree_util
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.experimental.sparse._convert import checked_shape, in_range, unpacked
from funcgrad.experimental.sparse.bcoo import (
    BCOO,
    bcoo_extract,
    bcoo_fromdense,
    bcoo_sort_indices,
    bcoo_sum_duplicates,
    check_stored_count,
)
from funcgrad.experimental.sparse.bcoo_products import bcoo_dot_general
from funcgrad.experimental.sparse.bcoo_structure import (
    basic_items,
    bcoo_broadcast_in_dim,
    bcoo_concatenate,
    is_basic_index,
)

__all__ = [
    "BCSR",
    "bcsr_broadcast_in_dim",
    "bcsr_concatenate",
    "bcsr_dot_general",
    "bcsr_extract",
    "bcsr_fromdense",
    "bcsr_sum_duplicates",
    "bcsr_todense",
]


@tree_util.register_pytree_node_class
class BCSR:
    """A sparse (batch of) matrices in compressed-row format (see the module docstring)."""

    __array_ufunc__ = None  # NumPy arrays defer to BCSR's reflected operators

    def __init__(self, args: tuple[Any, Any, Any], *, shape: Sequence[int]):
        buffers = unpacked(args, 3, "data, indices, indptr", "BCSR")
        data, indices, indptr = (fnp.asarray(a) for a in buffers)
        shape = checked_shape(shape, "BCSR")
        n_batch = indices.ndim - 1
        if not (dtypes.is_int(indices.dtype) and dtypes.is_int(indptr.dtype)):
            raise TypeError(
                f"BCSR: indices and indptr must be integers, got {indices.dtype} and {indptr.dtype}"
            )
        batch_shape = shape[:n_batch]
        if (
            n_batch < 0
            or len(shape) < n_batch + 2
            or indices.shape[:n_batch] != batch_shape
            or indptr.shape != (*batch_shape, shape[n_batch] + 1)
            or data.shape != (*indices.shape, *shape[n_batch + 2 :])
        ):
            raise ValueError(
                f"BCSR: data of shape {data.shape}, indices of shape {indices.shape} and indptr "
                f"of shape {indptr.shape} do not describe an array of shape {shape}: indices "
                "(*batch, nse) fix the batch shape, which the shape must start with, followed "
                "by (rows, columns); indptr must have shape (*batch, rows + 1) and data "
                "(*batch, nse, *dense)"
            )
        _check_row_pointers(indptr, indices.shape[-1])
        self.data, self.indices, self.indptr = data, indices, indptr
        self._trailing_shape = shape[n_batch:]

    def tree_flatten(self):
        return (self.data, self.indices, self.indptr), (self._trailing_shape, self.nse)

    @classmethod
    def tree_unflatten(cls, aux, children) -> BCSR:
        mat = object.__new__(cls)
        mat.data, mat.indices, mat.indptr = children
        mat._trailing_shape, nse = aux
        check_stored_count("BCSR", mat.indices, -1, nse)
        return mat

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.indices.shape[:-1]) + self._trailing_shape

    @property
    def nse(self) -> int:
        return self.indices.shape[-1]

    @property
    def n_batch(self) -> int:
        return self.indices.ndim - 1

    @property
    def n_sparse(self) -> int:
        return 2

    @property
    def n_dense(self) -> int:
        return len(self.shape) - self.n_batch - 2

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __len__(self) -> int:
        return self.shape[0]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self) -> str:
        return f"BCSR({self.dtype.name}{list(self.shape)}, nse={self.nse}, n_batch={self.n_batch})"

    @classmethod
    def fromdense(
        cls,
        mat,
        *,
        nse: int | None = None,
        index_dtype=np.int32,
        n_dense: int = 0,
        n_batch: int = 0,
    ) -> BCSR:
        return bcsr_fromdense(
            mat, nse=nse, index_dtype=index_dtype, n_dense=n_dense, n_batch=n_batch
        )

    @classmethod
    def from_bcoo(cls, arr: BCOO) -> BCSR:
        """The BCSR form of a BCOO array with two sparse dimensions (sorting its elements)."""
        if not isinstance(arr, BCOO) or arr.n_sparse != 2:
            raise ValueError(
                f"BCSR.from_bcoo: expected a BCOO array with two sparse dimensions, got {arr!r}"
            )
        if not arr.indices_sorted:
            arr = bcoo_sort_indices(arr)
        n_batch = arr.n_batch
        rows = arr.shape[n_batch]
        # Elements outside the matrix sort last; give them the row past the last one so that
        # no row's range reaches them.
        valid = in_range(arr.indices, arr.shape[n_batch : n_batch + 2])
        row = fnp.where(valid, arr.indices[..., 0], rows)
        boundary = lax.broadcasted_iota(row.dtype, (rows + 1, 1), 0)
        indptr_dtype = _counting_dtype(arr.indices.dtype, arr.nse)
        indptr = fnp.sum(row[..., None, :] < boundary, axis=-1, dtype=indptr_dtype)
        return cls((arr.data, arr.indices[..., 1], indptr), shape=arr.shape)

    @classmethod
    def from_scipy_sparse(
        cls, mat, *, index_dtype=None, n_dense: int = 0, n_batch: int = 0
    ) -> BCSR:
        """The BCSR form of a SciPy sparse matrix of any format (read through `tocsr()`)."""
        if n_batch or n_dense:
            raise NotImplementedError(
                f"BCSR.from_scipy_sparse: n_batch={n_batch} and n_dense={n_dense} must be 0"
            )
        csr = mat.tocsr()
        index_dtype = np.dtype(index_dtype or np.int32)
        return cls(
            (np.asarray(csr.data), csr.indices.astype(index_dtype), csr.indptr.astype(index_dtype)),
            shape=csr.shape,
        )

    def sum_duplicates(self, nse: int | None = None, remove_zeros: bool = True) -> BCSR:
        """One element per distinct index, in sorted order (see `BCOO.sum_duplicates`)."""
        return BCSR.from_bcoo(self.to_bcoo().sum_duplicates(nse, remove_zeros))

    def block_until_ready(self) -> BCSR:
        for buffer in (self.data, self.indices, self.indptr):
            buffer.block_until_ready()
        return self

    def to_bcoo(self) -> BCOO:
        """The same elements with their rows written out: row r for slots indptr[r] to
        indptr[r + 1] - 1, and the row count (outside the matrix) for padding slots."""
        dtype = _counting_dtype(self.indptr.dtype, self.nse)
        slot = lax.broadcasted_iota(dtype, (1, self.nse), 1)
        ends = self.indptr[..., 1:, None].astype(dtype)
        row = fnp.sum(ends <= slot, axis=-2, dtype=self.indices.dtype)
        indices = fnp.stack([row, self.indices.astype(row.dtype)], axis=-1)
        return BCOO((self.data, indices), shape=self.shape)

    def todense(self) -> Array:
        return self.to_bcoo().todense()

    def __getitem__(self, item) -> BCSR | BCOO:
        """NumPy's indexing, through sparsify's rules: BCSR where the rows stay whole, else
        BCOO. A static integer out of bounds raises IndexError, as for BCOO (the dense
        indexing the rules follow would clamp it, and a loop over the rows would never end)."""
        from funcgrad.experimental.sparse.transform import sparsify  # it builds on BCSR

        if is_basic_index(item):
            basic_items(self.shape, item, "BCSR indexing")
        return sparsify(lambda mat: mat[item])(self)

    def __matmul__(self, other) -> Array:
        return self.to_bcoo() @ other

    def __rmatmul__(self, other) -> Array:
        return other @ self.to_bcoo()


def _check_row_pointers(indptr, nse: int) -> None:
    """Raise unless every batch's `indptr` starts at 0, never decreases and ends at most at
    `nse`: otherwise rows would overlap or claim slots that do not exist, and the array would
    silently mean something else. Known only from concrete values: a traced `indptr` (under
    jit or vmap) is taken as given."""
    if isinstance(indptr, core.Tracer):
        return
    pointers = np.asarray(indptr)
    bad = (pointers[..., 0] != 0) | (pointers[..., -1] > nse)
    bad |= np.any(np.diff(pointers, axis=-1) < 0, axis=-1)
    if np.any(bad):
        batch = tuple(int(i) for i in np.argwhere(bad)[0])
        where = f" (batch {batch})" if batch else ""
        raise ValueError(
            f"BCSR: indptr {pointers[batch].tolist()}{where} must start at 0, never decrease "
            f"and end at most at nse={nse}: row r stores the elements indptr[r] to "
            "indptr[r + 1] - 1"
        )


def _counting_dtype(index_dtype, nse: int) -> np.dtype:
    """`index_dtype`, or a wider integer type where it cannot count to `nse` (indptr's values
    and the slots they bound run up to nse, which may exceed every index: int8 columns of a
    20 x 20 matrix that stores 400 elements)."""
    if nse <= np.iinfo(index_dtype).max:
        return np.dtype(index_dtype)
    return np.promote_types(index_dtype, np.min_scalar_type(nse))


def bcsr_fromdense(
    mat, *, nse: int | None = None, n_batch: int = 0, n_dense: int = 0, index_dtype=np.int32
) -> BCSR:
    """The BCSR form of a dense array, whose dimensions after the first `n_batch` and before
    the last `n_dense` are the rows and columns. `nse` as in `bcoo_fromdense`."""
    mat = fnp.asarray(mat)
    if mat.ndim - n_batch - n_dense != 2:
        raise ValueError(
            f"bcsr_fromdense: an array of shape {mat.shape} with n_batch={n_batch} and "
            f"n_dense={n_dense} must leave exactly two sparse dimensions (rows, columns)"
        )
    coo = bcoo_fromdense(mat, nse=nse, n_batch=n_batch, n_dense=n_dense, index_dtype=index_dtype)
    return BCSR.from_bcoo(coo)


def bcsr_todense(mat: BCSR) -> Array:
    return mat.todense()


def bcsr_sum_duplicates(mat: BCSR, nse: int | None = None) -> BCSR:
    """One element per distinct index of each batch, holding the sum of the data there (see
    `bcoo_sum_duplicates`)."""
    if not isinstance(mat, BCSR):
        raise TypeError(f"bcsr_sum_duplicates: expected a BCSR array, got {type(mat).__name__}")
    return BCSR.from_bcoo(bcoo_sum_duplicates(mat.to_bcoo(), nse=nse))


def bcsr_extract(indices, indptr, mat) -> Array:
    """The values of the dense `mat` at the elements that `indices` and `indptr` describe (the
    data a BCSR array with them has where it agrees with `mat`)."""
    mat = fnp.asarray(mat)
    indices, indptr = fnp.asarray(indices), fnp.asarray(indptr)
    n_batch = indices.ndim - 1
    data_shape = (*indices.shape, *mat.shape[n_batch + 2 :])
    pattern = BCSR((fnp.zeros(data_shape, mat.dtype), indices, indptr), shape=mat.shape)
    return bcoo_extract(pattern.to_bcoo(), mat, assume_unique=True).data


def bcsr_dot_general(
    lhs, rhs, *, dimension_numbers, precision=None, preferred_element_type=None
) -> Array:
    """`lax.dot_general` with a BCSR array as one operand and a dense array as the other."""
    if isinstance(lhs, BCSR) == isinstance(rhs, BCSR):
        raise TypeError(
            "bcsr_dot_general: exactly one operand must be a BCSR array, got "
            f"{type(lhs).__name__} and {type(rhs).__name__}"
        )
    lhs, rhs = (x.to_bcoo() if isinstance(x, BCSR) else fnp.asarray(x) for x in (lhs, rhs))
    return bcoo_dot_general(
        lhs,
        rhs,
        dimension_numbers=dimension_numbers,
        precision=precision,
        preferred_element_type=preferred_element_type,
    )


def _as_bcsr(mat, name: str) -> BCSR:
    if not isinstance(mat, BCSR):
        raise TypeError(f"{name}: expected a BCSR array, got {type(mat).__name__}")
    return mat


def _compressed(mat: BCOO, name: str) -> BCSR:
    if mat.n_sparse != 2:
        raise ValueError(
            f"{name}: the result {mat!r} has {mat.n_sparse} sparse dimensions; a BCSR array "
            "has two (rows and columns)"
        )
    return BCSR.from_bcoo(mat)


def bcsr_broadcast_in_dim(
    mat: BCSR, *, shape: Sequence[int], broadcast_dimensions: Sequence[int], sharding=None
) -> BCSR:
    """`lax.broadcast_in_dim` of a BCSR array, as `bcoo_broadcast_in_dim` places dimensions; the
    result must keep two sparse dimensions (new dimensions go before the rows, as batch
    dimensions, or after the columns, as dense ones)."""
    mat = _as_bcsr(mat, "bcsr_broadcast_in_dim")
    out = bcoo_broadcast_in_dim(
        mat.to_bcoo(), shape=shape, broadcast_dimensions=broadcast_dimensions
    )
    return _compressed(out, "bcsr_broadcast_in_dim")


def bcsr_concatenate(operands: Sequence[BCSR], *, dimension: int) -> BCSR:
    """The BCSR arrays joined along `dimension` (see `bcoo_concatenate`)."""
    operands = [_as_bcsr(op, "bcsr_concatenate") for op in operands]
    out = bcoo_concatenate([op.to_bcoo() for op in operands], dimension=dimension)
    return _compressed(out, "bcsr_concatenate")
