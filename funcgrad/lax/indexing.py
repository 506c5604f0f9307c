"""Indexing primitives: dynamic slices, gather and scatter.

Start indices are data, not parameters, so they may be traced. As in XLA, a start index that
would put a dynamic slice out of bounds is clamped; gather and scatter choose what happens to
out-of-bounds windows with a `GatherScatterMode`.

Gather and scatter follow XLA's dimension-number semantics, with JAX's convention that the
index vector is the last dimension of the indices.
"""

from __future__ import annotations

import enum
import math
import operator
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from funcgrad import core, dtypes
from funcgrad.core import Primitive, ShapedArray
from funcgrad.interpreters.ad import defjvp, instantiate, is_undefined
from funcgrad.interpreters.batching import batch_size, broadcast_batch, moveaxis, not_mapped
from funcgrad.lax.base import asarray, canonical_axes, check_same_dtypes
from funcgrad.lax.elementwise import (
    add,
    binary_operands,
    bitwise_or,
    convert_element_type,
    div,
    eq,
    lt,
    mul,
    select,
)
from funcgrad.lax.shapes import (
    _insert,
    _lane_axes,
    broadcast_in_dim,
    concatenate,
    expand_dims,
    full,
    index_in_dim,
    iota,
    reshape,
    scalar_if_0d,
    squeeze,
)

__all__ = [
    "GatherDimensionNumbers",
    "GatherScatterMode",
    "ScatterDimensionNumbers",
    "dynamic_index_in_dim",
    "dynamic_slice",
    "dynamic_slice_in_dim",
    "dynamic_update_index_in_dim",
    "dynamic_update_slice",
    "dynamic_update_slice_in_dim",
    "gather",
    "scatter",
    "scatter_add",
    "scatter_max",
    "scatter_min",
    "scatter_mul",
]


def _first_operand_weak(weak_flags: Sequence[bool], **params) -> bool:
    """The result holds the first operand's values; the index operands do not type it."""
    return weak_flags[0]


def _operand_and_update_weak(weak_flags: Sequence[bool], **params) -> bool:
    return weak_flags[0] and weak_flags[1]


def _check_start_indices(name: str, operand: ShapedArray, indices: Sequence[ShapedArray]):
    if len(indices) != operand.ndim:
        raise TypeError(
            f"{name}: got {len(indices)} start indices for the operand of shape {operand.shape}; "
            "it needs one per dimension"
        )
    if any(i.ndim != 0 for i in indices):
        raise TypeError(
            f"{name}: start indices must be scalars, got shapes "
            + ", ".join(str(i.shape) for i in indices)
        )
    if any(not dtypes.is_int(i.dtype) or i.dtype != indices[0].dtype for i in indices):
        raise TypeError(
            f"{name}: start indices must be integers of one dtype, got "
            + ", ".join(i.dtype.name for i in indices)
        )


def _start_index_operands(
    name: str, operand, start_indices, allow_negative_indices: bool | Sequence[bool] = True
) -> list:
    """Scalar index operands; a negative start index counts from the end of its dimension,
    where `allow_negative_indices` (one bool, or one per dimension) allows it.

    `start_indices` is a sequence of scalars or one 1-d array. The wrapping of negative
    indices happens here, in the wrapper (as in JAX): the primitive itself only clamps, so an
    index that may not be negative and is clamps to 0; a negative Python int there is an
    error. Python ints take the dtype of the array indices, if any.
    """
    if not isinstance(start_indices, Sequence):
        vector = asarray(start_indices)
        if vector.ndim != 1:
            raise TypeError(
                f"{name}: start_indices must be a sequence of scalars or a 1-d array, got an "
                f"array of shape {vector.shape}"
            )
        start_indices = [index_in_dim(vector, k, keepdims=False) for k in range(vector.shape[0])]
    if len(start_indices) != operand.ndim:
        raise TypeError(
            f"{name}: got {len(start_indices)} start indices for the operand of shape "
            f"{operand.shape}; it needs one per dimension"
        )
    if isinstance(allow_negative_indices, bool):
        allow_negative_indices = (allow_negative_indices,) * operand.ndim
    allow_negative_indices = tuple(allow_negative_indices)
    if len(allow_negative_indices) != operand.ndim:
        raise TypeError(
            f"{name}: allow_negative_indices must be one bool or one per dimension of the "
            f"operand of shape {operand.shape}, got {allow_negative_indices}"
        )
    index_dtype = next(
        (asarray(i).dtype for i in start_indices if not isinstance(i, int)), dtypes.default_int
    )
    operands = []
    for index, size, wrap in zip(start_indices, operand.shape, allow_negative_indices):
        if isinstance(index, int):
            if index < 0 and not wrap:
                raise ValueError(
                    f"{name}: start index {index} is negative for dimension of size {size}, "
                    "where allow_negative_indices=False"
                )
            index = index + size if index < 0 else index
            operands.append(asarray(np.array(index, index_dtype)[()]))
            continue
        index = asarray(index)
        if not wrap:
            operands.append(index)
            continue
        if index.ndim == 0 and dtypes.is_int(index.dtype) and not dtypes.is_unsigned(index.dtype):
            # The size wraps modulo the index dtype, as a conversion would in compiled code.
            size = asarray(np.array(size).astype(index.dtype)[()])
            index = select(lt(index, 0), add(index, size), index)
        operands.append(index)
    # Checked here as well as by the primitive: under vmap the batching rule, which joins the
    # indices into one array, runs before the primitive's own check.
    _check_start_indices(name, core.get_aval(operand), [core.get_aval(i) for i in operands])
    return operands


def _at_batch_dim(x, dim, size: int, target: int):
    """`x` with its batch axis at `target`, broadcast there if `x` is not batched."""
    return broadcast_batch(x, size, target) if dim is not_mapped else moveaxis(x, dim, target)


def _index_vectors(start_indices, dims, size: int):
    """Scalar start indices, some batched, as one (size, n) array: each lane's index vector."""
    columns = [
        broadcast_in_dim(i, (size, 1), () if d is not_mapped else (0,))
        for i, d in zip(start_indices, dims)
    ]
    return concatenate(columns, 1)


# ---------------------------------------------------------------------------------------------
# Dynamic slices

dynamic_slice_p = Primitive("dynamic_slice")


@dynamic_slice_p.def_abstract_eval
def _dynamic_slice_abstract_eval(
    operand: ShapedArray, *start_indices: ShapedArray, slice_sizes: tuple[int, ...]
) -> ShapedArray:
    _check_start_indices("dynamic_slice", operand, start_indices)
    if len(slice_sizes) != operand.ndim or not all(
        0 <= s <= n for s, n in zip(slice_sizes, operand.shape)
    ):
        raise TypeError(
            f"dynamic_slice: slice_sizes {slice_sizes} must give a size between 0 and the "
            f"dimension's size for each dimension of the operand of shape {operand.shape}"
        )
    return ShapedArray(slice_sizes, operand.dtype)


def _clamped_window(start_indices, window_shape, operand_shape) -> tuple:
    """Slices of `window_shape` at the starts, each clamped so the window stays in bounds."""
    windows = []
    for start, size, n in zip(start_indices, window_shape, operand_shape):
        start = min(max(int(start), 0), n - size)
        windows.append(slice(start, start + size))
    return tuple(windows)


