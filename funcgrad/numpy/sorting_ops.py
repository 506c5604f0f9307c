"""Sorting and searching with NumPy's names: sort, argsort, searchsorted, unique, bincount, ...

Everything is built on lax.sort, which orders NaNs last and can carry extra operands along
with its keys; that is how indices, and the compaction in `unique`, avoid gathers. Functions
whose result size depends on the values (unique, bincount) need that size given statically
under a transformation.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from funcgrad import core, dtypes, lax
from funcgrad.array import Array
from funcgrad.lax.sharding_constraint import placed
from funcgrad.numpy._promotion import convert, result_type_and_weak, to_array
from funcgrad.numpy.reductions import accumulation_dtype, cumsum, scalar
from funcgrad.numpy.reductions import sum as _sum
from funcgrad.numpy.shape_ops import canonicalize_axis
from funcgrad.numpy.ufuncs import isnan

__all__ = [
    "sort_complex",
    "argpartition",
    "argsort",
    "bincount",
    "digitize",
    "lexsort",
    "partition",
    "searchsorted",
    "sort",
    "unique",
]


def _flatten(a):
    return lax.reshape(a, (a.size,))


def _check_order(name: str, order) -> None:
    if order is not None:
        raise NotImplementedError(
            f"{name}: order is not supported (funcgrad has no structured arrays)"
        )


# ---------------------------------------------------------------------------------------------
# sort, argsort, lexsort, partition


def sort(
    a,
    axis: int | None = -1,
    *,
    kind=None,
    order=None,
    stable: bool = True,
    descending: bool = False,
):
    """Sort along `axis` (the flattened array for None); NaNs go last, or first if descending.

    A descending sort is an ascending sort of the reversed array, reversed back, so equal
    elements keep their original order in both directions.
    """
    _check_order("sort", order)
    a = to_array(a)
    if axis is None:
        a, axis = _flatten(a), 0
    axis = canonicalize_axis(axis, a.ndim, "sort")
    if descending:
        return lax.rev(_sorted_along(lax.rev(a, (axis,)), axis, stable), (axis,))
    return _sorted_along(a, axis, stable)


def _sort_keys(a) -> tuple:
    """What `a` sorts by: itself, or for complex numbers the real part, then the imaginary
    part (each with NaNs last), the order NumPy and `sort_complex` use."""
    return (lax.real(a), lax.imag(a)) if dtypes.is_complex(a.dtype) else (a,)


def _sorted_along(a, axis: int, stable: bool):
    keys = _sort_keys(a)
    if len(keys) == 1:
        return lax.sort(a, axis, stable)
    return lax.sort((*keys, a), axis, stable, num_keys=len(keys))[-1]


def argsort(
    a,
    axis: int | None = -1,
    *,
    kind=None,
    order=None,
    stable: bool = True,
    descending: bool = False,
    dtype=None,
):
    """Indices (of `dtype`, by default the default int) that sort `a` along `axis`; ties keep
    their original order."""
    _check_order("argsort", order)
    a = to_array(a)
    if axis is None:
        a, axis = _flatten(a), 0
    axis = canonicalize_axis(axis, a.ndim, "argsort")
    dtype = _index_dtype("argsort", dtype, a.shape[axis])
    indices = lax.broadcasted_iota(dtype, a.shape, axis)
    if not descending:
        keys = _sort_keys(a)
        return lax.sort((*keys, indices), axis, stable, num_keys=len(keys))[-1]
    # Sorting the reversed array finds positions counted from the end; map them back.
    keys = _sort_keys(lax.rev(a, (axis,)))
    reversed_indices = lax.sort((*keys, indices), axis, stable, num_keys=len(keys))[-1]
    last = scalar(a.shape[axis] - 1, dtype)
    return lax.rev(lax.sub(last, reversed_indices), (axis,))


def _index_dtype(name: str, dtype, length: int) -> np.dtype:
    """The integer dtype asked for indices below `length` (the default int if None)."""
    if dtype is None:
        return dtypes.default_int
    dtype = dtypes.canonicalize(dtype)
    if not dtypes.is_int(dtype):
        raise TypeError(f"{name}: dtype must be an integer dtype, got {dtype.name}")
    if length - 1 > np.iinfo(dtype).max:
        raise ValueError(
            f"{name}: dtype {dtype.name} cannot hold the indices of an axis of length {length}"
        )
    return dtype


def sort_complex(a) -> Array:
    """`a` as complex numbers sorted along its last axis by real part, then imaginary part;
    real inputs become the complex dtype of their float width (complex64 for float32, half
    floats and integers of up to 32 bits, complex128 for float64 and, under enable_x64,
    64-bit integers)."""
    a = to_array(a)
    if a.ndim == 0:
        raise ValueError("sort_complex: a must have at least one axis")
    complex_dtype = dtypes.complex_dtype(dtypes.to_inexact(a.dtype))
    return _sorted_along(lax.convert_element_type(a, complex_dtype), a.ndim - 1, True)


def lexsort(keys, axis: int = -1):
    """Indices that sort by the last key, then by the one before it, and so on."""
    if isinstance(keys, Sequence):
        keys = [to_array(k) for k in keys]
    else:
        keys = list(to_array(keys))
    if not keys:
        raise TypeError("lexsort: needs at least one key")
    shapes = {k.shape for k in keys}
    if len(shapes) != 1:
        raise ValueError(f"lexsort: all keys must have one shape, got {sorted(shapes)}")
    shape = keys[0].shape
    if not shape:
        raise ValueError("lexsort: keys must have at least one axis")
    axis = canonicalize_axis(axis, len(shape), "lexsort")
    indices = lax.broadcasted_iota(dtypes.default_int, shape, axis)
    ordered_keys = [part for key in keys[::-1] for part in _sort_keys(key)]
    return lax.sort((*ordered_keys, indices), axis, True, num_keys=len(ordered_keys))[-1]


def partition(a, kth: int | Sequence[int], axis: int = -1):
    """A partition around `kth`; funcgrad returns the fully sorted array, one valid answer."""
    a = to_array(a)
    axis = canonicalize_axis(axis, a.ndim, "partition")
    _check_kth("partition", kth, a.shape[axis])
    return sort(a, axis)


def argpartition(a, kth: int | Sequence[int], axis: int = -1):
    """Indices that partition around `kth`; funcgrad returns indices that fully sort `a`.
    They are int32 whatever the x64 setting, as JAX's are (its partition is a top-k, whose
    indices are int32), where argsort's are the default integer."""
    a = to_array(a)
    axis = canonicalize_axis(axis, a.ndim, "argpartition")
    _check_kth("argpartition", kth, a.shape[axis])
    return lax.convert_element_type(argsort(a, axis), dtypes.int32)


