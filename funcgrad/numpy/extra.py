"""More of NumPy's API: statistics, histograms, polynomials, set operations, differences,
floating-point decomposition, and functional forms of NumPy's in-place functions.

Everything is written with funcgrad.lax and the rest of funcgrad.numpy, so every
transformation applies. Functions whose result size depends on the values (set operations,
compress, extract) need a static `size=` under a transformation, as in JAX; NumPy's in-place
functions (fill_diagonal, put, put_along_axis) need `inplace=False` and return a new array.
"""

from __future__ import annotations

import builtins
import functools
import math
import operator
from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from funcgrad import core, dtypes, lax
from funcgrad.array import DLPACK_CUDA, Array, device_put, from_cuda_dlpack
from funcgrad.errors import ConcretizationTypeError
from funcgrad.lax.sharding_constraint import placed
from funcgrad.numpy import (
    _bessel,
    creation,
    indexing,
    linalg,
    linalg_ops,
    misc,
    reductions,
    shape_ops,
    sorting_ops,
    ufuncs,
)
from funcgrad.numpy._promotion import (
    broadcast_shapes,
    broadcast_to,
    convert,
    promote_args,
    promote_args_inexact,
    promote_dtypes_inexact,
    result_type,
    to_array,
)
from funcgrad.numpy.reductions import Axis, check_no_out, reduction_axes
from funcgrad.numpy.shape_ops import canonicalize_axis, static_value
from funcgrad.numpy.sorting_ops import _static_size

__all__ = [
    "array_repr",
    "array_str",
    "kaiser",
    "roots",
    "angle",
    "append",
    "apply_along_axis",
    "apply_over_axes",
    "astype",
    "bartlett",
    "bitwise_invert",
    "bitwise_left_shift",
    "bitwise_right_shift",
    "blackman",
    "block",
    "bool",
    "c_",
    "can_cast",
    "choose",
    "compress",
    "concat",
    "convolve",
    "corrcoef",
    "correlate",
    "cov",
    "delete",
    "diff",
    "double",
    "ediff1d",
    "extract",
    "fabs",
    "fill_diagonal",
    "frexp",
    "from_dlpack",
    "frombuffer",
    "fromfunction",
    "fromiter",
    "fromfile",
    "fromstring",
    "gcd",
    "get_printoptions",
    "gradient",
    "hamming",
    "hanning",
    "histogram",
    "histogram2d",
    "histogram_bin_edges",
    "histogramdd",
    "imag",
    "index_exp",
    "insert",
    "interp",
    "intersect1d",
    "iscomplex",
    "isdtype",
    "isin",
    "isreal",
    "isrealobj",
    "iterable",
    "lcm",
    "ldexp",
    "load",
    "mask_indices",
    "matvec",
    "mgrid",
    "modf",
    "nanmedian",
    "nanpercentile",
    "nanquantile",
    "ogrid",
    "packbits",
    "percentile",
    "permute_dims",
    "place",
    "piecewise",
    "poly",
    "polyadd",
    "polyder",
    "polydiv",
    "polyfit",
    "polyint",
    "polymul",
    "polysub",
    "polyval",
    "printoptions",
    "put",
    "put_along_axis",
    "quantile",
    "r_",
    "ravel_multi_index",
    "resize",
    "rollaxis",
    "s_",
    "save",
    "savez",
    "set_printoptions",
    "setdiff1d",
    "setxor1d",
    "single",
    "spacing",
    "trapezoid",
    "trim_zeros",
    "uint",
    "union1d",
    "unique_all",
    "unique_counts",
    "unique_inverse",
    "unique_values",
    "unpackbits",
    "unstack",
    "unwrap",
    "vander",
    "vecmat",
    "vectorize",
]


def _inexact(x):
    x = to_array(x)
    return x if dtypes.is_inexact(x.dtype) else convert(x, dtypes.to_inexact(x.dtype))


def _to_dtype(x, dtype):
    """x as an array of dtype; Python numbers convert exactly, not through float32."""
    return convert(x if dtypes.is_python_scalar(x) else to_array(x), dtype)


def _take(x, index: int, axis: int):
    """x[..., index, ...] along `axis`, the axis dropped (a static slice)."""
    return lax.index_in_dim(x, index, axis, keepdims=False)


def _slice(x, start: int, stop: int, axis: int):
    return lax.slice_in_dim(x, start, stop, axis=axis)


# ---------------------------------------------------------------------------------------------
# Quantiles

_QUANTILE_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")


def quantile(
    a,
    q,
    axis: Axis = None,
    out=None,
    overwrite_input: bool = False,
    method: str = "linear",
    keepdims: bool = False,
    *,
    weights=None,
):
    """The q-th quantiles (q in [0, 1]) over `axis`; the shape of q leads the result's.

    A slice containing NaN has NaN quantiles, as in NumPy. A q outside [0, 1] raises a
    ValueError as in NumPy, or, when q is traced, gives NaN (JAX would clamp it to 0 or 1).
    Between two equal infinities the quantile is that infinity, where NumPy's interpolation
    gives inf - inf = NaN.
    """
    return _quantile("quantile", a, q, axis, out, method, keepdims, weights, ignore_nan=False)


def nanquantile(
    a,
    q,
    axis: Axis = None,
    out=None,
    overwrite_input: bool = False,
    method: str = "linear",
    keepdims: bool = False,
    *,
    weights=None,
):
    """`quantile` of the values that are not NaN (NaN for a slice of only NaNs)."""
    return _quantile("nanquantile", a, q, axis, out, method, keepdims, weights, ignore_nan=True)


def percentile(
    a,
    q,
    axis: Axis = None,
    out=None,
    overwrite_input: bool = False,
    method: str = "linear",
    keepdims: bool = False,
    *,
    weights=None,
    out_sharding=None,
):
    """`quantile` with q in percent."""
    result = _quantile(
        "percentile", a, q, axis, out, method, keepdims, weights, ignore_nan=False, percent=True
    )
    return placed(result, "percentile", out_sharding=out_sharding)


def nanpercentile(
    a,
    q,
    axis: Axis = None,
    out=None,
    overwrite_input: bool = False,
    method: str = "linear",
    keepdims: bool = False,
    *,
    weights=None,
):
    return _quantile(
        "nanpercentile", a, q, axis, out, method, keepdims, weights, ignore_nan=True, percent=True
    )


def nanmedian(a, axis: Axis = None, out=None, overwrite_input: bool = False, keepdims=False):
    """`median` of the values that are not NaN: the mean of the middle two for an even count
    (`midpoint`, as median's, so that inf and a number give inf rather than inf - inf)."""
    return _quantile("nanmedian", a, 0.5, axis, out, "midpoint", keepdims, None, ignore_nan=True)


def _quantile(name, a, q, axis, out, method, keepdims, weights, ignore_nan: bool, percent=False):
    check_no_out(name, out)
    if weights is not None:
        raise NotImplementedError(f"{name}: weights are not supported")
    if method not in _QUANTILE_METHODS:
        raise ValueError(f"{name}: method must be one of {_QUANTILE_METHODS}, got {method!r}")
    a = _inexact(a)
    q = _to_dtype(q, a.dtype)
    if not isinstance(q, core.Tracer):
        # As NumPy. A traced q out of range gives NaN there (never a clamped quantile).
        top = 100 if percent else 1
        if not np.all((np.asarray(q) >= 0) & (np.asarray(q) <= top)):
            raise ValueError(f"{name}: q must lie in [0, {top}], got {np.asarray(q).tolist()}")
    if percent:
        q = q / 100
    axes = reduction_axes(name, axis, a.ndim)
    kept = [d for d in range(a.ndim) if d not in axes]
    # The reduced axes go last, merged into one, and get sorted: NaNs end up at the end.
    moved = lax.transpose(a, (*kept, *axes))
    batch_shape = moved.shape[: len(kept)]
    n = math.prod(moved.shape[len(kept) :])
    x = lax.sort(lax.reshape(moved, (*batch_shape, n)), dimension=len(batch_shape))
    if n == 0:
        result = lax.full(q.shape + batch_shape, np.nan, a.dtype)
    else:
        nan_count = reductions.sum(ufuncs.isnan(x), axis=-1, keepdims=True, dtype=dtypes.int32)
        valid = lax.sub(np.int32(n), nan_count) if ignore_nan else lax.full_like(nan_count, n)
        result = _sorted_quantile(x, q, valid, method)
        if not ignore_nan:
            has_nan = broadcast_to(nan_count[..., 0] > 0, result.shape)
            result = misc.where(has_nan, np.nan, result)
    if keepdims:
        shape = q.shape + tuple(1 if d in axes else size for d, size in enumerate(a.shape))
        result = lax.reshape(result, shape)
    return result


def _sorted_quantile(x, q, valid, method: str):
    """Quantiles of each row of x (sorted, its first `valid` entries counting): the result has
    q's axes first, then x's leading axes."""
    batch_shape = x.shape[:-1]
    position = lax.mul(
        lax.broadcast_in_dim(q, q.shape + batch_shape, tuple(range(q.ndim))),
        lax.broadcast_in_dim(
            convert(lax.sub(valid, np.int32(1)), x.dtype)[..., 0],
            q.shape + batch_shape,
            tuple(range(q.ndim, q.ndim + len(batch_shape))),
        ),
    )
    lower_index = ufuncs.floor(position)
    upper_index = ufuncs.ceil(position)

    def values_at(index):
        index = convert(index, dtypes.int32)
        flat = lax.reshape(index, (q.size, *batch_shape))
        flat = lax.transpose(flat, (*range(1, flat.ndim), 0))
        taken = indexing.take_along_axis(x, lax.max(flat, np.int32(0)), axis=-1)
        taken = lax.transpose(taken, (taken.ndim - 1, *range(taken.ndim - 1)))
        return lax.reshape(taken, q.shape + batch_shape)

    if method == "lower":
        return values_at(lower_index)
    if method == "higher":
        return values_at(upper_index)
    if method == "nearest":
        return values_at(ufuncs.rint(position))  # halves round to even, as NumPy's
    low, high = values_at(lower_index), values_at(upper_index)
    if method == "midpoint":
        return lax.mul(lax.add(low, high), np.array(0.5, x.dtype)[()])
    # NumPy's lerp: from the nearer end, so that a fraction of 1/2 between -inf and a number
    # gives -inf (as the median does) rather than -inf + inf; two equal infinities give that
    # infinity rather than inf - inf. (Only infinite ends are selected: equal finite ends
    # interpolate to the same value and keep JAX's gradient, split by the fraction.)
    fraction = lax.sub(position, lower_index)
    difference = lax.sub(high, low)
    one = np.array(1, x.dtype)[()]
    from_low = lax.add(low, lax.mul(difference, fraction))
    from_high = lax.sub(high, lax.mul(difference, lax.sub(one, fraction)))
    half = np.array(0.5, x.dtype)[()]
    result = lax.select(lax.ge(fraction, lax.full_like(fraction, half)), from_high, from_low)
    same_infinity = lax.bitwise_and(lax.eq(low, high), lax.bitwise_not(lax.is_finite(low)))
    return lax.select(same_infinity, low, result)


# ---------------------------------------------------------------------------------------------
# Covariance


