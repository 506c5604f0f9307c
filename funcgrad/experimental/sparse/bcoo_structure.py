"""BCOO counterparts of the lax structural operations: changing the layout, concatenating,
slicing, reversing, broadcasting and squeezing, and the indexing of `BCOO.__getitem__` built on
them.

Each keeps the array sparse; none forms a dense array.
"""

from __future__ import annotations

import math
import operator
import warnings
from collections.abc import Sequence

import numpy as np

from funcgrad import core, lax
from funcgrad import numpy as fnp
from funcgrad.experimental.sparse import _relayout, _slicing
from funcgrad.experimental.sparse._convert import check_index_dtype, in_range
from funcgrad.experimental.sparse.bcoo import (
    BCOO,
    _as_bcoo,
    _is_integer_index,
    _normalize_axis,
    bcoo_reshape,
    bcoo_transpose,
)

__all__ = [
    "SparseEfficiencyError",
    "SparseEfficiencyWarning",
    "bcoo_broadcast_in_dim",
    "bcoo_concatenate",
    "bcoo_dynamic_slice",
    "bcoo_gather",
    "bcoo_rev",
    "bcoo_slice",
    "bcoo_squeeze",
    "bcoo_update_layout",
]


class SparseEfficiencyError(ValueError):
    """A layout change would store far more elements than the array has."""


class SparseEfficiencyWarning(UserWarning):
    """A layout change stores far more elements than the array has (`on_inefficient='warn'`)."""


def bcoo_update_layout(
    mat: BCOO,
    *,
    n_batch: int | None = None,
    n_dense: int | None = None,
    on_inefficient: str | None = "error",
) -> BCOO:
    """The same array with `n_batch` batch and `n_dense` dense dimensions (by default, the
    current numbers). Turning a sparse dimension of size > 1 into a batch or dense one copies
    every element into each of its positions, mostly as stored zeros; `on_inefficient` says
    whether that raises a `SparseEfficiencyError` ('error'), warns ('warn') or passes (None)."""
    mat = _as_bcoo(mat, "bcoo_update_layout")
    n_batch = mat.n_batch if n_batch is None else operator.index(n_batch)
    n_dense = mat.n_dense if n_dense is None else operator.index(n_dense)
    if on_inefficient not in ("error", "warn", None):
        raise ValueError(
            f"bcoo_update_layout: on_inefficient must be 'error', 'warn' or None, got "
            f"{on_inefficient!r}"
        )
    if n_batch < 0 or n_dense < 0 or n_batch + n_dense > mat.ndim:
        raise ValueError(
            f"bcoo_update_layout: n_batch={n_batch} and n_dense={n_dense} must be non-negative "
            f"and together at most the rank of {mat!r}"
        )
    if (n_batch, n_dense) == (mat.n_batch, mat.n_dense):
        return mat
    copied = (
        mat.shape[mat.n_batch : n_batch] + mat.shape[mat.ndim - n_dense : mat.ndim - mat.n_dense]
    )
    if on_inefficient is not None and math.prod(copied) > 1:
        message = (
            f"bcoo_update_layout: making n_batch={n_batch} and n_dense={n_dense} for {mat!r} "
            f"turns sparse dimensions of sizes {copied} into batch or dense ones, storing a "
            f"copy of every element for each of their {math.prod(copied)} positions; pass "
            "on_inefficient=None if that is meant"
        )
        if on_inefficient == "error":
            raise SparseEfficiencyError(message)
        warnings.warn(message, SparseEfficiencyWarning, stacklevel=2)
    data, indices = _relayout.update_layout(mat.data, mat.indices, mat.shape, n_batch, n_dense)
    return BCOO((data, indices), shape=mat.shape)