@dynamic_slice_p.def_impl
def _dynamic_slice_impl(operand, *start_indices, slice_sizes):
    window = _clamped_window(start_indices, slice_sizes, np.shape(operand))
    return scalar_if_0d(operand[window])


dynamic_slice_p.def_weak_type(_first_operand_weak)


def _dynamic_slice_tangent(t, operand, *start_indices, slice_sizes):
    return dynamic_slice_p.bind(t, *start_indices, slice_sizes=slice_sizes)


# Linear in the operand; the integer start indices have no tangent.
defjvp(dynamic_slice_p, _dynamic_slice_tangent)


@dynamic_slice_p.def_transpose
def _dynamic_slice_transpose(ct, operand, *start_indices, slice_sizes):
    # The primitive clamps the same start indices the same way, so the block lands where it
    # was read.
    zeros = full(operand.aval.shape, 0, ct.dtype)
    ct_operand = dynamic_update_slice_p.bind(zeros, ct, *start_indices)
    return [ct_operand] + [None] * len(start_indices)


@dynamic_slice_p.def_batch
def _dynamic_slice_batch(values, dims, *, slice_sizes):
    """With one start per lane the slice is a gather of one clamped window per lane, reading
    the lane's own slice of a batched operand through a batching dimension."""
    (operand, *starts), (operand_dim, *start_dims) = values, dims
    size = batch_size(values, dims)
    if all(d is not_mapped for d in start_dims):
        zero = np.zeros((), core.get_aval(starts[0]).dtype if starts else np.int32)[()]
        starts = _insert(starts, operand_dim, asarray(zero))
        sizes = _insert(slice_sizes, operand_dim, size)
        return dynamic_slice_p.bind(operand, *starts, slice_sizes=sizes), operand_dim
    rank = len(slice_sizes)
    batching = () if operand_dim is not_mapped else (operand_dim,)
    dn = GatherDimensionNumbers(
        offset_dims=tuple(range(1, rank + 1)),
        collapsed_slice_dims=(),
        start_index_map=_lane_axes(range(rank), operand_dim) if batching else tuple(range(rank)),
        operand_batching_dims=batching,
        start_indices_batching_dims=(0,) if batching else (),
    )
    out = gather_p.bind(
        operand,
        _index_vectors(starts, start_dims, size),
        dimension_numbers=dn,
        slice_sizes=_insert(slice_sizes, operand_dim, 1) if batching else slice_sizes,
        indices_are_sorted=False,
        unique_indices=bool(batching),  # lanes share the window only of a shared operand
        mode=GatherScatterMode.CLIP,
        fill_value=None,
    )
    return out, 0


def dynamic_slice(
    operand,
    start_indices: Sequence,
    slice_sizes: Sequence[int],
    *,
    allow_negative_indices: bool | Sequence[bool] = True,
):
    """The block of `slice_sizes` at `start_indices` (traceable scalars).

    Negative start indices count from the end (unless `allow_negative_indices` says not to);
    then each start is clamped so that the block lies inside the operand.
    """
    operand = asarray(operand)
    indices = _start_index_operands("dynamic_slice", operand, start_indices, allow_negative_indices)
    try:
        sizes = tuple(operator.index(s) for s in slice_sizes)
    except TypeError:
        raise TypeError(f"dynamic_slice: slice_sizes must be integers, got {slice_sizes}") from None
    return dynamic_slice_p.bind(operand, *indices, slice_sizes=sizes)


def _canonical_axis(axis: int, operand, name: str) -> int:
    return canonical_axes((axis,), operand.ndim, name)[0]


def _one_axis_indices(operand, index, axis: int) -> list:
    """Start indices that are `index` along `axis` and 0 elsewhere, in `index`'s dtype."""
    if isinstance(index, int):
        zero = 0
    else:
        index = asarray(index)
        zero = asarray(np.zeros((), index.dtype)[()])
    indices = [zero] * operand.ndim
    indices[axis] = index
    return indices


def dynamic_slice_in_dim(
    operand,
    start_index,
    slice_size: int = 1,
    axis: int = 0,
    *,
    allow_negative_indices: bool = True,
):
    """`dynamic_slice` along one axis, taking the whole of every other axis."""
    operand = asarray(operand)
    axis = _canonical_axis(axis, operand, "dynamic_slice_in_dim")
    sizes = list(operand.shape)
    sizes[axis] = int(slice_size)
    indices = _one_axis_indices(operand, start_index, axis)
    return dynamic_slice(operand, indices, sizes, allow_negative_indices=allow_negative_indices)


def dynamic_index_in_dim(
    operand, index, axis: int = 0, keepdims: bool = True, *, allow_negative_indices: bool = True
):
    """Element `index` (traceable) along `axis`, keeping the axis if asked."""
    operand = asarray(operand)
    axis = _canonical_axis(axis, operand, "dynamic_index_in_dim")
    result = dynamic_slice_in_dim(
        operand, index, 1, axis, allow_negative_indices=allow_negative_indices
    )
    return result if keepdims else squeeze(result, (axis,))


dynamic_update_slice_p = Primitive("dynamic_update_slice")


@dynamic_update_slice_p.def_abstract_eval
def _dynamic_update_slice_abstract_eval(
    operand: ShapedArray, update: ShapedArray, *start_indices: ShapedArray
) -> ShapedArray:
    dtype = check_same_dtypes("dynamic_update_slice", [operand, update])
    _check_start_indices("dynamic_update_slice", operand, start_indices)
    if update.ndim != operand.ndim or not all(u <= n for u, n in zip(update.shape, operand.shape)):
        raise TypeError(
            f"dynamic_update_slice: the update of shape {update.shape} must have the operand's "
            f"rank and fit inside the operand of shape {operand.shape}"
        )
    return ShapedArray(operand.shape, dtype)


@dynamic_update_slice_p.def_impl
def _dynamic_update_slice_impl(operand, update, *start_indices):
    out = np.array(operand, copy=True)
    out[_clamped_window(start_indices, np.shape(update), np.shape(operand))] = update
    return scalar_if_0d(out)


dynamic_update_slice_p.def_weak_type(_operand_and_update_weak)


@dynamic_update_slice_p.def_jvp
def _dynamic_update_slice_jvp(primals, tangents):
    operand, update, *start_indices = primals
    t_operand, t_update = map(instantiate, tangents[:2])
    out = dynamic_update_slice_p.bind(operand, update, *start_indices)
    return out, dynamic_update_slice_p.bind(t_operand, t_update, *start_indices)


@dynamic_update_slice_p.def_transpose
def _dynamic_update_slice_transpose(ct, operand, update, *start_indices):
    update_shape = core.get_aval(update).shape
    ct_operand = ct_update = None
    if is_undefined(operand):
        zeros = full(update_shape, 0, ct.dtype)
        ct_operand = dynamic_update_slice_p.bind(ct, zeros, *start_indices)
    if is_undefined(update):
        ct_update = dynamic_slice_p.bind(ct, *start_indices, slice_sizes=update_shape)
    return [ct_operand, ct_update] + [None] * len(start_indices)