def cov(
    m,
    y=None,
    rowvar: bool = True,
    bias: bool = False,
    ddof: int | None = None,
    fweights=None,
    aweights=None,
    dtype=None,
):
    """The covariance matrix of the variables in the rows of m (columns unless `rowvar`),
    with integer frequency weights and/or observation weights as NumPy defines them."""
    # NumPy's rules: m's columns are the variables unless rowvar or m is 1-d, y's unless
    # rowvar or y has one row; no variables in m give an empty matrix whatever y holds.
    x = _observations("cov", m, not rowvar and np.ndim(m) != 1)
    result_dtype = to_array(m).dtype if y is None else result_type(m, y)
    dtype = dtypes.canonicalize(dtype) if dtype is not None else dtypes.to_inexact(result_dtype)
    if x.shape[0] == 0:
        return lax.full((0, 0), 0, dtype)
    if y is not None:
        rows = _observations("cov", y, False)
        rows = rows.T if not rowvar and rows.shape[0] != 1 else rows
        x = shape_ops.concatenate([convert(x, dtype), convert(rows, dtype)], axis=0)
    x = convert(x, dtype)
    if ddof is None:
        ddof = 0 if bias else 1
    weights = None
    real_dtype = dtypes.real_dtype(dtype)
    if fweights is not None:
        weights = _to_dtype(fweights, real_dtype)
    if aweights is not None:
        aweights = _to_dtype(aweights, real_dtype)
        weights = aweights if weights is None else weights * aweights
    mean, weights_sum = reductions.average(x, axis=1, weights=weights, returned=True)
    weights_sum = ufuncs.real(weights_sum[0])
    if weights is None:
        factor = x.shape[1] - ddof
    elif ddof == 0:
        factor = weights_sum
    elif aweights is None:
        factor = weights_sum - ddof
    else:
        factor = weights_sum - ddof * reductions.sum(weights * aweights) / weights_sum
    factor = ufuncs.maximum(factor, 0)
    centered = x - mean[:, None]
    weighted = centered if weights is None else centered * weights
    if dtypes.is_complex(dtype):
        weighted = lax.conj(weighted)
    c = linalg_ops.matmul(centered, weighted.T) / factor
    return shape_ops.squeeze(c)


def _observations(name: str, m, transpose: bool):
    """m as a 2-d array whose rows are the variables."""
    x = to_array(m)
    if x.ndim > 2:
        raise ValueError(f"{name}: m has more than two dimensions, shape {x.shape}")
    x = shape_ops.atleast_2d(x)
    return x.T if transpose else x


def corrcoef(x, y=None, rowvar: bool = True, dtype=None):
    """Pearson correlation coefficients: the covariance scaled to a unit diagonal (for complex
    variables, real and imaginary parts each clipped to [-1, 1], as in NumPy)."""
    c = cov(x, y, rowvar, dtype=dtype)
    if c.ndim == 0:
        return c / c
    stddev = convert(ufuncs.sqrt(ufuncs.real(misc.diagonal(c))), c.dtype)
    c = c / stddev[:, None] / stddev[None, :]
    if dtypes.is_complex(c.dtype):
        return lax.complex(misc.clip(lax.real(c), -1, 1), misc.clip(lax.imag(c), -1, 1))
    return misc.clip(c, -1, 1)


# ---------------------------------------------------------------------------------------------
# Histograms


def histogram_bin_edges(a, bins=10, range=None, weights=None):
    """Edges of equal-width bins over `range` (by default the data's min and max; a range of
    zero width is widened by 0.5 each side), or the given edges."""
    a = _inexact(a)
    if isinstance(bins, str):
        raise NotImplementedError(f"histogram_bin_edges: bins={bins!r} is not supported")
    if np.ndim(bins) == 1 or (isinstance(bins, (Array, core.Tracer)) and bins.ndim == 1):
        if np.shape(bins)[0] < 2:
            raise ValueError(
                f"histogram_bin_edges: bins given as edges need at least 2, got {np.shape(bins)[0]}"
            )
        return _to_dtype(bins, a.dtype)
    count = operator.index(bins)
    if count < 1:
        raise ValueError(f"histogram_bin_edges: bins must be positive, got {count}")
    if range is None:
        low = reductions.min(a, initial=np.inf) if a.size else 0.0
        high = reductions.max(a, initial=-np.inf) if a.size else 1.0
    else:
        low, high = range
    # NumPy computes the edges in its promotion of the bounds (float64 for Python numbers),
    # rounding to the data's dtype only at the end.
    working = misc._numpy_working_dtype(low, high)
    low, high = (_to_dtype(v, working) for v in (low, high))
    widen = lax.eq(low, high)
    low = misc.where(widen, low - 0.5, low)
    high = misc.where(widen, high + 0.5, high)
    return misc.linspace(low, high, count + 1, dtype=a.dtype)


def histogram(a, bins=10, range=None, weights=None, density=None):
    """Counts (or summed weights) of the flattened `a` in each bin, and the bin edges. The
    last bin includes its right edge; values outside the edges are not counted."""
    a, weights = _sample_and_weights(a, weights)
    edges = histogram_bin_edges(a, bins, range, weights)
    sample = shape_ops.ravel(a)[:, None]
    hist, (edges,) = _histogram_nd(sample, [edges], weights, density, a.dtype)
    return hist, edges


def histogram2d(x, y, bins=10, range=None, weights=None, density=None):
    """The 2-d histogram of points (x[i], y[i]): (hist, x edges, y edges)."""
    x, y = promote_args_inexact("histogram2d", x, y)
    hist, (x_edges, y_edges) = histogramdd(
        shape_ops.stack([x, y], axis=1), bins, range, weights, density
    )
    return hist, x_edges, y_edges


def histogramdd(sample, bins=10, range=None, weights=None, density=None):
    """The histogram of the rows of an (N, D) sample: (hist, list of D edge arrays). `bins`
    and `range` are one for every dimension, or one per dimension."""
    sample, weights = _sample_and_weights(sample, weights)
    if sample.ndim == 1:
        sample = sample[:, None]
    if sample.ndim != 2:
        raise ValueError(f"histogramdd: sample must be (N, D), got shape {sample.shape}")
    dims = sample.shape[1]
    bins_per_dim = bins if isinstance(bins, (list, tuple)) else [bins] * dims
    ranges = range if range is not None else [None] * dims
    if len(bins_per_dim) != dims or len(ranges) != dims:
        raise ValueError(
            f"histogramdd: bins and range need one entry per dimension ({dims}), got "
            f"{len(bins_per_dim)} and {len(ranges)}"
        )
    edges = [
        histogram_bin_edges(sample[:, d], b, r)
        for d, (b, r) in enumerate(zip(bins_per_dim, ranges))
    ]
    return _histogram_nd(sample, edges, weights, density, sample.dtype)


def _sample_and_weights(sample, weights):
    """The sample and its weights in their common float dtype (the sample's alone without
    weights): float16 weights give float16 counts."""
    if weights is None:
        return _inexact(sample), None
    return promote_dtypes_inexact(sample, weights)


def _histogram_nd(sample, edges: list, weights, density, dtype):
    """Counts of the rows of sample (N, D) in the grid of bins that `edges` give, as `dtype`.

    Counts accumulate in int32 and summed weights in at least float32, rounded to `dtype`
    once at the end: added one by one in float16 or bfloat16, counts stopped growing at 2048
    or 256."""
    shape = tuple(e.shape[0] - 1 for e in edges)
    flat = lax.full((sample.shape[0],), 0, dtypes.int32)
    inside = lax.full((sample.shape[0],), True, dtypes.bool_)
    for d, e in enumerate(edges):
        values = sample[:, d]
        index = sorting_ops.searchsorted(e, values, side="right") - 1
        # The last bin is closed: its right edge belongs to it.
        index = misc.where(values == e[-1], shape[d] - 1, index)
        inside = inside & (index >= 0) & (index < shape[d])
        flat = flat * shape[d] + misc.clip(index, 0, shape[d] - 1)
    if weights is None:
        totals_dtype, weights = dtypes.int32, convert(inside, dtypes.int32)
    else:
        totals_dtype = reductions.accumulation_dtype(sample.dtype)
        weights = convert(shape_ops.ravel(to_array(weights)), totals_dtype)
        weights = misc.where(inside, weights, 0)
    totals = lax.full((math.prod(shape),), 0, totals_dtype).at[flat].add(weights)
    hist = lax.reshape(totals, shape)
    if density:
        # NumPy's order of divisions (each axis's widths, then the total), so that results
        # round, overflow and underflow as NumPy's do.
        hist = convert(hist, reductions.accumulation_dtype(sample.dtype))
        total = reductions.sum(hist)
        for d, e in enumerate(edges):
            hist = hist / lax.broadcast_in_dim(convert(diff(e), hist.dtype), shape, (d,))
        hist = hist / total
    return convert(hist, dtype), edges


# ---------------------------------------------------------------------------------------------
# Interpolation, integration, differences


def interp(x, xp, fp, left=None, right=None, period=None):
    """Piecewise-linear interpolation of the points (xp, fp), xp increasing, at x. Outside
    xp's range the values are `left` and `right` (fp's end values by default; 'extrapolate'
    continues the end segments); with a `period`, x and xp are angles modulo it, and `left`
    and `right` are ignored, as in NumPy."""
    for position_name, position in (("x", x), ("xp", xp)):
        if dtypes.is_complex(result_type(position)):
            raise TypeError(f"interp: {position_name} must be real, got {result_type(position)}")
    x, xp, fp = promote_dtypes_inexact(x, xp, fp)
    # Only fp may be complex: x and xp are positions on the real line.
    x, xp = (convert(a, dtypes.real_dtype(a.dtype)) for a in (x, xp))
    if xp.ndim != 1 or fp.ndim != 1 or xp.shape != fp.shape or xp.shape[0] == 0:
        raise ValueError(
            f"interp: xp and fp must be 1-d of one nonzero length, got shapes {xp.shape} and "
            f"{fp.shape}"
        )
    if period is not None:
        left = right = None
        x = ufuncs.remainder(x, period)
        xp = ufuncs.remainder(xp, period)
        order = sorting_ops.argsort(xp)
        xp, fp = xp[order], fp[order]
        xp = shape_ops.concatenate([xp[-1:] - period, xp, xp[:1] + period])
        fp = shape_ops.concatenate([fp[-1:], fp, fp[:1]])
    if xp.shape[0] == 1:
        f = broadcast_to(fp[0], x.shape)
    else:
        i = misc.clip(sorting_ops.searchsorted(xp, x, side="right"), 1, xp.shape[0] - 1)
        x0, x1, f0, f1 = xp[i - 1], xp[i], fp[i - 1], fp[i]
        dx = x1 - x0
        slope = (f1 - f0) / misc.where(dx == 0, 1, dx)
        f = misc.where(dx == 0, f1, f0 + (x - x0) * slope)
    if left != "extrapolate":
        f = misc.where(x < xp[0], fp[0] if left is None else left, f)
    if right != "extrapolate":
        f = misc.where(x > xp[-1], fp[-1] if right is None else right, f)
    return convert(f, fp.dtype)


def trapezoid(y, x=None, dx=1.0, axis: int = -1):
    """The integral of y along `axis` by the trapezoidal rule, at sample points x (spaced
    dx apart when x is None)."""
    if x is None:
        (y,) = promote_args_inexact("trapezoid", y)
        spacing = dx
    else:
        y, x = promote_dtypes_inexact(y, x)
        spacing = diff(x, axis=-1 if x.ndim == 1 else axis)
    axis = canonicalize_axis(axis, y.ndim, "trapezoid")
    y = shape_ops.moveaxis(y, axis, -1)
    if x is not None and x.ndim != 1:
        spacing = shape_ops.moveaxis(spacing, axis, -1)
    n = y.shape[-1]
    average = (_slice(y, min(1, n), n, y.ndim - 1) + _slice(y, 0, max(n - 1, 0), y.ndim - 1)) / 2
    return reductions.sum(spacing * average, axis=-1)


def _promote(*args) -> list:
    """The arguments in their common dtype, each keeping its own shape."""
    dtype = result_type(*args)
    return [_to_dtype(a, dtype) for a in args]


def diff(a, n: int = 1, axis: int = -1, prepend=None, append=None):
    """The n-th discrete difference along `axis` (inequality for booleans), after adding
    `prepend` and `append` (broadcast to a's shape, or scalars) at the ends."""
    a = to_array(a)
    n = operator.index(n)
    if n < 0:
        raise ValueError(f"diff: the order n must be non-negative, got {n}")
    if n == 0:  # a itself, whatever its rank, as in NumPy
        return a
    if a.ndim == 0:
        raise ValueError("diff: needs an array of rank at least 1, got a scalar")
    axis = canonicalize_axis(axis, a.ndim, "diff")
    parts = []
    for extra in (prepend, a, append):
        if extra is None:
            continue
        extra = to_array(extra)
        if extra.ndim == 0:
            extra = broadcast_to(extra, a.shape[:axis] + (1,) + a.shape[axis + 1 :])
        parts.append(extra)
    if len(parts) > 1:
        a = shape_ops.concatenate(parts, axis=axis)
    for _ in builtins.range(n):
        size = a.shape[axis]
        # An axis already empty stays empty (NumPy's diff of order n >= size is empty).
        later, earlier = _slice(a, min(1, size), size, axis), _slice(a, 0, max(size - 1, 0), axis)
        if a.dtype == dtypes.bool_:
            a = ufuncs.not_equal(later, earlier)
        else:
            a = ufuncs.subtract(later, earlier)
    return a


