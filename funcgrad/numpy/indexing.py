"""NumPy indexing for funcgrad arrays: `x[index]`, `x.at[index].set(...)`, take and friends.

An index is parsed, against the operand's shape, into one *item* per operand dimension: a
static slice, a static int, a 0-d integer array (possibly traced) or an integer array. New axes
(None) and 0-d boolean masks first become size-1 dimensions of the operand, and concrete
boolean masks become integer arrays, so every later step sees only those four kinds.

Reading slices statically where it can (lax.slice and rev; dynamic_slice for traced scalars)
and builds a single gather for integer-array indices. An update builds a single scatter for
the whole index: contiguous slices become windows, strided slices become extra index arrays.
Integer-array indices count negative values from the end; out-of-bounds ones are clamped when
reading and dropped when updating (JAX's defaults; the `mode` arguments choose others).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from funcgrad import core, dtypes, lax
from funcgrad.array import Array
from funcgrad.errors import ConcretizationTypeError, NonConcreteBooleanIndexError
from funcgrad.lax.composed import applied_times
from funcgrad.lax.indexing import (
    GatherDimensionNumbers,
    GatherScatterMode,
    ScatterDimensionNumbers,
    gather_along_axis,
)
from funcgrad.lax.shapes import slice_p, squeeze_p
from funcgrad.numpy import ufuncs
from funcgrad.numpy._promotion import (
    broadcast_shapes,
    broadcast_to,
    convert,
    result_type_and_weak,
    to_array,
)
from funcgrad.numpy.shape_ops import canonicalize_axis, ravel

__all__ = [
    "diag_indices",
    "diag_indices_from",
    "ix_",
    "take",
    "take_along_axis",
    "tril_indices",
    "tril_indices_from",
    "triu_indices",
    "triu_indices_from",
    "unravel_index",
]

_INDEX_DTYPE = dtypes.int32

# ---------------------------------------------------------------------------------------------
# Parsing an index into one item per dimension


class _Slice(NamedTuple):
    """A static slice, normalized: `length` elements from `start`, every `step`."""

    start: int
    step: int
    length: int


class _Int(NamedTuple):
    """A static integer (negative values counting from the end); may be out of bounds."""

    value: int


class _Scalar(NamedTuple):
    """A 0-d integer funcgrad array: a position only known when the program runs."""

    value: Any


class _IntArray(NamedTuple):
    """An integer array index (NumPy or funcgrad, any rank), negative values not yet wrapped."""

    value: Any


def _full_slice(size: int) -> _Slice:
    return _Slice(0, 1, size)


_INVALID_INDEX = (
    "only integers, slices (`:`), ellipsis (`...`), None (newaxis) and integer or boolean "
    "arrays are valid indices"
)


def _classify(entry):
    """One entry of an index tuple as None, Ellipsis, a slice, an int, a NumPy boolean mask,
    a `_Scalar` or an `_IntArray`."""
    if entry is None or entry is Ellipsis or isinstance(entry, slice):
        return entry
    if isinstance(entry, (bool, np.bool_)):
        return np.asarray(entry)
    if isinstance(entry, (int, np.integer)):
        return int(entry)
    if isinstance(entry, (list, tuple)):
        entry = _sequence_index(entry)
    if isinstance(entry, np.ndarray):
        if entry.dtype == np.bool_:
            return entry
        if entry.dtype.kind not in "iu":
            raise IndexError(f"{_INVALID_INDEX}; got an array of dtype {entry.dtype}")
        return int(entry) if entry.ndim == 0 else _IntArray(entry)
    if isinstance(entry, (Array, core.Tracer)):
        if dtypes.is_bool(entry.dtype):
            return _concrete_mask(entry)
        if not dtypes.is_int(entry.dtype):
            raise IndexError(f"{_INVALID_INDEX}; got an array of dtype {entry.dtype}")
        return _Scalar(entry) if entry.ndim == 0 else _IntArray(entry)
    if hasattr(entry, "__index__"):
        return operator.index(entry)
    raise IndexError(f"{_INVALID_INDEX}; got {type(entry).__name__} {entry!r}")


def _has_tracer(seq) -> bool:
    return any(
        _has_tracer(x) if isinstance(x, (list, tuple)) else isinstance(x, core.Tracer) for x in seq
    )


def _sequence_index(seq):
    """A list used as an index: an integer or boolean array (a funcgrad one if it holds
    tracers, else a static NumPy one)."""
    if _has_tracer(seq):
        from funcgrad.numpy.creation import asarray

        return asarray(seq)
    value = np.asarray(seq)
    if value.size == 0:
        return value.astype(np.int64)
    return value


def _concrete_mask(mask) -> np.ndarray:
    if isinstance(mask, core.Tracer):
        try:
            return np.asarray(mask.to_concrete_value())
        except ConcretizationTypeError:
            raise NonConcreteBooleanIndexError(
                f"a boolean index must be concrete, but got the traced value {mask.aval}: "
                "the number of elements it selects, and so the shape of the result, would "
                "depend on values that are unknown while tracing. Use fnp.where(mask, x, y) to "
                "keep the shape, or fnp.nonzero(mask, size=n) to get a static number of indices."
            ) from None
    return np.asarray(mask)


def _dims_used(entry) -> int:
    if entry is None or entry is Ellipsis:
        return 0
    if isinstance(entry, np.ndarray) and entry.dtype == np.bool_:
        return entry.ndim
    return 1


def _static_slice(entry: slice, size: int) -> _Slice:
    try:
        bounds = [None if b is None else operator.index(b) for b in (entry.start, entry.stop)]
        step = None if entry.step is None else operator.index(entry.step)
    except ConcretizationTypeError:
        raise IndexError(
            f"slice bounds must be static, got {entry}: a slice's size decides the shape of "
            "the result. To read a block of static size at a traced position, use "
            "lax.dynamic_slice (or index with a traced integer array)."
        ) from None
    start, stop, step = slice(*bounds, step).indices(size)
    return _Slice(start, step, len(range(start, stop, step)))


def _parse(shape: tuple[int, ...], index) -> tuple[tuple[int, ...], list]:
    """The new size-1 axes to insert into the operand, and one item per dimension after that."""
    entries = [_classify(e) for e in (index if isinstance(index, tuple) else (index,))]
    ellipses = sum(e is Ellipsis for e in entries)
    if ellipses > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    used = sum(_dims_used(e) for e in entries)
    if used > len(shape):
        raise IndexError(
            f"too many indices for array: array of shape {shape} is {len(shape)}-dimensional, "
            f"but {used} were indexed"
        )
    if not ellipses:
        entries.append(Ellipsis)
    new_axes, items = [], []
    dim = 0
    for entry in entries:
        if entry is Ellipsis:
            items.extend(_full_slice(n) for n in shape[dim : dim + len(shape) - used])
            dim += len(shape) - used
        elif entry is None:
            new_axes.append(len(items))
            items.append(_full_slice(1))
        elif isinstance(entry, np.ndarray) and entry.ndim == 0:
            # A 0-d mask adds an axis of size 1 that it keeps (True) or empties (False).
            new_axes.append(len(items))
            items.append(_IntArray(np.zeros(int(entry), np.int64)))
        elif isinstance(entry, np.ndarray):
            _check_mask(entry, shape, dim)
            items.extend(_IntArray(coords) for coords in np.nonzero(entry))
            dim += entry.ndim
        elif isinstance(entry, slice):
            items.append(_static_slice(entry, shape[dim]))
            dim += 1
        elif isinstance(entry, int):
            items.append(_Int(entry))
            dim += 1
        else:
            items.append(entry)
            dim += 1
    return tuple(new_axes), items


def _check_mask(mask: np.ndarray, shape: tuple[int, ...], dim: int) -> None:
    indexed = shape[dim : dim + mask.ndim]
    if mask.shape != indexed:
        raise IndexError(
            f"boolean index of shape {mask.shape} does not match the indexed array of shape "
            f"{shape}: it covers axes {dim} to {dim + mask.ndim - 1}, of shape {indexed}"
        )


# ---------------------------------------------------------------------------------------------
# Index values: wrapped negatives, int32


def _index_value(item, size: int):
    """The positions of an index item as int32, negative ones counted from the end.

    Static items stay NumPy values, so a static index gives a constant index array.
    """
    value = item.value
    if isinstance(value, (int, np.ndarray)):
        value = np.asarray(value)
        if value.dtype == np.uint64:  # (past int64's range: out of bounds, never negative)
            value = np.minimum(value, np.uint64(np.iinfo(np.int64).max))
        value = value.astype(np.int64)
        # Out-of-bounds positions stay out of bounds (-1 or size) but fit in int32.
        return np.asarray(np.clip(np.where(value < 0, value + size, value), -1, size), np.int32)
    return _traced_index(value, size)


def _traced_index(value, size: int):
    signed = not dtypes.is_unsigned(value.dtype)
    value = _as_int32(value, size)
    return lax.select(lax.lt(value, 0), lax.add(value, size), value) if signed else value


def _as_int32(value, size: int):
    info = np.iinfo(value.dtype)
    if info.max > np.iinfo(np.int32).max or info.min < np.iinfo(np.int32).min:
        # Clamping first keeps out-of-bounds positions out of bounds after the conversion.
        value = lax.clamp(max(info.min, -size - 1), value, min(info.max, size))
    return lax.convert_element_type(value, _INDEX_DTYPE)


# ---------------------------------------------------------------------------------------------
# Reading: getitem


def getitem(x, index):
    """`x[index]` with NumPy's semantics, except that out-of-bounds positions are clamped."""
    if type(index) is int and type(x) is Array and x._value.ndim and x._value.shape[0]:
        return _leading_int_index(x, index)
    return _getitem(to_array(x), index)


