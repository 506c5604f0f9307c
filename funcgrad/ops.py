"""jax.ops: segment reductions, `out[s] = reduce(data[i] for i with segment_ids[i] == s)`.

Each is one scatter (add, mul, max or min) of `data` into an array of `num_segments` rows
filled with the operation's identity, so a segment no id names holds the identity (0, 1, the
lowest or the highest value of the dtype) and an id outside [0, num_segments) is dropped
(`mode="clip"` clamps it instead). Being scatters, they are differentiated, batched and
compiled by the scatter primitives' rules, except the product's derivative with respect to
`data`, written below: with colliding indices it is each row's product of the other rows of
its segment.

`bucket_size` scatters consecutive runs of that many elements into rows of their own and
reduces the rows after: the same result, summed or multiplied in a different order, which
keeps the rounding of long segments of floats smaller.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable

import numpy as np

from funcgrad import core, dtypes, lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.lax import GatherScatterMode, ScatterDimensionNumbers
from funcgrad.transforms.custom_derivatives import custom_jvp

__all__ = ["segment_max", "segment_min", "segment_prod", "segment_sum"]

Mode = str | GatherScatterMode | None


def segment_sum(
    data,
    segment_ids,
    num_segments: int | None = None,
    indices_are_sorted: bool = False,
    unique_indices: bool = False,
    bucket_size: int | None = None,
    mode: Mode = None,
) -> Array:
    """The sum of the rows of `data` in each segment; an empty segment sums to 0.

    `segment_ids` gives the segment of each row (its shape is a prefix of `data`'s; `data`'s
    further axes are kept). `num_segments`, the number of rows of the result, is by default
    the largest id plus one, which needs concrete ids: pass it under jit or vmap."""
    data, ids, num_segments = _operands("segment_sum", data, segment_ids, num_segments)
    return _segment_reduce(
        lax.scatter_add,
        lax.reduce_sum,
        0,
        data,
        ids,
        num_segments,
        indices_are_sorted,
        unique_indices,
        _checked_bucket_size(bucket_size),
        mode,
    )


def segment_prod(
    data,
    segment_ids,
    num_segments: int | None = None,
    indices_are_sorted: bool = False,
    unique_indices: bool = False,
    bucket_size: int | None = None,
    mode: Mode = None,
) -> Array:
    """The product of the rows of `data` in each segment; an empty segment gives 1 (see
    `segment_sum` for the arguments)."""
    data, ids, num_segments = _operands("segment_prod", data, segment_ids, num_segments)
    return _segment_prod(
        data,
        ids,
        num_segments,
        bool(indices_are_sorted),
        bool(unique_indices),
        _checked_bucket_size(bucket_size),
        mode,
    )


def segment_max(
    data,
    segment_ids,
    num_segments: int | None = None,
    indices_are_sorted: bool = False,
    unique_indices: bool = False,
    bucket_size: int | None = None,
    mode: Mode = None,
) -> Array:
    """The largest row of `data` in each segment, elementwise; an empty segment gives -inf (the
    dtype's lowest value for integers, False for booleans). See `segment_sum`."""
    data, ids, num_segments = _operands("segment_max", data, segment_ids, num_segments)
    return _segment_reduce(
        lax.scatter_max,
        lax.reduce_max,
        dtypes.lowest(data.dtype),
        data,
        ids,
        num_segments,
        indices_are_sorted,
        unique_indices,
        _checked_bucket_size(bucket_size),
        mode,
    )


def segment_min(
    data,
    segment_ids,
    num_segments: int | None = None,
    indices_are_sorted: bool = False,
    unique_indices: bool = False,
    bucket_size: int | None = None,
    mode: Mode = None,
) -> Array:
    """The smallest row of `data` in each segment, elementwise; an empty segment gives +inf
    (the dtype's highest value for integers, True for booleans). See `segment_sum`."""
    data, ids, num_segments = _operands("segment_min", data, segment_ids, num_segments)
    return _segment_reduce(
        lax.scatter_min,
        lax.reduce_min,
        dtypes.highest(data.dtype),
        data,
        ids,
        num_segments,
        indices_are_sorted,
        unique_indices,
        _checked_bucket_size(bucket_size),
        mode,
    )


def _operands(name: str, data, segment_ids, num_segments) -> tuple[Array, Array, int]:
    """`data` with its segmented axes flattened into one, the ids flattened alike, and the
    number of segments as an int."""
    data, ids = fnp.asarray(data), fnp.asarray(segment_ids)
    if not dtypes.is_int(ids.dtype):
        raise TypeError(f"{name}: segment_ids must be integers, got {ids.dtype}")
    if ids.ndim == 0 or data.shape[: ids.ndim] != ids.shape:
        raise ValueError(
            f"{name}: the shape of segment_ids {ids.shape} must be the leading part of the "
            f"shape of data {data.shape} (one id per row of data)"
        )
    trailing = data.shape[ids.ndim :]
    data, ids = data.reshape((ids.size, *trailing)), ids.reshape(-1)
    if num_segments is None:
        num_segments = _segments_named(name, ids)
    else:
        num_segments = _concrete_int(name, num_segments)
        if num_segments < 0:
            raise ValueError(f"{name}: num_segments must be non-negative, got {num_segments}")
    return data, ids, num_segments


def _segments_named(name: str, ids) -> int:
    """The largest id plus one (0 without ids), read from concrete ids."""
    ids = core.concrete_or_error(
        ids,
        f"{name}: num_segments=None takes the number of segments from the largest of "
        "segment_ids, whose values are not known while tracing; pass num_segments= "
        "(a Python int) to fix the number of rows of the result.",
    )
    ids = np.asarray(ids)
    return max(int(ids.max()) + 1, 0) if ids.size else 0


def _concrete_int(name: str, num_segments) -> int:
    num_segments = core.concrete_or_error(
        num_segments,
        f"{name}: num_segments decides the shape of the result, so it must be a Python "
        "int (a static argument under jit), not a traced value.",
    )
    try:
        return operator.index(num_segments)
    except TypeError:
        raise TypeError(
            f"{name}: num_segments must be an int or None, got {type(num_segments).__name__} "
            f"{num_segments!r}"
        ) from None


def _checked_bucket_size(bucket_size) -> int | None:
    if bucket_size is None:
        return None
    if isinstance(bucket_size, bool) or not isinstance(bucket_size, (int, np.integer)):
        raise TypeError(f"bucket_size must be a positive int or None, got {bucket_size!r}")
    if bucket_size < 1:
        raise ValueError(f"bucket_size must be a positive int or None, got {bucket_size}")
    return int(bucket_size)


def _segment_reduce(
    scatter: Callable,
    reduce: Callable,
    identity,
    data: Array,
    ids: Array,
    num_segments: int,
    indices_are_sorted: bool,
    unique_indices: bool,
    bucket_size: int | None,
    mode: Mode,
) -> Array:
    """`data`'s rows scattered with `scatter` into `num_segments` rows of `identity`; with a
    bucket size, into one such block per bucket, reduced with `reduce` after."""
    window_dims = tuple(range(1, data.ndim))
    if bucket_size is not None and ids.shape[0] == 0:
        bucket_size = None  # no buckets: nothing to reduce across them
    if bucket_size is None:
        out = lax.full((num_segments, *data.shape[1:]), identity, data.dtype)
        indices = ids.reshape((-1, 1))
        index_dims = (0,)
    else:
        count = ids.shape[0]
        num_buckets = -(-count // bucket_size)
        out = lax.full((num_buckets, num_segments, *data.shape[1:]), identity, data.dtype)
        buckets = lax.div(lax.iota(ids.dtype, count), lax.full((), bucket_size, ids.dtype))
        indices = lax.concatenate([buckets.reshape((-1, 1)), ids.reshape((-1, 1))], 1)
        index_dims = (0, 1)
    out = scatter(
        out,
        indices,
        data,
        ScatterDimensionNumbers(window_dims, index_dims, index_dims),
        indices_are_sorted=indices_are_sorted,
        unique_indices=unique_indices,
        mode=mode,
    )
    return out if bucket_size is None else reduce(out, (0,))


@functools.partial(custom_jvp, nondiff_argnums=(2, 3, 4, 5, 6))
def _segment_prod(data, ids, num_segments, indices_are_sorted, unique_indices, bucket_size, mode):
    return _segment_reduce(
        lax.scatter_mul,
        lax.reduce_prod,
        1,
        data,
        ids,
        num_segments,
        indices_are_sorted,
        unique_indices,
        bucket_size,
        mode,
    )


@_segment_prod.defjvp
def _segment_prod_jvp(
    num_segments, indices_are_sorted, unique_indices, bucket_size, mode, primals, tangents
):
    """d out[s] = sum over the rows i of segment s of (the product of the segment's other
    rows) * d data[i], with the others' products taken without division (see
    `_products_of_others`), so exact where rows are 0, and differentiable again."""
    data, ids = primals
    data_tangent = tangents[0]
    out = _segment_prod(
        data, ids, num_segments, indices_are_sorted, unique_indices, bucket_size, mode
    )
    if num_segments == 0 or ids.shape[0] == 0:
        return out, fnp.zeros_like(out)
    # Rows meet in one segment when their ids are equal after clamping (mode="clip"); rows
    # with other out-of-range ids are dropped by the sum below, whatever they are grouped with.
    clamps = GatherScatterMode.from_any(mode) == GatherScatterMode.CLIP
    groups = fnp.clip(ids, 0, num_segments - 1) if clamps else ids
    order = fnp.argsort(groups, stable=True)
    others = _products_of_others(data[order], groups[order])
    tangent = _segment_reduce(
        lax.scatter_add,
        lax.reduce_sum,
        0,
        others * data_tangent[order],
        ids[order],
        num_segments,
        True,
        unique_indices,
        bucket_size,
        mode,
    )
    return out, tangent


def _products_of_others(rows: Array, groups: Array) -> Array:
    """For rows sorted by group, each row's product of the other rows of its group: the
    product of those before it in the group times that of those after it, each a segmented
    prefix product (running products restarting where a group starts)."""
    changes = groups[1:] != groups[:-1]
    first = fnp.concatenate([fnp.ones(1, bool), changes])  # rows that start their group
    last = fnp.concatenate([changes, fnp.ones(1, bool)])  # rows that end it
    row_shape = (-1,) + (1,) * (rows.ndim - 1)

    def restarting_product(a, b):
        (a_restarts, a_product), (b_restarts, b_product) = a, b
        product = fnp.where(b_restarts.reshape(row_shape), b_product, a_product * b_product)
        return a_restarts | b_restarts, product

    _, through = lax.associative_scan(restarting_product, (first, rows))
    _, from_end = lax.associative_scan(restarting_product, (last, rows), reverse=True)
    one = fnp.ones_like(rows[:1])
    before = fnp.where(first.reshape(row_shape), 1, fnp.concatenate([one, through[:-1]]))
    after = fnp.where(last.reshape(row_shape), 1, fnp.concatenate([from_end[1:], one]))
    return before * after
