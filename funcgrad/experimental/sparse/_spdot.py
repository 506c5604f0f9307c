"""Products of two BCOO arrays: the contraction of one with the other, and their elementwise
product.

Both pair every stored element of one operand with every stored element of the other in the
same batch: a pair contributes the product of its data (of its dense blocks, for a
contraction) where the two indices agree on the paired dimensions, and nothing otherwise (its
slot becomes padding). Duplicated indices need no care, since the dense form sums them and
both products are bilinear. So the result stores (at most) lhs nse x rhs nse elements per
batch, and the work grows with that number, never with the size of the dense forms.
"""

from __future__ import annotations

import math

import numpy as np

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.experimental.sparse import _order
from funcgrad.experimental.sparse._convert import in_range


def _padding(sparse_shape, shape, dtype) -> Array:
    return fnp.broadcast_to(fnp.asarray(np.array(sparse_shape, dtype)), shape)


def _first_along(x, axis: int) -> Array:
    """The first entry of `x` along `axis`, kept as an axis of size 1; zeros where there is no
    entry (an operand storing no elements, whose slot `kept` then marks as padding)."""
    if x.shape[axis] == 0:
        return fnp.zeros((*x.shape[:axis], 1, *x.shape[axis + 1 :]), x.dtype)
    return lax.slice_in_dim(x, 0, 1, axis=axis)


def _agree(lhs_indices, rhs_indices, lhs_columns, rhs_columns, lhs_valid, rhs_valid) -> Array:
    """Whether stored element i of lhs (axis -2) and j of rhs (axis -1) both lie inside their
    arrays and have equal indices in the paired columns: (*batch, lhs nse, rhs nse)."""
    agree = lhs_valid[..., :, None] & rhs_valid[..., None, :]
    for lhs_column, rhs_column in zip(lhs_columns, rhs_columns):
        agree = agree & (
            lhs_indices[..., :, None, lhs_column] == rhs_indices[..., None, :, rhs_column]
        )
    return agree


BATCH, SPARSE, DENSE = "batch", "sparse", "dense"


class _Layout:
    """Which dimensions of an operand are batch (the first `n_batch`), dense (the last
    `n_dense`) and sparse (those between)."""

    def __init__(self, mat):
        self.ndim, self.n_batch, self.n_dense = mat.ndim, mat.n_batch, mat.n_dense

    def kind(self, dim: int) -> str:
        if dim < self.n_batch:
            return BATCH
        return DENSE if dim >= self.ndim - self.n_dense else SPARSE

    def make_sparse(self, dim: int) -> None:
        """Make `dim` sparse, with the batch dimensions after it or the dense ones before it:
        spreading them into the stored elements, which stores no zeros."""
        if self.kind(dim) == BATCH:
            self.n_batch = dim
        elif self.kind(dim) == DENSE:
            self.n_dense = self.ndim - 1 - dim

    def state(self) -> tuple[int, int]:
        return self.n_batch, self.n_dense