def bcoo_concatenate(operands: Sequence[BCOO], *, dimension: int) -> BCOO:
    """The operands joined along `dimension`, in the layout with the fewest batch and dense
    dimensions among them."""
    operands = [_as_bcoo(op, "bcoo_concatenate") for op in operands]
    if not operands:
        raise ValueError("bcoo_concatenate: needs at least one operand")
    first = operands[0]
    dimension = _normalize_axis(dimension, first.ndim, "bcoo_concatenate")
    others = [op.shape[:dimension] + op.shape[dimension + 1 :] for op in operands]
    if any(op.ndim != first.ndim for op in operands) or len(set(others)) > 1:
        raise ValueError(
            f"bcoo_concatenate: operands of shapes {[op.shape for op in operands]} must agree "
            f"in every dimension but {dimension}"
        )
    n_batch = min(op.n_batch for op in operands)
    n_dense = min(op.n_dense for op in operands)
    operands = [bcoo_update_layout(op, n_batch=n_batch, n_dense=n_dense) for op in operands]
    dtype = fnp.result_type(*(op.data for op in operands))
    index_dtype = np.result_type(*(op.indices.dtype for op in operands))
    datas = [op.data.astype(dtype) for op in operands]
    indices = [op.indices.astype(index_dtype) for op in operands]
    sizes = [op.shape[dimension] for op in operands]
    shape = list(first.shape)
    shape[dimension] = sum(sizes)
    n_positional = n_batch + first.ndim - n_batch - n_dense
    sparse_shape = tuple(shape[n_batch:n_positional])
    check_index_dtype(sparse_shape, index_dtype, "bcoo_concatenate")
    if dimension < n_batch:
        nse = max(op.nse for op in operands)
        padded = [_pad_nse(d, i, nse, sparse_shape) for d, i in zip(datas, indices)]
        data = fnp.concatenate([d for d, _ in padded], axis=dimension)
        index = fnp.concatenate([i for _, i in padded], axis=dimension)
    elif dimension < n_positional:
        column = dimension - n_batch
        offsets = np.cumsum([0, *sizes[:-1]])
        moved = []
        for op, index, offset in zip(operands, indices, offsets):
            valid = in_range(index, op.shape[n_batch:n_positional])
            shift = np.zeros(index.shape[-1], index_dtype)
            shift[column] = offset
            index = fnp.where(valid[..., None], index + shift, np.array(sparse_shape, index_dtype))
            moved.append(index)
        data = fnp.concatenate(datas, axis=n_batch)
        index = fnp.concatenate(moved, axis=n_batch)
    else:
        axis = dimension - n_positional + n_batch + 1
        offsets = np.cumsum([0, *sizes])
        placed = [
            fnp.pad(
                d,
                [
                    (offsets[k], shape[dimension] - offsets[k + 1]) if a == axis else (0, 0)
                    for a in range(d.ndim)
                ],
            )
            for k, d in enumerate(datas)
        ]
        data = fnp.concatenate(placed, axis=n_batch)
        index = fnp.concatenate(indices, axis=n_batch)
    return BCOO((data, index), shape=shape)


def _pad_nse(data, indices, nse: int, sparse_shape):
    """`data` and `indices` with padding elements appended up to `nse` per batch."""
    n_batch = indices.ndim - 2
    extra = nse - indices.shape[-2]
    if not extra:
        return data, indices
    padding = np.broadcast_to(
        np.array(sparse_shape, indices.dtype), (*indices.shape[:-2], extra, indices.shape[-1])
    )
    zeros = fnp.zeros((*data.shape[:n_batch], extra, *data.shape[n_batch + 1 :]), data.dtype)
    return (
        fnp.concatenate([data, zeros], axis=n_batch),
        fnp.concatenate([indices, fnp.asarray(padding)], axis=n_batch),
    )