def _check_kth(name: str, kth, size: int) -> None:
    for k in np.atleast_1d(np.asarray(kth)):
        if not -size <= int(k) < size:
            raise ValueError(f"{name}: kth={int(k)} is out of bounds for an axis of size {size}")


# ---------------------------------------------------------------------------------------------
# Searching: searchsorted, digitize


def _less(x, y):
    """x < y in sort order: NaN is larger than every number (as lax.sort orders it); complex
    numbers by real part, then imaginary part (as `sort` orders them)."""
    if dtypes.is_complex(x.dtype):
        x_re, y_re = lax.real(x), lax.real(y)
        tied = lax.bitwise_not(lax.bitwise_or(_less(x_re, y_re), _less(y_re, x_re)))
        return lax.bitwise_or(
            _less(x_re, y_re), lax.bitwise_and(tied, _less(lax.imag(x), lax.imag(y)))
        )
    if not dtypes.is_float(x.dtype):
        return lax.lt(x, y)
    return lax.bitwise_or(lax.lt(x, y), lax.bitwise_and(isnan(y), lax.bitwise_not(isnan(x))))


def _at_most(x, y):
    """x <= y in sort order."""
    return lax.bitwise_not(_less(y, x))


def searchsorted(a, v, side: str = "left", sorter=None, *, method: str = "scan"):
    """Where each element of `v` would go in the sorted 1-d `a` to keep it sorted (int32).

    method="scan" is a binary search unrolled into ceil(log2(len(a) + 1)) vectorized steps
    ("scan_unrolled" and "sort" name the same search here); method="compare_all" compares
    every element of `v` with every element of `a`, which is faster for short `a`.
    """
    if side not in ("left", "right"):
        raise ValueError(f"searchsorted: side must be 'left' or 'right', got {side!r}")
    if method not in ("scan", "scan_unrolled", "sort", "compare_all"):
        raise ValueError(
            "searchsorted: method must be 'scan', 'scan_unrolled', 'sort' or 'compare_all', "
            f"got {method!r}"
        )
    a, v = to_array(a), to_array(v)
    if a.ndim != 1:
        raise ValueError(f"searchsorted: a must be 1-d, got shape {a.shape}")
    if sorter is not None:
        a = a[to_array(sorter)]
    dtype, weak = result_type_and_weak(a, v)
    a, v = convert(a, dtype, weak), convert(v, dtype, weak)
    # Left: the count of elements of `a` below v. Right: the count not above v.
    goes_after = _less if side == "left" else _at_most
    if method == "compare_all":
        return _search_compare_all(a, v, goes_after)
    return _search_binary(a, v, goes_after)