def _leading_int_index(x: Array, index: int):
    """The eager hot path `x[i]`: the slice and squeeze the general path stages, bound directly."""
    shape = x._value.shape
    start = min(max(index + shape[0] if index < 0 else index, 0), shape[0] - 1)
    row = slice_p.bind(
        x,
        start_indices=(start,) + (0,) * (len(shape) - 1),
        limit_indices=(start + 1,) + shape[1:],
        strides=None,
    )
    return squeeze_p.bind(row, dimensions=(0,))


def _getitem(
    x,
    index,
    *,
    mode=None,
    fill_value=None,
    indices_are_sorted: bool = False,
    unique_indices: bool = False,
):
    new_axes, items = _parse(x.shape, index)
    y = lax.expand_dims(x, new_axes) if new_axes else x
    if mode is None:
        mode = "clip" if fill_value is None else "fill"
    if GatherScatterMode.from_any(mode) == GatherScatterMode.FILL_OR_DROP:
        # Integers that may be out of bounds need the gather, which alone can fill.
        items = [_as_array_item(it) for it in items]
    if not any(isinstance(it, _IntArray) for it in items):
        return _basic_indexing(y, items)
    y = _apply_slices(y, items)
    items = [_full_slice(it.length) if isinstance(it, _Slice) else it for it in items]
    return _gather(y, items, mode, fill_value, indices_are_sorted, unique_indices)