def bcoo_slice(
    mat: BCOO,
    *,
    start_indices: Sequence[int],
    limit_indices: Sequence[int],
    strides: Sequence[int] | None = None,
) -> BCOO:
    """The window [start, limit) with `strides` of every dimension, as `lax.slice`."""
    mat = _as_bcoo(mat, "bcoo_slice")
    start = tuple(operator.index(s) for s in start_indices)
    limit = tuple(operator.index(s) for s in limit_indices)
    strides = (1,) * mat.ndim if strides is None else tuple(operator.index(s) for s in strides)
    if not len(start) == len(limit) == len(strides) == mat.ndim or any(
        not 0 <= lo <= hi <= size or step < 1
        for lo, hi, step, size in zip(start, limit, strides, mat.shape)
    ):
        raise ValueError(
            f"bcoo_slice: start_indices {start}, limit_indices {limit} and strides {strides} "
            f"must give, for each dimension of the shape {mat.shape}, 0 <= start <= limit <= "
            "size and a positive stride"
        )
    data, indices, shape = _slicing.slice_(mat.data, mat.indices, mat.shape, start, limit, strides)
    return BCOO((data, indices), shape=shape)


def bcoo_dynamic_slice(mat: BCOO, start_indices, slice_sizes: Sequence[int]) -> BCOO:
    """The window of `slice_sizes` at `start_indices` (which may be traced; a negative one
    counts from the end, then each is clamped so that the window lies inside the array), as
    `lax.dynamic_slice`."""
    mat = _as_bcoo(mat, "bcoo_dynamic_slice")
    slice_sizes = tuple(operator.index(s) for s in slice_sizes)
    start_indices = list(start_indices)
    if (
        len(start_indices) != mat.ndim
        or len(slice_sizes) != mat.ndim
        or any(not 0 <= w <= size for w, size in zip(slice_sizes, mat.shape))
    ):
        raise ValueError(
            f"bcoo_dynamic_slice: {len(start_indices)} start indices and slice_sizes "
            f"{slice_sizes} must have one entry per dimension of the shape {mat.shape}, each "
            "size at most the dimension's"
        )
    data, indices = _slicing.dynamic_slice(
        mat.data, mat.indices, mat.shape, start_indices, slice_sizes
    )
    return BCOO((data, indices), shape=slice_sizes)


def bcoo_rev(operand: BCOO, dimensions: Sequence[int]) -> BCOO:
    """The array reversed along `dimensions`, as `lax.rev`."""
    operand = _as_bcoo(operand, "bcoo_rev")
    dimensions = tuple(operator.index(d) for d in dimensions)
    if len(set(dimensions)) != len(dimensions) or any(
        not 0 <= d < operand.ndim for d in dimensions
    ):
        raise ValueError(
            f"bcoo_rev: dimensions {dimensions} must be distinct dimensions of the shape "
            f"{operand.shape}"
        )
    data, indices = _slicing.rev(operand.data, operand.indices, operand.shape, dimensions)
    return BCOO((data, indices), shape=operand.shape, unique_indices=operand.unique_indices)


def bcoo_squeeze(mat: BCOO, *, dimensions: Sequence[int]) -> BCOO:
    """The array without the given dimensions, which must have size 1."""
    mat = _as_bcoo(mat, "bcoo_squeeze")
    dimensions = tuple(sorted({_normalize_axis(d, mat.ndim, "bcoo_squeeze") for d in dimensions}))
    if any(mat.shape[d] != 1 for d in dimensions):
        raise ValueError(
            f"bcoo_squeeze: dimensions {dimensions} of the shape {mat.shape} must all have size 1"
        )
    data, indices, shape = _slicing.squeeze(mat.data, mat.indices, mat.shape, dimensions)
    return BCOO((data, indices), shape=shape)