def operand_layouts(lhs, rhs, dimension_numbers) -> tuple[_Layout, _Layout]:
    """The layout each operand takes for the product: the fewest changes that
    make every contracted pair sparse with sparse (matched by index) or dense with dense
    (contracted in the blocks' product), and that leave the result's dimensions (paired
    batch dims, then lhs's free dims, then rhs's) in batch, sparse, dense order: rhs's
    unpaired batch dims stay batch dims only after lhs free dims that are all batch dims, and
    lhs's free dense dims stay dense only before rhs free dims that are all dense. Every change
    turns batch or dense dimensions into sparse ones, so the layouts only move one way and the
    loop ends."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    left, right = _Layout(lhs), _Layout(rhs)
    lhs_free = [d for d in range(lhs.ndim) if d not in lhs_contract + lhs_batch]
    rhs_free = [d for d in range(rhs.ndim) if d not in rhs_contract + rhs_batch]
    while True:
        before = left.state(), right.state()
        for lhs_dim, rhs_dim in zip(lhs_contract, rhs_contract):
            kinds = left.kind(lhs_dim), right.kind(rhs_dim)
            if kinds not in ((SPARSE, SPARSE), (DENSE, DENSE)):
                left.make_sparse(lhs_dim)
                right.make_sparse(rhs_dim)
        if any(left.kind(d) != BATCH for d in lhs_free):
            for d in rhs_free:
                if right.kind(d) == BATCH:
                    right.make_sparse(d)
        if any(right.kind(d) != DENSE for d in rhs_free):
            for d in lhs_free:
                if left.kind(d) == DENSE:
                    left.make_sparse(d)
        if (left.state(), right.state()) == before:
            return left, right


def mismatched_batch_pairs(left: _Layout, right: _Layout, dimension_numbers) -> list[str]:
    """The batch pairs a product of operands in these layouts cannot take: each must pair
    batch with batch dimensions or dense with dense ones (a sparse dimension paired as a batch
    dimension would have to turn into a batch dimension, storing a masked copy of every element
    per position)."""
    _, (lhs_batch, rhs_batch) = dimension_numbers
    return [
        f"lhs dim {lhs_dim} ({left.kind(lhs_dim)}) with rhs dim {rhs_dim} ({right.kind(rhs_dim)})"
        for lhs_dim, rhs_dim in zip(lhs_batch, rhs_batch)
        if (left.kind(lhs_dim), right.kind(rhs_dim)) not in ((BATCH, BATCH), (DENSE, DENSE))
    ]


def _data_axis(mat, dim: int) -> int:
    """The axis of `mat.data` that holds dimension `dim` (a batch or dense one)."""
    return dim if dim < mat.n_batch else dim - mat.n_sparse + 1


def _aligned(mat, batch, contract, before: int, after: int, out_batch_shape, dtype):
    """`mat`'s data as (*out batch, nse, *contracted dense dims, *free dense dims) and its
    indices as (*out batch, nse, n_sparse), with size-1 axes where they do not vary (the other
    operand's unpaired batch dims: `before` of them ahead of this operand's, `after` behind;
    and, for the indices, the paired dense dims)."""
    n_batch = mat.n_batch
    unpaired = [d for d in range(n_batch) if d not in batch]
    dense_contract = [d for d in contract if d >= n_batch + mat.n_sparse]
    free_dense = [
        d for d in range(n_batch + mat.n_sparse, mat.ndim) if d not in contract and d not in batch
    ]
    order = [_data_axis(mat, d) for d in (*batch, *unpaired)] + [n_batch]
    order += [_data_axis(mat, d) for d in (*dense_contract, *free_dense)]
    data = fnp.transpose(mat.data, order).astype(dtype)
    rest = data.shape[len(batch) + len(unpaired) :]
    sizes = [mat.shape[d] for d in unpaired]
    data = data.reshape(*data.shape[: len(batch)], *(1,) * before, *sizes, *(1,) * after, *rest)
    data = fnp.broadcast_to(data, (*out_batch_shape, *rest))
    batch_of_indices = [d for d in batch if d < n_batch]
    indices = fnp.transpose(mat.indices, (*batch_of_indices, *unpaired, n_batch, n_batch + 1))
    paired_sizes = [mat.shape[d] if d < n_batch else 1 for d in batch]
    indices = indices.reshape(
        *paired_sizes, *(1,) * before, *sizes, *(1,) * after, *mat.indices.shape[-2:]
    )
    return data, indices, len(free_dense)


def spdot_general(
    lhs, rhs, dimension_numbers, out_shape, dtype, precision=None
) -> tuple[Array, Array]:
    """dot_general of two BCOO arrays laid out by `operand_layouts` (whose batch pairs are
    batch with batch or dense with dense dimensions). The result's batch dimensions are the
    paired ones, then lhs's and rhs's unpaired batch ones; its sparse dimensions lhs's free
    ones, then rhs's; its dense dimensions lhs's free dense ones, then rhs's. Each pair of
    stored elements contributes the product of their dense blocks (contracting the paired
    dense dimensions) where their indices agree on the contracted sparse dimensions."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    n_paired = len(lhs_batch)
    n_lhs_only = sum(d not in lhs_batch for d in range(lhs.n_batch))
    n_rhs_only = sum(d not in rhs_batch for d in range(rhs.n_batch))
    out_n_batch = n_paired + n_lhs_only + n_rhs_only
    out_batch_shape = out_shape[:out_n_batch]
    # Contracted dense pairs, in one order for both operands.
    dense_pairs = [
        (lhs_dim, rhs_dim)
        for lhs_dim, rhs_dim in zip(lhs_contract, rhs_contract)
        if lhs_dim >= lhs.n_batch + lhs.n_sparse
    ]
    sparse_pairs = [
        (lhs_dim - lhs.n_batch, rhs_dim - rhs.n_batch)
        for lhs_dim, rhs_dim in zip(lhs_contract, rhs_contract)
        if lhs_dim < lhs.n_batch + lhs.n_sparse
    ]
    lhs_data, lhs_indices, n_lhs_dense = _aligned(
        lhs,
        lhs_batch,
        [lhs_dim for lhs_dim, _ in dense_pairs],
        0,
        n_rhs_only,
        out_batch_shape,
        dtype,
    )
    rhs_data, rhs_indices, n_rhs_dense = _aligned(
        rhs,
        rhs_batch,
        [rhs_dim for _, rhs_dim in dense_pairs],
        n_lhs_only,
        0,
        out_batch_shape,
        dtype,
    )
    # (*batch, lhs nse, *lhs free dense, rhs nse, *rhs free dense) -> pairs first
    contracted = tuple(range(out_n_batch + 1, out_n_batch + 1 + len(dense_pairs)))
    batch_axes = tuple(range(out_n_batch))
    product = lax.dot_general(
        lhs_data, rhs_data, ((contracted, contracted), (batch_axes, batch_axes)), precision
    )
    rhs_nse_axis = out_n_batch + 1 + n_lhs_dense
    product = fnp.moveaxis(product, rhs_nse_axis, out_n_batch + 1)
    n_out_dense = n_lhs_dense + n_rhs_dense
    out_dense_shape = product.shape[out_n_batch + 2 :]

    lhs_sparse_shape = lhs.shape[lhs.n_batch : lhs.n_batch + lhs.n_sparse]
    rhs_sparse_shape = rhs.shape[rhs.n_batch : rhs.n_batch + rhs.n_sparse]
    lhs_free = [c for c in range(lhs.n_sparse) if c not in [p for p, _ in sparse_pairs]]
    rhs_free = [c for c in range(rhs.n_sparse) if c not in [p for _, p in sparse_pairs]]
    lhs_valid = in_range(lhs_indices, lhs_sparse_shape)
    rhs_valid = in_range(rhs_indices, rhs_sparse_shape)
    agree = _agree(
        lhs_indices,
        rhs_indices,
        [p for p, _ in sparse_pairs],
        [p for _, p in sparse_pairs],
        lhs_valid,
        rhs_valid,
    )
    agree = fnp.broadcast_to(agree, (*out_batch_shape, lhs.nse, rhs.nse))
    product = fnp.where(agree.reshape(agree.shape + (1,) * n_out_dense), product, 0)
    product = product.astype(dtype)

    out_sparse_shape = out_shape[out_n_batch : len(out_shape) - n_out_dense]
    index_dtype = np.promote_types(lhs.indices.dtype, rhs.indices.dtype)
    pairs = agree.shape
    columns = [
        fnp.broadcast_to(lhs_indices[..., :, None, c], pairs).astype(index_dtype) for c in lhs_free
    ] + [
        fnp.broadcast_to(rhs_indices[..., None, :, c], pairs).astype(index_dtype) for c in rhs_free
    ]
    n_out_sparse = len(columns)
    if columns:
        indices = fnp.stack(columns, axis=-1)
    else:
        indices = fnp.zeros((*pairs, 0), index_dtype)
    # A side with no free sparse dimension puts all its elements at one free index: sum them.
    kept = agree
    for axis, free in ((out_n_batch, lhs_free), (out_n_batch + 1, rhs_free)):
        if not free:
            product = fnp.sum(product, axis=axis, keepdims=True, dtype=dtype)
            kept = fnp.any(kept, axis=axis, keepdims=True)
            indices = _first_along(indices, axis)
    padding = _padding(out_sparse_shape, indices.shape, index_dtype)
    indices = fnp.where(kept[..., None], indices, padding)
    nse = product.shape[out_n_batch] * product.shape[out_n_batch + 1]
    data = product.reshape(*out_batch_shape, nse, *out_dense_shape)
    indices = indices.reshape(*out_batch_shape, nse, n_out_sparse)
    room = math.prod(out_sparse_shape)
    if nse > room:  # more pairs than positions: merge them into one element per position
        merged = _order.sum_duplicates(data, indices, out_sparse_shape, remove_zeros=False)
        data, indices = merged.into_slots(room)
    return data, indices