def _as_array_item(item):
    """An integer item as a 0-d `_IntArray`: the same position, read by the gather."""
    if isinstance(item, _Int):
        return _IntArray(np.asarray(item.value))
    if isinstance(item, _Scalar):
        return _IntArray(item.value)
    return item


def _check_ints_have_positions(shape: tuple[int, ...], items) -> None:
    """An integer index into an empty axis has no position to clamp to."""
    for d, item in enumerate(items):
        if isinstance(item, (_Int, _Scalar)) and shape[d] == 0:
            value = item.value if isinstance(item, _Int) else "(traced)"
            raise IndexError(f"index {value} is out of bounds for axis {d} with size 0")


def _basic_indexing(y, items):
    """Ints and slices only: static slices, one dynamic_slice for traced ints, one squeeze.

    Out-of-bounds ints are clamped, like the starts of a dynamic_slice.
    """
    _check_ints_have_positions(y.shape, items)
    dropped = [d for d, it in enumerate(items) if not isinstance(it, _Slice)]
    y = _apply_slices(y, [_clamped_int(it, n) for it, n in zip(items, y.shape)])
    if any(isinstance(it, _Scalar) for it in items):
        starts = [
            _as_int32(it.value, n) if isinstance(it, _Scalar) else 0
            for it, n in zip(items, y.shape)
        ]
        sizes = [1 if isinstance(it, _Scalar) else n for it, n in zip(items, y.shape)]
        y = lax.dynamic_slice(y, starts, sizes)
    return lax.squeeze(y, dropped)


def _clamped_int(item, size: int):
    """A static int as the slice of length 1 it reads (clamped into bounds)."""
    if not isinstance(item, _Int):
        return item
    position = item.value + size if item.value < 0 else item.value
    return _Slice(min(max(position, 0), size - 1), 1, 1)


def _apply_slices(y, items):
    """Apply the `_Slice` items with one lax.slice (and a rev for negative steps)."""
    starts, limits, strides, reversed_dims = [], [], [], []
    for d, (item, size) in enumerate(zip(items, y.shape)):
        if not isinstance(item, _Slice):
            bounds = (0, size, 1)
        elif item.length == 0:
            bounds = (0, 0, 1)
        elif item.step > 0:
            bounds = (item.start, item.start + (item.length - 1) * item.step + 1, item.step)
        else:
            # Take the same elements in increasing order, then reverse them.
            last = item.start + (item.length - 1) * item.step
            bounds = (last, item.start + 1, -item.step)
            reversed_dims.append(d)
        for bound_list, bound in zip((starts, limits, strides), bounds):
            bound_list.append(bound)
    return lax.rev(lax.slice(y, starts, limits, strides), reversed_dims)


