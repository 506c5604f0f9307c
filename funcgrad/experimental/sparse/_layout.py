"""Operations that rearrange a BCOO array's stored elements without comparing their indices:
transposing, summing over axes, reshaping, and scaling by a dense array.

Each takes and returns `data`, `indices` and the shape; padding entries stay padding (their
data may change, but they keep addressing nothing).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.experimental.sparse._convert import (
    check_index_dtype,
    gather_slices,
    in_range,
    position_columns,
    zero_where_invalid,
)


def _select_columns(indices, columns: Sequence[int]) -> Array:
    return fnp.take(indices, np.asarray(columns, np.int32), axis=-1)


def transpose(data, indices, shape, permutation: Sequence[int]) -> tuple[Array, Array, tuple]:
    """Axes permuted, where `permutation` keeps the batch, sparse and dense groups apart."""
    n_batch, n_sparse = indices.ndim - 2, indices.shape[-1]
    n_positional = n_batch + n_sparse
    batch_perm = tuple(permutation[:n_batch])
    sparse_perm = [d - n_batch for d in permutation[n_batch:n_positional]]
    dense_perm = tuple(d - n_positional + n_batch + 1 for d in permutation[n_positional:])
    data = fnp.transpose(data, batch_perm + (n_batch,) + dense_perm)
    indices = fnp.transpose(indices, batch_perm + (n_batch, n_batch + 1))
    if sparse_perm != list(range(n_sparse)):
        indices = _select_columns(indices, sparse_perm)
    return data, indices, tuple(shape[d] for d in permutation)


def reduce_sum(data, indices, shape, axes: Sequence[int]) -> tuple[Array, Array, tuple]:
    """The sum over `axes`: dense axes sum the data, sparse axes leave the index (elements
    that then share an index add up), and batch axes join their batches' elements."""
    n_batch, n_sparse = indices.ndim - 2, indices.shape[-1]
    n_positional = n_batch + n_sparse
    axes = set(axes)
    dense_axes = tuple(d - n_positional + n_batch + 1 for d in axes if d >= n_positional)
    data = fnp.sum(data, axis=dense_axes, dtype=data.dtype)
    kept_sparse = [i for i in range(n_sparse) if n_batch + i not in axes]
    if len(kept_sparse) < n_sparse:
        # An element outside the array in a dropped dimension must not land inside: it becomes
        # padding, holding 0 (which also matters when no sparse dimension is left).
        sparse_shape = shape[n_batch:n_positional]
        valid = in_range(indices, sparse_shape)
        data = zero_where_invalid(data, valid)
        kept = _select_columns(indices, kept_sparse)
        padding = fnp.asarray(np.array([sparse_shape[i] for i in kept_sparse], indices.dtype))
        indices = fnp.where(valid[..., None], kept, padding)
    batch_axes = sorted(d for d in axes if d < n_batch)
    if batch_axes:
        kept_batch = [d for d in range(n_batch) if d not in batch_axes]
        order = (*kept_batch, *batch_axes, n_batch)  # the joined axes next to nse, then merged
        data = _merge_into_nse(data, order, len(kept_batch))
        indices = _merge_into_nse(indices, order, len(kept_batch))
    return data, indices, tuple(s for d, s in enumerate(shape) if d not in axes)


def _merge_into_nse(x, order: tuple[int, ...], n_kept: int) -> Array:
    x = fnp.transpose(x, order + tuple(range(len(order), x.ndim)))
    merged = math.prod(x.shape[n_kept : len(order)])
    return x.reshape(*x.shape[:n_kept], merged, *x.shape[len(order) :])


def reshape(data, indices, shape, new_shape: tuple[int, ...], name: str):
    """The same elements in `new_shape`: its leading dimensions of the batch size are the new
    batch dimensions, its last n_dense the (unchanged) dense ones, and the sparse indices are
    re-read in row-major order in between."""
    n_batch, n_sparse = indices.ndim - 2, indices.shape[-1]
    n_positional = n_batch + n_sparse
    batch_shape, sparse_shape = shape[:n_batch], shape[n_batch:n_positional]
    dense_shape = shape[n_positional:]
    new_dense_start = len(new_shape) - len(dense_shape)
    new_n_batch = _batch_split(
        new_shape, new_dense_start, math.prod(batch_shape), math.prod(sparse_shape)
    )
    fits = new_n_batch is not None and tuple(new_shape[new_dense_start:]) == dense_shape
    if not fits and math.prod(new_shape) == 0:
        return _holding_nothing(new_shape, indices.shape[-2], data.dtype, indices.dtype, name)
    if not fits:
        raise ValueError(
            f"{name}: cannot reshape a BCOO array of shape {shape} (batch {batch_shape}, sparse "
            f"{sparse_shape}, dense {dense_shape}) into {new_shape}: the batch dimensions must "
            "become leading dimensions of the same total size and the dense dimensions must "
            "stay the trailing ones"
        )
    new_batch_shape = new_shape[:new_n_batch]
    new_sparse_shape = new_shape[new_n_batch:new_dense_start]
    nse = indices.shape[-2]
    data = data.reshape(*new_batch_shape, nse, *dense_shape)
    indices = indices.reshape(*new_batch_shape, nse, n_sparse)
    if tuple(new_sparse_shape) != tuple(sparse_shape):
        check_index_dtype(new_sparse_shape, indices.dtype, name)
        valid = in_range(indices, sparse_shape)
        indices = _reindex(indices, valid, sparse_shape, new_sparse_shape, name)
        if not new_sparse_shape:  # no index is left to mark padding: its data must be 0
            data = zero_where_invalid(data, valid)
    return data, indices, tuple(new_shape)


