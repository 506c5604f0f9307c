"""Between dense arrays and stored elements: where each stored element lies, and the scatter and
gather that move values from one form to the other.

A BCOO array stores `data` of shape (*batch, nse, *dense) and `indices` of shape
(*batch, nse, n_sparse). The element `data[b, k]` lies at batch position `b` and sparse
position `indices[b, k]`; together these are its *position* in the array's leading
n_batch + n_sparse dimensions. Positions outside the array (the padding entries, whose indices
equal the sparse shape, or any other out-of-range index) address nothing: the scatters here
drop them and the gathers read 0 there.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence

import numpy as np

from funcgrad import dtypes, lax
from funcgrad import numpy as fnp
from funcgrad.array import Array


def check_index_dtype(sparse_shape: Sequence[int], index_dtype, name: str) -> None:
    """Raise unless indices of `index_dtype` hold every position of `sparse_shape` and the
    padding index (the shape itself); a narrower type would wrap them around silently."""
    index_dtype = np.dtype(index_dtype)
    if not dtypes.is_int(index_dtype):
        raise TypeError(f"{name}: indices must be integers, got {index_dtype}")
    largest = max(sparse_shape, default=0)
    if largest > np.iinfo(index_dtype).max:
        raise ValueError(
            f"{name}: {index_dtype.name} indices cannot hold the positions of a sparse "
            f"dimension of size {largest} (nor its padding index, the size itself); use a "
            "wider index_dtype"
        )


def checked_shape(shape, name: str) -> tuple[int, ...]:
    """`shape` as a tuple of non-negative Python ints, or an error naming it."""
    try:
        shape = tuple(operator.index(s) for s in shape)
    except TypeError:
        raise TypeError(f"{name}: shape must be a sequence of integers, got {shape!r}") from None
    if any(s < 0 for s in shape):
        raise ValueError(f"{name}: shape {shape} has a negative size")
    return shape


def unpacked(args, count: int, names: str, name: str) -> tuple:
    """The `count` buffers of a sparse array's constructor, or an error naming them."""
    if not isinstance(args, (tuple, list)) or len(args) != count:
        got = f"a {type(args).__name__} of length {len(args)}" if hasattr(args, "__len__") else args
        raise TypeError(f"{name}: the first argument must be the tuple ({names}), got {got}")
    return tuple(args)


def position_columns(indices, dims: Sequence[int]) -> Array:
    """The coordinates of every stored element in the leading dimensions `dims` (batch
    dimensions first, then sparse ones): shape (*batch, nse, len(dims))."""
    n_batch = indices.ndim - 2
    dtype = np.promote_types(indices.dtype, np.int32)  # holds every batch position
    grid_shape = (*indices.shape[:-1], 1)
    columns = []
    for dim in dims:
        if dim < n_batch:
            columns.append(lax.broadcasted_iota(dtype, grid_shape, dim))
        else:
            column = lax.slice_in_dim(indices, dim - n_batch, dim - n_batch + 1, axis=-1)
            columns.append(column.astype(dtype))
    if not columns:
        return fnp.zeros(grid_shape[:-1] + (0,), dtype)
    return columns[0] if len(columns) == 1 else lax.concatenate(columns, indices.ndim - 1)


def positions(indices) -> Array:
    """Every stored element's coordinates in all batch and sparse dimensions."""
    n_positional = indices.ndim - 2 + indices.shape[-1]
    return position_columns(indices, range(n_positional))


def in_range(indices, sparse_shape: Sequence[int]) -> Array:
    """Whether each stored element's sparse index lies inside the array: (*batch, nse)."""
    limits = fnp.asarray(np.array(sparse_shape, dtype=indices.dtype))
    return fnp.all((indices >= 0) & (indices < limits), axis=-1)


def zero_where_invalid(data, valid) -> Array:
    """`data` with the blocks of the elements not `valid` (*batch, nse) set to 0."""
    valid = valid.reshape(valid.shape + (1,) * (data.ndim - valid.ndim))
    return fnp.where(valid, data, fnp.zeros((), data.dtype))


def todense(data, indices, shape: tuple[int, ...]) -> Array:
    """The dense array: every stored element added at its position (duplicates sum)."""
    n_batch = indices.ndim - 2
    n_positional = n_batch + indices.shape[-1]
    n_dense = len(shape) - n_positional
    dimension_numbers = lax.ScatterDimensionNumbers(
        update_window_dims=tuple(range(n_batch + 1, n_batch + 1 + n_dense)),
        inserted_window_dims=tuple(range(n_positional)),
        scatter_dims_to_operand_dims=tuple(range(n_positional)),
    )
    zeros = fnp.zeros(shape, data.dtype)
    return lax.scatter_add(zeros, positions(indices), data, dimension_numbers, mode="drop")