# ---------------------------------------------------------------------------------------------
# One gather or scatter for a whole index

_ADVANCED = -1  # stands for the block of advanced-index dimensions in a result layout


class _Plan(NamedTuple):
    """How one gather or scatter performs an index on an operand.

    `indices` holds one index vector per element of the batch shape; entry i of each vector is
    a position in operand dimension `start_index_map[i]`. `collapsed_dims` are the operand
    dimensions an index vector picks a single position in; the others are windows of
    `slice_sizes`, which sit at `window_positions` in NumPy's shape of the result,
    `result_shape`. `indices` is None when the index selects the whole operand, unchanged.
    """

    indices: Any
    start_index_map: tuple[int, ...]
    collapsed_dims: tuple[int, ...]
    window_positions: tuple[int, ...]
    slice_sizes: tuple[int, ...]
    result_shape: tuple[int, ...]


def _plan(items, shape: tuple[int, ...]) -> _Plan:
    advanced = [d for d, it in enumerate(items) if not isinstance(it, _Slice)]
    slices = [d for d, it in enumerate(items) if isinstance(it, _Slice)]
    strided = [d for d in slices if items[d].step != 1 and items[d].length > 1]
    advanced_shape = _broadcast_index_shapes([np.shape(items[d].value) for d in advanced])
    # NumPy's result layout: the sliced dimensions in order, with the advanced indices'
    # broadcast shape where they stand when they are adjacent, and in front when they are not.
    adjacent = advanced == list(range(advanced[0], advanced[-1] + 1)) if advanced else True
    at = sum(d < advanced[0] for d in slices) if advanced and adjacent else 0
    layout = slices[:at] + [_ADVANCED] + slices[at:]

    result_shape, batch_shape, window_positions, batch_position = [], [], [], {}
    for entry in layout:
        if entry == _ADVANCED or entry in strided:
            batch_position[entry] = len(batch_shape)
        else:
            window_positions.append(len(result_shape))
        sizes = advanced_shape if entry == _ADVANCED else (items[entry].length,)
        result_shape.extend(sizes)
        if entry == _ADVANCED or entry in strided:
            batch_shape.extend(sizes)

    columns, start_index_map = [], []
    for d in advanced:
        value = _index_value(items[d], shape[d])
        end = batch_position[_ADVANCED] + len(advanced_shape)
        columns.append((value, tuple(range(end - value.ndim, end))))
        start_index_map.append(d)
    for d in slices:
        item = items[d]
        if d in strided:
            positions = item.start + item.step * np.arange(item.length, dtype=np.int32)
            columns.append((positions, (batch_position[d],)))
        elif item.start != 0 or item.length != shape[d]:
            columns.append((np.array(item.start, np.int32), ()))
        else:
            continue
        start_index_map.append(d)

    collapsed = tuple(sorted(advanced + strided))
    return _Plan(
        indices=_stack_columns(columns, tuple(batch_shape)) if columns else None,
        start_index_map=tuple(start_index_map),
        collapsed_dims=collapsed,
        window_positions=tuple(window_positions),
        slice_sizes=tuple(1 if d in collapsed else items[d].length for d in range(len(shape))),
        result_shape=tuple(result_shape),
    )


def _broadcast_index_shapes(shapes: list[tuple[int, ...]]) -> tuple[int, ...]:
    try:
        return broadcast_shapes((), *shapes)
    except ValueError:
        raise IndexError(
            f"shape mismatch: index arrays of shapes {', '.join(map(str, shapes))} do not "
            "broadcast together (a boolean mask counts as an array of its number of True "
            "values, one for each axis it covers)"
        ) from None


def _selects_nothing(plan: _Plan, shape: tuple[int, ...]) -> bool:
    return not math.prod(plan.result_shape) or any(shape[d] == 0 for d in plan.collapsed_dims)


def _stack_columns(columns, batch_shape: tuple[int, ...]):
    """The index array: each column (value, the batch dimensions it spans) broadcast to the
    batch shape, stacked along a new last axis. All-static columns give a NumPy constant."""
    if all(isinstance(value, np.ndarray) for value, _ in columns):
        stacked = [
            np.broadcast_to(_expand(value, dims, len(batch_shape)), batch_shape)
            for value, dims in columns
        ]
        return lax.asarray(np.stack(stacked, axis=-1))
    shape = batch_shape + (1,)
    return lax.concatenate(
        [lax.broadcast_in_dim(value, shape, dims) for value, dims in columns], len(batch_shape)
    )