@dynamic_update_slice_p.def_batch
def _dynamic_update_slice_batch(values, dims):
    """The operand and the update get a common batch axis (each lane writes its own copy);
    with one start per lane the update becomes a scatter of one clamped window per lane."""
    (operand, update, *starts), (operand_dim, update_dim, *start_dims) = values, dims
    size = batch_size(values, dims)
    dim = next((d for d in (operand_dim, update_dim) if d is not not_mapped), 0)
    operand = _at_batch_dim(operand, operand_dim, size, dim)
    if all(d is not_mapped for d in start_dims):
        update = _at_batch_dim(update, update_dim, size, dim)
        zero = np.zeros((), core.get_aval(starts[0]).dtype if starts else np.int32)[()]
        starts = _insert(starts, dim, asarray(zero))
        return dynamic_update_slice_p.bind(operand, update, *starts), dim
    if update_dim is not_mapped:
        update, update_dim = broadcast_batch(update, size, 0), 0
    rank = len(starts)
    dn = ScatterDimensionNumbers(
        update_window_dims=tuple(d for d in range(rank + 1) if d != update_dim),
        inserted_window_dims=(),
        scatter_dims_to_operand_dims=_lane_axes(range(rank), dim),
        operand_batching_dims=(dim,),
        scatter_indices_batching_dims=(0,),
    )
    out = scatter_p.bind(
        operand,
        _index_vectors(starts, start_dims, size),
        update,
        dimension_numbers=dn,
        indices_are_sorted=False,
        unique_indices=True,  # one window per lane, each in its own lane
        mode=GatherScatterMode.CLIP,
    )
    return out, dim


def dynamic_update_slice(
    operand,
    update,
    start_indices: Sequence,
    *,
    allow_negative_indices: bool | Sequence[bool] = True,
):
    """`operand` with `update` written at `start_indices`, wrapped and clamped as in
    `dynamic_slice`, so that the whole update is written."""
    operand, update = binary_operands(operand, update)
    indices = _start_index_operands(
        "dynamic_update_slice", operand, start_indices, allow_negative_indices
    )
    return dynamic_update_slice_p.bind(operand, update, *indices)


def dynamic_update_slice_in_dim(
    operand, update, start_index, axis: int, *, allow_negative_indices: bool = True
):
    operand = asarray(operand)
    axis = _canonical_axis(axis, operand, "dynamic_update_slice_in_dim")
    indices = _one_axis_indices(operand, start_index, axis)
    return dynamic_update_slice(
        operand, update, indices, allow_negative_indices=allow_negative_indices
    )


def dynamic_update_index_in_dim(
    operand, update, index, axis: int, *, allow_negative_indices: bool = True
):
    """Write `update` at position `index` of `axis`; `update` may lack that axis."""
    operand, update = binary_operands(operand, update)
    axis = _canonical_axis(axis, operand, "dynamic_update_index_in_dim")
    if update.ndim == operand.ndim - 1:
        update = expand_dims(update, (axis,))
    return dynamic_update_slice_in_dim(
        operand, update, index, axis, allow_negative_indices=allow_negative_indices
    )


# ---------------------------------------------------------------------------------------------
# Gather and scatter: dimension numbers and modes


class GatherDimensionNumbers(NamedTuple):
    """How the operand, the indices and the output of a gather relate (XLA's definition).

    Every dimension of the indices but the last is a batch dimension of the output; the last
    holds index vectors, whose entries are starts in the operand dimensions `start_index_map`.
    Each start selects a window of `slice_sizes` from the operand. The window's dimensions
    appear in the output at `offset_dims`, except `collapsed_slice_dims` (size 1, dropped)
    and `operand_batching_dims` (size 1, dropped): the window's start in
    `operand_batching_dims[k]` is the output's position in indices dimension
    `start_indices_batching_dims[k]`, which is how vmap batches a gather.
    """

    offset_dims: tuple[int, ...]
    collapsed_slice_dims: tuple[int, ...]
    start_index_map: tuple[int, ...]
    operand_batching_dims: tuple[int, ...] = ()
    start_indices_batching_dims: tuple[int, ...] = ()


class ScatterDimensionNumbers(NamedTuple):
    """How the operand, the indices and the updates of a scatter relate (XLA's definition).

    The mirror of `GatherDimensionNumbers`: `update_window_dims` are the window dimensions of
    the updates, `inserted_window_dims` the size-1 operand dimensions they lack, and
    `scatter_dims_to_operand_dims` maps the entries of each index vector to operand dimensions.
    """

    update_window_dims: tuple[int, ...]
    inserted_window_dims: tuple[int, ...]
    scatter_dims_to_operand_dims: tuple[int, ...]
    operand_batching_dims: tuple[int, ...] = ()
    scatter_indices_batching_dims: tuple[int, ...] = ()


class GatherScatterMode(enum.Enum):
    """What happens to a window that reaches outside the operand.

    CLIP clamps its start so that it lies inside. FILL_OR_DROP gives a gathered window that is
    wholly `fill_value` and drops a scattered window entirely. PROMISE_IN_BOUNDS trusts the
    caller; out-of-bounds windows then behave as XLA's do: gathers clamp, scatters drop.
    """

    CLIP = enum.auto()
    FILL_OR_DROP = enum.auto()
    PROMISE_IN_BOUNDS = enum.auto()

    @staticmethod
    def from_any(s: str | GatherScatterMode | None) -> GatherScatterMode:
        """The mode named by `s`: a mode, 'clip', 'fill' or 'drop', 'promise_in_bounds', or
        None (FILL_OR_DROP)."""
        if isinstance(s, GatherScatterMode):
            return s
        names = {
            None: GatherScatterMode.FILL_OR_DROP,
            "clip": GatherScatterMode.CLIP,
            "fill": GatherScatterMode.FILL_OR_DROP,
            "drop": GatherScatterMode.FILL_OR_DROP,
            "promise_in_bounds": GatherScatterMode.PROMISE_IN_BOUNDS,
        }
        if s not in names:
            raise ValueError(
                f"unknown gather/scatter mode {s!r}: expected 'clip', 'fill', 'drop', "
                "'promise_in_bounds', None or a GatherScatterMode"
            )
        return names[s]


def _check_dim_set(name: str, what: str, dims: tuple[int, ...], rank: int, ordered: bool):
    if any(not 0 <= d < rank for d in dims) or len(set(dims)) != len(dims):
        raise TypeError(f"{name}: {what} {dims} must be distinct dimensions in [0, {rank})")
    if ordered and list(dims) != sorted(dims):
        raise TypeError(f"{name}: {what} {dims} must be sorted")


def _check_disjoint(name: str, what: str, a: tuple[int, ...], b: tuple[int, ...]) -> None:
    if set(a) & set(b):
        raise TypeError(f"{name}: {what} must not share dimensions, got {a} and {b}")


def _check_indices(name: str, indices: ShapedArray, index_map: tuple[int, ...], map_name: str):
    if not dtypes.is_int(indices.dtype):
        raise TypeError(f"{name}: indices must be integers, got {indices.dtype.name}")
    if indices.ndim == 0 or indices.shape[-1] != len(index_map):
        raise TypeError(
            f"{name}: the last dimension of the indices (shape {indices.shape}) holds the index "
            f"vectors and must have size len({map_name}) = {len(index_map)}"
        )


def _check_batching(
    name: str,
    operand: ShapedArray,
    indices: ShapedArray,
    operand_dims: tuple[int, ...],
    indices_dims: tuple[int, ...],
    indices_dims_name: str,
) -> None:
    """Operand batching dims pair, in order, with batch dims of the indices of equal sizes."""
    _check_dim_set(name, indices_dims_name, indices_dims, indices.ndim - 1, ordered=False)
    operand_sizes = tuple(operand.shape[d] for d in operand_dims)
    indices_sizes = tuple(indices.shape[d] for d in indices_dims)
    if operand_sizes != indices_sizes:
        raise TypeError(
            f"{name}: operand_batching_dims {operand_dims} of the operand of shape "
            f"{operand.shape} and {indices_dims_name} {indices_dims} of the indices of shape "
            f"{indices.shape} must pair up dimensions of equal sizes"
        )


