"""Changing which dimensions of a BCOO array are batch, sparse or dense, one dimension at a time.

A batch or dense dimension becomes sparse by spreading it into the stored elements (nse grows
by its size, and the indices widen where their type cannot hold its positions); a sparse
dimension becomes a batch or dense one by giving every batch or every dense block a masked copy
of the elements (nse stays, but most stored values are zeros).
"""

from __future__ import annotations

import numpy as np

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.array import Array


def _counting_to(indices, size: int) -> Array:
    """`indices`, in a wider integer type where theirs cannot hold the positions of a new
    sparse dimension of `size` and its padding index (the size itself)."""
    if size <= np.iinfo(indices.dtype).max:
        return indices
    return indices.astype(np.promote_types(indices.dtype, np.min_scalar_type(size)))


def _batch_to_sparse(data, indices) -> tuple[Array, Array]:
    """The last batch dimension becomes the first sparse one."""
    n_batch = indices.ndim - 2
    size, nse = indices.shape[n_batch - 1], indices.shape[-2]
    indices = _counting_to(indices, size)
    column = lax.broadcasted_iota(indices.dtype, (*indices.shape[:-1], 1), n_batch - 1)
    indices = fnp.concatenate([column, indices], axis=-1)
    lead = indices.shape[: n_batch - 1]
    indices = indices.reshape(*lead, size * nse, indices.shape[-1])
    data = data.reshape(*lead, size * nse, *data.shape[n_batch + 1 :])
    return data, indices


def _dense_to_sparse(data, indices) -> tuple[Array, Array]:
    """The first dense dimension becomes the last sparse one."""
    n_batch = indices.ndim - 2
    nse, n_sparse = indices.shape[-2:]
    size = data.shape[n_batch + 1]
    indices = _counting_to(indices, size)
    spread = (*indices.shape[:-1], size, n_sparse)
    indices = fnp.broadcast_to(indices[..., None, :], spread)
    column = lax.broadcasted_iota(indices.dtype, (*spread[:-1], 1), n_batch + 1)
    indices = fnp.concatenate([indices, column], axis=-1)
    lead = indices.shape[:n_batch]
    indices = indices.reshape(*lead, nse * size, n_sparse + 1)
    data = data.reshape(*lead, nse * size, *data.shape[n_batch + 2 :])
    return data, indices


def _sparse_to_batch(data, indices, sparse_shape) -> tuple[Array, Array]:
    """The first sparse dimension becomes the last batch one: batch t keeps the elements whose
    index there is t, and the others turn into padding."""
    n_batch = indices.ndim - 2
    size = sparse_shape[0]
    position = lax.broadcasted_iota(indices.dtype, (size, 1), 0)
    here = indices[..., None, :, 0] == position  # (*batch, size, nse)
    rest = indices[..., None, :, 1:]
    padding = fnp.asarray(np.array(sparse_shape[1:], indices.dtype))
    indices = fnp.where(here[..., None], rest, padding)
    data = data[(slice(None),) * n_batch + (None,)]
    here = here.reshape(here.shape + (1,) * (data.ndim - here.ndim))
    return fnp.where(here, data, fnp.zeros((), data.dtype)), indices


def _sparse_to_dense(data, indices, size: int) -> tuple[Array, Array]:
    """The last sparse dimension becomes the first dense one: every element's block is zero
    except at its index there."""
    n_batch = indices.ndim - 2
    position = lax.broadcasted_iota(indices.dtype, (size,), 0)
    here = indices[..., -1:] == position  # (*batch, nse, size)
    here = here.reshape(here.shape + (1,) * (data.ndim - n_batch - 1))
    data = data[(slice(None),) * (n_batch + 1) + (None,)]
    data = fnp.where(here, data, fnp.zeros((), data.dtype))
    return data, indices[..., :-1]


def update_layout(data, indices, shape, n_batch: int, n_dense: int) -> tuple[Array, Array]:
    """The same array with `n_batch` batch and `n_dense` dense dimensions."""
    old_n_batch, n_sparse = indices.ndim - 2, indices.shape[-1]
    old_n_dense = len(shape) - old_n_batch - n_sparse
    for _ in range(old_n_batch - n_batch):
        data, indices = _batch_to_sparse(data, indices)
    for _ in range(old_n_dense - n_dense):
        data, indices = _dense_to_sparse(data, indices)
    for _ in range(n_batch - min(n_batch, old_n_batch)):
        current = indices.ndim - 2
        data, indices = _sparse_to_batch(
            data, indices, shape[current : current + indices.shape[-1]]
        )
    for _ in range(n_dense - min(n_dense, old_n_dense)):
        last_sparse = indices.ndim - 2 + indices.shape[-1] - 1
        data, indices = _sparse_to_dense(data, indices, shape[last_sparse])
    return data, indices