def _expand(value: np.ndarray, dims: tuple[int, ...], rank: int) -> np.ndarray:
    shape = [1] * rank
    for size, d in zip(value.shape, dims):
        shape[d] = size
    return value.reshape(shape)


def _gather(y, items, mode, fill_value, indices_are_sorted: bool, unique_indices: bool):
    plan = _plan(items, y.shape)
    if _selects_nothing(plan, y.shape):
        # Nothing to read (and no position to clamp to): an empty result, or an error.
        empty = [d for d in plan.collapsed_dims if y.shape[d] == 0]
        if math.prod(plan.result_shape):
            raise IndexError(
                f"index is out of bounds for axis {empty[0]} with size 0 (array shape {y.shape})"
            )
        nothing = lax.slice(y, (0,) * y.ndim, (0,) * y.ndim)
        return lax.reshape(nothing, plan.result_shape)
    dimension_numbers = GatherDimensionNumbers(
        offset_dims=plan.window_positions,
        collapsed_slice_dims=plan.collapsed_dims,
        start_index_map=plan.start_index_map,
    )
    return lax.gather(
        y,
        plan.indices,
        dimension_numbers,
        plan.slice_sizes,
        indices_are_sorted=indices_are_sorted,
        unique_indices=unique_indices,
        mode=mode,
        fill_value=fill_value,
    )


# ---------------------------------------------------------------------------------------------
# Updating: x.at[index]

# Each update: the scatter that applies it, and the elementwise op for an index that selects
# the whole operand (where no scatter is needed).
_UPDATES: dict[str, tuple[Callable, Callable]] = {
    "set": (lax.scatter, lambda x, values: values),
    "add": (lax.scatter_add, lax.add),
    "mul": (lax.scatter_mul, lax.mul),
    "min": (lax.scatter_min, lax.min),
    "max": (lax.scatter_max, lax.max),
}


_BOOLEAN_COMBINE = {"add": lax.bitwise_or, "mul": lax.bitwise_and}


def _update(x, index, values, kind: str, mode, indices_are_sorted: bool, unique_indices: bool):
    """`x` with `values` (cast to x's dtype, broadcast to x[index]'s shape) combined at `index`."""
    x = to_array(x)
    new_axes, items = _parse(x.shape, index)
    y = lax.expand_dims(x, new_axes) if new_axes else x
    _check_ints_have_positions(y.shape, items)
    plan = _plan(items, y.shape)
    if dtypes.promotion == "strict":
        result_type_and_weak(x, values)  # (raises where the values' dtype does not meet x's)
    values = _fit_values(convert(values, x.dtype, x.weak_type), plan.result_shape)
    scatter, combine = _UPDATES[kind]
    if dtypes.is_bool(x.dtype) and kind in _BOOLEAN_COMBINE:
        # As the scatters combine booleans (NumPy's add and multiply: or and and)
        combine = _BOOLEAN_COMBINE[kind]
    if _selects_nothing(plan, y.shape):
        return x
    if plan.indices is None:
        out = combine(y, values)
    else:
        dimension_numbers = ScatterDimensionNumbers(
            update_window_dims=plan.window_positions,
            inserted_window_dims=plan.collapsed_dims,
            scatter_dims_to_operand_dims=plan.start_index_map,
        )
        out = scatter(
            y,
            plan.indices,
            values,
            dimension_numbers,
            indices_are_sorted=indices_are_sorted,
            unique_indices=unique_indices or _known_unique(plan, y.shape),
            mode=mode,
        )
    return lax.reshape(out, x.shape) if new_axes else out


def _known_unique(plan: _Plan, shape: tuple[int, ...]) -> bool:
    """Whether the plan's index vectors are known to pick distinct elements: a single vector
    (`x.at[0]`), or static in-bounds vectors that differ. The scatters' derivatives (mul's in
    particular) need to know it."""
    indices = plan.indices
    if math.prod(indices.shape[:-1]) <= 1:
        return True
    if isinstance(indices, core.Tracer):
        return False
    rows = np.asarray(indices).reshape(-1, indices.shape[-1])
    sizes = np.array([shape[d] for d in plan.start_index_map])
    in_bounds = bool(np.all((rows >= 0) & (rows < sizes)))
    return in_bounds and len(np.unique(rows, axis=0)) == len(rows)


def _fit_values(values, shape: tuple[int, ...]):
    """Broadcast update values to the indexed shape; extra leading size-1 axes are dropped,
    as NumPy's assignment does."""
    extra = values.ndim - len(shape)
    if extra > 0 and all(n == 1 for n in values.shape[:extra]):
        values = lax.reshape(values, values.shape[extra:])
    try:
        return broadcast_to(values, shape)
    except ValueError:
        raise ValueError(
            f"shape mismatch: values of shape {values.shape} cannot be broadcast to the shape "
            f"{shape} of the indexed array"
        ) from None