def _search_compare_all(a, v, goes_after):
    n = a.shape[0]
    shape = v.shape + (n,)
    a_all = lax.broadcast_in_dim(a, shape, (v.ndim,))
    v_all = lax.broadcast_in_dim(v, shape, tuple(range(v.ndim)))
    return _sum(goes_after(a_all, v_all), axis=-1, dtype=dtypes.int32)


def _search_binary(a, v, goes_after):
    n = a.shape[0]
    low = lax.full(v.shape, 0, dtypes.int32)
    high = lax.full(v.shape, n, dtypes.int32)
    one = scalar(1, dtypes.int32)
    for _ in range(n.bit_length()):
        middle = lax.shift_right_logical(lax.add(low, high), one)
        # The interval may already be empty, where middle == n; clamp the look-up.
        element = a[lax.min(middle, scalar(n - 1, dtypes.int32))]
        active = lax.lt(low, high)
        right = goes_after(element, v)
        low = lax.select(lax.bitwise_and(active, right), lax.add(middle, one), low)
        high = lax.select(lax.bitwise_and(active, lax.bitwise_not(right)), middle, high)
    return low


def digitize(x, bins, right: bool = False, *, method: str | None = None):
    """The index of the bin each element of `x` falls in (`bins` increasing or decreasing),
    found by `searchsorted` with `method` (by default its own)."""
    x, bins = to_array(x), to_array(bins)
    if bins.ndim != 1:
        raise ValueError(f"digitize: bins must be 1-d, got shape {bins.shape}")
    if bins.shape[0] == 0:
        return lax.full(x.shape, 0, dtypes.int32)
    side = "left" if right else "right"
    options = {} if method is None else {"method": method}
    increasing = searchsorted(bins, x, side, **options)
    flipped = searchsorted(lax.rev(bins, (0,)), x, side, **options)
    decreasing = lax.sub(scalar(bins.shape[0], dtypes.int32), flipped)
    first = lax.index_in_dim(bins, 0, 0, keepdims=False)
    last = lax.index_in_dim(bins, bins.shape[0] - 1, 0, keepdims=False)
    is_increasing = lax.broadcast_in_dim(lax.ge(last, first), x.shape, ())
    return lax.select(is_increasing, increasing, decreasing)


# ---------------------------------------------------------------------------------------------
# unique, bincount


def _static_size(name: str, value, what: str, argument: str) -> int:
    """The concrete int behind `value`, or an error saying why `argument` must be given."""
    value = core.concrete_or_error(
        value,
        f"{name}: the {what} depends on the values of the input, which are not known "
        f"while tracing; pass a static {argument}= to fix the size of the result.",
    )
    return int(value)