def multiply_sparse(lhs, rhs, dtype) -> tuple[Array, Array]:
    """The data and indices of the elementwise product of two BCOO arrays of one shape and
    layout: each pair of elements with equal index stores the product of their data."""
    n_batch, n_dense = lhs.n_batch, lhs.n_dense
    sparse_shape = lhs.shape[n_batch : n_batch + lhs.n_sparse]
    lhs_valid = in_range(lhs.indices, sparse_shape)
    rhs_valid = in_range(rhs.indices, sparse_shape)
    every_column = range(lhs.n_sparse)
    agree = _agree(lhs.indices, rhs.indices, every_column, every_column, lhs_valid, rhs_valid)
    dense_axes = (1,) * n_dense
    lhs_data = lhs.data.astype(dtype).reshape(
        *lhs.data.shape[: n_batch + 1], 1, *lhs.data.shape[n_batch + 1 :]
    )
    rhs_data = rhs.data.astype(dtype)[(slice(None),) * n_batch + (None,)]
    product = fnp.where(agree.reshape(agree.shape + dense_axes), lhs_data * rhs_data, 0)
    index_dtype = np.promote_types(lhs.indices.dtype, rhs.indices.dtype)
    pairs = (*agree.shape, lhs.n_sparse)
    indices = fnp.broadcast_to(lhs.indices.astype(index_dtype)[..., :, None, :], pairs)
    indices = fnp.where(agree[..., None], indices, _padding(sparse_shape, pairs, index_dtype))
    batch_shape, nse = agree.shape[:n_batch], lhs.nse * rhs.nse
    data = product.astype(dtype).reshape(*batch_shape, nse, *lhs.shape[n_batch + lhs.n_sparse :])
    return data, indices.reshape(*batch_shape, nse, lhs.n_sparse)