def bcoo_broadcast_in_dim(
    mat: BCOO, *, shape: Sequence[int], broadcast_dimensions: Sequence[int]
) -> BCOO:
    """`lax.broadcast_in_dim` of a BCOO array: the new dimensions before its first sparse (or
    dense) one become batch dimensions, those after its last dense one dense dimensions, and
    those among its sparse dimensions sparse ones of size 1. Batch and dense dimensions of size
    1 may grow; sparse ones keep their size."""
    mat = _as_bcoo(mat, "bcoo_broadcast_in_dim")
    shape = tuple(operator.index(s) for s in shape)
    dims = tuple(operator.index(d) for d in broadcast_dimensions)
    n_batch, n_positional = mat.n_batch, mat.n_batch + mat.n_sparse
    if (
        len(dims) != mat.ndim
        or any(not 0 <= d < len(shape) for d in dims)
        or list(dims) != sorted(set(dims))
        or any(mat.shape[i] not in (1, shape[d]) for i, d in enumerate(dims))
    ):
        raise ValueError(
            f"bcoo_broadcast_in_dim: broadcast_dimensions {dims} must place each dimension of "
            f"the shape {mat.shape}, in increasing order, at a dimension of {shape} of the same "
            "size (or of any size where the operand's is 1)"
        )
    batch_dims, sparse_dims, dense_dims = (
        dims[:n_batch],
        dims[n_batch:n_positional],
        dims[n_positional:],
    )
    new_n_batch = min(dims[n_batch:], default=len(shape))
    new_n_dense = len(shape) - dense_dims[0] if dense_dims else 0
    new_sparse = range(new_n_batch, len(shape) - new_n_dense)
    grown = [d for i, d in enumerate(sparse_dims) if shape[d] != mat.shape[n_batch + i]]
    added = [d for d in new_sparse if d not in sparse_dims and shape[d] != 1]
    if grown or added:
        raise ValueError(
            f"bcoo_broadcast_in_dim: broadcasting {mat!r} to {shape} with broadcast_dimensions "
            f"{dims} would grow or add sparse dimensions {tuple(grown + added)} of size > 1; "
            "only batch and dense dimensions can be broadcast"
        )
    dense_shape = shape[len(shape) - new_n_dense :]
    data_dims = (
        *batch_dims,
        new_n_batch,
        *(d - len(shape) + new_n_dense + new_n_batch + 1 for d in dense_dims),
    )
    data = lax.broadcast_in_dim(mat.data, (*shape[:new_n_batch], mat.nse, *dense_shape), data_dims)
    indices = lax.broadcast_in_dim(
        mat.indices,
        (*shape[:new_n_batch], mat.nse, mat.n_sparse),
        (*batch_dims, new_n_batch, new_n_batch + 1),
    )
    column_of = {d: i for i, d in enumerate(sparse_dims)}
    zeros = fnp.zeros(indices.shape[:-1], indices.dtype)
    columns = [indices[..., column_of[d]] if d in column_of else zeros for d in new_sparse]
    indices = fnp.stack(columns, axis=-1) if columns else indices[..., :0]
    return BCOO((data, indices), shape=shape)