def _window_operand_dims(rank: int, *excluded: tuple[int, ...]) -> tuple[int, ...]:
    """The operand dimensions that a window keeps (those not collapsed/inserted or batched)."""
    dropped = {d for dims in excluded for d in dims}
    return tuple(d for d in range(rank) if d not in dropped)


# ---------------------------------------------------------------------------------------------
# Gather

gather_p = Primitive("gather")


@gather_p.def_abstract_eval
def _gather_abstract_eval(
    operand: ShapedArray,
    indices: ShapedArray,
    *,
    dimension_numbers: GatherDimensionNumbers,
    slice_sizes: tuple[int, ...],
    indices_are_sorted: bool,
    unique_indices: bool,
    mode: GatherScatterMode,
    fill_value,
) -> ShapedArray:
    dn = dimension_numbers
    _check_indices("gather", indices, dn.start_index_map, "start_index_map")
    batch_shape = indices.shape[:-1]
    out_rank = len(batch_shape) + len(dn.offset_dims)
    _check_dim_set("gather", "offset_dims", dn.offset_dims, out_rank, ordered=True)
    rank = operand.ndim
    _check_dim_set("gather", "collapsed_slice_dims", dn.collapsed_slice_dims, rank, True)
    _check_dim_set("gather", "operand_batching_dims", dn.operand_batching_dims, rank, True)
    _check_dim_set("gather", "start_index_map", dn.start_index_map, rank, ordered=False)
    _check_disjoint(
        "gather",
        "collapsed_slice_dims and operand_batching_dims",
        dn.collapsed_slice_dims,
        dn.operand_batching_dims,
    )
    _check_disjoint(
        "gather",
        "start_index_map and operand_batching_dims",
        dn.start_index_map,
        dn.operand_batching_dims,
    )
    _check_batching(
        "gather",
        operand,
        indices,
        dn.operand_batching_dims,
        dn.start_indices_batching_dims,
        "start_indices_batching_dims",
    )
    # With no index vectors no window is read, so none has to fit: a gather vmapped over zero
    # lanes slices 1 from its batch axis of size 0.
    reads = math.prod(batch_shape) > 0
    if len(slice_sizes) != rank or not all(
        0 <= s and (s <= n or not reads) for s, n in zip(slice_sizes, operand.shape)
    ):
        raise TypeError(
            f"gather: slice_sizes {slice_sizes} must give a size between 0 and the dimension's "
            f"size for each dimension of the operand of shape {operand.shape}"
        )
    for d in dn.collapsed_slice_dims + dn.operand_batching_dims:
        if slice_sizes[d] != 1:
            raise TypeError(
                f"gather: slice_sizes {slice_sizes} must be 1 in collapsed_slice_dims "
                f"{dn.collapsed_slice_dims} and operand_batching_dims {dn.operand_batching_dims}"
            )
    window_dims = _window_operand_dims(rank, dn.collapsed_slice_dims, dn.operand_batching_dims)
    if len(window_dims) != len(dn.offset_dims):
        raise TypeError(
            f"gather: each of the {rank} dimensions of the operand of shape {operand.shape} must "
            f"be an offset, collapsed or batching dimension; got offset_dims {dn.offset_dims}, "
            f"collapsed_slice_dims {dn.collapsed_slice_dims} and operand_batching_dims "
            f"{dn.operand_batching_dims}"
        )
    offset_sizes = iter(slice_sizes[d] for d in window_dims)
    batch_sizes = iter(batch_shape)
    shape = tuple(
        next(offset_sizes) if d in dn.offset_dims else next(batch_sizes) for d in range(out_rank)
    )
    return ShapedArray(shape, operand.dtype)


def _as_int64(indices: np.ndarray) -> np.ndarray:
    """Indices as int64; uint64 values beyond its range saturate (they are out of bounds)."""
    if indices.dtype == np.uint64:
        indices = np.minimum(indices, np.iinfo(np.int64).max)
    return indices.astype(np.int64)


def _window_starts(indices, index_map, operand_batching_dims, indices_batching_dims, rank):
    """The start of every window in every operand dimension: batch_shape + (rank,)."""
    batch_shape = indices.shape[:-1]
    starts = np.zeros(batch_shape + (rank,), np.int64)
    starts[..., list(index_map)] = _as_int64(indices)
    for operand_dim, indices_dim in zip(operand_batching_dims, indices_batching_dims):
        position = np.arange(batch_shape[indices_dim])
        line_shape = [1] * len(batch_shape)
        line_shape[indices_dim] = -1
        starts[..., operand_dim] = position.reshape(line_shape)
    return starts


def _flat_positions(starts: np.ndarray, window_shape, operand_shape) -> np.ndarray:
    """Row-major positions in the operand of each element of each window.

    Shape batch_shape + window_shape, where `starts` is batch_shape + (rank,).
    """
    rank = len(operand_shape)
    strides = np.ones(rank, np.int64)
    for d in range(rank - 2, -1, -1):
        strides[d] = strides[d + 1] * operand_shape[d + 1]
    offsets = np.zeros(window_shape, np.int64)
    for d in range(rank):
        line_shape = [1] * rank
        line_shape[d] = -1
        offsets = offsets + (np.arange(window_shape[d]) * strides[d]).reshape(line_shape)
    base = starts @ strides
    return np.reshape(base, np.shape(base) + (1,) * rank) + offsets


def _window_bounds(starts, window_shape, operand_shape, clamp: bool):
    """Starts (clamped if asked) and which windows lie wholly inside the operand."""
    limits = np.array(operand_shape, np.int64) - np.array(window_shape, np.int64)
    in_bounds = np.all((starts >= 0) & (starts <= limits), axis=-1)
    if clamp:
        starts = np.clip(starts, 0, limits)
    return starts, in_bounds


@gather_p.def_impl
def _gather_impl(
    operand,
    indices,
    *,
    dimension_numbers,
    slice_sizes,
    indices_are_sorted,
    unique_indices,
    mode,
    fill_value,
):
    dn = dimension_numbers
    operand, indices = np.asarray(operand), np.asarray(indices)
    rank, batch_rank = operand.ndim, indices.ndim - 1
    starts = _window_starts(
        indices, dn.start_index_map, dn.operand_batching_dims, dn.start_indices_batching_dims, rank
    )
    starts, in_bounds = _window_bounds(starts, slice_sizes, operand.shape, clamp=True)
    values = operand.reshape(-1)[_flat_positions(starts, slice_sizes, operand.shape)]
    if mode == GatherScatterMode.FILL_OR_DROP:
        mask = in_bounds.reshape(in_bounds.shape + (1,) * rank)
        values = np.where(mask, values, np.array(fill_value, operand.dtype))
    window_dims = _window_operand_dims(rank, dn.collapsed_slice_dims, dn.operand_batching_dims)
    values = values.reshape(indices.shape[:-1] + tuple(slice_sizes[d] for d in window_dims))
    window_axes = range(batch_rank, batch_rank + len(window_dims))
    return scalar_if_0d(np.moveaxis(values, window_axes, dn.offset_dims))


gather_p.def_weak_type(_first_operand_weak)


