"""funcgrad.scipy.ndimage: `map_coordinates`, interpolation of an N-d array at arbitrary
points, by nearest neighbour (order 0) or multilinearly (order 1).

Each point reads the 2^d (order 1) or one (order 0) surrounding samples with one gather and
weighs them by its distance from them, so the result is differentiable in the values and, for
order 1, in the coordinates. Points beyond the edges read samples by `mode`, which follows
SciPy's documented definitions: "constant" (SciPy's "grid-constant": samples beyond the
edges are `cval`, so order 1 blends towards `cval` within one sample of an edge), "nearest"
(the edge sample repeated), "wrap" (SciPy's "grid-wrap": periodic), "mirror" (reflected about
the edge samples' centres) and "reflect" (SciPy's "grid-mirror": reflected about the edges).
"""

from __future__ import annotations

import functools
import itertools
import operator
from collections.abc import Callable, Sequence

from funcgrad import dtypes, lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.numpy._promotion import convert

__all__ = ["map_coordinates"]


def _mirror(index, size: int):
    if size == 1:
        return fnp.zeros_like(index)
    period = 2 * (size - 1)
    folded = index % period
    return fnp.where(folded >= size, period - folded, folded)


def _reflect(index, size: int):
    folded = index % (2 * size)
    return fnp.where(folded >= size, 2 * size - 1 - folded, folded)


_INDEXERS: dict[str, Callable] = {
    "constant": lambda index, size: fnp.clip(index, 0, size - 1),
    "nearest": lambda index, size: fnp.clip(index, 0, size - 1),
    "wrap": lambda index, size: index % size,
    "mirror": _mirror,
    "reflect": _reflect,
}
_ALIASES = {"grid-constant": "constant", "grid-wrap": "wrap", "grid-mirror": "reflect"}


def _folded(index, size: int, mode: str):
    """A whole-valued float index brought into a range that int32 holds, reading the same
    samples: periodic modes reduce it by their period, the others clip it to [-2, size] (the
    samples beyond are all the edge's or all cval). An infinite index becomes NaN in the
    periodic modes, which have no sample for it."""
    period = {"wrap": size, "reflect": 2 * size, "mirror": max(2 * (size - 1), 1)}.get(mode)
    if period is None:
        return fnp.clip(index, -2, size)
    return fnp.remainder(index, period)


def _neighbours(coordinate, order: int, size: int, mode: str):
    """(index, weight) pairs of the samples that a coordinate reads, and where the coordinate
    names no position (NaN, or infinite in a periodic mode)."""
    if not dtypes.is_inexact(coordinate.dtype):
        return [(convert(coordinate, dtypes.int32), None)], fnp.zeros(coordinate.shape, bool)
    if order == 0:
        folded = _folded(lax.round(coordinate), size, mode)
        index = convert(fnp.where(fnp.isnan(folded), 0, folded), dtypes.int32)
        return [(index, None)], fnp.isnan(folded)
    lower = fnp.floor(coordinate)
    above = coordinate - lower
    folded = _folded(lower, size, mode)
    index = convert(fnp.where(fnp.isnan(folded), 0, folded), dtypes.int32)
    return [(index, 1 - above), (index + 1, above)], fnp.isnan(folded)


def map_coordinates(
    input, coordinates: Sequence, order: int, mode: str = "constant", cval=0.0
) -> Array:
    """`input` interpolated at the points whose i-th coordinates are coordinates[i] (arrays
    that broadcast together; the result takes their shape). An integer input's result is
    rounded to its dtype. A NaN coordinate, or an infinite one in a periodic mode, gives NaN
    (`cval` for an integer input); coordinates beyond int32's range read the samples their
    mode assigns them. A boolean input's result is true wherever a true sample has weight."""
    input = fnp.asarray(input)
    mode = _ALIASES.get(mode, mode)
    if mode not in _INDEXERS:
        raise NotImplementedError(
            f"map_coordinates: mode must be one of {sorted(_INDEXERS) + sorted(_ALIASES)}, "
            f"got {mode!r}"
        )
    if order not in (0, 1):
        raise NotImplementedError(f"map_coordinates: order must be 0 or 1, got {order!r}")
    coordinates = [fnp.asarray(c) for c in coordinates]
    if len(coordinates) != input.ndim:
        raise ValueError(
            f"map_coordinates: needs one coordinate array per axis of the input, got "
            f"{len(coordinates)} for an input of shape {input.shape}"
        )
    if input.ndim == 0:
        return input
    coordinates = fnp.broadcast_arrays(*coordinates)
    indexer = _INDEXERS[mode]
    per_axis, nowhere = zip(
        *[_neighbours(c, order, size, mode) for c, size in zip(coordinates, input.shape)]
    )
    result = None
    for corner in itertools.product(*per_axis):
        indices = tuple(indexer(index, size) for (index, _), size in zip(corner, input.shape))
        values = input[indices]
        if mode == "constant":
            inside = functools.reduce(
                operator.and_,
                [(index >= 0) & (index < size) for (index, _), size in zip(corner, input.shape)],
            )
            values = fnp.where(inside, values, fnp.asarray(cval, dtype=input.dtype))
        for _, weight in corner:
            if weight is not None:
                values = values * weight
        result = values if result is None else result + values
    if dtypes.is_int(input.dtype) and dtypes.is_inexact(result.dtype):
        result = lax.round(result)
    result = convert(result, input.dtype)
    unknown = fnp.nan if dtypes.is_inexact(input.dtype) else cval
    return fnp.where(functools.reduce(operator.or_, nowhere), unknown, result).astype(input.dtype)