def unique(
    ar,
    return_index: bool = False,
    return_inverse: bool = False,
    return_counts: bool = False,
    axis: int | None = None,
    *,
    equal_nan: bool = True,
    size: int | None = None,
    fill_value=None,
    sorted: bool = True,
):
    """The sorted unique elements (or slices along `axis`) of `ar`.

    With `size`, exactly `size` results are returned: the smallest ones, padded with
    `fill_value` (by default the smallest unique value), the index with where the smallest
    value first occurs and the counts with zeros. Without `size` the input must be concrete,
    since the count depends on its values. The results are sorted whatever `sorted` says (it
    allows any order, and sorted is one).
    """
    ar = to_array(ar)
    if axis is None:
        rows = lax.reshape(ar, (ar.size, 1))
        slice_shape = ()
    else:
        axis = canonicalize_axis(axis, ar.ndim, "unique")
        moved = lax.transpose(ar, [axis] + [i for i in range(ar.ndim) if i != axis])
        slice_shape = moved.shape[1:]
        rows = lax.reshape(moved, (moved.shape[0], int(np.prod(slice_shape, dtype=np.int64))))
    found = _unique_rows(rows, equal_nan)
    if size is None:
        size = _static_size("unique", found.count, "number of unique values", "size")
    if fill_value is not None:
        fill = lax.full(rows.shape[1:], fill_value, rows.dtype)
    elif rows.shape[0]:
        fill = lax.index_in_dim(found.rows, 0, 0, keepdims=False)
    else:
        fill = lax.full(rows.shape[1:], 0, rows.dtype)
    values = _resize(found.rows, size, found.count, fill)
    values = lax.reshape(values, (size,) + slice_shape)
    if axis is not None:
        order = list(range(1, axis + 1)) + [0] + list(range(axis + 1, values.ndim))
        values = lax.transpose(values, order)
    results = [values]
    zero = scalar(0, found.count.dtype)
    if return_index:
        first = lax.index_in_dim(found.first_index, 0, 0, False) if rows.shape[0] else zero
        results.append(_resize(found.first_index, size, found.count, first))
    if return_inverse:
        results.append(found.inverse if axis is not None else lax.reshape(found.inverse, ar.shape))
    if return_counts:
        results.append(_resize(found.counts, size, found.count, zero))
    return results[0] if len(results) == 1 else tuple(results)


class _UniqueRows(NamedTuple):
    """The distinct rows of an (n, m) array, compacted to the front of length-n arrays."""

    rows: Any  # (n, m): the distinct rows in sorted order, then leftovers
    first_index: Any  # (n,): where each distinct row first occurs in the input
    inverse: Any  # (n,): which distinct row each input row is
    counts: Any  # (n,): how often each distinct row occurs
    count: Any  # a scalar: how many distinct rows there are


def _unique_rows(rows, equal_nan: bool) -> _UniqueRows:
    n, m = rows.shape
    index_dtype = dtypes.default_int
    if n == 0:
        empty = lax.full((0,), 0, index_dtype)
        return _UniqueRows(rows, empty, empty, empty, scalar(0, index_dtype))
    positions = lax.iota(index_dtype, n)
    # Rows of width zero are all equal: one constant key column sorts them.
    columns = [lax.index_in_dim(rows, j, 1, keepdims=False) for j in range(m)] or [
        lax.full((n,), 0, index_dtype)
    ]
    # Sort rows lexicographically (complex numbers by real, then imaginary part), remembering
    # where each came from; complex columns ride along with their parts as keys.
    keys = [part for column in columns for part in _sort_keys(column)]
    carried = columns if len(keys) > len(columns) else []
    *ordered, origin = lax.sort((*keys, *carried, positions), 0, True, num_keys=len(keys))
    columns = ordered[len(keys) :] if carried else ordered
    starts = _run_starts(columns, n, equal_nan)
    run_id = lax.sub(cumsum(starts, dtype=index_dtype), scalar(1, index_dtype))
    count = _sum(starts, dtype=index_dtype)
    # A stable sort on "not a run start" moves the first row of each run to the front, in
    # order, carrying along the row, where it came from and its position in sorted order.
    not_start = lax.convert_element_type(lax.bitwise_not(starts), index_dtype)
    _, *front_columns, first_index, start = lax.sort(
        (not_start, *columns, origin, positions), 0, True, num_keys=1
    )
    # Run k ends where run k + 1 starts; the last run ends at n.
    next_start = lax.concatenate([lax.slice(start, (1,), (n,)), lax.full((1,), n, index_dtype)], 0)
    is_last_run = lax.ge(lax.add(positions, scalar(1, index_dtype)), count)
    end = lax.select(is_last_run, lax.full((n,), n, index_dtype), next_start)
    counts = lax.sub(end, start)
    # Send each run id back to the original position of its row.
    _, inverse = lax.sort((origin, run_id), 0, True, num_keys=1)
    if m:
        rows = lax.concatenate([lax.expand_dims(c, (1,)) for c in front_columns], 1)
    return _UniqueRows(rows, first_index, inverse, counts, count)