def gather_slices(operand, coordinates, operand_dims: Sequence[int]) -> Array:
    """The slices of `operand` at `coordinates` (shape (*lead, k)) in its dimensions
    `operand_dims` (k of them): shape (*lead, its other dimensions in order), 0 where a
    coordinate lies outside."""
    lead = coordinates.shape[:-1]
    kept = [d for d in range(operand.ndim) if d not in operand_dims]
    kept_shape = tuple(operand.shape[d] for d in kept)
    if 0 in (operand.shape[d] for d in operand_dims):  # no coordinate lies inside
        return fnp.zeros((*lead, *kept_shape), operand.dtype)
    dimension_numbers = lax.GatherDimensionNumbers(
        offset_dims=tuple(range(len(lead), len(lead) + len(kept))),
        collapsed_slice_dims=tuple(sorted(operand_dims)),
        start_index_map=tuple(operand_dims),
    )
    slice_sizes = tuple(1 if d in operand_dims else operand.shape[d] for d in range(operand.ndim))
    return lax.gather(
        operand, coordinates, dimension_numbers, slice_sizes, mode="fill", fill_value=0
    )


def extract(indices, dense) -> Array:
    """The values of `dense` at the stored elements' positions (the data a BCOO array with these
    indices has where it agrees with `dense`); 0 at out-of-range positions."""
    n_positional = indices.ndim - 2 + indices.shape[-1]
    return gather_slices(dense, positions(indices), range(n_positional))


def nonzero_count(mat, n_batch: int, n_dense: int) -> Array:
    """How many sparse positions of each batch hold a nonzero (in any dense element)."""
    nonzero = _nonzero_mask(mat, n_dense)
    return fnp.sum(nonzero, axis=tuple(range(n_batch, nonzero.ndim)))


def _nonzero_mask(mat, n_dense: int) -> Array:
    nonzero = mat != 0
    return fnp.any(nonzero, axis=tuple(range(mat.ndim - n_dense, mat.ndim)))


def _coordinates(shape: tuple[int, ...], dtype) -> Array:
    """Every position of an array of `shape` in row-major order: (size, len(shape))."""
    if not shape:
        return fnp.zeros((1, 0), dtype)
    columns = [lax.broadcasted_iota(dtype, shape, d).reshape(-1) for d in range(len(shape))]
    return fnp.stack(columns, axis=-1)


def fromdense(mat, nse: int, n_batch: int, n_dense: int, index_dtype) -> tuple[Array, Array]:
    """The first `nse` nonzero positions of each batch in row-major order, and their values;
    slots past a batch's last nonzero are padding (index = sparse shape, value 0)."""
    n_sparse = mat.ndim - n_batch - n_dense
    batch_shape = mat.shape[:n_batch]
    sparse_shape = mat.shape[n_batch : n_batch + n_sparse]
    batch_size, sparse_size = math.prod(batch_shape), math.prod(sparse_shape)
    nonzero = _nonzero_mask(mat, n_dense).reshape(batch_size, sparse_size)
    rank = fnp.cumsum(nonzero, axis=1, dtype=np.int32) - 1
    slot = fnp.where(nonzero, rank, nse)  # nse lies outside the slots: dropped
    coordinates = _coordinates(sparse_shape, index_dtype).reshape(1, sparse_size, n_sparse)
    coordinates = fnp.broadcast_to(coordinates, (batch_size, sparse_size, n_sparse))
    padding = fnp.broadcast_to(
        fnp.asarray(np.array(sparse_shape, index_dtype)), (batch_size, nse, n_sparse)
    )
    dimension_numbers = lax.ScatterDimensionNumbers(
        update_window_dims=(2,),
        inserted_window_dims=(1,),
        scatter_dims_to_operand_dims=(1,),
        operand_batching_dims=(0,),
        scatter_indices_batching_dims=(0,),
    )
    indices = lax.scatter(
        padding,
        slot[..., None],
        coordinates,
        dimension_numbers,
        unique_indices=True,
        mode="drop",
    ).reshape(*batch_shape, nse, n_sparse)
    data = extract(indices, mat)
    # With no sparse dimensions every slot lies inside the array; the unfilled ones must hold 0.
    filled = lax.broadcasted_iota(np.int32, (*batch_shape, nse), n_batch) < fnp.sum(
        nonzero, axis=1, dtype=np.int32
    ).reshape(*batch_shape, 1)
    data = fnp.where(filled.reshape(filled.shape + (1,) * n_dense), data, fnp.zeros((), data.dtype))
    return data, indices