def _gather_tangent(t, operand, indices, *, mode, fill_value, **params):
    # A window of the constant fill value has a zero tangent.
    fill = 0 if mode == GatherScatterMode.FILL_OR_DROP else None
    return gather_p.bind(t, indices, mode=mode, fill_value=fill, **params)


defjvp(gather_p, _gather_tangent, None)


@gather_p.def_transpose
def _gather_transpose(
    ct,
    operand,
    indices,
    *,
    dimension_numbers,
    slice_sizes,
    indices_are_sorted,
    unique_indices,
    mode,
    fill_value,
):
    """Add each window of the cotangent back where the gather read it (the mirrored scatter).

    Gathers clamp an out-of-bounds window unless they fill it, while a PROMISE_IN_BOUNDS
    scatter would drop it: the scatter clips, so the adjoint is exact even when the promise
    is broken.
    """
    dn = dimension_numbers
    scatter_dn = ScatterDimensionNumbers(
        update_window_dims=dn.offset_dims,
        inserted_window_dims=dn.collapsed_slice_dims,
        scatter_dims_to_operand_dims=dn.start_index_map,
        operand_batching_dims=dn.operand_batching_dims,
        scatter_indices_batching_dims=dn.start_indices_batching_dims,
    )
    fills = mode == GatherScatterMode.FILL_OR_DROP
    ct_operand = scatter_add_p.bind(
        full(operand.aval.shape, 0, ct.dtype),
        indices,
        ct,
        dimension_numbers=scatter_dn,
        indices_are_sorted=indices_are_sorted,
        unique_indices=unique_indices,
        mode=mode if fills else GatherScatterMode.CLIP,
    )
    return [ct_operand, None]


def _indices_batch_dim(indices, dim: int) -> tuple:
    """Batched indices whose batch axis is not the last, which holds the index vectors."""
    last = core.get_aval(indices).ndim - 1
    return (moveaxis(indices, dim, last - 1), last - 1) if dim == last else (indices, dim)


def _new_batch_position(window_dims: Sequence[int], rank: int, k: int) -> tuple[int, int]:
    """Where an axis may be inserted into an array of `rank` axes so that exactly `k` of the
    axes that are not in `window_dims` precede it: the range (lowest, highest)."""
    others = [d for d in range(rank) if d not in window_dims]
    lowest = others[k - 1] + 1 if k > 0 else 0
    return lowest, others[k] if k < len(others) else rank


def _window_position(window_dims: Sequence[int], rank: int, k: int) -> tuple[int, int]:
    """Where an axis may be inserted into an array of `rank` axes so that it comes right
    after the first `k` of `window_dims`: the range (lowest, highest)."""
    lowest = window_dims[k - 1] + 1 if k > 0 else 0
    return lowest, window_dims[k] if k < len(window_dims) else rank


def _add_batching_pair(operand_dims, indices_dims, operand_dim: int, indices_dim: int) -> tuple:
    """The batching pairs with (operand_dim, indices_dim) added, keeping operand dims sorted."""
    k = sum(d < operand_dim for d in operand_dims)
    return _insert(operand_dims, k, operand_dim), _insert(indices_dims, k, indices_dim)


@gather_p.def_batch
def _gather_batch(
    values,
    dims,
    *,
    dimension_numbers,
    slice_sizes,
    indices_are_sorted,
    unique_indices,
    mode,
    fill_value,
):
    """One gather for all lanes. A batched operand's batch axis is read whole, as one more
    window dimension, when the indices are shared; with batched indices it pairs with their
    batch axis as a batching dimension, and an unbatched operand is read by every lane as it
    is (never broadcast)."""
    (operand, indices), (operand_dim, indices_dim) = values, dims
    dn = dimension_numbers
    lane_index_rank = core.get_aval(indices).ndim - (indices_dim is not not_mapped)
    out_rank = lane_index_rank - 1 + len(dn.offset_dims)  # of one lane's output
    offset_dims, sizes = dn.offset_dims, slice_sizes
    collapsed, index_map = dn.collapsed_slice_dims, dn.start_index_map
    operand_batching, indices_batching = dn.operand_batching_dims, dn.start_indices_batching_dims
    if operand_dim is not not_mapped:
        collapsed = _lane_axes(collapsed, operand_dim)
        index_map = _lane_axes(index_map, operand_dim)
        operand_batching = _lane_axes(operand_batching, operand_dim)
    if indices_dim is not_mapped:
        windows = _window_operand_dims(
            len(slice_sizes), dn.collapsed_slice_dims, dn.operand_batching_dims
        )
        k = sum(d < operand_dim for d in windows)
        out_dim = _window_position(offset_dims, out_rank, k)[0]
        offset_dims = _insert(_lane_axes(offset_dims, out_dim), k, out_dim)
        sizes = _insert(slice_sizes, operand_dim, core.get_aval(operand).shape[operand_dim])
    else:
        indices, indices_dim = _indices_batch_dim(indices, indices_dim)
        out_dim = _new_batch_position(offset_dims, out_rank, indices_dim)[0]
        offset_dims = _lane_axes(offset_dims, out_dim)
        indices_batching = _lane_axes(indices_batching, indices_dim)
        if operand_dim is not not_mapped:
            operand_batching, indices_batching = _add_batching_pair(
                operand_batching, indices_batching, operand_dim, indices_dim
            )
            sizes = _insert(slice_sizes, operand_dim, 1)
        else:
            unique_indices = False  # lanes may read the same window
        indices_are_sorted = False
    out = gather_p.bind(
        operand,
        indices,
        dimension_numbers=GatherDimensionNumbers(
            offset_dims, collapsed, index_map, operand_batching, indices_batching
        ),
        slice_sizes=sizes,
        indices_are_sorted=indices_are_sorted,
        unique_indices=unique_indices,
        mode=mode,
        fill_value=fill_value,
    )
    return out, out_dim


def _default_fill_value(dtype: np.dtype):
    """JAX's fill for out-of-bounds gathers: a value that stands out in results."""
    if dtypes.is_inexact(dtype):
        return np.nan
    if dtypes.is_unsigned(dtype):
        return int(np.iinfo(dtype).max)
    if dtypes.is_int(dtype):
        return int(np.iinfo(dtype).min)
    return True


def _canonical_dimension_numbers(dimension_numbers, cls):
    return cls(*(tuple(int(d) for d in dims) for dims in dimension_numbers))


def gather(
    operand,
    start_indices,
    dimension_numbers: GatherDimensionNumbers,
    slice_sizes: Sequence[int],
    *,
    unique_indices: bool = False,
    indices_are_sorted: bool = False,
    mode: str | GatherScatterMode | None = None,
    fill_value=None,
):
    """XLA's gather: one window of `slice_sizes` per index vector in `start_indices`.

    With `mode=None` the caller promises in-bounds indices (out-of-bounds windows are clamped,
    as XLA does); 'fill' returns `fill_value` (default: NaN, the dtype's minimum for signed
    and maximum for unsigned integers, True for bool) for windows that reach outside.
    """
    operand, start_indices = asarray(operand), asarray(start_indices)
    parsed_mode = GatherScatterMode.from_any(
        GatherScatterMode.PROMISE_IN_BOUNDS if mode is None else mode
    )
    if parsed_mode != GatherScatterMode.FILL_OR_DROP:
        fill_value = None
    elif fill_value is None:
        fill_value = _default_fill_value(operand.dtype)
    elif not isinstance(fill_value, (bool, int, float)):
        fill_value = _static_fill_value(fill_value)
    return gather_p.bind(
        operand,
        start_indices,
        dimension_numbers=_canonical_dimension_numbers(dimension_numbers, GatherDimensionNumbers),
        slice_sizes=tuple(int(s) for s in slice_sizes),
        indices_are_sorted=bool(indices_are_sorted),
        unique_indices=bool(unique_indices),
        mode=parsed_mode,
        fill_value=fill_value,
    )