def _holding_nothing(new_shape, nse: int, dtype, index_dtype, name: str):
    """An array of `new_shape`, which has no elements: (as any array of no elements can take
    any such shape, whatever its layout) all its dimensions sparse, every element padding."""
    check_index_dtype(new_shape, index_dtype, name)
    padding = np.broadcast_to(np.array(new_shape, index_dtype), (nse, len(new_shape)))
    return fnp.zeros((nse,), dtype), fnp.asarray(padding), tuple(new_shape)


def _batch_split(new_shape, dense_start: int, batch_size: int, sparse_size: int) -> int | None:
    """The fewest leading dimensions of `new_shape` that hold `batch_size` elements while the
    ones up to `dense_start` hold `sparse_size` (sizes of 0 make several splits fit)."""
    for count in range(dense_start + 1):
        if (
            math.prod(new_shape[:count]) == batch_size
            and math.prod(new_shape[count:dense_start]) == sparse_size
        ):
            return count
    return None


def _reindex(indices, valid, sparse_shape, new_sparse_shape, name: str) -> Array:
    """Indices into `sparse_shape` as indices into `new_sparse_shape` of the same size, through
    their row-major offset; the elements not `valid` (inside the array) become padding."""
    dtype = np.promote_types(indices.dtype, np.int32)
    if math.prod(sparse_shape) > np.iinfo(dtype).max:
        raise ValueError(
            f"{name}: the sparse dimensions {tuple(sparse_shape)} hold more positions than "
            f"{np.dtype(dtype).name} indices can count; reshaping them needs wider indices"
        )
    offset = fnp.zeros(indices.shape[:-1], dtype)
    for i, size in enumerate(sparse_shape):
        offset = offset * size + indices[..., i].astype(dtype)
    columns = []
    for size in reversed(new_sparse_shape):
        columns.append(offset % size)
        offset = offset // size
    if not columns:
        return indices[..., :0]
    new_indices = fnp.stack(columns[::-1], axis=-1).astype(indices.dtype)
    padding = fnp.asarray(np.array(new_sparse_shape, indices.dtype))
    return fnp.where(valid[..., None], new_indices, padding)


def dense_values(indices, shape, v) -> Array:
    """The values of `v`, which broadcasts to `shape`, at each stored element's position:
    (*batch, nse, *v's dense dimensions), or size 1 where `v` does not vary; 0 at positions
    outside the array along the sparse dimensions where `v` varies."""
    n_positional = indices.ndim - 2 + indices.shape[-1]
    v = v.reshape((1,) * (len(shape) - v.ndim) + v.shape)
    varying = [d for d in range(n_positional) if v.shape[d] != 1]
    if not varying:  # the same values at every position
        return v.reshape((1,) * (indices.ndim - 1) + v.shape[n_positional:])
    v = v.reshape(*(v.shape[d] for d in varying), *v.shape[n_positional:])
    coordinates = position_columns(indices, varying)
    return gather_slices(v, coordinates, range(len(varying)))


def multiply_dense(data, indices, shape, v) -> Array:
    """The data of the elementwise product with `v`, which broadcasts to `shape`: each stored
    element times the values of `v` at its position."""
    return data * dense_values(indices, shape, v)


def divide_dense(data, indices, shape, v, divide) -> Array:
    """The data of the elementwise quotient by `v`, which broadcasts to `shape`, with `divide`
    (true or truncating division). Padding is divided by 1, so that neither a division by
    zero nor its derivative reaches it."""
    values = dense_values(indices, shape, v)
    n_batch, n_sparse = indices.ndim - 2, indices.shape[-1]
    valid = in_range(indices, shape[n_batch : n_batch + n_sparse])
    valid = valid.reshape(valid.shape + (1,) * (values.ndim - valid.ndim))
    values = fnp.where(valid, values, fnp.ones((), values.dtype))
    return divide(data, fnp.broadcast_to(values, data.shape))
