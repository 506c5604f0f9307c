"""Stored elements in order: sorting them by index, and merging the ones that share an index.

Both sort each batch's elements lexicographically by sparse index, with every element whose
index lies outside the array after all the others, so padding collects at the end.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from funcgrad import lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.experimental.sparse._convert import in_range


def _sorted(indices, valid) -> tuple[list[Array], Array, Array]:
    """Each sparse index column in sorted order, whether each sorted element is valid, and the
    permutation that sorts: along the nse axis of every batch."""
    columns = [indices[..., i] for i in range(indices.shape[-1])]
    order = lax.broadcasted_iota(np.int32, indices.shape[:-1], indices.ndim - 2)
    invalid, *columns, permutation = lax.sort(
        [fnp.logical_not(valid).astype(np.int32), *columns, order],
        dimension=indices.ndim - 2,
        num_keys=1 + len(columns),
    )
    return columns, invalid == 0, permutation


def _permute(data, permutation, n_batch: int) -> Array:
    """`data` reordered along its nse axis by `permutation`."""
    n_dense = data.ndim - n_batch - 1
    return fnp.take_along_axis(
        data, permutation.reshape(permutation.shape + (1,) * n_dense), axis=n_batch
    )


def sort_indices(data, indices, sparse_shape) -> tuple[Array, Array]:
    """The stored elements of every batch ordered by index (n_sparse > 0)."""
    columns, _, permutation = _sorted(indices, in_range(indices, sparse_shape))
    return _permute(data, permutation, indices.ndim - 2), fnp.stack(columns, axis=-1)


class Duplicates(NamedTuple):
    """Each batch's stored elements grouped by index: `distinct` counts the valid groups of
    each batch, and `into_slots(nse)` gives one element per group, in sorted order."""

    data: Array  # in sorted order
    columns: list[Array]  # the sorted index columns
    slot: Array  # each sorted element's group; invalid elements point past every slot
    distinct: Array
    sparse_shape: tuple[int, ...]
    index_shape: tuple[int, ...]
    index_dtype: np.dtype

    def into_slots(self, nse: int) -> tuple[Array, Array]:
        """Data summed per group and the groups' indices, in `nse` slots: groups past `nse` are
        dropped, and slots past the last group are padding."""
        n_batch = len(self.index_shape) - 2
        slot = fnp.minimum(self.slot, nse)  # nse lies outside the slots: dropped
        padding = fnp.broadcast_to(
            fnp.asarray(np.array(self.sparse_shape, self.index_dtype)),
            (*self.index_shape[:-2], nse, self.index_shape[-1]),
        )
        if self.columns:
            indices = _scatter_into_slots(lax.scatter, padding, slot, fnp.stack(self.columns, -1))
        else:
            indices = padding
        data = self.data
        zeros = fnp.zeros((*data.shape[:n_batch], nse, *data.shape[n_batch + 1 :]), data.dtype)
        return _scatter_into_slots(lax.scatter_add, zeros, slot, data), indices


def sum_duplicates(data, indices, sparse_shape, remove_zeros: bool) -> Duplicates:
    """The stored elements grouped by index, leaving out those outside the array and, with
    `remove_zeros`, those whose data is zero."""
    n_batch = indices.ndim - 2
    valid = in_range(indices, sparse_shape)
    if remove_zeros:
        nonzero = data != 0
        valid = valid & fnp.any(nonzero, axis=tuple(range(n_batch + 1, data.ndim)))
    columns, sorted_valid, permutation = _sorted(indices, valid)
    first = _starts_of_runs(columns, sorted_valid)
    group = fnp.cumsum(first, axis=-1, dtype=np.int32) - 1
    past_every_slot = np.iinfo(np.int32).max
    return Duplicates(
        data=_permute(data, permutation, n_batch),
        columns=columns,
        slot=fnp.where(sorted_valid, group, past_every_slot),
        distinct=fnp.sum(first & sorted_valid, axis=-1),
        sparse_shape=tuple(sparse_shape),
        index_shape=indices.shape,
        index_dtype=indices.dtype,
    )


def first_copies(indices, sparse_shape) -> Array:
    """Whether each stored element is the first of its batch with its index."""
    columns, sorted_valid, permutation = _sorted(indices, in_range(indices, sparse_shape))
    first = _starts_of_runs(columns, sorted_valid)
    unsorted = fnp.zeros(first.shape, bool)
    return _scatter_into_slots(lax.scatter, unsorted, permutation, first)


def _starts_of_runs(columns, sorted_valid) -> Array:
    """Whether each sorted element's index differs from the one before it."""
    nse_axis = sorted_valid.ndim - 1
    start = lax.broadcasted_iota(np.int32, sorted_valid.shape, nse_axis) == 0
    for key in [sorted_valid, *columns]:
        previous = fnp.roll(key, 1, axis=nse_axis)
        start = start | (key != previous)
    return start


def _scatter_into_slots(scatter, operand, slot, updates) -> Array:
    """`updates` (*batch, n, *window) combined into `operand` (*batch, nse, *window) at slot
    `slot[b, k]` of its own batch; slots outside [0, nse) are dropped."""
    n_batch = slot.ndim - 1
    window_rank = updates.ndim - n_batch - 1
    dimension_numbers = lax.ScatterDimensionNumbers(
        update_window_dims=tuple(range(n_batch + 1, n_batch + 1 + window_rank)),
        inserted_window_dims=(n_batch,),
        scatter_dims_to_operand_dims=(n_batch,),
        operand_batching_dims=tuple(range(n_batch)),
        scatter_indices_batching_dims=tuple(range(n_batch)),
    )
    return scatter(operand, slot[..., None], updates, dimension_numbers, mode="drop")