def _static_fill_value(fill_value):
    """A fill value as a Python scalar: a parameter of the gather, so static and hashable."""
    fill_value = core.concrete_or_error(
        fill_value,
        "The fill_value of a gather (x.at[i].get, take, take_along_axis) is a parameter "
        "of the program, so it must be static; to fill with a traced value, select it "
        "with fnp.where where the indices are out of bounds.",
    )
    value = np.asarray(fill_value)
    if value.size != 1:
        raise ValueError(f"gather: fill_value must be a scalar, got shape {value.shape}")
    return value.item()


def gather_along_axis(
    operand, indices, axis: int, *, unique_indices: bool = False, mode=None, fill_value=None
):
    """operand[..., indices[..., j, ...], ...] along `axis`, for indices whose other dimensions
    match operand's: one gather batched over those dimensions (as JAX's take_along_axis),
    whose transpose adds each line's updates into that line alone. Modes as `gather`'s."""
    operand, indices = asarray(operand), asarray(indices)
    others = tuple(d for d in range(operand.ndim) if d != axis)
    dimension_numbers = GatherDimensionNumbers(
        offset_dims=(),
        collapsed_slice_dims=(axis,),
        start_index_map=(axis,),
        operand_batching_dims=others,
        start_indices_batching_dims=others,
    )
    return gather(
        operand,
        expand_dims(indices, (indices.ndim,)),
        dimension_numbers,
        (1,) * operand.ndim,
        unique_indices=unique_indices,
        mode=mode,
        fill_value=fill_value,
    )


# ---------------------------------------------------------------------------------------------
# Scatter: one shape rule and one impl, parametrized by how an update combines with the operand


def _scatter_abstract_eval(
    name: str,
    operand: ShapedArray,
    indices: ShapedArray,
    updates: ShapedArray,
    *,
    dimension_numbers: ScatterDimensionNumbers,
    indices_are_sorted: bool,
    unique_indices: bool,
    mode: GatherScatterMode,
) -> ShapedArray:
    dn = dimension_numbers
    dtype = check_same_dtypes(name, [operand, updates])
    _check_indices(name, indices, dn.scatter_dims_to_operand_dims, "scatter_dims_to_operand_dims")
    rank = operand.ndim
    _check_dim_set(name, "update_window_dims", dn.update_window_dims, updates.ndim, True)
    _check_dim_set(name, "inserted_window_dims", dn.inserted_window_dims, rank, True)
    _check_dim_set(name, "operand_batching_dims", dn.operand_batching_dims, rank, True)
    _check_dim_set(
        name, "scatter_dims_to_operand_dims", dn.scatter_dims_to_operand_dims, rank, False
    )
    _check_disjoint(
        name,
        "inserted_window_dims and operand_batching_dims",
        dn.inserted_window_dims,
        dn.operand_batching_dims,
    )
    _check_disjoint(
        name,
        "scatter_dims_to_operand_dims and operand_batching_dims",
        dn.scatter_dims_to_operand_dims,
        dn.operand_batching_dims,
    )
    _check_batching(
        name,
        operand,
        indices,
        dn.operand_batching_dims,
        dn.scatter_indices_batching_dims,
        "scatter_indices_batching_dims",
    )
    window_dims = _window_operand_dims(rank, dn.inserted_window_dims, dn.operand_batching_dims)
    if len(window_dims) != len(dn.update_window_dims):
        raise TypeError(
            f"{name}: each of the {rank} dimensions of the operand of shape {operand.shape} "
            f"must be a window, inserted or batching dimension; got update_window_dims "
            f"{dn.update_window_dims}, inserted_window_dims {dn.inserted_window_dims} and "
            f"operand_batching_dims {dn.operand_batching_dims}"
        )
    scatter_shape = tuple(n for d, n in enumerate(updates.shape) if d not in dn.update_window_dims)
    window_shape = tuple(updates.shape[d] for d in dn.update_window_dims)
    if scatter_shape != indices.shape[:-1] or not all(
        w <= operand.shape[d] for w, d in zip(window_shape, window_dims)
    ):
        raise TypeError(
            f"{name}: updates of shape {updates.shape} do not match indices of shape "
            f"{indices.shape} and the operand of shape {operand.shape}: the updates need the "
            f"indices' batch shape {indices.shape[:-1]} outside update_window_dims "
            f"{dn.update_window_dims}, and windows no larger than operand dimensions {window_dims}"
        )
    unit_dims = dn.inserted_window_dims + dn.operand_batching_dims
    empty_dims = tuple(d for d in unit_dims if operand.shape[d] == 0)
    if mode == GatherScatterMode.CLIP and math.prod(scatter_shape) > 0 and empty_dims:
        # The other modes drop every window, as none fits; clamping has nowhere to put one.
        raise TypeError(
            f"{name}: mode 'clip' cannot place the {math.prod(scatter_shape)} update windows, "
            f"each of size 1 in dimensions {empty_dims}, in the operand of shape {operand.shape}"
        )
    return ShapedArray(operand.shape, dtype)


def _scatter_impl(
    combine: Callable,
    operand,
    indices,
    updates,
    *,
    dimension_numbers,
    indices_are_sorted,
    unique_indices,
    mode,
):
    dn = dimension_numbers
    operand, indices, updates = np.asarray(operand), np.asarray(indices), np.asarray(updates)
    rank, batch_rank = operand.ndim, indices.ndim - 1
    window_dims = _window_operand_dims(rank, dn.inserted_window_dims, dn.operand_batching_dims)
    window_sizes = dict(zip(window_dims, (updates.shape[d] for d in dn.update_window_dims)))
    window_shape = tuple(window_sizes.get(d, 1) for d in range(rank))
    window_axes = range(batch_rank, updates.ndim)
    # Colliding updates are combined in the order of the updates array itself (the last
    # write wins, sums round in that order), as compiled kernels loop over it.
    order = np.arange(updates.size).reshape(updates.shape)
    order = np.moveaxis(order, dn.update_window_dims, window_axes)
    updates = np.moveaxis(updates, dn.update_window_dims, window_axes)
    order = order.reshape(indices.shape[:-1] + window_shape)
    updates = updates.reshape(indices.shape[:-1] + window_shape)
    starts = _window_starts(
        indices,
        dn.scatter_dims_to_operand_dims,
        dn.operand_batching_dims,
        dn.scatter_indices_batching_dims,
        rank,
    )
    clamp = mode == GatherScatterMode.CLIP
    starts, in_bounds = _window_bounds(starts, window_shape, operand.shape, clamp)
    positions = _flat_positions(starts, window_shape, operand.shape)
    if not clamp:  # the other modes drop every window that reaches outside the operand
        positions, updates, order = positions[in_bounds], updates[in_bounds], order[in_bounds]
    in_order = np.argsort(order.reshape(-1))
    out = np.array(operand, copy=True).reshape(-1)
    combine(out, positions.reshape(-1)[in_order], updates.reshape(-1)[in_order])
    return scalar_if_0d(out.reshape(operand.shape))


