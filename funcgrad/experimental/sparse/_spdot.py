"""Products of two BCOO arrays: the contraction of one with the other, and their elementwise
product.

Both pair every stored element of one operand with every stored element of the other in the
same batch: a pair contributes the product of its data where the two indices agree on the
paired dimensions, and nothing otherwise (its slot becomes padding). Duplicated indices need no
care, since the dense form sums them and both products are bilinear. So the result stores (at
most) lhs nse x rhs nse elements per batch, and the work grows with that number, never with the
size of the dense forms.
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


def spdot_general(lhs, rhs, dimension_numbers, out_shape, dtype) -> tuple[Array, Array]:
    """dot_general of two BCOO arrays (`lhs` and `rhs` as BCOO values, without dense
    dimensions), whose batch dimensions are batch dimensions of both and whose contracting
    dimensions are sparse ones. The result's batch dimensions are the paired ones, then lhs's
    and rhs's unpaired ones; its sparse dimensions lhs's free ones, then rhs's."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = dimension_numbers
    lhs_unpaired = [d for d in range(lhs.n_batch) if d not in lhs_batch]
    rhs_unpaired = [d for d in range(rhs.n_batch) if d not in rhs_batch]
    n_paired, n_lhs_only, n_rhs_only = len(lhs_batch), len(lhs_unpaired), len(rhs_unpaired)
    out_n_batch = n_paired + n_lhs_only + n_rhs_only

    def batch_aligned(mat, batch, unpaired, before: int, after: int):
        """data (*out batch, nse) and indices (*out batch, nse, n_sparse), with size-1 axes
        for the other operand's unpaired batch dimensions."""
        order = (*batch, *unpaired)
        data = fnp.transpose(mat.data, (*order, mat.n_batch)).astype(dtype)
        indices = fnp.transpose(mat.indices, (*order, mat.n_batch, mat.n_batch + 1))
        lead, sizes = n_paired, data.shape[n_paired : mat.n_batch]
        shape = (*data.shape[:lead], *(1,) * before, *sizes, *(1,) * after, mat.nse)
        return data.reshape(shape), indices.reshape(*shape, mat.n_sparse)

    lhs_data, lhs_indices = batch_aligned(lhs, lhs_batch, lhs_unpaired, 0, n_rhs_only)
    rhs_data, rhs_indices = batch_aligned(rhs, rhs_batch, rhs_unpaired, n_lhs_only, 0)
    lhs_sparse_shape = lhs.shape[lhs.n_batch :]
    rhs_sparse_shape = rhs.shape[rhs.n_batch :]
    lhs_paired = [d - lhs.n_batch for d in lhs_contract]
    rhs_paired = [d - rhs.n_batch for d in rhs_contract]
    lhs_free = [c for c in range(lhs.n_sparse) if c not in lhs_paired]
    rhs_free = [c for c in range(rhs.n_sparse) if c not in rhs_paired]
    lhs_valid = in_range(lhs_indices, lhs_sparse_shape)
    rhs_valid = in_range(rhs_indices, rhs_sparse_shape)
    agree = _agree(lhs_indices, rhs_indices, lhs_paired, rhs_paired, lhs_valid, rhs_valid)
    product = fnp.where(agree, lhs_data[..., :, None] * rhs_data[..., None, :], 0).astype(dtype)

    out_batch_shape = out_shape[:out_n_batch]
    out_sparse_shape = out_shape[out_n_batch:]
    index_dtype = np.promote_types(lhs.indices.dtype, rhs.indices.dtype)
    pairs = (*out_batch_shape, lhs.nse, rhs.nse)
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
    nse = product.shape[-2] * product.shape[-1]
    data = product.reshape(*out_batch_shape, nse)
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