def ediff1d(ary, to_end=None, to_begin=None):
    """Differences of consecutive elements of the flattened array, with extras at the ends."""
    ary = shape_ops.ravel(to_array(ary))
    if dtypes.is_bool(ary.dtype):
        raise TypeError("ediff1d: booleans have no difference; convert them to integers first")
    parts = [diff(ary)] if ary.size else [ary]
    if to_begin is not None:
        parts.insert(0, shape_ops.ravel(_to_dtype(to_begin, ary.dtype)))
    if to_end is not None:
        parts.append(shape_ops.ravel(_to_dtype(to_end, ary.dtype)))
    return shape_ops.concatenate(parts)


def gradient(f, *varargs, axis: int | Sequence[int] | None = None, edge_order: int | None = None):
    """Second-order central differences inside, one-sided differences of order `edge_order`
    (1 or 2) at the ends. `varargs` give the spacing: one scalar for all axes, or for each
    axis a scalar or the 1-d coordinates of the samples."""
    f = _inexact(f)
    axes = (
        tuple(range(f.ndim))
        if axis is None
        else shape_ops.canonicalize_axes(axis, f.ndim, "gradient")
    )
    edge_order = 1 if edge_order is None else edge_order
    if edge_order not in (1, 2):
        raise ValueError(f"gradient: edge_order must be 1 or 2, got {edge_order}")
    if not varargs:
        spacings = [1.0] * len(axes)
    elif len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        spacings = [varargs[0]] * len(axes)
    elif len(varargs) == len(axes):
        spacings = list(varargs)
    else:
        raise TypeError(
            f"gradient: give no spacing, one scalar, or one per axis ({len(axes)}), got "
            f"{len(varargs)}"
        )
    results = [_gradient_along(f, ax, spacing, edge_order) for ax, spacing in zip(axes, spacings)]
    return results[0] if len(results) == 1 else results


def _gradient_along(f, axis: int, spacing, edge_order: int):
    n = f.shape[axis]
    if n < edge_order + 1:
        raise ValueError(
            f"gradient: axis {axis} of shape {f.shape} needs at least {edge_order + 1} samples "
            f"for edge_order={edge_order}"
        )
    spacing = _to_dtype(spacing, f.dtype)
    steps = diff(spacing) if spacing.ndim == 1 else lax.full((n - 1,), spacing, f.dtype)
    if steps.shape != (n - 1,):
        raise ValueError(
            f"gradient: coordinates of shape {spacing.shape} do not match axis {axis} of size {n}"
        )
    f = shape_ops.moveaxis(f, axis, -1)
    last = f.ndim - 1

    def sample(i: int):
        return _take(f, i % n, last)

    def weighted(weights, points):
        return builtins.sum(w * sample(i) for w, i in zip(weights, points))

    # Inside: the exact derivative of the parabola through three neighbouring samples. With
    # one spacing h that is NumPy's (f[i + 1] - f[i - 1]) / 2h, which leaves f[i] out (its
    # weight 0 would turn an infinite f[i] into NaN).
    h1, h2 = steps[:-1], steps[1:]
    if spacing.ndim == 0:
        inner = (_slice(f, 2, n, last) - _slice(f, 0, n - 2, last)) / (2 * spacing)
    else:
        inner = (
            (-h2 / (h1 * (h1 + h2))) * _slice(f, 0, n - 2, last)
            + ((h2 - h1) / (h1 * h2)) * _slice(f, 1, n - 1, last)
            + (h1 / (h2 * (h1 + h2))) * _slice(f, 2, n, last)
        )
    if edge_order == 1:
        first = (sample(1) - sample(0)) / steps[0]
        final = (sample(-1) - sample(-2)) / steps[-1]
    elif spacing.ndim == 0:
        first = weighted([-1.5 / spacing, 2.0 / spacing, -0.5 / spacing], [0, 1, 2])
        final = weighted([0.5 / spacing, -2.0 / spacing, 1.5 / spacing], [-3, -2, -1])
    else:
        h1, h2 = steps[0], steps[1]
        first = weighted(
            [-(2 * h1 + h2) / (h1 * (h1 + h2)), (h1 + h2) / (h1 * h2), -h1 / (h2 * (h1 + h2))],
            [0, 1, 2],
        )
        h1, h2 = steps[-2], steps[-1]
        final = weighted(
            [h2 / (h1 * (h1 + h2)), -(h1 + h2) / (h1 * h2), (2 * h2 + h1) / (h2 * (h1 + h2))],
            [-3, -2, -1],
        )
    out = shape_ops.concatenate([first[..., None], inner, final[..., None]], axis=-1)
    return shape_ops.moveaxis(out, -1, axis)


def unwrap(p, discont=None, axis: int = -1, period=2 * np.pi):
    """p with jumps between consecutive values larger than max(discont, period / 2) along
    `axis` replaced by their complement modulo `period`. Integers with an integer period stay
    integers, as in NumPy and JAX (half an odd period rounds down)."""
    p = to_array(p)
    dtype = result_type(p, period)
    if not dtypes.is_int(dtype):
        dtype = dtypes.to_inexact(dtype)
    p = convert(p, dtype)
    axis = canonicalize_axis(axis, p.ndim, "unwrap")
    if p.shape[axis] == 0:
        return p
    if dtypes.is_int(dtype):
        half = ufuncs.floor_divide(period, 2)
        # (an odd period's jumps of -half are not jumps of +half beyond it)
        ambiguous = ufuncs.remainder(period, 2) == 0
    else:
        half, ambiguous = period / 2, True
    discont = half if discont is None else ufuncs.maximum(discont, half)
    jumps = diff(p, axis=axis)
    wrapped = ufuncs.remainder(jumps + half, period) - half
    wrapped = misc.where((wrapped == -half) & (jumps > 0) & ambiguous, half, wrapped)
    correction = misc.where(ufuncs.absolute(jumps) < discont, 0, wrapped - jumps)
    correction = reductions.cumsum(correction, axis=axis)
    zero = lax.full(p.shape[:axis] + (1,) + p.shape[axis + 1 :], 0, p.dtype)
    return p + convert(shape_ops.concatenate([zero, correction], axis=axis), p.dtype)


# ---------------------------------------------------------------------------------------------
# Convolution and polynomials


def convolve(a, v, mode: str = "full", *, precision=None, preferred_element_type=None):
    """The discrete linear convolution of two 1-d arrays."""
    return _convolve_1d("convolve", a, v, mode, precision, preferred_element_type, flip=True)


def correlate(a, v, mode: str = "valid", *, precision=None, preferred_element_type=None):
    """The cross-correlation c[k] = sum_n a[n + k] * conj(v[n]) of two 1-d arrays."""
    a, v = _promote(a, v)
    if dtypes.is_complex(v.dtype):
        v = lax.conj(v)
    return _convolve_1d("correlate", a, v, mode, precision, preferred_element_type, flip=False)