def _assign(out: np.ndarray, positions: np.ndarray, values: np.ndarray) -> None:
    # Where windows overlap, XLA leaves the winner unspecified; NumPy keeps the last write.
    out[positions] = values


def _scatter_primitive(name: str, combine: Callable) -> Primitive:
    prim = Primitive(name)

    def abstract_eval(operand, indices, updates, **params):
        return _scatter_abstract_eval(name, operand, indices, updates, **params)

    def impl(operand, indices, updates, **params):
        return _scatter_impl(combine, operand, indices, updates, **params)

    prim.def_abstract_eval(abstract_eval)
    prim.def_impl(impl)
    prim.def_weak_type(_scatter_weak_type)
    return prim


def _scatter_weak_type(weak_flags: Sequence[bool], **params) -> bool:
    """The result mixes operand and update values; the indices do not type it."""
    return weak_flags[0] and weak_flags[2]


scatter_p = _scatter_primitive("scatter", _assign)
scatter_add_p = _scatter_primitive("scatter_add", np.add.at)
scatter_mul_p = _scatter_primitive("scatter_mul", np.multiply.at)


def _extremum_at(ufunc: np.ufunc, negative: bool) -> Callable:
    """`ufunc.at` with max and min's order of zeros (-0 below +0): a float maximum is -0 only
    where every zero it met was -0 (a minimum +0 only where every one was +0). NumPy's
    maximum and minimum keep whichever zero of a tie their rule picks."""

    def combine(out: np.ndarray, positions: np.ndarray, values: np.ndarray) -> None:
        if not dtypes.is_float(out.dtype):
            ufunc.at(out, positions, values)
            return
        met_zero_of_sign = (out == 0) & (np.signbit(out) == negative)
        np.logical_or.at(
            met_zero_of_sign, positions, (values == 0) & (np.signbit(values) == negative)
        )
        ufunc.at(out, positions, values)
        signed_zero = np.copysign(np.zeros((), out.dtype), -1 if negative else 1)
        out[(out == 0) & met_zero_of_sign] = signed_zero

    return combine


scatter_min_p = _scatter_primitive("scatter_min", _extremum_at(np.minimum, negative=True))
scatter_max_p = _scatter_primitive("scatter_max", _extremum_at(np.maximum, negative=False))


# ---------------------------------------------------------------------------------------------
# Scatter: derivatives


def _scattered_values(x, indices, updates_shape, *, dimension_numbers, mode, **params):
    """For each element of a scatter's updates, the element of the operand-shaped `x` that it
    lands on (the mirrored gather); 0 for the windows that the scatter drops."""
    dn = dimension_numbers
    gather_dn = GatherDimensionNumbers(
        offset_dims=dn.update_window_dims,
        collapsed_slice_dims=dn.inserted_window_dims,
        start_index_map=dn.scatter_dims_to_operand_dims,
        operand_batching_dims=dn.operand_batching_dims,
        start_indices_batching_dims=dn.scatter_indices_batching_dims,
    )
    window_sizes = iter(updates_shape[d] for d in dn.update_window_dims)
    dropped = set(dn.inserted_window_dims) | set(dn.operand_batching_dims)
    x_aval = core.get_aval(x)
    slice_sizes = tuple(1 if d in dropped else next(window_sizes) for d in range(x_aval.ndim))
    if any(x_aval.shape[d] == 0 for d in dropped):  # no window fits: the scatter drops all
        return full(updates_shape, 0, x_aval.dtype)
    clips = mode == GatherScatterMode.CLIP
    return gather_p.bind(
        x,
        indices,
        dimension_numbers=gather_dn,
        slice_sizes=slice_sizes,
        mode=mode if clips else GatherScatterMode.FILL_OR_DROP,
        fill_value=None if clips else 0,
        **params,
    )


def _where(pred, x):
    """`x` where `pred`, else 0."""
    return select(pred, x, full(core.get_aval(x).shape, 0, core.get_aval(x).dtype))


def _scatter_linear_jvp(prim: Primitive) -> Callable:
    """The jvp of a scatter that is linear in (operand, updates) jointly: itself on tangents."""

    def jvp(primals, tangents, **params):
        operand, indices, updates = primals
        out = prim.bind(operand, indices, updates, **params)
        t_out = prim.bind(instantiate(tangents[0]), indices, instantiate(tangents[2]), **params)
        return out, t_out

    return jvp


scatter_add_p.def_jvp(_scatter_linear_jvp(scatter_add_p))
_scatter_unique_jvp = _scatter_linear_jvp(scatter_p)


@scatter_add_p.def_transpose
def _scatter_add_transpose(ct, operand, indices, updates, **params):
    ct_operand = ct if is_undefined(operand) else None
    ct_updates = None
    if is_undefined(updates):
        ct_updates = _scattered_values(ct, indices, updates.aval.shape, **params)
    return [ct_operand, None, ct_updates]


@scatter_p.def_jvp
def _scatter_jvp(primals, tangents, **params):
    """With unique indices a scatter is linear in (operand, updates). Otherwise which of the
    colliding updates wins is unspecified: scattering each window's id finds the winners, and
    both the primal and the tangent are then summed from winners only, so they agree on any
    backend (JAX's approach)."""
    if params["unique_indices"]:
        return _scatter_unique_jvp(primals, tangents, **params)
    operand, indices, updates = primals
    updates_aval = core.get_aval(updates)
    window_dims = params["dimension_numbers"].update_window_dims
    batch_dims = tuple(d for d in range(updates_aval.ndim) if d not in window_dims)
    batch_shape = tuple(updates_aval.shape[d] for d in batch_dims)
    count = math.prod(batch_shape)
    id_dtype = np.int32 if count < np.iinfo(np.int32).max else np.int64
    window_ids = reshape(add(iota(id_dtype, count), 1), batch_shape)
    update_ids = broadcast_in_dim(window_ids, updates_aval.shape, batch_dims)
    no_ids = full(core.get_aval(operand).shape, 0, id_dtype)  # id 0: the operand's own value
    winner_ids = scatter_p.bind(no_ids, indices, update_ids, **params)
    operand_kept = eq(winner_ids, 0)
    at_updates = _scattered_values(winner_ids, indices, updates_aval.shape, **params)
    update_won = eq(at_updates, update_ids)

    def from_winners(x, u):
        return scatter_add_p.bind(_where(operand_kept, x), indices, _where(update_won, u), **params)

    t_operand, t_updates = instantiate(tangents[0]), instantiate(tangents[2])
    return from_winners(operand, updates), from_winners(t_operand, t_updates)


@scatter_p.def_transpose
def _scatter_transpose(ct, operand, indices, updates, **params):
    if not params["unique_indices"]:
        raise NotImplementedError(
            "scatter: the transpose needs unique_indices=True; with colliding indices a scatter "
            "is not linear in its updates (differentiate it with jvp/grad, whose rule handles "
            "collisions)"
        )
    updates_shape = core.get_aval(updates).shape
    ct_operand = ct_updates = None
    if is_undefined(operand):
        zeros = full(updates_shape, 0, ct.dtype)
        ct_operand = scatter_p.bind(ct, indices, zeros, **params)
    if is_undefined(updates):
        ct_updates = _scattered_values(ct, indices, updates_shape, **params)
    return [ct_operand, None, ct_updates]