def bcoo_gather(
    operand: BCOO,
    start_indices,
    dimension_numbers: lax.GatherDimensionNumbers,
    slice_sizes: Sequence[int],
    *,
    unique_indices: bool = False,
    indices_are_sorted: bool = False,
    mode=None,
    fill_value=None,
) -> BCOO:
    """`lax.gather` of a BCOO array: one window per index vector, each a dynamic slice of the
    array (storing all of its nse elements, those outside the window as padding), stacked
    along a new batch dimension and arranged as the gather's output.

    Windows that reach outside are clamped (modes 'clip' and 'promise_in_bounds', as
    `lax.gather`), or, in mode 'fill', hold `fill_value`, which must then be 0 to keep the
    result sparse."""
    operand = _as_bcoo(operand, "bcoo_gather")
    start_indices = fnp.asarray(start_indices)
    parsed_mode = lax.GatherScatterMode.from_any(
        lax.GatherScatterMode.PROMISE_IN_BOUNDS if mode is None else mode
    )
    fills = parsed_mode == lax.GatherScatterMode.FILL_OR_DROP
    if fills and (fill_value is None or np.asarray(fill_value) != 0):
        raise NotImplementedError(
            f"bcoo_gather: mode 'fill' with fill_value={fill_value!r} fills windows that reach "
            "outside the array with a nonzero value (by default NaN), which a sparse result "
            "cannot hold; pass fill_value=0, another mode, or gather from the dense form"
        )
    out_shape = _gather_shape(operand, start_indices, dimension_numbers, slice_sizes)
    dimension_numbers, start_indices = _without_batching_dims(dimension_numbers, start_indices)
    batch_shape = start_indices.shape[:-1]
    starts = start_indices.reshape(-1, start_indices.shape[-1]).astype(np.int32)
    full_starts = []  # every dimension's start: 0 where the indices give none
    in_bounds = fnp.ones(starts.shape[:1], bool)
    for dim, (size, window) in enumerate(zip(operand.shape, slice_sizes)):
        if dim not in dimension_numbers.start_index_map:
            full_starts.append(fnp.zeros(starts.shape[:1], np.int32))
            continue
        start = starts[:, dimension_numbers.start_index_map.index(dim)]
        in_bounds = in_bounds & (start >= 0) & (start <= size - window)
        full_starts.append(fnp.clip(start, 0, size - window))
    collapsed = tuple(dimension_numbers.collapsed_slice_dims)

    def window_at(starts_of_window):
        window = bcoo_dynamic_slice(operand, starts_of_window, slice_sizes)
        return bcoo_squeeze(window, dimensions=collapsed) if collapsed else window

    from funcgrad.transforms.vmap import vmap  # transforms build on this package's imports

    windows = vmap(window_at)(full_starts)
    if fills:
        kept = in_bounds.reshape(in_bounds.shape + (1,) * (windows.data.ndim - 1))
        windows = windows._like(fnp.where(kept, windows.data, fnp.zeros((), windows.dtype)))
    if len(batch_shape) != 1:
        windows = bcoo_reshape(windows, new_sizes=(*batch_shape, *windows.shape[1:]))
    # The windows' dimensions (batch dimensions, then window dimensions) moved to the output's.
    offset_dims = tuple(dimension_numbers.offset_dims)
    batch_dims = tuple(d for d in range(len(out_shape)) if d not in offset_dims)
    permutation = np.zeros(len(out_shape), int)
    permutation[np.array(batch_dims + offset_dims, int)] = np.arange(len(out_shape))
    permutation = tuple(int(p) for p in permutation)
    if permutation != tuple(range(len(out_shape))):
        windows = bcoo_transpose(_permutable(windows, permutation), permutation=permutation)
    return windows


def _gather_shape(operand, start_indices, dimension_numbers, slice_sizes) -> tuple[int, ...]:
    """The shape `lax.gather` gives (which checks the arguments)."""
    from funcgrad.transforms.make_jaxpr import eval_shape

    def dense_gather(o, i):
        return lax.gather(o, i, dimension_numbers, slice_sizes)

    dense = core.ShapeDtypeStruct(operand.shape, operand.dtype)
    indices = core.ShapeDtypeStruct(start_indices.shape, start_indices.dtype)
    return tuple(eval_shape(dense_gather, dense, indices).shape)


def _without_batching_dims(dimension_numbers, start_indices):
    """The same gather with its operand batching dimensions indexed as ordinary collapsed
    dimensions: each window's start there is its position along the matching dimension of the
    indices."""
    operand_dims = tuple(dimension_numbers.operand_batching_dims)
    if not operand_dims:
        return dimension_numbers, start_indices
    grid = start_indices.shape[:-1] + (1,)
    positions = [
        lax.broadcasted_iota(start_indices.dtype, grid, d)
        for d in dimension_numbers.start_indices_batching_dims
    ]
    start_indices = fnp.concatenate([start_indices, *positions], axis=-1)
    return (
        lax.GatherDimensionNumbers(
            offset_dims=tuple(dimension_numbers.offset_dims),
            collapsed_slice_dims=tuple(
                sorted((*dimension_numbers.collapsed_slice_dims, *operand_dims))
            ),
            start_index_map=(*dimension_numbers.start_index_map, *operand_dims),
        ),
        start_indices,
    )