class IndexUpdateHelper:
    """`x.at`: indexing it, as in `x.at[index]`, gives the updates of x at that index."""

    __slots__ = ("array",)

    def __init__(self, array):
        self.array = array

    def __getitem__(self, index) -> IndexUpdateRef:
        return IndexUpdateRef(self.array, index)

    def __repr__(self) -> str:
        return f"IndexUpdateHelper({self.array!r})"


class IndexUpdateRef:
    """`x.at[index]`: each method returns an updated copy of x (x itself never changes).

    Updates are cast to x's dtype and broadcast to the shape of x[index]. Repeated positions
    all apply for add, multiply, min and max; which value wins for `set` is unspecified.
    Out-of-bounds positions are dropped unless `mode='clip'`.
    """

    __slots__ = ("array", "index")

    def __init__(self, array, index):
        self.array = array
        self.index = index

    def __repr__(self) -> str:
        return f"IndexUpdateRef({self.array!r}, {self.index!r})"

    def get(
        self,
        *,
        indices_are_sorted: bool = False,
        unique_indices: bool = False,
        mode=None,
        fill_value=None,
    ):
        """`x[index]`; mode='fill' (or a fill_value) gives fill_value at out-of-bounds positions."""
        return _getitem(
            to_array(self.array),
            self.index,
            mode=mode,
            fill_value=fill_value,
            indices_are_sorted=indices_are_sorted,
            unique_indices=unique_indices,
        )

    def _apply(self, kind: str, values, indices_are_sorted, unique_indices, mode):
        return _update(
            self.array, self.index, values, kind, mode, indices_are_sorted, unique_indices
        )

    def set(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        return self._apply("set", values, indices_are_sorted, unique_indices, mode)

    def add(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        return self._apply("add", values, indices_are_sorted, unique_indices, mode)

    def multiply(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        return self._apply("mul", values, indices_are_sorted, unique_indices, mode)

    mul = multiply

    def min(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        return self._apply("min", values, indices_are_sorted, unique_indices, mode)

    def max(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        return self._apply("max", values, indices_are_sorted, unique_indices, mode)

    def apply(self, func, *, indices_are_sorted=False, unique_indices=False, mode=None):
        """x with the elementwise `func` applied at index, once per time a position is given
        (`x.at[[0, 0]].apply(f)` applies f twice to x[0])."""
        x = to_array(self.array)

        def count():
            zeros = lax.full(x.shape, 0, dtypes.int32)
            return _update(zeros, self.index, 1, "add", mode, indices_are_sorted, unique_indices)

        return applied_times(x, count, func, "at[...].apply")

    def divide(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        """x divided at index by values (by their product where positions repeat)."""
        divisor = self._ones_times(values, indices_are_sorted, unique_indices, mode)
        x = to_array(self.array)
        return convert(ufuncs.true_divide(x, divisor), x.dtype, x.weak_type)

    def power(self, values, *, indices_are_sorted=False, unique_indices=False, mode=None):
        """x raised at index to values (to their product where positions repeat)."""
        exponent = self._ones_times(values, indices_are_sorted, unique_indices, mode)
        x = to_array(self.array)
        return convert(ufuncs.power(x, exponent), x.dtype, x.weak_type)

    def _ones_times(self, values, indices_are_sorted, unique_indices, mode):
        """Ones of x's shape and dtype, multiplied at index by values."""
        x = to_array(self.array)
        ones = lax.full(x.shape, 1, x.dtype)
        return _update(ones, self.index, values, "mul", mode, indices_are_sorted, unique_indices)


# ---------------------------------------------------------------------------------------------
# take, take_along_axis


def index_array(indices, name: str):
    """An index argument as an integer array: NumPy when static, funcgrad when traced."""
    if isinstance(indices, (list, tuple)):
        indices = _sequence_index(indices)
    elif not isinstance(indices, (Array, core.Tracer)):
        indices = np.asarray(indices)
    if not dtypes.is_int(indices.dtype):
        raise TypeError(f"{name}: indices must be integers, got dtype {indices.dtype}")
    return indices


def wide_index(indices):
    """Integer indices (NumPy or funcgrad) of at least 32 bits, so that an axis size (a Python
    int) meets them in a wrap or a clip: int8 indices wrapped into an axis of 300 elements
    would need 300 as an int8."""
    if indices.dtype.itemsize >= 4:
        return indices
    if isinstance(indices, np.ndarray):
        return indices.astype(_INDEX_DTYPE)
    return lax.convert_element_type(indices, _INDEX_DTYPE)


def _wrapped(indices, size: int):
    indices = wide_index(indices)
    if isinstance(indices, np.ndarray):
        return np.mod(indices, size)
    return ufuncs.remainder(indices, size)


def _nonnegative(indices):
    if isinstance(indices, np.ndarray):
        return np.maximum(indices, 0)
    return ufuncs.maximum(indices, 0)


def _negatives_out_of_bounds(indices, mode, size: int):
    """`indices` whose negative entries are out of bounds rather than counted from the end:
    clamped to 0 where the mode clamps, past the end where it fills."""
    if mode in ("clip", "promise_in_bounds"):
        return _nonnegative(indices)
    if mode == "wrap" or dtypes.is_unsigned(indices.dtype):
        return indices
    if isinstance(indices, np.ndarray):
        return np.where(indices < 0, size, indices.astype(np.int64))
    wide = (
        indices if indices.dtype.itemsize >= 4 else lax.convert_element_type(indices, dtypes.int32)
    )
    return lax.select(lax.lt(wide, lax.full_like(wide, 0)), lax.full_like(wide, size), wide)


def _take_mode(name: str, mode, indices, size: int):
    """The gather mode for take-like functions (JAX's default: fill) and the indices to use."""
    if mode == "raise":
        raise NotImplementedError(
            f"{name}: mode='raise' cannot check traced indices; use 'fill', 'clip' or 'wrap'"
        )
    if mode == "wrap":
        if size == 0:
            raise IndexError(f"{name}: cannot wrap indices into an empty axis")
        return "clip", _wrapped(indices, size)
    return ("fill" if mode is None else mode), indices


def take(
    a,
    indices,
    axis: int | None = None,
    out=None,
    mode=None,
    unique_indices: bool = False,
    indices_are_sorted: bool = False,
    fill_value=None,
):
    """Elements of `a` at `indices` along `axis` (of the flattened array if None).

    As in JAX, out-of-bounds indices give `fill_value` by default (NaN for floats, the most
    negative value for signed integers); mode='clip' clamps them and mode='wrap' wraps them.
    As in NumPy and JAX, mode='clip' does not count negative indices from the end: they clamp
    to 0.
    """
    if out is not None:
        raise NotImplementedError("take: out is not supported; funcgrad arrays are immutable")
    a = to_array(a)
    if axis is None:
        a, axis = ravel(a), 0
    axis = canonicalize_axis(axis, a.ndim, "take")
    indices = index_array(indices, "take")
    if mode == "clip":
        indices = _nonnegative(indices)
    mode, indices = _take_mode("take", mode, indices, a.shape[axis])
    items = [_full_slice(n) for n in a.shape]
    items[axis] = _IntArray(indices)
    return _gather(a, items, mode, fill_value, indices_are_sorted, unique_indices)


def take_along_axis(
    arr,
    indices,
    axis: int | None,
    mode=None,
    fill_value=None,
    *,
    wrap_negative_indices: bool | None = None,
):
    """`arr` at `indices` along `axis`, the other axes matched (broadcast) position by position.

    Negative indices count from the end, unless `wrap_negative_indices` is False (by default
    it is, for mode="promise_in_bounds"): then they are out of bounds, which `mode` handles.
    """
    arr = to_array(arr)
    indices = index_array(indices, "take_along_axis")
    if axis is None:
        if indices.ndim != 1:
            raise ValueError(
                f"take_along_axis: with axis=None the indices must be 1-d, got shape "
                f"{indices.shape}"
            )
        arr, axis = ravel(arr), 0
    if indices.ndim != arr.ndim:
        raise ValueError(
            f"take_along_axis: indices of shape {indices.shape} and arr of shape {arr.shape} "
            "must have the same number of dimensions"
        )
    axis = canonicalize_axis(axis, arr.ndim, "take_along_axis")
    if wrap_negative_indices is None:
        wrap_negative_indices = mode != "promise_in_bounds"
    if not wrap_negative_indices:
        indices = _negatives_out_of_bounds(indices, mode, arr.shape[axis])
    mode, indices = _take_mode("take_along_axis", mode, indices, arr.shape[axis])
    others = tuple(d for d in range(arr.ndim) if d != axis)
    if arr.size and all(indices.shape[d] == arr.shape[d] for d in others):
        # Each place along the other axes reads its own line (a GPU then gives the lines of
        # the gradient's scatter threads of their own).
        positions = _index_value(_IntArray(indices), arr.shape[axis])
        return gather_along_axis(arr, positions, axis, mode=mode, fill_value=fill_value)
    items = []
    for d, size in enumerate(arr.shape):
        if d == axis:
            items.append(_IntArray(indices))
        else:
            position = np.arange(size).reshape([size if i == d else 1 for i in range(arr.ndim)])
            items.append(_IntArray(position))
    try:
        broadcast_shapes(*(it.value.shape for it in items))
    except ValueError:
        raise ValueError(
            f"take_along_axis: indices of shape {indices.shape} do not broadcast against arr "
            f"of shape {arr.shape} outside axis {axis}"
        ) from None
    return _gather(arr, items, mode, fill_value, False, False)


# ---------------------------------------------------------------------------------------------
# Index constructors


def ix_(*args) -> tuple:
    """Open-mesh index arrays: the i-th of n is 1-d input i shaped to broadcast along axis i."""
    from funcgrad.numpy.creation import asarray

    meshes = []
    for i, seq in enumerate(args):
        if isinstance(seq, (list, tuple)) and not seq:
            seq = np.zeros(0, dtypes.default_int)
        a = asarray(seq)
        if a.ndim == 1 and a.size == 0:  # of any dtype, as NumPy takes them
            a = lax.full((0,), 0, dtypes.default_int)
        if dtypes.is_bool(a.dtype):
            a = lax.asarray(np.nonzero(_concrete_mask(a))[0].astype(dtypes.default_int))
        if a.ndim != 1:
            raise ValueError(f"ix_: each index must be 1-d, got shape {a.shape} at position {i}")
        if not dtypes.is_int(a.dtype):
            raise TypeError(f"ix_: indices must be integers, got dtype {a.dtype} at position {i}")
        meshes.append(lax.reshape(a, [a.shape[0] if j == i else 1 for j in range(len(args))]))
    return tuple(meshes)


def _static_indices(values) -> tuple:
    return tuple(lax.asarray(np.asarray(v, dtypes.default_int)) for v in values)


def diag_indices(n: int, ndim: int = 2) -> tuple:
    return tuple(lax.iota(dtypes.default_int, operator.index(n)) for _ in range(ndim))


def diag_indices_from(arr) -> tuple:
    arr = to_array(arr)
    if arr.ndim < 2 or len(set(arr.shape)) != 1:
        raise ValueError(
            f"diag_indices_from: the array must have at least 2 dimensions, all of equal "
            f"length, got shape {arr.shape}"
        )
    return diag_indices(arr.shape[0], arr.ndim)


def tril_indices(n: int, k: int = 0, m: int | None = None) -> tuple:
    return _static_indices(np.tril_indices(operator.index(n), operator.index(k), m))


def triu_indices(n: int, k: int = 0, m: int | None = None) -> tuple:
    return _static_indices(np.triu_indices(operator.index(n), operator.index(k), m))


def _check_2d(name: str, arr) -> tuple[int, int]:
    shape = to_array(arr).shape
    if len(shape) != 2:
        raise ValueError(f"{name}: the array must be 2-d, got shape {shape}")
    return shape


def tril_indices_from(arr, k: int = 0) -> tuple:
    n, m = _check_2d("tril_indices_from", arr)
    return tril_indices(n, k, m)


def triu_indices_from(arr, k: int = 0) -> tuple:
    n, m = _check_2d("triu_indices_from", arr)
    return triu_indices(n, k, m)


def unravel_index(indices, shape) -> tuple:
    """Coordinates in an array of `shape` of flat `indices`.

    As in JAX (unlike NumPy, which raises), negative indices count from the end and
    out-of-bounds indices are clamped into range.
    """
    shape = tuple(operator.index(d) for d in np.atleast_1d(shape))
    size = math.prod(shape)
    flat = to_array(indices)
    if not dtypes.is_int(flat.dtype):
        raise TypeError(f"unravel_index: indices must be integers, got dtype {flat.dtype}")
    if size == 0:
        raise ValueError(f"unravel_index: an array of shape {shape} has no elements to index")
    # Clamped into [-size, size) in their own dtype first, so that an unsigned index past the
    # signed range stays past the end; then int32 (int64 for 64-bit indices), wide enough to
    # wrap negatives in.
    info = np.iinfo(flat.dtype)
    flat = lax.clamp(max(info.min, -size), flat, min(info.max, size - 1))
    flat = lax.convert_element_type(
        flat, dtypes.int64 if flat.dtype.itemsize == 8 else _INDEX_DTYPE
    )
    flat = lax.select(lax.lt(flat, 0), lax.add(flat, size), flat)
    coords = []
    for n in reversed(shape):
        coords.append(lax.rem(flat, n))
        flat = lax.div(flat, n)
    return tuple(reversed(coords))
