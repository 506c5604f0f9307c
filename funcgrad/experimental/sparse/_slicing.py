"""Windows of a BCOO array: static and dynamic slices, reversals, and removing dimensions of
size 1.

Batch and dense dimensions are sliced (or reversed) in the leaves themselves; a sparse
dimension is sliced by moving every index into the window's coordinates, with the elements
that fall outside the window becoming padding.
"""

from __future__ import annotations

import numpy as np

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.experimental.sparse._convert import in_range


def _masked(data, indices, keep, sparse_shape) -> tuple[Array, Array]:
    """Elements where `keep` is False become padding holding zero."""
    padding = fnp.asarray(np.array(sparse_shape, indices.dtype))
    indices = fnp.where(keep[..., None], indices, padding)
    keep = keep.reshape(keep.shape + (1,) * (data.ndim - keep.ndim))
    return fnp.where(keep, data, fnp.zeros((), data.dtype)), indices


def slice_(data, indices, shape, start, limit, strides) -> tuple[Array, Array, tuple]:
    n_batch, n_sparse = indices.ndim - 2, indices.shape[-1]
    n_positional = n_batch + n_sparse

    def leaf_slice(x, window):
        full = [(0, x.shape[a], 1) if w is None else w for a, w in enumerate(window)]
        starts, limits, steps = zip(*full) if full else ((), (), ())
        return lax.slice(x, starts, limits, steps)

    windows = list(zip(start, limit, strides))
    # (start, limit, stride) per leaf axis; None keeps the whole nse or index axis
    data_window = (*windows[:n_batch], None, *windows[n_positional:])
    index_window = (*windows[:n_batch], None, None)
    data, indices = leaf_slice(data, data_window), leaf_slice(indices, index_window)
    new_shape = tuple(max(0, -(-(hi - lo) // step)) for lo, hi, step in zip(start, limit, strides))
    keep = fnp.ones(indices.shape[:-1], bool)
    columns = []
    for i in range(n_sparse):
        lo, hi, step = windows[n_batch + i]
        column = indices[..., i]
        offset = column - lo
        keep = keep & (column >= lo) & (column < hi) & (offset % step == 0)
        columns.append(offset // step)
    if n_sparse:
        indices = fnp.stack(columns, axis=-1).astype(indices.dtype)
        data, indices = _masked(data, indices, keep, new_shape[n_batch:n_positional])
    return data, indices, new_shape


def dynamic_slice(data, indices, shape, start_indices, slice_sizes) -> tuple[Array, Array]:
    """`start_indices` may be traced; as in `lax.dynamic_slice`, a negative one counts from
    the end, and then each is clamped so that the window lies inside the array."""
    n_batch, n_sparse = indices.ndim - 2, indices.shape[-1]
    n_positional = n_batch + n_sparse
    starts = []
    for s, size, window in zip(start_indices, shape, slice_sizes):
        s = fnp.asarray(s).astype(np.int32)
        starts.append(fnp.clip(fnp.where(s < 0, s + size, s), 0, size - window))
    zero = fnp.zeros((), np.int32)
    data = lax.dynamic_slice(
        data,
        (*starts[:n_batch], zero, *starts[n_positional:]),
        (*slice_sizes[:n_batch], data.shape[n_batch], *slice_sizes[n_positional:]),
    )
    indices = lax.dynamic_slice(
        indices,
        (*starts[:n_batch], zero, zero),
        (*slice_sizes[:n_batch], *indices.shape[-2:]),
    )
    if not n_sparse:
        return data, indices
    lows = fnp.stack(starts[n_batch:n_positional]).astype(indices.dtype)
    sizes = fnp.asarray(np.array(slice_sizes[n_batch:n_positional], indices.dtype))
    moved = indices - lows
    keep = fnp.all((moved >= 0) & (moved < sizes), axis=-1)
    return _masked(data, moved, keep, slice_sizes[n_batch:n_positional])


def squeeze(data, indices, shape, dimensions) -> tuple[Array, Array, tuple]:
    """Dimensions of size 1 removed: batch and dense ones from the leaves, sparse ones from
    the indices (an element whose index there is not 0 lies outside and becomes padding)."""
    n_batch, n_sparse = indices.ndim - 2, indices.shape[-1]
    n_positional = n_batch + n_sparse
    batch = [d for d in dimensions if d < n_batch]
    sparse = [d - n_batch for d in dimensions if n_batch <= d < n_positional]
    dense = [d - n_positional + n_batch + 1 for d in dimensions if d >= n_positional]
    new_shape = tuple(s for d, s in enumerate(shape) if d not in dimensions)
    data = lax.squeeze(data, (*batch, *dense))
    indices = lax.squeeze(indices, batch)
    if sparse:
        keep = fnp.all(indices[..., np.array(sparse)] == 0, axis=-1)
        kept_columns = np.array([c for c in range(n_sparse) if c not in sparse], np.int32)
        new_n_batch = n_batch - len(batch)
        new_sparse_shape = new_shape[new_n_batch : new_n_batch + len(kept_columns)]
        data, indices = _masked(
            data, fnp.take(indices, kept_columns, axis=-1), keep, new_sparse_shape
        )
    return data, indices, new_shape


def rev(data, indices, shape, dimensions) -> tuple[Array, Array]:
    """The array reversed along `dimensions`: batch and dense ones in the leaves, a sparse one
    by mirroring every index in it (padding stays padding)."""
    n_batch, n_sparse = indices.ndim - 2, indices.shape[-1]
    n_positional = n_batch + n_sparse
    batch_dims = [d for d in dimensions if d < n_batch]
    dense_axes = [d - n_sparse + 1 for d in dimensions if d >= n_positional]
    if batch_dims:
        indices = lax.rev(indices, tuple(batch_dims))
    if batch_dims or dense_axes:
        data = lax.rev(data, tuple(batch_dims + dense_axes))
    sparse_columns = [d - n_batch for d in dimensions if n_batch <= d < n_positional]
    if sparse_columns:
        sparse_shape = shape[n_batch:n_positional]
        valid = in_range(indices, sparse_shape)
        columns = [
            sparse_shape[i] - 1 - indices[..., i] if i in sparse_columns else indices[..., i]
            for i in range(n_sparse)
        ]
        mirrored = fnp.stack(columns, axis=-1).astype(indices.dtype)
        padding = fnp.asarray(np.array(sparse_shape, indices.dtype))
        indices = fnp.where(valid[..., None], mirrored, padding)
    return data, indices