def _permutable(mat: BCOO, permutation: tuple[int, ...]) -> BCOO:
    """`mat`, with its batch (and if need be its dense) dimensions made sparse (which stores no
    zeros), so that `permutation` keeps the batch, sparse and dense dimensions apart."""

    def keeps_groups(m: BCOO) -> bool:
        n_positional = m.n_batch + m.n_sparse
        return sorted(permutation[: m.n_batch]) == list(range(m.n_batch)) and sorted(
            permutation[n_positional:]
        ) == list(range(n_positional, m.ndim))

    for n_batch, n_dense in ((mat.n_batch, mat.n_dense), (0, mat.n_dense), (0, 0)):
        relaid = bcoo_update_layout(mat, n_batch=n_batch, n_dense=n_dense)
        if keeps_groups(relaid):
            return relaid
    raise AssertionError("an array with only sparse dimensions takes any permutation")


def is_basic_index(item) -> bool:
    """Whether `item` holds only integers (Python or traced scalars), slices with positive
    (or no) steps and at most one Ellipsis, which `getitem` reads directly."""
    items = item if isinstance(item, tuple) else (item,)
    # By identity: `==` against an array index would compare elementwise.
    ellipses = sum(i is Ellipsis for i in items)
    return ellipses <= 1 and all(
        i is Ellipsis
        or (isinstance(i, slice) and (i.step is None or operator.index(i.step) > 0))
        or (not isinstance(i, bool) and _is_integer_index(i))
        for i in items
    )


def basic_items(shape: tuple[int, ...], item, name: str) -> list:
    """An `is_basic_index` item as one entry per dimension of `shape` (the Ellipsis expanded,
    the dimensions it leaves out whole). A static integer out of bounds raises IndexError, as
    in NumPy, which is also what ends a loop over the array's rows."""
    items = list(item) if isinstance(item, tuple) else [item]
    ellipses = [at for at, i in enumerate(items) if i is Ellipsis]
    if ellipses:
        at = ellipses[0]
        items[at : at + 1] = [slice(None)] * (len(shape) - len(items) + 1)
    if len(items) > len(shape):
        raise IndexError(f"{name}: too many indices ({len(items)}) for an array of shape {shape}")
    items += [slice(None)] * (len(shape) - len(items))
    for dim, (i, size) in enumerate(zip(items, shape)):
        if isinstance(i, (slice, core.Tracer)):
            continue
        position = operator.index(i)
        if not -size <= position < size:
            raise IndexError(
                f"{name}: index {position} is out of bounds for dimension {dim} of size {size}"
            )
    return items


def getitem(mat: BCOO, item) -> BCOO:
    """`mat[item]` for an `is_basic_index` item."""
    items = basic_items(mat.shape, item, "BCOO indexing")
    windows, dynamic, squeezed = [], {}, []  # windows: (start, limit, stride) per dimension
    for dim, (i, size) in enumerate(zip(items, mat.shape)):
        if isinstance(i, slice):
            lo, hi, step = i.indices(size)
            windows.append((lo, max(lo, hi), step))
            continue
        squeezed.append(dim)
        if isinstance(i, core.Tracer):
            dynamic[dim] = i  # bcoo_dynamic_slice counts a negative one from the end
            windows.append((0, size, 1))
            continue
        position = operator.index(i) % size
        windows.append((position, position + 1, 1))
    start, limit, strides = zip(*windows) if windows else ((), (), ())
    out = bcoo_slice(mat, start_indices=start, limit_indices=limit, strides=strides)
    if dynamic:
        starts = [dynamic.get(d, 0) for d in range(out.ndim)]
        sizes = [1 if d in dynamic else s for d, s in enumerate(out.shape)]
        out = bcoo_dynamic_slice(out, starts, sizes)
    return bcoo_squeeze(out, dimensions=squeezed) if squeezed else out