def _scatter_mul_operand_tangent(t, operand, indices, updates, **params):
    return scatter_mul_p.bind(t, indices, updates, **params)


def _scatter_mul_updates_tangent(t, operand, indices, updates, **params):
    if not params["unique_indices"]:
        raise NotImplementedError(
            "scatter_mul: derivatives with respect to the updates are implemented only for "
            "unique_indices=True (as in JAX); with colliding indices each update's derivative "
            "is the product of all the others"
        )
    # Each operand element is multiplied by at most one update, so the update's tangent is
    # scaled by the operand element it lands on (gathered, so that an infinite operand
    # element elsewhere does not turn 0 * inf into NaN).
    at_updates = _scattered_values(operand, indices, core.get_aval(updates).shape, **params)
    zeros = full(core.get_aval(operand).shape, 0, t.dtype)
    return scatter_add_p.bind(zeros, indices, mul(at_updates, t), **params)


defjvp(scatter_mul_p, _scatter_mul_operand_tangent, None, _scatter_mul_updates_tangent)


@scatter_mul_p.def_transpose
def _scatter_mul_transpose(ct, operand, indices, updates, **params):
    # Its jvp emits scatter_mul only with a linear operand: a diagonal map, its own transpose.
    if is_undefined(updates):
        raise NotImplementedError("scatter_mul: transposed only with respect to its operand")
    return [scatter_mul_p.bind(ct, indices, updates, **params), None, None]


def _scatter_extremum_jvp(prim: Primitive) -> Callable:
    """Every value equal to the result at a position, the operand's and each update's, shares
    the tangent there equally (JAX's tie rule for max and min). Where no update equals the
    result (a NaN among them), the operand's tangent passes."""

    def jvp(primals, tangents, **params):
        operand, indices, updates = primals
        out = prim.bind(operand, indices, updates, **params)
        dtype = core.get_aval(out).dtype
        at_updates = _scattered_values(out, indices, core.get_aval(updates).shape, **params)
        update_won = eq(updates, at_updates)
        zeros = full(core.get_aval(out).shape, 0, dtype)
        update_wins = scatter_add_p.bind(
            zeros, indices, convert_element_type(update_won, dtype), **params
        )
        operand_won = bitwise_or(eq(operand, out), eq(update_wins, 0))
        winners = add(update_wins, convert_element_type(operand_won, dtype))
        t_operand, t_updates = instantiate(tangents[0]), instantiate(tangents[2])
        t_sum = scatter_add_p.bind(
            _where(operand_won, t_operand), indices, _where(update_won, t_updates), **params
        )
        return out, div(t_sum, winners)

    return jvp


for _prim in (scatter_min_p, scatter_max_p):
    _prim.def_jvp(_scatter_extremum_jvp(_prim))
    _prim.not_applicable["transpose"] = "not linear"


def _scatter_batch(prim: Primitive) -> Callable:
    """One scatter for all lanes, into an operand with a batch axis (each lane writes its own
    copy; an unbatched operand is broadcast, as the result differs by lane). With shared
    indices the operand's batch axis is one more window dimension, updated whole; with
    batched indices it pairs with their batch axis as a batching dimension. The updates'
    batch axis stays where it is when it already sits where the scatter needs it."""

    def rule(values, dims, *, dimension_numbers, indices_are_sorted, unique_indices, mode):
        (operand, indices, updates), (operand_dim, indices_dim, updates_dim) = values, dims
        dn = dimension_numbers
        size = batch_size(values, dims)
        if operand_dim is not_mapped:
            operand, operand_dim = broadcast_batch(operand, size, 0), 0
        updates_rank = core.get_aval(updates).ndim - (updates_dim is not not_mapped)
        window_dims = dn.update_window_dims
        inserted = _lane_axes(dn.inserted_window_dims, operand_dim)
        index_map = _lane_axes(dn.scatter_dims_to_operand_dims, operand_dim)
        operand_batching = _lane_axes(dn.operand_batching_dims, operand_dim)
        indices_batching = dn.scatter_indices_batching_dims
        if indices_dim is not_mapped:
            lane_rank = core.get_aval(operand).ndim - 1
            windows = _window_operand_dims(
                lane_rank, dn.inserted_window_dims, dn.operand_batching_dims
            )
            k = sum(d < operand_dim for d in windows)
            lowest, highest = _window_position(window_dims, updates_rank, k)
            updates_at = _preferred(updates_dim, lowest, highest)
            window_dims = _insert(_lane_axes(window_dims, updates_at), k, updates_at)
        else:
            indices, indices_dim = _indices_batch_dim(indices, indices_dim)
            lowest, highest = _new_batch_position(window_dims, updates_rank, indices_dim)
            updates_at = _preferred(updates_dim, lowest, highest)
            window_dims = _lane_axes(window_dims, updates_at)
            operand_batching, indices_batching = _add_batching_pair(
                operand_batching,
                _lane_axes(indices_batching, indices_dim),
                operand_dim,
                indices_dim,
            )
            indices_are_sorted = False
        out = prim.bind(
            operand,
            indices,
            _at_batch_dim(updates, updates_dim, size, updates_at),
            dimension_numbers=ScatterDimensionNumbers(
                window_dims, inserted, index_map, operand_batching, indices_batching
            ),
            indices_are_sorted=indices_are_sorted,
            unique_indices=unique_indices,
            mode=mode,
        )
        return out, operand_dim

    return rule


def _preferred(dim, lowest: int, highest: int) -> int:
    """`dim` if it lies in [lowest, highest], else lowest."""
    return dim if dim is not not_mapped and lowest <= dim <= highest else lowest


for _prim in (scatter_p, scatter_add_p, scatter_mul_p, scatter_min_p, scatter_max_p):
    _prim.def_batch(_scatter_batch(_prim))


def _scatter_wrapper(prim: Primitive, doc: str):
    def wrapper(
        operand,
        scatter_indices,
        updates,
        dimension_numbers: ScatterDimensionNumbers,
        *,
        indices_are_sorted: bool = False,
        unique_indices: bool = False,
        mode: str | GatherScatterMode | None = None,
    ):
        operand, updates = binary_operands(operand, updates)
        return prim.bind(
            operand,
            asarray(scatter_indices),
            updates,
            dimension_numbers=_canonical_dimension_numbers(
                dimension_numbers, ScatterDimensionNumbers
            ),
            indices_are_sorted=bool(indices_are_sorted),
            unique_indices=bool(unique_indices),
            mode=GatherScatterMode.from_any(mode),
        )

    wrapper.__name__ = wrapper.__qualname__ = prim.name
    wrapper.__doc__ = doc
    return wrapper


_SCATTER_DOC = (
    "XLA's scatter: {what} each window of `updates` at its index vector in `scatter_indices`.\n\n"
    "With `mode=None` (as 'fill' or 'drop') a window that reaches outside the operand is "
    "dropped; 'clip' clamps its start instead."
)
scatter = _scatter_wrapper(scatter_p, _SCATTER_DOC.format(what="write"))
scatter_add = _scatter_wrapper(scatter_add_p, _SCATTER_DOC.format(what="add"))
scatter_mul = _scatter_wrapper(scatter_mul_p, _SCATTER_DOC.format(what="multiply by"))
scatter_min = _scatter_wrapper(scatter_min_p, _SCATTER_DOC.format(what="take the minimum with"))
scatter_max = _scatter_wrapper(scatter_max_p, _SCATTER_DOC.format(what="take the maximum with"))