def _convolve_1d(name, a, v, mode, precision, preferred_element_type, flip: bool):
    a, v = _promote(a, v)
    if a.ndim != 1 or v.ndim != 1:
        raise ValueError(f"{name}: needs 1-d arrays, got shapes {a.shape} and {v.shape}")
    if a.size == 0 or v.size == 0:
        raise ValueError(f"{name}: needs non-empty arrays, got shapes {a.shape} and {v.shape}")
    if mode not in ("full", "same", "valid"):
        raise ValueError(f"{name}: mode must be 'full', 'same' or 'valid', got {mode!r}")
    # Booleans convolve as NumPy's do, with `or` for the sum and `and` for the product: the
    # integer convolution is nonzero exactly where that is true.
    logical = a.dtype == dtypes.bool_ and preferred_element_type is None
    if a.dtype == dtypes.bool_:
        a, v = convert(a, dtypes.int32), convert(v, dtypes.int32)
    reverse_output = False
    if a.shape[0] < v.shape[0]:
        # Both are symmetric in their operands up to a reversal of the correlation.
        a, v = v, a
        reverse_output = not flip
    if flip:
        v = lax.rev(v, (0,))
    m = v.shape[0]
    padding = {"full": (m - 1, m - 1), "same": (m // 2, m - 1 - m // 2), "valid": (0, 0)}[mode]
    out = lax.conv_general_dilated(
        a[None, None, :],
        v[None, None, :],
        (1,),
        [padding],
        precision=precision,
        preferred_element_type=preferred_element_type,
    )[0, 0]
    if logical:
        out = lax.ne(out, lax.full_like(out, 0))
    return lax.rev(out, (0,)) if reverse_output else out


def _poly(name: str, p):
    p = to_array(p)
    if p.ndim != 1:
        raise ValueError(f"{name}: polynomial coefficients must be 1-d, got shape {p.shape}")
    return p


def polyval(p, x, *, unroll: int = 16):
    """The polynomial with coefficients p (highest power first) at x, by Horner's rule."""
    p = _poly("polyval", p)
    p, x = _promote(p, x)
    result = lax.full(x.shape, 0, x.dtype)
    for coefficient in p if p.shape[0] <= unroll else ():
        result = result * x + coefficient
    if p.shape[0] > unroll:
        result, _ = lax.scan(lambda y, c: (y * x + c, None), result, p)
    return result


def poly(seq_of_zeros):
    """The coefficients (highest power first, leading 1) of the polynomial with these roots, or
    of a square matrix's characteristic polynomial (complex, from its eigenvalues)."""
    roots = _inexact(seq_of_zeros)
    if roots.ndim == 2 and roots.shape[0] == roots.shape[1] != 0:
        roots = linalg.eigvals(roots)
    elif roots.ndim != 1:
        raise ValueError(
            f"poly: needs a 1-d array of roots or a non-empty square matrix, got shape "
            f"{roots.shape}"
        )
    if roots.shape[0] == 0:
        # As NumPy's and JAX's: the constant polynomial 1, as a scalar.
        return lax.full((), 1, roots.dtype)
    coefficients = lax.full((1,), 1, roots.dtype)
    for i in builtins.range(roots.shape[0]):
        factor = shape_ops.concatenate([lax.full((1,), 1, roots.dtype), -roots[i : i + 1]])
        coefficients = convolve(coefficients, factor)
    return coefficients


def roots(p, *, strip_zeros: bool = True) -> Array:
    """The roots of the polynomial with coefficients p (highest power first): the eigenvalues
    of its companion matrix, complex. With `strip_zeros` (p must then be concrete) leading
    zeros are dropped first; without, a leading zero makes every root NaN, as in JAX.
    Differentiable through the eigenvalues."""
    p = promote_args_inexact("roots", p)[0]
    if p.ndim != 1:
        raise ValueError(f"roots: p must be one-dimensional, got shape {p.shape}")
    if strip_zeros:
        hint = "Pass strip_zeros=False to keep leading zeros (their roots are then NaN)."
        leading = np.flatnonzero(static_value(p, "roots", "p with strip_zeros=True", hint))
        p = p[int(leading[0]) if leading.size else p.shape[0] :]
    degree = p.shape[0] - 1
    complex_dtype = dtypes.complex_dtype(p.dtype)
    if degree < 1:
        return lax.full((0,), 0, complex_dtype)
    first_row = -p[1:] / p[0]
    below = misc.eye(degree - 1, degree, dtype=p.dtype)
    companion = shape_ops.concatenate([first_row[None], below], axis=0)
    return convert(linalg.eigvals(companion), complex_dtype)


def polyadd(a1, a2):
    a1, a2 = _promote(_poly("polyadd", a1), _poly("polyadd", a2))
    n = builtins.max(a1.shape[0], a2.shape[0])
    return _pad_front(a1, n) + _pad_front(a2, n)


def polysub(a1, a2):
    a1, a2 = _promote(_poly("polysub", a1), _poly("polysub", a2))
    n = builtins.max(a1.shape[0], a2.shape[0])
    return _pad_front(a1, n) - _pad_front(a2, n)


def _pad_front(p, n: int):
    return lax.pad(p, lax.full((), 0, p.dtype), [(n - p.shape[0], 0, 0)])


def _trim_leading_zeros(name: str, p):
    value = static_value(p, name, "trim_leading_zeros=True", "Use trim_leading_zeros=False.")
    nonzero = np.flatnonzero(value)
    return p[nonzero[0] :] if nonzero.size else p[-1:]


def polymul(a1, a2, *, trim_leading_zeros: bool = False):
    """The product of two polynomials (the convolution of their coefficients)."""
    a1, a2 = _poly("polymul", a1), _poly("polymul", a2)
    if trim_leading_zeros:
        a1, a2 = _trim_leading_zeros("polymul", a1), _trim_leading_zeros("polymul", a2)
    if a1.size == 0 or a2.size == 0:
        return lax.full((0,), 0, result_type(a1, a2))
    return convolve(a1, a2)


def polydiv(u, v, *, trim_leading_zeros: bool = False):
    """Quotient and remainder of polynomial division; the remainder keeps u's length, its
    leading entries zero."""
    u, v = promote_dtypes_inexact(_poly("polydiv", u), _poly("polydiv", v))
    if trim_leading_zeros:
        v = _trim_leading_zeros("polydiv", v)
    m, n = u.shape[0], v.shape[0]
    quotient = []
    remainder = u
    for k in builtins.range(builtins.max(m - n + 1, 0)):
        coefficient = remainder[k] / v[0]
        quotient.append(coefficient)
        remainder = remainder.at[k : k + n].add(-coefficient * v)
    q = shape_ops.stack(quotient) if quotient else lax.full((1,), 0, u.dtype)
    if quotient:
        remainder = remainder.at[: m - n + 1].set(0)
    return q, remainder


def polyder(p, m: int = 1):
    """The m-th derivative of a polynomial."""
    p = _poly("polyder", p)
    m = operator.index(m)
    if m < 0:
        raise ValueError(f"polyder: the order m must be non-negative, got {m}")
    for _ in builtins.range(m):
        n = p.shape[0] - 1
        if n <= 0:
            return lax.full((0,), 0, p.dtype)
        p = p[:-1] * np.arange(n, 0, -1).astype(p.dtype)
    return p


def polyint(p, m: int = 1, k=None):
    """The m-th antiderivative of a polynomial, with integration constants k (zeros by
    default; one scalar for all, or m of them, the first for the first integration)."""
    p = _inexact(_poly("polyint", p))
    m = operator.index(m)
    if m < 0:
        raise ValueError(f"polyint: the order m must be non-negative, got {m}")
    constants = lax.full((m,), 0, p.dtype) if k is None else _to_dtype(k, p.dtype)
    if constants.ndim == 0:
        constants = broadcast_to(constants, (m,))
    if constants.shape != (m,):
        raise ValueError(f"polyint: k must be a scalar or have {m} entries, got {constants.shape}")
    for i in builtins.range(m):
        n = p.shape[0]
        powers = np.arange(n, 0, -1).astype(p.dtype)
        p = shape_ops.concatenate([p / powers, constants[i : i + 1]])
    return p


def vander(x, N: int | None = None, increasing: bool = False):
    """The Vandermonde matrix: columns x**(N-1), ..., x**0 (the reverse if increasing)."""
    x = to_array(x)
    if x.ndim != 1:
        raise ValueError(f"vander: x must be 1-d, got shape {x.shape}")
    N = x.shape[0] if N is None else operator.index(N)
    if N < 0:
        raise ValueError(f"vander: N must be non-negative, got {N}")
    powers = np.arange(N) if increasing else np.arange(N - 1, -1, -1)
    if x.dtype == dtypes.bool_:
        x = convert(x, dtypes.int32)
    return ufuncs.power(x[:, None], powers.astype(dtypes.default_int)[None, :])


def polyfit(x, y, deg: int, rcond=None, full: bool = False, w=None, cov: bool = False):
    """Least-squares polynomial coefficients of degree `deg`, highest power first, for the
    points (x, y) (y may hold several data sets as columns), optionally weighted by w.

    `full` also returns (residuals, rank, singular values, rcond); `cov` returns the
    coefficients' covariance, scaled by the residuals unless cov='unscaled'.
    """
    x, y = promote_dtypes_inexact(x, y)
    deg = operator.index(deg)
    if deg < 0:
        raise ValueError(f"polyfit: deg must be non-negative, got {deg}")
    if x.ndim != 1 or y.ndim not in (1, 2) or y.shape[0] != x.shape[0]:
        raise ValueError(
            f"polyfit: x must be 1-d and y have as many rows, got {x.shape}, {y.shape}"
        )
    order = deg + 1
    lhs = vander(x, order)
    rhs = y
    if w is not None:
        w = _to_dtype(w, x.dtype)
        lhs = lhs * w[:, None]
        rhs = rhs * (w if y.ndim == 1 else w[:, None])
    if rcond is None:
        rcond = x.shape[0] * dtypes.finfo(x.dtype).eps
    # Columns scaled to unit norm improve the conditioning of the least-squares problem.
    scale = ufuncs.sqrt(reductions.sum(lhs * lhs, axis=0))
    scale = misc.where(scale == 0, 1, scale)
    c, residuals, rank, s = linalg.lstsq(lhs / scale, rhs, rcond)
    c = (c.T / scale).T
    if full:
        return c, residuals, rank, s, rcond
    if cov:
        inverse = linalg.inv(linalg_ops.matmul(lhs.T, lhs))
        if cov == "unscaled":
            factor = 1
        else:
            if x.shape[0] <= order:
                raise ValueError("polyfit: cov needs more points than coefficients")
            factor = residuals / (x.shape[0] - order)
        if y.ndim == 1:
            return c, inverse * factor
        return c, inverse[:, :, None] * factor
    return c


# ---------------------------------------------------------------------------------------------
# Set operations


# Up to this many pairs one vectorized comparison beats sorting (and stays small in memory).
_COMPARE_ALL_PAIRS = 1 << 16


def isin(
    element, test_elements, assume_unique: bool = False, invert: bool = False, *, method="auto"
):
    """Whether each element occurs in test_elements (flattened); `method` 'compare_all'
    compares every pair (time and memory len(element) * len(test_elements)), 'sort' and
    'binary_search' search a sorted copy (time O(n log n), memory O(n)); 'auto' compares all
    pairs only while there are at most _COMPARE_ALL_PAIRS of them."""
    element, test_elements = _promote(element, test_elements)
    test_elements = shape_ops.ravel(test_elements)
    if method == "auto":
        few_pairs = element.size * test_elements.size <= _COMPARE_ALL_PAIRS
        method = "compare_all" if few_pairs else "sort"
    if method == "compare_all":
        equal = ufuncs.equal(element[..., None], test_elements)
        found = reductions.any(equal, axis=-1)
    elif method in ("sort", "binary_search"):
        found = _found_in_sorted(sorting_ops.sort(test_elements), element)
    else:
        raise ValueError(f"isin: unknown method {method!r}")
    return ufuncs.logical_not(found) if invert else found


def _found_in_sorted(sorted_values, queries):
    if sorted_values.shape[0] == 0:
        return lax.full(queries.shape, False, dtypes.bool_)
    position = sorting_ops.searchsorted(sorted_values, queries)
    position = misc.clip(position, 0, sorted_values.shape[0] - 1)
    return sorted_values[position] == queries


def _unique_padded(x):
    """The sorted distinct values of x (flattened), padded to x's size, and which are real."""
    x = shape_ops.ravel(to_array(x))
    if x.size == 0:
        return x, lax.full((0,), False, dtypes.bool_)
    values, counts = sorting_ops.unique(x, return_counts=True, size=x.size)
    return values, counts > 0


def _select(name: str, values, keep, size, fill_value, default_fill):
    """values[keep] in their order, as `size` entries padded with fill_value."""
    count = reductions.sum(keep, dtype=dtypes.int32)
    if size is None:
        size = _static_size(name, count, "number of results", "size")
    n = values.shape[0]
    if n == 0:
        fill = 0 if fill_value is None else fill_value
        return lax.full((size,), fill, values.dtype)
    # A stable sort on "not kept" moves the kept values to the front, in order.
    _, moved = lax.sort((convert(ufuncs.logical_not(keep), dtypes.int32), values), num_keys=1)
    if size > n:
        moved = lax.pad(moved, lax.full((), 0, moved.dtype), [(0, size - n, 0)])
    moved = moved[:size]
    if fill_value is None:
        fill_value = default_fill(moved, count)
    position = lax.iota(dtypes.int32, size)
    return misc.where(position < count, moved, _to_dtype(fill_value, moved.dtype))


def _smallest(moved, count):
    """The smallest kept value (the first), or 0 where none is kept."""
    return misc.where(count > 0, moved[0], convert(0, moved.dtype)) if moved.shape[0] else 0


def setdiff1d(ar1, ar2, assume_unique: bool = False, *, size=None, fill_value=None):
    """The sorted distinct values of ar1 that are not in ar2 (padded with 0 given `size`), in
    ar1's dtype."""
    values, real = _unique_padded(ar1)
    keep = real & isin(values, ar2, invert=True, method="sort")
    return _select("setdiff1d", values, keep, size, fill_value, lambda moved, count: 0)


def union1d(ar1, ar2, *, size=None, fill_value=None):
    """The sorted distinct values in either array (padded with the smallest given `size`)."""
    ar1, ar2 = _promote(ar1, ar2)
    values, real = _unique_padded(shape_ops.concatenate([ar1.ravel(), ar2.ravel()]))
    return _select("union1d", values, real, size, fill_value, _smallest)


def setxor1d(ar1, ar2, assume_unique: bool = False, *, size=None, fill_value=None):
    """The sorted distinct values in exactly one of the arrays. As in NumPy and JAX, a NaN is
    equal to nothing, itself included: each array holding NaNs adds one NaN to the result."""
    ar1, ar2 = _promote(ar1, ar2)
    values, real = _unique_padded(shape_ops.concatenate([ar1.ravel(), ar2.ravel()]))
    keep = real & (isin(values, ar1, method="sort") != isin(values, ar2, method="sort"))
    if dtypes.is_inexact(values.dtype) and values.size:
        nan1, nan2 = (reductions.any(ufuncs.isnan(a)) for a in (ar1, ar2))
        keep = keep | (real & ufuncs.isnan(values))
        # With NaNs in both, the concatenation has a NaN to spare, so the distinct values
        # leave a padding entry, the first after the real ones, for the second NaN.
        second = (lax.iota(dtypes.int32, values.size) == reductions.sum(real)) & nan1 & nan2
        values = misc.where(second, np.nan, values)
        keep = keep | second
    return _select("setxor1d", values, keep, size, fill_value, _smallest)


def intersect1d(
    ar1,
    ar2,
    assume_unique: bool = False,
    return_indices: bool = False,
    *,
    size=None,
    fill_value=None,
):
    """The sorted distinct values in both arrays; with `return_indices` also where each first
    occurs in ar1 and in ar2 (flattened), padded with the array's length given `size`."""
    ar1, ar2 = _promote(ar1, ar2)
    ar1, ar2 = ar1.ravel(), ar2.ravel()
    if not return_indices:
        values, real = _unique_padded(ar1)
        keep = real & isin(values, ar2, method="sort")
        return _select("intersect1d", values, keep, size, fill_value, _smallest)
    values1, index1, counts1 = sorting_ops.unique(
        ar1, return_index=True, return_counts=True, size=ar1.size
    )
    values2, index2, counts2 = sorting_ops.unique(
        ar2, return_index=True, return_counts=True, size=ar2.size
    )
    # unique pads with copies of the smallest value; the largest keeps the padding sorted.
    padded2 = misc.where(counts2 > 0, values2, _largest(values2.dtype))
    if ar2.size == 0 or ar1.size == 0:
        keep = lax.full(values1.shape, False, dtypes.bool_)
        position = lax.full(values1.shape, 0, index2.dtype)
    else:
        position = misc.clip(sorting_ops.searchsorted(padded2, values1), 0, ar2.size - 1)
        keep = (counts1 > 0) & (padded2[position] == values1) & (counts2[position] > 0)
    values = _select("intersect1d", values1, keep, size, fill_value, _smallest)
    size = values.shape[0]
    first1 = _select("intersect1d", index1, keep, size, ar1.size, None)
    first2 = _select(
        "intersect1d", index2[position] if ar2.size else position, keep, size, ar2.size, None
    )
    return values, first1, first2


def _largest(dtype):
    if dtypes.is_float(dtype):
        return np.array(np.nan, dtype)
    if dtype == dtypes.bool_:
        return np.True_
    return np.array(np.iinfo(dtype).max, dtype)


class _UniqueAllResult(NamedTuple):
    values: Array
    indices: Array
    inverse_indices: Array
    counts: Array


class _UniqueCountsResult(NamedTuple):
    values: Array
    counts: Array


class _UniqueInverseResult(NamedTuple):
    values: Array
    inverse_indices: Array


def unique_values(x, /, *, size=None, fill_value=None):
    return sorting_ops.unique(x, equal_nan=False, size=size, fill_value=fill_value)


def unique_counts(x, /, *, size=None, fill_value=None) -> _UniqueCountsResult:
    values, counts = sorting_ops.unique(
        x, return_counts=True, equal_nan=False, size=size, fill_value=fill_value
    )
    return _UniqueCountsResult(values, counts)


def unique_inverse(x, /, *, size=None, fill_value=None) -> _UniqueInverseResult:
    """The distinct values and, shaped like x, the index of each element's value."""
    x = to_array(x)
    values, inverse = sorting_ops.unique(
        x, return_inverse=True, equal_nan=False, size=size, fill_value=fill_value
    )
    return _UniqueInverseResult(values, lax.reshape(inverse, x.shape))


def unique_all(x, /, *, size=None, fill_value=None) -> _UniqueAllResult:
    x = to_array(x)
    values, indices, inverse, counts = sorting_ops.unique(
        x,
        return_index=True,
        return_inverse=True,
        return_counts=True,
        equal_nan=False,
        size=size,
        fill_value=fill_value,
    )
    return _UniqueAllResult(values, indices, lax.reshape(inverse, x.shape), counts)


# ---------------------------------------------------------------------------------------------
# Floating-point decomposition and integer arithmetic


def _float_bits(x):
    """x's bits as unsigned integers of its width, and the layout of its dtype."""
    info = dtypes.finfo(x.dtype)
    unsigned = np.dtype(f"uint{info.bits}")
    return lax.bitcast_convert_type(x, unsigned), info, unsigned


def frexp(x, /):
    """Mantissas in [0.5, 1) (signed) and int32 exponents with x = mantissa * 2**exponent;
    (x, 0) for zeros, infinities and NaNs. Subnormal numbers are handled exactly."""
    (x,) = promote_args_inexact("frexp", x)
    ufuncs.check_real("frexp", x)  # the bits of a complex number are not one float's
    info = dtypes.finfo(x.dtype)
    # Scaling subnormals up into the normal range keeps the bit manipulation simple.
    subnormal = ufuncs.absolute(x) < info.tiny
    boost = info.nmant + 1
    scaled = misc.where(subnormal, x * np.array(2.0**boost, x.dtype), x)
    bits, info, unsigned = _float_bits(scaled)
    exponent_mask = ((1 << info.nexp) - 1) << info.nmant
    biased = lax.shift_right_logical(
        lax.bitwise_and(bits, unsigned.type(exponent_mask)), unsigned.type(info.nmant)
    )
    bias = (1 << (info.nexp - 1)) - 1
    exponent = lax.convert_element_type(biased, dtypes.int32) - (bias - 1)
    exponent = exponent - misc.where(subnormal, boost, 0)
    # The mantissa keeps the sign and fraction bits, with the exponent field of 0.5.
    half = unsigned.type((bias - 1) << info.nmant)
    mantissa_bits = lax.bitwise_or(
        lax.bitwise_and(bits, unsigned.type(~exponent_mask & (2**info.bits - 1))), half
    )
    mantissa = lax.bitcast_convert_type(mantissa_bits, x.dtype)
    special = (x == 0) | ufuncs.isinf(x) | ufuncs.isnan(x)
    # The bits carry no derivative; the mantissa is x * 2**-exponent, of slope 2**-exponent,
    # added as a term that is 0 in value (through `scaled`, as that slope overflows for
    # subnormal x and 0 * inf would not be 0).
    slope = lax.stop_gradient(misc.where(special, 1, mantissa / scaled))
    mantissa = mantissa + (scaled - lax.stop_gradient(scaled)) * slope
    return misc.where(special, x, mantissa), misc.where(special, 0, exponent)


def ldexp(x1, x2, /):
    """x1 * 2**x2 for integer x2, without overflowing in 2**x2 where the product fits."""
    x2 = to_array(x2)
    if dtypes.is_bool(x2.dtype):  # (NumPy's and JAX's ldexp take booleans as 0 and 1)
        x2 = convert(x2, dtypes.int8)
    if not dtypes.is_int(x2.dtype):
        raise TypeError(f"ldexp: the exponent x2 must be integers, got {x2.dtype.name}")
    (x1,) = promote_args_inexact("ldexp", x1)
    x1, x2 = broadcast_to(x1, broadcast_shapes(x1.shape, x2.shape)), x2
    info = dtypes.finfo(x1.dtype)
    # Any exponent beyond this moves every finite value to 0 or inf; the clipped exponent is
    # applied in three powers of two that are each normal numbers, so each product is exact
    # except the last, which rounds once.
    limit = (info.maxexp - info.minexp) + info.nmant + 2
    bounds = dtypes.iinfo(x2.dtype)
    low, high = builtins.max(-limit, bounds.min), builtins.min(limit, bounds.max)
    n = convert(misc.clip(x2, x2.dtype.type(low), x2.dtype.type(high)), dtypes.int32)
    n = broadcast_to(n, x1.shape)
    first = ufuncs.floor_divide(n, 3)
    second = ufuncs.floor_divide(n - first, 2)
    third = n - first - second
    return (
        x1
        * _power_of_two(first, x1.dtype)
        * _power_of_two(second, x1.dtype)
        * _power_of_two(third, x1.dtype)
    )


def _power_of_two(n, dtype):
    """2.0**n exactly, for int32 n in the normal exponent range of dtype."""
    info = dtypes.finfo(dtype)
    unsigned = np.dtype(f"uint{info.bits}")
    bias = (1 << (info.nexp - 1)) - 1
    biased = convert(n + bias, unsigned)
    return lax.bitcast_convert_type(lax.shift_left(biased, unsigned.type(info.nmant)), dtype)


def modf(x, /, out=None):
    """The fractional and integral parts of x, both with x's sign; (±0, ±inf) for infinities."""
    check_no_out("modf", out)
    (x,) = promote_args_inexact("modf", x)
    integral = ufuncs.trunc(x)
    # x - integral is +0 at negative integers, where NumPy's fraction is -0; there negative x
    # take -(integral - x), the same slope 1 (copysign's slope at a +0 of the other sign is -1).
    fraction = misc.where(ufuncs.signbit(x), -(integral - x), x - integral)
    zeros = ufuncs.copysign(lax.full(x.shape, 0, x.dtype), x)
    return misc.where(ufuncs.isinf(x), zeros, fraction), integral


def spacing(x, /):
    """The distance from x to the next float of larger magnitude, with x's sign (positive for
    zeros)."""
    (x,) = promote_args_inexact("spacing", x)
    # Zeros of either sign step up, as in NumPy.
    toward = misc.where(x == 0, np.inf, ufuncs.copysign(lax.full(x.shape, np.inf, x.dtype), x))
    return ufuncs.nextafter(x, toward) - x


def gcd(x1, x2):
    """The greatest common divisor of integers, non-negative (0 for gcd(0, 0))."""
    x1, x2 = _integers("gcd", x1, x2)
    a, b = _unsigned_magnitudes(x1, x2)
    return convert(_unsigned_gcd(a, b), x1.dtype)


def _unsigned_magnitudes(x1, x2):
    """|x1| and |x2| as unsigned integers of their width, as NumPy's gcd and lcm take them:
    |int8 min| is 128 there, where a signed abs leaves -128, whose remainders would turn a
    gcd negative (gcd(7, -128) = -1). A result of 128 wraps back to -128, as in NumPy."""
    unsigned = _UNSIGNED_OF_WIDTH[np.dtype(x1.dtype).itemsize]
    return convert(ufuncs.absolute(x1), unsigned), convert(ufuncs.absolute(x2), unsigned)


def _unsigned_gcd(a, b):
    def not_done(carry):
        return reductions.any(carry[1] != 0)

    def euclid_step(carry):
        a, b = carry
        nonzero = b != 0
        safe_b = misc.where(nonzero, b, lax.full_like(b, 1))
        return misc.where(nonzero, b, a), misc.where(nonzero, lax.rem(a, safe_b), b)

    return lax.while_loop(not_done, euclid_step, (a, b))[0]


_UNSIGNED_OF_WIDTH = {np.dtype(d).itemsize: d for d in dtypes.unsigned_dtypes}


def lcm(x1, x2):
    """The least common multiple of integers, non-negative (0 if either is 0)."""
    x1, x2 = _integers("lcm", x1, x2)
    a, b = _unsigned_magnitudes(x1, x2)
    divisor = _unsigned_gcd(a, b)
    zero = divisor == 0
    multiple = lax.mul(lax.div(a, misc.where(zero, lax.full_like(divisor, 1), divisor)), b)
    return convert(misc.where(zero, lax.full_like(divisor, 0), multiple), x1.dtype)


def _integers(name: str, x1, x2):
    """The operands promoted and broadcast to one shape (Euclid's loop carries them)."""
    x1, x2 = promote_args(name, x1, x2)
    if not dtypes.is_int(x1.dtype):
        raise TypeError(f"{name}: needs integer arguments, got {x1.dtype.name}")
    return shape_ops.broadcast_arrays(x1, x2)


# ---------------------------------------------------------------------------------------------
# Functional forms of NumPy's in-place functions


def _require_not_inplace(name: str, inplace: bool) -> None:
    if inplace:
        raise ValueError(
            f"{name}: funcgrad arrays are immutable, so {name} cannot modify its argument; "
            f"pass inplace=False to get the modified copy"
        )


def fill_diagonal(a, val, wrap: bool = False, *, inplace: bool = True):
    """A copy of a with its main diagonal set to val (repeated as needed). A tall matrix's
    diagonal restarts after a blank row every n_columns + 1 rows if `wrap`."""
    _require_not_inplace("fill_diagonal", inplace)
    a = to_array(a)
    if a.ndim < 2:
        raise ValueError(f"fill_diagonal: needs at least two dimensions, got shape {a.shape}")
    if a.ndim == 2:
        step = a.shape[1] + 1
        end = a.size if wrap else a.shape[1] * a.shape[1]
    else:
        if len(set(a.shape)) != 1:
            raise ValueError(f"fill_diagonal: all dimensions must be equal, got shape {a.shape}")
        step = 1 + int(np.cumprod(a.shape[:-1]).sum())
        end = a.size
    positions = np.arange(0, builtins.min(end, a.size), step)
    values = resize(_to_dtype(val, a.dtype), (positions.size,))
    flat = shape_ops.ravel(a).at[positions].set(values, unique_indices=True)
    return lax.reshape(flat, a.shape)


def put(a, ind, v, mode: str | None = None, *, inplace: bool = True):
    """A copy of a whose flattened entries at `ind` are v (repeated as needed). Indices out of
    bounds are clipped unless mode='wrap'; by default (as NumPy's and JAX's) negative ones
    count from the end first, where mode='clip' clips them to 0. No indices or no values put
    nothing."""
    _require_not_inplace("put", inplace)
    if mode not in (None, "clip", "wrap"):
        raise ValueError(f"put: mode must be 'clip' or 'wrap', got {mode!r}")
    a = to_array(a)
    ind = to_array(indexing.wide_index(indexing.index_array(ind, "put")))
    values = shape_ops.ravel(_to_dtype(v, a.dtype))
    if ind.size == 0 or values.size == 0 or a.size == 0:
        return a
    ind = shape_ops.ravel(ind)
    if mode == "wrap":
        ind = ufuncs.remainder(ind, a.size)
    elif mode is None and not dtypes.is_unsigned(ind.dtype):
        ind = misc.where(ind < 0, ind + a.size, ind)
    ind = misc.clip(ind, 0, a.size - 1)
    return lax.reshape(shape_ops.ravel(a).at[ind].set(resize(values, ind.shape)), a.shape)


def place(arr, mask, vals, *, inplace: bool = True):
    """A copy of arr whose entries where mask holds take vals in order, repeated as needed."""
    _require_not_inplace("place", inplace)
    arr = to_array(arr)
    mask = broadcast_to(_nonzero_mask(to_array(mask)), arr.shape).ravel()
    vals = shape_ops.ravel(convert(vals, arr.dtype, arr.weak_type))
    if vals.size == 0:
        raise ValueError("place: vals must not be empty")
    # The k-th selected entry takes vals[k % len(vals)].
    order = ufuncs.remainder(reductions.cumsum(mask, dtype=dtypes.int32) - 1, vals.size)
    chosen = indexing.take(vals, order, mode="clip")
    return lax.reshape(misc.where(mask, chosen, arr.ravel()), arr.shape)


def put_along_axis(arr, indices, values, axis: int | None, inplace: bool = True, *, mode=None):
    """A copy of arr with values written at `indices` along `axis` (take_along_axis's inverse)."""
    _require_not_inplace("put_along_axis", inplace)
    arr, indices = to_array(arr), to_array(indices)
    if axis is None:
        return lax.reshape(
            put_along_axis(arr.ravel(), indices.ravel(), values, 0, False, mode=mode), arr.shape
        )
    axis = canonicalize_axis(axis, arr.ndim, "put_along_axis")
    if indices.ndim != arr.ndim:
        raise ValueError(
            f"put_along_axis: indices of shape {indices.shape} and arr of shape {arr.shape} "
            "must have the same number of dimensions"
        )
    index = tuple(
        indices
        if d == axis
        else np.arange(size).reshape([size if i == d else 1 for i in builtins.range(arr.ndim)])
        for d, size in enumerate(arr.shape)
    )
    return arr.at[index].set(values, mode=mode)


# ---------------------------------------------------------------------------------------------
# Building, reshaping and selecting


def append(arr, values, axis: int | None = None):
    """arr with values appended along axis (both flattened when axis is None)."""
    if axis is None:
        return shape_ops.concatenate([shape_ops.ravel(arr), shape_ops.ravel(values)])
    return shape_ops.concatenate([arr, values], axis=axis)


def concat(arrays: Sequence, /, *, axis: int | None = 0):
    return shape_ops.concatenate(arrays, axis=axis)


def permute_dims(a, /, axes: tuple[int, ...]):
    return shape_ops.transpose(a, axes)


def unstack(x, /, *, axis: int = 0) -> tuple:
    """The slices of x along axis, as a tuple."""
    x = to_array(x)
    if x.ndim == 0:
        raise ValueError("unstack: needs an array of rank at least 1, got a scalar")
    axis = canonicalize_axis(axis, x.ndim, "unstack")
    return tuple(_take(x, i, axis) for i in builtins.range(x.shape[axis]))


def rollaxis(a, axis: int, start: int = 0):
    """NumPy's older moveaxis: `axis` moved to just before position `start`."""
    a = to_array(a)
    axis = canonicalize_axis(axis, a.ndim, "rollaxis")
    if not -a.ndim <= start <= a.ndim:
        raise ValueError(f"rollaxis: start {start} is out of range for rank {a.ndim}")
    if start < 0:  # counted from the end of the axes, as NumPy counts it (not of ndim + 1)
        start += a.ndim
    if axis < start:
        start -= 1
    return shape_ops.moveaxis(a, axis, start)


def resize(a, new_shape):
    """An array of new_shape filled with a's flattened entries, repeated as needed."""
    a = shape_ops.ravel(to_array(a))
    shape = (operator.index(new_shape),) if np.ndim(new_shape) == 0 else tuple(new_shape)
    size = math.prod(shape)
    if a.size == 0:
        return lax.full(shape, 0, a.dtype)
    repeats = -(-size // a.size)
    return lax.reshape(shape_ops.tile(a, repeats)[:size], shape)


def block(arrays):
    """An array assembled from nested lists of blocks: the innermost lists are joined along
    the last axis, the next ones along the second to last, and so on."""
    depth = _block_depth(arrays)
    leaves = []

    def collect(item):
        if isinstance(item, list):
            for entry in item:
                collect(entry)
        else:
            leaves.append(to_array(item))

    collect(arrays)
    ndim = builtins.max([depth] + [leaf.ndim for leaf in leaves])

    def assemble(item, level: int):
        if not isinstance(item, list):
            item = to_array(item)
            return lax.reshape(item, (1,) * (ndim - item.ndim) + item.shape)
        parts = [assemble(entry, level + 1) for entry in item]
        return shape_ops.concatenate(parts, axis=level - depth)

    return assemble(arrays, 0)


def _block_depth(item) -> int:
    if isinstance(item, tuple):
        raise TypeError("block: nested blocks must be lists, not tuples")
    if not isinstance(item, list):
        return 0
    if not item:
        raise ValueError("block: lists of blocks must not be empty")
    depths = {_block_depth(entry) for entry in item}
    if len(depths) != 1:
        raise ValueError("block: list depths are mismatched")
    return depths.pop() + 1


def insert(arr, obj, values, axis: int | None = None):
    """arr with values inserted before the static index or indices obj along axis."""
    arr = to_array(arr)
    if axis is None:
        arr, axis = shape_ops.ravel(arr), 0
    axis = canonicalize_axis(axis, arr.ndim, "insert")
    n = arr.shape[axis]
    values = _to_dtype(values, arr.dtype)
    if isinstance(obj, slice):
        positions = np.arange(n)[obj]
    else:
        positions = static_value(obj, "insert", "the insertion index", "Pass a static obj.")
        if positions.dtype == bool or not np.issubdtype(positions.dtype, np.integer):
            raise TypeError(f"insert: obj must be integers or a slice, got dtype {positions.dtype}")
    if positions.ndim == 0:
        position = int(positions)
        if not -n <= position <= n:
            raise IndexError(f"insert: index {position} is out of bounds for axis of size {n}")
        if position < 0:
            position += n
        # One block: values gain arr's rank, and their first axis becomes the inserted one.
        values = lax.reshape(values, (1,) * (arr.ndim - values.ndim) + values.shape)
        values = shape_ops.moveaxis(values, 0, axis)
        count = values.shape[axis]
        new_positions = np.arange(position, position + count)
    else:
        positions = np.where(positions < 0, positions + n, positions).ravel()
        if positions.size and (positions.min() < 0 or positions.max() > n):
            raise IndexError(f"insert: indices {positions} are out of bounds for axis of size {n}")
        count = positions.size
        order = np.argsort(positions, kind="stable")
        new_positions = np.empty(count, np.int64)
        new_positions[order] = positions[order] + np.arange(count)
    shape = arr.shape[:axis] + (count,) + arr.shape[axis + 1 :]
    values = broadcast_to(values, shape)
    # The result gathers from [arr, values] along axis: each position names its source.
    source = np.empty(n + count, np.int64)
    is_new = np.zeros(n + count, bool)
    is_new[new_positions] = True
    source[~is_new] = np.arange(n)
    source[new_positions] = n + np.arange(count)
    combined = shape_ops.concatenate([arr, values], axis=axis)
    return indexing.take(combined, source.astype(np.int32), axis=axis, mode="promise_in_bounds")


def delete(arr, obj, axis: int | None = None, *, assume_unique_indices: bool = False):
    """arr without the entries at the static index, indices, slice or mask obj along axis."""
    arr = to_array(arr)
    if axis is None:
        arr, axis = shape_ops.ravel(arr), 0
    axis = canonicalize_axis(axis, arr.ndim, "delete")
    n = arr.shape[axis]
    keep = np.ones(n, bool)
    if isinstance(obj, slice):
        keep[obj] = False
    else:
        removed = static_value(obj, "delete", "the deleted indices", "Pass a static obj.")
        if removed.dtype == bool:
            if removed.shape != (n,):
                raise ValueError(f"delete: a boolean mask needs shape ({n},), got {removed.shape}")
            keep = ~removed
        elif not np.issubdtype(removed.dtype, np.integer):
            raise IndexError(
                f"delete: indices must be integers or a boolean mask, got dtype {removed.dtype}"
            )
        else:
            removed = removed.ravel().astype(np.int64)
            if removed.size and (removed.min() < -n or removed.max() >= n):
                raise IndexError(f"delete: indices {removed} are out of bounds for size {n}")
            keep[removed] = False
    kept = np.flatnonzero(keep).astype(np.int32)
    return indexing.take(arr, kept, axis=axis, mode="promise_in_bounds")


def trim_zeros(filt, trim: str = "fb", axis=None):
    """filt without its leading ('f') and/or trailing ('b') zeros: the smallest box holding
    its nonzero elements, along `axis` (an int or a sequence of them) or all axes. filt must
    be concrete, since the result's shape depends on its values."""
    filt = to_array(filt)
    trim = trim.lower()
    if trim not in ("fb", "bf", "f", "b"):
        raise ValueError(f"trim_zeros: trim must be 'f', 'b' or 'fb', got {trim!r}")
    value = static_value(filt, "trim_zeros", "the number of zeros", "")
    axes = (
        range(filt.ndim)
        if axis is None
        else shape_ops.canonicalize_axes(axis, filt.ndim, "trim_zeros")
    )
    nonzero = np.argwhere(value)
    box = [slice(None)] * filt.ndim
    for a in axes:
        if nonzero.size == 0:
            box[a] = slice(0, 0)
            continue
        start = int(nonzero[:, a].min()) if "f" in trim else 0
        stop = int(nonzero[:, a].max()) + 1 if "b" in trim else filt.shape[a]
        box[a] = slice(start, stop)
    return filt[tuple(box)]


def _nonzero_mask(x):
    """x != 0, booleans as they are (they meet no Python int under strict promotion)."""
    return x if x.dtype == dtypes.bool_ else ufuncs.not_equal(x, 0)


def compress(condition, a, axis: int | None = None, *, size=None, fill_value=0, out=None):
    """The slices of a along axis where the 1-d condition holds (given `size`, the first
    size of them, padded with fill_value)."""
    check_no_out("compress", out)
    condition = _nonzero_mask(shape_ops.ravel(to_array(condition)))
    a = to_array(a)
    if axis is None:
        a, axis = shape_ops.ravel(a), 0
    axis = canonicalize_axis(axis, a.ndim, "compress")
    n = a.shape[axis]
    if condition.shape[0] > n:
        # As NumPy and JAX: entries past the axis may be given, if they select nothing.
        extra = condition[n:]
        if isinstance(extra, core.Tracer) or np.asarray(extra).any():
            raise ValueError(
                f"compress: condition of length {condition.shape[0]} selects past axis {axis} "
                f"of shape {a.shape}"
                + (
                    " (a traced condition must not be longer)"
                    if isinstance(extra, core.Tracer)
                    else ""
                )
            )
    condition = condition[:n]
    a = _slice(a, 0, condition.shape[0], axis)
    if size is None:
        (selected,) = misc.nonzero(condition)
        return indexing.take(a, selected, axis=axis, mode="promise_in_bounds")
    (selected,) = misc.nonzero(condition, size=size, fill_value=condition.shape[0])
    if not isinstance(fill_value, core.Tracer):
        return indexing.take(a, selected, axis=axis, mode="fill", fill_value=fill_value)
    # A traced fill value cannot be the gather's (a static parameter): it is selected after.
    taken = indexing.take(a, selected, axis=axis, mode="fill")
    found = lax.broadcast_in_dim(lax.lt(selected, condition.shape[0]), taken.shape, (axis,))
    return misc.where(found, taken, convert(fill_value, a.dtype, a.weak_type))


def extract(condition, arr, *, size=None, fill_value=0):
    """The entries of the flattened arr where the flattened condition holds."""
    return compress(
        shape_ops.ravel(condition), shape_ops.ravel(arr), size=size, fill_value=fill_value
    )


def choose(a, choices, out=None, mode: str = "raise"):
    """choices[a[i]][i] for every position i (all broadcast together). Out-of-range choices
    raise (so `a` must be concrete); mode 'clip' and 'wrap' bring them into range."""
    check_no_out("choose", out)
    a = indexing.wide_index(to_array(a))
    choices = [to_array(c) for c in choices] if isinstance(choices, Sequence) else list(choices)
    n = len(choices)
    if mode == "wrap":
        a = ufuncs.remainder(a, n)
    elif mode == "clip":
        a = misc.clip(a, 0, n - 1)
    elif mode == "raise":
        value = _checked_value("choose", a)
        if value.size and (value.min() < 0 or value.max() >= n):
            raise ValueError(f"choose: index out of range for {n} choices")
    else:
        raise ValueError(f"choose: mode must be 'raise', 'wrap' or 'clip', got {mode!r}")
    # Each choice is broadcast with a before the stack: a choice of fewer dimensions than a
    # lines up with a's last axes, not with the axis of the stack.
    a, *choices = shape_ops.broadcast_arrays(a, *choices)
    stacked = shape_ops.stack(choices)
    return indexing.take_along_axis(stacked, a[None], axis=0, mode="clip")[0]


def piecewise(x, condlist, funclist: list, *args, **kw):
    """funclist[i] (a function of x, or a value) where condlist[i] holds, later conditions
    taking precedence; an extra last entry of funclist applies where none holds (else 0)."""
    x = to_array(x)
    if isinstance(condlist, (Array, core.Tracer, np.ndarray)) and np.ndim(condlist) == x.ndim:
        condlist = [condlist]
    conditions = [broadcast_to(_nonzero_mask(to_array(c)), x.shape) for c in condlist]
    if len(funclist) == len(conditions) + 1:
        otherwise = ~reductions.any(shape_ops.stack(conditions), axis=0) if conditions else True
        conditions.append(broadcast_to(to_array(otherwise), x.shape))
    elif len(funclist) != len(conditions):
        raise ValueError(
            f"piecewise: funclist needs {len(conditions)} or {len(conditions) + 1} entries, got "
            f"{len(funclist)}"
        )
    result = lax.full(x.shape, 0, x.dtype)
    for condition, function in zip(conditions, funclist):
        value = function(x, *args, **kw) if callable(function) else function
        result = misc.where(
            condition, convert(broadcast_to(to_array(value), x.shape), x.dtype), result
        )
    return result


def _checked_value(name: str, index) -> np.ndarray:
    """The value of an index that mode='raise' checks, which a traced index does not have."""
    if isinstance(index, core.Tracer):
        try:
            return np.asarray(index.to_concrete_value())
        except ConcretizationTypeError:
            raise ConcretizationTypeError(
                index,
                f"{name}: mode='raise' checks the values of the indices, which are not known "
                "while tracing; use mode='wrap' or mode='clip'.",
            ) from None
    return np.asarray(index)


def ravel_multi_index(
    multi_index: Sequence, dims: Sequence[int], mode: str = "raise", order="C", *, dtype=None
):
    """Flat indices (of `dtype`, by default the default int) of the index arrays into an array
    of shape dims. Out-of-range indices raise (so the indices must be concrete); mode 'clip'
    and 'wrap' bring them into range."""
    dims = tuple(operator.index(d) for d in dims)
    dtype = dtypes.default_int if dtype is None else dtypes.canonicalize(dtype)
    if not dtypes.is_int(dtype):
        raise TypeError(f"ravel_multi_index: dtype must be an integer dtype, got {dtype.name}")
    if math.prod(dims) - 1 > np.iinfo(dtype).max:
        raise ValueError(
            f"ravel_multi_index: dtype {dtype.name} cannot hold the flat indices of an array of "
            f"shape {dims}"
        )
    if len(multi_index) != len(dims):
        raise ValueError(f"ravel_multi_index: {len(multi_index)} index arrays for {len(dims)} dims")
    if order not in ("C", "F"):
        raise ValueError(f"ravel_multi_index: order must be 'C' or 'F', got {order!r}")
    indices = [to_array(i) for i in multi_index]
    for index in indices:
        if not dtypes.is_int(index.dtype):
            raise TypeError(f"ravel_multi_index: indices must be integers, got {index.dtype.name}")
    indices = [indexing.wide_index(i) for i in indices]
    if mode == "wrap":
        indices = [ufuncs.remainder(i, d) for i, d in zip(indices, dims)]
    elif mode == "clip":
        indices = [misc.clip(i, 0, d - 1) for i, d in zip(indices, dims)]
    elif mode == "raise":
        for index, d in zip(indices, dims):
            value = _checked_value("ravel_multi_index", index)
            if value.size and (value.min() < 0 or value.max() >= d):
                raise ValueError(f"ravel_multi_index: an index is out of bounds for size {d}")
    else:
        raise ValueError(f"ravel_multi_index: mode must be 'raise', 'wrap' or 'clip', got {mode!r}")
    if order == "F":
        indices, dims = indices[::-1], dims[::-1]
    flat = _to_dtype(0, dtype)
    for index, d in zip(indices, dims):
        flat = flat * d + convert(index, dtype)
    return flat


def mask_indices(n: int, mask_func: Callable, k: int = 0, *, size=None) -> tuple:
    """The indices where mask_func(ones((n, n)), k) is nonzero (as tril or triu give)."""
    mask = mask_func(creation.ones((n, n), dtypes.int32), k)
    return misc.nonzero(mask, size=size)


def fromfunction(function: Callable, shape, *, dtype=float, **kwargs):
    """function applied to the index grids of shape (one array per axis, of dtype)."""
    return function(*misc.indices(shape, dtype=dtype), **kwargs)


def apply_along_axis(func1d: Callable, axis: int, arr, *args, **kwargs):
    """func1d applied to every 1-d slice along axis (by vmap); its output axes take the place
    of axis."""
    from funcgrad.transforms.vmap import vmap

    arr = to_array(arr)
    axis = canonicalize_axis(axis, arr.ndim, "apply_along_axis")

    def on_slice(x):
        return func1d(x, *args, **kwargs)

    mapped = on_slice
    for _ in builtins.range(arr.ndim - 1):
        mapped = vmap(mapped, in_axes=0, out_axes=0)
    result = to_array(mapped(shape_ops.moveaxis(arr, axis, -1)))
    out_ndim = result.ndim - (arr.ndim - 1)
    return shape_ops.moveaxis(
        result,
        tuple(builtins.range(arr.ndim - 1, result.ndim)),
        tuple(builtins.range(axis, axis + out_ndim)),
    )


def apply_over_axes(func: Callable, a, axes: Sequence[int]):
    """func(a, axis) applied for each axis in turn, keeping the rank (a reduced axis stays
    with size 1)."""
    a = to_array(a)
    for axis in [axes] if np.ndim(axes) == 0 else axes:
        result = to_array(func(a, axis))
        if result.ndim == a.ndim - 1:
            result = shape_ops.expand_dims(result, axis)
        elif result.ndim != a.ndim:
            raise ValueError("apply_over_axes: func must keep the rank or remove one axis")
        a = result
    return a


# ---------------------------------------------------------------------------------------------
# Products, aliases, dtype queries, real-valued complex helpers


def matvec(x1, x2, /):
    """Matrix-vector products over the last axes, broadcasting the rest."""
    x1, x2 = to_array(x1), to_array(x2)
    if x1.ndim < 2 or x2.ndim < 1:
        raise ValueError(
            f"matvec: takes a matrix (at least 2-d) and a vector (at least 1-d), got shapes "
            f"{x1.shape} and {x2.shape}"
        )
    return linalg_ops.matmul(x1, x2[..., None])[..., 0]


def vecmat(x1, x2, /):
    """Vector-matrix products over the last axes, broadcasting the rest; the vector is
    conjugated, as in vecdot."""
    x1, x2 = ufuncs.conj(to_array(x1)), to_array(x2)
    if x1.ndim < 1 or x2.ndim < 2:
        raise ValueError(
            f"vecmat: takes a vector (at least 1-d) and a matrix (at least 2-d), got shapes "
            f"{x1.shape} and {x2.shape}"
        )
    return linalg_ops.matmul(x1[..., None, :], x2)[..., 0, :]


def fabs(x, /):
    (x,) = promote_args_inexact("fabs", x)
    ufuncs.check_real("fabs", x)
    return ufuncs.absolute(x)


bitwise_invert = ufuncs.bitwise_not
bitwise_left_shift = ufuncs.left_shift
bitwise_right_shift = ufuncs.right_shift


def astype(x, dtype, /, *, copy: bool = False, device=None):
    return _to_dtype(x, dtypes.canonicalize(dtype))


def array_repr(arr, max_line_width=None, precision=None, suppress_small=None) -> str:
    """NumPy's array_repr of the array's values, named Array (as repr(Array) is)."""
    text = np.array_repr(np.asarray(arr), max_line_width, precision, suppress_small)
    return "Array" + text.removeprefix("array")


def array_str(a, max_line_width=None, precision=None, suppress_small=None) -> str:
    """NumPy's array_str of the array's values."""
    return np.array_str(np.asarray(a), max_line_width, precision, suppress_small)


def angle(z, deg: bool = False):
    """The argument atan2(imag, real); of real numbers pi for negative ones (and -0.0), else 0.
    Integers and booleans give the default float (float64 under `enable_x64`), as `rint`
    does."""
    z = to_array(z)
    if not dtypes.is_inexact(z.dtype):
        z = lax.convert_element_type(z, dtypes.default_float)
    (z,) = promote_args_inexact("angle", z)
    if dtypes.is_complex(z.dtype):
        result = lax.atan2(lax.imag(z), lax.real(z))
    else:
        result = ufuncs.arctan2(lax.full(z.shape, 0, z.dtype), z)
    return ufuncs.degrees(result) if deg else result


def imag(val, /):
    """The imaginary part (zeros for real arrays)."""
    val = to_array(val)
    if dtypes.is_complex(val.dtype):
        return lax.imag(val)
    return lax.full(val.shape, 0, val.dtype)


def isreal(x):
    """Elementwise: is the imaginary part zero."""
    x = to_array(x)
    if dtypes.is_complex(x.dtype):
        return lax.eq(lax.imag(x), lax.full((), 0, dtypes.real_dtype(x.dtype)))
    return lax.full(x.shape, True, dtypes.bool_)


def iscomplex(x):
    """Elementwise: is the imaginary part nonzero."""
    x = to_array(x)
    if dtypes.is_complex(x.dtype):
        return lax.ne(lax.imag(x), lax.full((), 0, dtypes.real_dtype(x.dtype)))
    return lax.full(x.shape, False, dtypes.bool_)


def isrealobj(x) -> bool:
    """True when `x`'s dtype is not complex (whatever its values)."""
    from funcgrad.numpy.misc import iscomplexobj

    return not iscomplexobj(x)


def iterable(y) -> bool:
    return np.iterable(y)


def can_cast(from_, to, casting: str = "safe") -> bool:
    if isinstance(from_, (Array, core.Tracer, np.ndarray, np.generic)):
        from_ = from_.dtype
    from_ = dtypes.canonicalize(from_)
    return np.can_cast(from_, dtypes.canonicalize(to), casting)


_DTYPE_KINDS = {
    "bool": lambda d: d == dtypes.bool_,
    "signed integer": lambda d: dtypes.is_int(d) and not dtypes.is_unsigned(d),
    "unsigned integer": dtypes.is_unsigned,
    "integral": dtypes.is_int,
    "real floating": dtypes.is_float,
    "complex floating": dtypes.is_complex,
    "numeric": lambda d: dtypes.is_int(d) or dtypes.is_inexact(d),
}


def isdtype(dtype, kind) -> bool:
    """The array API's dtype-kind test: kind is a kind name, a dtype, or a tuple of them."""
    dtype = np.dtype(dtype)
    for entry in kind if isinstance(kind, tuple) else (kind,):
        if isinstance(entry, str):
            if entry not in _DTYPE_KINDS:
                raise ValueError(f"isdtype: unknown kind {entry!r}")
            if _DTYPE_KINDS[entry](dtype):
                return True
        elif dtype == np.dtype(entry):
            return True
    return False


# ---------------------------------------------------------------------------------------------
# Windows and bit packing


def _window(M: int, shape: Callable):
    """shape(n, M) at NumPy's points n = 1 - M, 3 - M, ..., M - 1, with NumPy's formulas,
    computed in float64 and rounded once to the default float (so a window is NumPy's,
    rounded); ones for M <= 1."""
    M = operator.index(M)
    if M <= 1:
        return lax.full((builtins.max(M, 0),), 1, dtypes.default_float)
    n = 2 * lax.convert_element_type(lax.iota(dtypes.int32, M), dtypes.float64) + (1 - M)
    return convert(shape(n, M), dtypes.default_float)


def bartlett(M: int):
    return _window(M, lambda n, M: misc.where(n <= 0, 1 + n / (M - 1), 1 - n / (M - 1)))


def hanning(M: int):
    return _window(M, lambda n, M: 0.5 + 0.5 * ufuncs.cos(np.pi * n / (M - 1)))


def hamming(M: int):
    return _window(M, lambda n, M: 0.54 + 0.46 * ufuncs.cos(np.pi * n / (M - 1)))


def blackman(M: int):
    def shape(n, M):
        return (
            0.42
            + 0.5 * ufuncs.cos(np.pi * n / (M - 1))
            + 0.08 * ufuncs.cos(2.0 * np.pi * n / (M - 1))
        )

    return _window(M, shape)


def kaiser(M: int, beta) -> Array:
    """The Kaiser window I0(beta sqrt(1 - (n / (M - 1))^2)) / I0(beta), taken as a ratio of
    exponentially scaled I0s (so that it stays finite for large beta)."""

    def shape(n, M):
        b = lax.convert_element_type(to_array(beta), dtypes.float64)
        ratio = n / (M - 1)
        r = ufuncs.sqrt(1 - ratio * ratio)
        # I0 is even, and i0e(x) = exp(-|x|) I0(x)
        return _bessel.i0e(b * r) / _bessel.i0e(b) * ufuncs.exp(ufuncs.absolute(b) * (r - 1))

    return _window(M, shape)


def packbits(a, axis: int | None = None, bitorder: str = "big"):
    """Groups of 8 booleans (a != 0) along axis packed into uint8 (zero-padded at the end)."""
    if bitorder not in ("big", "little"):
        raise ValueError(f"packbits: bitorder must be 'big' or 'little', got {bitorder!r}")
    a = to_array(a)
    if not (dtypes.is_int(a.dtype) or dtypes.is_bool(a.dtype)):
        raise TypeError(f"packbits: needs integers or booleans, got {a.dtype}")
    if axis is None:
        a, axis = shape_ops.ravel(a), 0
    axis = canonicalize_axis(axis, a.ndim, "packbits")
    bits = convert(_nonzero_mask(a), dtypes.uint8)
    n = bits.shape[axis]
    pad = [(0, 0, 0)] * bits.ndim
    pad[axis] = (0, -n % 8, 0)
    bits = lax.pad(bits, np.uint8(0), pad)
    bits = shape_ops.moveaxis(bits, axis, -1)
    groups = lax.reshape(bits, bits.shape[:-1] + (bits.shape[-1] // 8, 8))
    shifts = (
        np.arange(8, dtype=np.uint8)
        if bitorder == "little"
        else np.arange(7, -1, -1, dtype=np.uint8)
    )
    packed = reductions.sum(
        lax.shift_left(groups, broadcast_to(shifts, groups.shape)), axis=-1, dtype=dtypes.uint8
    )
    return shape_ops.moveaxis(packed, -1, axis)


def unpackbits(a, axis: int | None = None, count: int | None = None, bitorder: str = "big"):
    """The bits of uint8 values along axis, 8 per value (the first `count` of them)."""
    if bitorder not in ("big", "little"):
        raise ValueError(f"unpackbits: bitorder must be 'big' or 'little', got {bitorder!r}")
    a = to_array(a)
    if a.dtype != dtypes.uint8:
        raise TypeError(f"unpackbits: needs uint8 values, got {a.dtype.name}")
    if axis is None:
        a, axis = shape_ops.ravel(a), 0
    axis = canonicalize_axis(axis, a.ndim, "unpackbits")
    moved = shape_ops.moveaxis(a, axis, -1)
    shifts = (
        np.arange(8, dtype=np.uint8)
        if bitorder == "little"
        else np.arange(7, -1, -1, dtype=np.uint8)
    )
    spread = lax.broadcast_in_dim(moved, moved.shape + (8,), tuple(builtins.range(moved.ndim)))
    bits = lax.bitwise_and(
        lax.shift_right_logical(spread, broadcast_to(shifts, spread.shape)), np.uint8(1)
    )
    bits = lax.reshape(bits, moved.shape[:-1] + (moved.shape[-1] * 8,))
    if count is not None:
        total = bits.shape[-1]
        count = operator.index(count)
        if count < -total:
            raise ValueError(
                f"unpackbits: count={count} drops more bits than the {total} there are "
                f"(-count larger than number of elements)"
            )
        stop = count if count >= 0 else total + count
        if stop <= total:
            bits = bits[..., :stop]
        else:
            bits = lax.pad(
                bits, np.uint8(0), [(0, 0, 0)] * (bits.ndim - 1) + [(0, stop - total, 0)]
            )
    return shape_ops.moveaxis(bits, -1, axis)


def vectorize(pyfunc: Callable, *, excluded=frozenset(), signature: str | None = None):
    """pyfunc mapped over the leading (loop) axes of its arguments by vmap, the loop axes
    broadcasting as in NumPy. Without a signature pyfunc sees scalars; a signature such as
    '(m,n),(n)->(m)' gives it slices with those core axes. Arguments named in `excluded`
    (positions or keywords), and all keyword arguments, are passed through unmapped."""
    from funcgrad.transforms.vmap import vmap

    inputs_core, _ = _parse_signature(signature)

    @functools.wraps(pyfunc)
    def wrapped(*args, **kwargs):
        mapped = [i for i in builtins.range(len(args)) if i not in excluded]
        arrays = [to_array(args[i]) for i in mapped]
        cores = inputs_core if inputs_core is not None else [()] * len(arrays)
        if len(cores) != len(arrays):
            raise TypeError(
                f"vectorize: the signature {signature!r} names {len(cores)} inputs, got "
                f"{len(arrays)}"
            )
        sizes: dict[str, int] = {}
        loop_shapes = []
        for array, core_dims in zip(arrays, cores):
            if array.ndim < len(core_dims):
                raise ValueError(
                    f"vectorize: an input of shape {array.shape} has fewer axes than its core "
                    f"dimensions {core_dims}"
                )
            core_shape = array.shape[array.ndim - len(core_dims) :]
            for name, size in zip(core_dims, core_shape):
                if sizes.setdefault(name, size) != size:
                    raise ValueError(
                        f"vectorize: core dimension {name!r} has sizes {sizes[name]} and {size}"
                    )
            loop_shapes.append(array.shape[: array.ndim - len(core_dims)])
        loop_shape = broadcast_shapes(*loop_shapes) if loop_shapes else ()
        arrays = [
            broadcast_to(array, loop_shape + array.shape[len(shape) :])
            for array, shape in zip(arrays, loop_shapes)
        ]

        def call(*values):
            full = list(args)
            for i, value in zip(mapped, values):
                full[i] = value
            return pyfunc(*full, **kwargs)

        for _ in builtins.range(len(loop_shape)):
            call = vmap(call)
        return call(*arrays)

    return wrapped


def _parse_signature(signature: str | None):
    """'(m,n),(n)->(m)' as ([('m', 'n'), ('n',)], [('m',)]); None for no signature."""
    if signature is None:
        return None, None
    try:
        inputs, outputs = signature.replace(" ", "").split("->")

        def groups(text: str) -> list[tuple[str, ...]]:
            if not text:
                return []
            if not (text.startswith("(") and text.endswith(")")):
                raise ValueError
            return [tuple(d for d in group.split(",") if d) for group in text[1:-1].split("),(")]

        return groups(inputs), groups(outputs)
    except ValueError:
        raise ValueError(f"vectorize: not a valid signature: {signature!r}") from None


# ---------------------------------------------------------------------------------------------
# Grids and index helpers, and NumPy's host-side readers


class _Grid:
    """mgrid and ogrid: slices give ranges (a complex step j gives j points, ends included),
    combined into dense (mgrid) or broadcastable (ogrid) index grids."""

    def __init__(self, sparse: bool):
        self.sparse = sparse

    def __getitem__(self, key):
        single = isinstance(key, slice)
        ranges = [_slice_range(k) for k in ((key,) if single else key)]
        if single:
            return ranges[0]
        grids = misc.meshgrid(*ranges, indexing="ij", sparse=self.sparse)
        return grids if self.sparse else shape_ops.stack(grids)


def _slice_range(key: slice):
    start = 0 if key.start is None else key.start
    step = 1 if key.step is None else key.step
    if isinstance(step, complex):
        return misc.linspace(start, key.stop, int(abs(step)))
    return misc.arange(start, key.stop, step)


mgrid = _Grid(sparse=False)
ogrid = _Grid(sparse=True)
s_ = np.s_
index_exp = np.index_exp


class _Concatenator:
    """r_ and c_ (without NumPy's string directives): slices become ranges as in mgrid; r_
    joins 1-d pieces, c_ makes them columns."""

    def __init__(self, columns: bool):
        self.columns = columns

    def __getitem__(self, key):
        pieces = []
        for item in key if isinstance(key, tuple) else (key,):
            if isinstance(item, str):
                raise NotImplementedError("r_ and c_: string directives are not supported")
            piece = _slice_range(item) if isinstance(item, slice) else to_array(item)
            piece = shape_ops.atleast_1d(piece)
            if self.columns and piece.ndim == 1:
                piece = piece[:, None]
            pieces.append(piece)
        return shape_ops.concatenate(pieces, axis=-1 if self.columns else 0)


r_ = _Concatenator(columns=False)
c_ = _Concatenator(columns=True)


def frombuffer(buffer, dtype=float, count: int = -1, offset: int = 0):
    return creation.asarray(np.frombuffer(buffer, dtypes.canonicalize(dtype), count, offset))


def fromiter(iterable, dtype, count: int = -1):
    return creation.asarray(np.fromiter(iterable, dtypes.canonicalize(dtype), count))


def fromfile(*args, **kwargs):
    """Refused: reading a file is a side effect that a transformed function would make once,
    at tracing, or never again from a compiled program's cache."""
    raise NotImplementedError(
        "funcgrad.numpy.fromfile is not provided: reading a file is not a pure operation. Read "
        "it with numpy.fromfile and convert the result: funcgrad.numpy.asarray(numpy.fromfile(...))"
    )


def fromstring(string, dtype=float, count: int = -1, *, sep: str):
    return creation.asarray(np.fromstring(string, dtypes.canonicalize(dtype), count, sep=sep))


def from_dlpack(x, /, *, device=None, copy=None):
    """An array of the data `x` exports through DLPack. A CUDA GPU's stays on that GPU, shared
    without a copy unless `copy=True`; host memory is copied, as `asarray` copies it (funcgrad
    arrays own their host memory, which no exporter may change). `device` places the result."""
    if hasattr(x, "__dlpack_device__") and x.__dlpack_device__()[0] == DLPACK_CUDA:
        result = from_cuda_dlpack(x, x.__dlpack_device__()[1], copy)
    else:
        result = creation.asarray(np.from_dlpack(x))
    return result if device is None else device_put(result, device)


def load(file, *args, **kwargs):
    """NumPy's load; arrays come back as funcgrad arrays."""
    value = np.load(file, *args, **kwargs)
    return creation.asarray(value) if isinstance(value, np.ndarray) else value


save = np.save
savez = np.savez
get_printoptions = np.get_printoptions
set_printoptions = np.set_printoptions
printoptions = np.printoptions

# NumPy's scalar-type aliases. `bool` comes last: it shadows the builtin in this module.
double = dtypes.float64.type
single = dtypes.float32.type
uint = dtypes.uint32.type
bool = dtypes.bool_.type
