"""Descriptive statistics of samples, as jax.scipy.stats.mode, rankdata and sem.

mode and rankdata work on sorted data: equal values lie in runs, and each element's run is
found by a running max (or min) of the run starts (or ends) rather than by a search, so that
they vectorize over the other axes and need no data-dependent shapes. Like JAX, neither
supports nan_policy 'omit' or 'raise'; with 'propagate' a nan in a slice makes all of its
ranks nan, and nans count as one value for the mode.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from funcgrad import dtypes, lax
from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_args_inexact

_RANK_METHODS = ("average", "min", "max", "dense", "ordinal")


class ModeResult(NamedTuple):
    mode: Array
    count: Array


def _check_nan_policy(name: str, nan_policy: str) -> None:
    if nan_policy not in ("propagate", "omit", "raise"):
        raise ValueError(
            f"{name}: nan_policy must be 'propagate', 'omit' or 'raise', got {nan_policy!r}"
        )
    if nan_policy != "propagate":
        raise NotImplementedError(
            f"{name}: nan_policy={nan_policy!r} is not supported: whether there are nans is "
            "only known at run time; check for them before calling"
        )


def _runs(ordered):
    """For values sorted along the last axis, the position of the first and of the last element
    of each element's run of equal values (nans are equal to each other)."""
    size = ordered.shape[-1]
    same = (ordered[..., 1:] == ordered[..., :-1]) | (
        fnp.isnan(ordered[..., 1:]) & fnp.isnan(ordered[..., :-1])
    )
    differs = fnp.ones(ordered.shape[:-1] + (1,), bool)
    starts_run = fnp.concatenate([differs, ~same], axis=-1)
    ends_run = fnp.concatenate([~same, differs], axis=-1)
    position = lax.broadcasted_iota(dtypes.int32, ordered.shape, ordered.ndim - 1)
    first = lax.cummax(fnp.where(starts_run, position, 0), axis=ordered.ndim - 1)
    last = lax.cummin(fnp.where(ends_run, position, size - 1), axis=ordered.ndim - 1, reverse=True)
    return first, last, starts_run


def mode(
    a: ArrayLike, axis: int | None = 0, nan_policy: str = "propagate", keepdims: bool = False
) -> ModeResult:
    """The most frequent value along `axis` (the smallest of equally frequent ones) and its
    count; over all elements when axis is None. An empty axis gives nan with count 0."""
    _check_nan_policy("mode", nan_policy)
    x = fnp.atleast_1d(fnp.asarray(a))
    if axis is None:
        kept_shape = (1,) * x.ndim if keepdims else ()
        x, axis = x.reshape(-1), 0
    else:
        axis = axis + x.ndim if axis < 0 else axis
        if not 0 <= axis < x.ndim:
            raise ValueError(f"mode: axis {axis} is out of range for an array of {x.ndim} dims")
        kept_shape = x.shape[:axis] + (1,) * keepdims + x.shape[axis + 1 :]
    x = fnp.moveaxis(x, axis, -1)
    if x.shape[-1] == 0:
        nothing = fnp.full(kept_shape, fnp.nan, dtypes.default_float)
        return ModeResult(nothing, fnp.zeros(kept_shape, dtypes.default_float))
    ordered = fnp.sort(x, axis=-1)
    first, last, _ = _runs(ordered)
    counts = last - first + 1
    where_most = fnp.argmax(counts, axis=-1)[..., None]
    value = fnp.take_along_axis(ordered, where_most, axis=-1)
    count = fnp.take_along_axis(counts, where_most, axis=-1)
    return ModeResult(value.reshape(kept_shape), count.reshape(kept_shape))


def rankdata(
    a: ArrayLike, method: str = "average", *, axis: int | None = None, nan_policy: str = "propagate"
) -> Array:
    """The ranks (from 1) of the values along `axis`, or of all values flattened when axis is
    None, in the default float. Ties get the mean of their ranks ('average'), the lowest
    ('min'), the highest ('max'), consecutive ranks of the distinct values ('dense'), or
    distinct ranks in order of appearance ('ordinal')."""
    _check_nan_policy("rankdata", nan_policy)
    if method not in _RANK_METHODS:
        raise ValueError(f"rankdata: method must be one of {_RANK_METHODS}, got {method!r}")
    x = fnp.asarray(a)
    if axis is None:
        x, axis = x.reshape(-1), 0
    axis = axis + x.ndim if axis < 0 else axis
    x = fnp.moveaxis(x, axis, -1)
    position = lax.broadcasted_iota(dtypes.int32, x.shape, x.ndim - 1)
    ordered, order = lax.sort_key_val(x, position, dimension=x.ndim - 1)
    # Where each element went in the sorted order, so that ranks of the sorted values can be
    # read back in the original order.
    place = fnp.argsort(order, axis=-1)
    first, last, starts_run = _runs(ordered)
    if method == "ordinal":
        ranks = position + 1
    elif method == "dense":
        ranks = fnp.cumsum(starts_run, axis=-1)
    elif method == "min":
        ranks = first + 1
    elif method == "max":
        ranks = last + 1
    else:
        ranks = 0.5 * (first + last) + 1
    ranks = fnp.take_along_axis(ranks.astype(dtypes.default_float), place, axis=-1)
    has_nan = fnp.any(fnp.isnan(x), axis=-1, keepdims=True)
    return fnp.moveaxis(fnp.where(has_nan, fnp.nan, ranks), -1, axis)


def sem(
    a: ArrayLike,
    axis: int | None = 0,
    ddof: int = 1,
    nan_policy: str = "propagate",
    *,
    keepdims: bool = False,
) -> Array:
    """The standard error of the mean, std(ddof) / sqrt(n), along `axis` (all elements when
    None); with nan_policy='omit' the nans are left out of both."""
    (x,) = promote_args_inexact("sem", a)
    if nan_policy == "propagate":
        size = x.size if axis is None else x.shape[axis]
        return fnp.std(x, axis, ddof=ddof, keepdims=keepdims) / math.sqrt(size)
    if nan_policy == "omit":
        count = fnp.sum(~fnp.isnan(x), axis, keepdims=keepdims).astype(x.dtype)
        return fnp.nanstd(x, axis, ddof=ddof, keepdims=keepdims) / fnp.sqrt(count)
    raise ValueError(f"sem: nan_policy must be 'propagate' or 'omit', got {nan_policy!r}")