def _run_starts(columns: list, n: int, equal_nan: bool):
    """Whether each sorted row differs from the one before it (the first row always does)."""
    differs = lax.full((n - 1,), False, dtypes.bool_)
    for column in columns:
        current = lax.slice(column, (1,), (n,))
        previous = lax.slice(column, (0,), (n - 1,))
        different = lax.ne(current, previous)
        if equal_nan and dtypes.is_inexact(column.dtype):
            both_nan = lax.bitwise_and(isnan(current), isnan(previous))
            different = lax.bitwise_and(different, lax.bitwise_not(both_nan))
        differs = lax.bitwise_or(differs, different)
    return lax.concatenate([lax.full((1,), True, dtypes.bool_), differs], 0)


def _resize(x, size: int, count, fill):
    """The first `size` entries of `x` along axis 0, those at or past `count` set to `fill`."""
    n = x.shape[0]
    if size <= n:
        x = lax.slice(x, (0,) * x.ndim, (size,) + x.shape[1:])
    else:
        x = lax.pad(x, scalar(0, x.dtype), [(0, size - n, 0)] + [(0, 0, 0)] * (x.ndim - 1))
    keep = lax.broadcast_in_dim(lax.lt(lax.iota(count.dtype, size), count), x.shape, (0,))
    return lax.select(keep, x, lax.broadcast_in_dim(fill, x.shape, tuple(range(1, x.ndim))))


def bincount(x, weights=None, minlength: int = 0, *, length: int | None = None, out_sharding=None):
    """How often each non-negative integer occurs in `x` (or the sum of its weights).

    As in JAX, negative values count as 0 and values at or past `length` are dropped. Without
    `length` the input must be concrete, since the result's size depends on its values.
    """
    counts = _bincount(x, weights, minlength, length)
    return placed(counts, "bincount", out_sharding=out_sharding)


def _bincount(x, weights, minlength: int, length: int | None):
    x = to_array(x)
    if x.ndim != 1:
        raise ValueError(f"bincount: x must be 1-d, got shape {x.shape}")
    if dtypes.is_bool(x.dtype):  # NumPy casts booleans to 0 and 1 safely
        x = lax.convert_element_type(x, dtypes.int32)
    if not dtypes.is_int(x.dtype):
        raise TypeError(f"bincount: x must be of an integer dtype, got {x.dtype.name}")
    if length is None:
        length = int(minlength)
        if x.size:
            largest = lax.reduce_max(x, (0,))
            length = max(length, _static_size("bincount", largest, "largest value", "length") + 1)
    if weights is None:
        weights = lax.full(x.shape, 1, dtypes.default_int)
    weights = to_array(weights)
    if weights.shape != x.shape:
        raise ValueError(
            f"bincount: weights of shape {weights.shape} must match x of shape {x.shape}"
        )
    bins = lax.max(x, scalar(0, x.dtype))
    # Half-precision weights sum in float32, rounded once: added one by one in float16 the
    # totals stopped growing at 2048.
    totals_dtype = accumulation_dtype(weights.dtype)
    totals = lax.full((length,), 0, totals_dtype)
    totals = totals.at[bins].add(convert(weights, totals_dtype), mode="drop")
    return convert(totals, weights.dtype)
