"""Reductions with NumPy's names: sum, mean, var, max, argmax, cumsum, ...

Dtypes follow JAX: sums and products of booleans and narrow integers accumulate in the default
int (int32, or uint32 for unsigned) rather than NumPy's int64; means and variances of integers
are float32; float16, bfloat16 and the 8- and 4-bit floats accumulate in float32 and are cast back
at the end.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

import numpy as np

from funcgrad import dtypes, lax
from funcgrad.array import Array
from funcgrad.lax.reductions import reduce_sum_p
from funcgrad.numpy._promotion import (
    broadcast_shapes,
    broadcast_to,
    convert,
    result_type,
    to_array,
)
from funcgrad.numpy.shape_ops import canonicalize_axes, canonicalize_axis
from funcgrad.numpy.ufuncs import isnan, multiply, sqrt, subtract

__all__ = [
    "all",
    "amax",
    "amin",
    "any",
    "argmax",
    "argmin",
    "average",
    "count_nonzero",
    "cumprod",
    "cumsum",
    "cumulative_prod",
    "cumulative_sum",
    "max",
    "mean",
    "median",
    "min",
    "nanargmax",
    "nanargmin",
    "nancumprod",
    "nancumsum",
    "nanmax",
    "nanmean",
    "nanmin",
    "nanprod",
    "nanstd",
    "nansum",
    "nanvar",
    "prod",
    "ptp",
    "std",
    "sum",
    "var",
]

Axis = int | Sequence[int] | None

# ---------------------------------------------------------------------------------------------
# Shared helpers


def check_no_out(name: str, out) -> None:
    if out is not None:
        raise NotImplementedError(
            f"{name}: the out argument is not supported, because funcgrad arrays are immutable; "
            "use the returned array instead"
        )


def reduction_axes(name: str, axis: Axis, ndim: int) -> tuple[int, ...]:
    """`axis` (None, an int or a sequence of ints, possibly negative) as sorted axes."""
    if axis is None:
        return tuple(range(ndim))
    return tuple(sorted(canonicalize_axes(axis, ndim, name)))


def keep_reduced_dims(x, axes: tuple[int, ...]):
    """Put back the reduced `axes` as dimensions of size one (keepdims=True)."""
    return lax.expand_dims(x, axes) if axes else x


def scalar(value, dtype: np.dtype):
    """A rank-0 array of `dtype` (elementwise primitives broadcast rank-0 operands)."""
    # A 0-d ndarray, not a NumPy scalar: np.float64 would pass for a weak Python float.
    return lax.asarray(np.array(value, dtype))


def accumulation_dtype(dtype: np.dtype) -> np.dtype:
    """Half-precision and narrow floats accumulate in float32, so long sums keep their
    precision."""
    return dtypes.compute_dtype(dtype) if dtypes.is_float(dtype) else dtype


def _promoted_int(dtype: np.dtype) -> np.dtype:
    """The dtype sums and products of `dtype` accumulate in when promote_integers is set."""
    if dtypes.is_bool(dtype):
        return dtypes.default_int
    width = dtypes.default_int.itemsize
    if dtypes.is_unsigned(dtype) and dtype.itemsize < width:
        return np.dtype(f"uint{8 * width}")
    if dtypes.is_int(dtype) and dtype.itemsize < width:
        return dtypes.default_int
    return dtype


def _inexact_dtype(a, dtype, name: str) -> np.dtype:
    """The result dtype of mean-like reductions: the requested one, else a float."""
    if dtype is None:
        return dtypes.to_inexact(a.dtype)
    dtype = dtypes.canonicalize(dtype)
    if dtypes.is_bool(dtype):
        raise TypeError(f"{name}: dtype bool cannot hold a {name}; ask for a numeric dtype")
    return dtype


def _where_mask(name: str, where, shape: tuple[int, ...]):
    mask = to_array(where)
    if not dtypes.is_bool(mask.dtype):
        raise TypeError(f"{name}: where must be a boolean array, got dtype {mask.dtype.name}")
    return broadcast_to(mask, shape)


def _reduced_count(name: str, shape, axes, where, keepdims: bool, dtype: np.dtype):
    """How many elements each output element of a reduction over `axes` combines."""
    if where is None:
        return scalar(int(np.prod([shape[ax] for ax in axes], dtype=np.int64)), dtype)
    mask = _where_mask(name, where, shape)
    return sum(mask, axes, dtype=dtype, keepdims=keepdims)


# ---------------------------------------------------------------------------------------------
# Reductions with an identity: sum, prod, max, min, all, any


class _Monoid(NamedTuple):
    """A lax reduction over axes, the binary op that folds `initial` in, and its identity.

    `accumulates` marks the reductions that round at each step (sum, prod), which therefore
    compute half-precision floats in float32.
    """

    name: str
    reduce: Callable
    combine: Callable
    identity: Callable
    accumulates: bool = False


# The lax reductions are looked up when called, so that importing this module never depends on
# the order in which funcgrad.lax's family modules are loaded.
_SUM = _Monoid("sum", lambda x, axes: lax.reduce_sum(x, axes), lax.add, lambda d: 0, True)
_PROD = _Monoid("prod", lambda x, axes: lax.reduce_prod(x, axes), lax.mul, lambda d: 1, True)
_MAX = _Monoid("max", lambda x, axes: lax.reduce_max(x, axes), lax.max, dtypes.lowest)
_MIN = _Monoid("min", lambda x, axes: lax.reduce_min(x, axes), lax.min, dtypes.highest)
_ALL = _Monoid("all", lambda x, axes: lax.reduce_and(x, axes), lax.bitwise_and, lambda d: True)
_ANY = _Monoid("any", lambda x, axes: lax.reduce_or(x, axes), lax.bitwise_or, lambda d: False)


def _reduce(
    monoid: _Monoid,
    a,
    axis: Axis,
    dtype: np.dtype,
    keepdims: bool,
    initial,
    where,
    *,
    has_identity: bool = True,
):
    """Reduce `a`, converted to `dtype`, over `axis`."""
    a = to_array(a)
    if monoid in (_MAX, _MIN) and dtypes.is_complex(dtype):
        raise TypeError(
            f"{monoid.name}: takes real arrays, got {np.dtype(dtype).name}; reduce the real "
            "parts or the moduli instead"
        )
    axes = reduction_axes(monoid.name, axis, a.ndim)
    compute_dtype = accumulation_dtype(dtype) if monoid.accumulates else dtype
    x = convert(a, compute_dtype)
    if not has_identity and initial is None:
        if where is not None:
            raise ValueError(
                f"{monoid.name}: a where mask needs an initial value, since a masked-out slice "
                f"has no {monoid.name} otherwise"
            )
        empty = [ax for ax in axes if a.shape[ax] == 0]
        if empty:
            raise ValueError(
                f"{monoid.name}: cannot reduce an array of shape {a.shape} over axis {empty[0]} "
                "of size zero without an initial value"
            )
    if where is not None:
        mask = _where_mask(monoid.name, where, x.shape)
        x = lax.select(mask, x, lax.full(x.shape, monoid.identity(compute_dtype), compute_dtype))
    result = monoid.reduce(x, axes)
    if initial is not None:
        result = monoid.combine(result, convert(to_array(initial), compute_dtype))
    if keepdims:
        result = keep_reduced_dims(result, axes)
    return convert(result, dtype)


def sum(
    a,
    axis: Axis = None,
    dtype=None,
    out=None,
    keepdims: bool = False,
    initial=None,
    where=None,
    promote_integers: bool = True,
):
    if (
        type(a) is Array
        and axis is None
        and dtype is None
        and not keepdims
        and initial is None
        and where is None
        and not a.weak_type
        and a._value.dtype in _SUMMED_IN_PLACE
    ):
        # The eager hot path: a full sum of a float32/float64 array is one reduce_sum.
        return reduce_sum_p.bind(a, axes=tuple(range(a._value.ndim)))
    check_no_out("sum", out)
    a = to_array(a)
    dtype = _accumulating_dtype(a.dtype, dtype, promote_integers)
    if dtypes.is_bool(dtype):  # a sum in booleans is NumPy's logical or
        return _reduce(_ANY, _as_bool(a), axis, dtype, keepdims, initial, where)
    return _reduce(_SUM, a, axis, dtype, keepdims, initial, where)


_SUMMED_IN_PLACE = frozenset([dtypes.float32, dtypes.float64])


def prod(
    a,
    axis: Axis = None,
    dtype=None,
    out=None,
    keepdims: bool = False,
    initial=None,
    where=None,
    promote_integers: bool = True,
):
    check_no_out("prod", out)
    a = to_array(a)
    dtype = _accumulating_dtype(a.dtype, dtype, promote_integers)
    if dtypes.is_bool(dtype):  # a product in booleans is NumPy's logical and
        return _reduce(_ALL, _as_bool(a), axis, dtype, keepdims, initial, where)
    return _reduce(_PROD, a, axis, dtype, keepdims, initial, where)


def _accumulating_dtype(a_dtype: np.dtype, dtype, promote_integers: bool) -> np.dtype:
    if dtype is not None:
        return dtypes.canonicalize(dtype)
    if promote_integers or dtypes.is_bool(a_dtype):
        return _promoted_int(a_dtype)
    return a_dtype


def max(a, axis: Axis = None, out=None, keepdims: bool = False, initial=None, where=None):
    check_no_out("max", out)
    a = to_array(a)
    return _reduce(_MAX, a, axis, a.dtype, keepdims, initial, where, has_identity=False)


def min(a, axis: Axis = None, out=None, keepdims: bool = False, initial=None, where=None):
    check_no_out("min", out)
    a = to_array(a)
    return _reduce(_MIN, a, axis, a.dtype, keepdims, initial, where, has_identity=False)


amax, amin = max, min


def all(a, axis: Axis = None, out=None, keepdims: bool = False, *, where=None):
    check_no_out("all", out)
    return _reduce(_ALL, _as_bool(a), axis, dtypes.bool_, keepdims, None, where)


def any(a, axis: Axis = None, out=None, keepdims: bool = False, *, where=None):
    check_no_out("any", out)
    return _reduce(_ANY, _as_bool(a), axis, dtypes.bool_, keepdims, None, where)


def _as_bool(a):
    a = to_array(a)
    return a if dtypes.is_bool(a.dtype) else lax.ne(a, scalar(0, a.dtype))


def ptp(a, axis: Axis = None, out=None, keepdims: bool = False):
    check_no_out("ptp", out)
    return subtract(max(a, axis, keepdims=keepdims), min(a, axis, keepdims=keepdims))


def count_nonzero(a, axis: Axis = None, keepdims: bool = False):
    return sum(_as_bool(a), axis, dtype=dtypes.default_int, keepdims=keepdims)


# ---------------------------------------------------------------------------------------------
# Statistics: mean, var, std, average, median


def mean(a, axis: Axis = None, dtype=None, out=None, keepdims: bool = False, *, where=None):
    check_no_out("mean", out)
    a = to_array(a)
    result_dtype = _inexact_dtype(a, dtype, "mean")
    compute_dtype = accumulation_dtype(result_dtype)
    axes = reduction_axes("mean", axis, a.ndim)
    total = sum(a, axes, dtype=compute_dtype, keepdims=keepdims, where=where)
    count = _reduced_count("mean", a.shape, axes, where, keepdims, compute_dtype)
    return convert(lax.div(total, count), result_dtype)


_mean = mean  # (under a name that the variances' `mean` parameter does not hide)


def var(
    a,
    axis: Axis = None,
    dtype=None,
    out=None,
    ddof: int = 0,
    keepdims: bool = False,
    *,
    where=None,
    mean=None,
    correction: int | float | None = None,
):
    """The variance; a given `mean` (of the shape a keepdims=True mean has, or one that
    broadcasts to `a`) is taken as the center instead of computing it."""
    check_no_out("var", out)
    ddof = _ddof("var", ddof, correction)
    a = to_array(a)
    # The variance of complex numbers is the mean of |x - mean|², a real number; a complex
    # dtype asked for holds it, as NumPy's does.
    asked_dtype = _inexact_dtype(a, dtype, "var")
    result_dtype = dtypes.real_dtype(asked_dtype)
    axes = reduction_axes("var", axis, a.ndim)
    if not dtypes.is_inexact(result_dtype):
        return _integer_var(a, axes, result_dtype, ddof, keepdims, where)
    compute_dtype = accumulation_dtype(result_dtype)
    x = convert(a, _working_dtype(a, compute_dtype))
    if mean is None:
        centered = subtract(x, _mean(x, axes, keepdims=True, where=where))
    else:
        centered = subtract(x, _given_mean("var", mean, x))
    if where is not None:
        # Zeros where the sum leaves elements out, as in nanvar: a masked-out NaN or inf
        # would otherwise make every derivative NaN.
        mask = _where_mask("where", where, a.shape)
        centered = lax.select(mask, centered, lax.full_like(centered, 0))
    total = sum(squared_modulus(centered), axes, keepdims=keepdims, where=where)
    count = _reduced_count("var", a.shape, axes, where, keepdims, compute_dtype)
    # As NumPy: fewer elements than ddof divide by zero (inf, or nan for a zero sum).
    dof = lax.max(lax.sub(count, scalar(ddof, compute_dtype)), scalar(0, compute_dtype))
    return convert(lax.div(total, dof), asked_dtype if dtype is not None else result_dtype)


def _integer_var(a, axes, dtype: np.dtype, ddof, keepdims: bool, where):
    """A variance asked for in an integer dtype, computed as NumPy does: the mean in `dtype`
    (truncated), the squared deviations converted to `dtype` and summed there, and the sum
    divided in `dtype` (0 where no degrees of freedom are left)."""
    centered = subtract(a, mean(a, axes, dtype, keepdims=True, where=where))
    total = sum(squared_modulus(centered), axes, dtype, keepdims=keepdims, where=where)
    count = _reduced_count("var", a.shape, axes, where, keepdims, dtype)
    dof = lax.sub(count, scalar(ddof, dtype))
    positive = lax.gt(dof, scalar(0, dtype))
    quotient = lax.div(total, lax.select(positive, dof, lax.full_like(dof, 1)))
    return lax.select(positive, quotient, lax.full_like(quotient, 0))


def std(
    a,
    axis: Axis = None,
    dtype=None,
    out=None,
    ddof: int = 0,
    keepdims: bool = False,
    *,
    where=None,
    mean=None,
    correction: int | float | None = None,
):
    check_no_out("std", out)
    _check_inexact_dtype("std", dtype)
    variance = var(
        a, axis, dtype, None, ddof, keepdims, where=where, mean=mean, correction=correction
    )
    return sqrt(variance)


def _given_mean(name: str, mean, x):
    """A variance's `mean` argument, in `x`'s dtype, after checking that it broadcasts to x."""
    mean = to_array(mean)
    try:
        fits = broadcast_shapes(mean.shape, x.shape) == x.shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(
            f"{name}: mean of shape {mean.shape} does not broadcast to the array's shape "
            f"{x.shape}; give the mean with the reduced axes kept (keepdims=True)"
        )
    return convert(mean, x.dtype)


def _check_inexact_dtype(name: str, dtype) -> None:
    """A standard deviation is a square root: it has no integer dtype to be computed in."""
    if dtype is not None and not dtypes.is_inexact(dtypes.canonicalize(dtype)):
        raise TypeError(f"{name}: dtype must be inexact, got {np.dtype(dtype).name}")


def _working_dtype(a, real_dtype: np.dtype) -> np.dtype:
    """The dtype a variance centers `a` in: `real_dtype`, or its complex form for complex a."""
    return dtypes.complex_dtype(real_dtype) if dtypes.is_complex(a.dtype) else real_dtype


def squared_modulus(x):
    """|x|², real for complex x."""
    if dtypes.is_complex(x.dtype):
        return lax.real(lax.mul(x, lax.conj(x)))
    return lax.mul(x, x)


def _ddof(name: str, ddof, correction):
    if correction is None:
        return ddof
    if ddof != 0:
        raise ValueError(f"{name}: pass ddof or correction, not both (they mean the same)")
    return correction


def average(a, axis: Axis = None, weights=None, returned: bool = False, keepdims: bool = False):
    a = to_array(a)
    axes = reduction_axes("average", axis, a.ndim)
    if weights is None:
        avg = mean(a, axes, keepdims=keepdims)
        count = int(np.prod([a.shape[ax] for ax in axes], dtype=np.int64))
        weights_sum = lax.full(avg.shape, count, avg.dtype)
    else:
        weights = to_array(weights)
        dtype = dtypes.to_inexact(result_type(a, weights))
        a, weights = convert(a, dtype), convert(weights, dtype)
        if weights.shape != a.shape:
            weights = _broadcast_weights(a.shape, weights, axis, axes)
        weights_sum = sum(weights, axes, keepdims=keepdims)
        avg = lax.div(sum(multiply(a, weights), axes, keepdims=keepdims), weights_sum)
    if returned:
        return avg, broadcast_to(weights_sum, avg.shape)
    return avg


def _broadcast_weights(shape, weights, axis, axes):
    """Weights given only along the reduced axes, spread over the whole of `a`."""
    if axis is None:
        raise TypeError(
            f"average: weights of shape {weights.shape} differ from the shape {shape} of the "
            "array, so axis must say which axes they lie along"
        )
    expected = tuple(shape[ax] for ax in axes)
    if weights.shape != expected:
        raise ValueError(
            f"average: weights of shape {weights.shape} do not fit an array of shape {shape} "
            f"along axis {axis} (expected weights of shape {expected} or {shape})"
        )
    return lax.broadcast_in_dim(weights, shape, axes)


def median(a, axis: Axis = None, out=None, overwrite_input: bool = False, keepdims: bool = False):
    """The middle of the sorted values (the mean of the two middle ones for an even count).

    A slice containing NaN has a NaN median, as in NumPy; sorting puts NaNs last.
    """
    check_no_out("median", out)
    a = to_array(a)
    axes = reduction_axes("median", axis, a.ndim)
    dtype = _inexact_dtype(a, None, "median")
    x = _move_to_last_flattened(convert(a, dtype), axes)
    n = x.shape[-1]
    if n == 0:
        result = lax.full(x.shape[:-1], np.nan, dtype)
    else:
        x = lax.sort(x, dimension=x.ndim - 1)
        lower = _take_last(x, (n - 1) // 2)
        upper = _take_last(x, n // 2)
        half = scalar(0.5, dtype)
        result = lax.add(lax.mul(lower, half), lax.mul(upper, half))
        result = lax.select(isnan(_take_last(x, n - 1)), lax.full_like(result, np.nan), result)
    if keepdims:
        result = lax.reshape(result, tuple(1 if i in axes else d for i, d in enumerate(a.shape)))
    return result


def _move_to_last_flattened(x, axes: tuple[int, ...]):
    """Transpose `axes` to the end and merge them into one trailing axis."""
    kept = [i for i in range(x.ndim) if i not in axes]
    x = lax.transpose(x, tuple(kept + list(axes)))
    size = int(np.prod([x.shape[i] for i in range(len(kept), x.ndim)], dtype=np.int64))
    return lax.reshape(x, x.shape[: len(kept)] + (size,))


def _take_last(x, index: int):
    """`x[..., index]`."""
    return lax.index_in_dim(x, index, x.ndim - 1, keepdims=False)


# ---------------------------------------------------------------------------------------------
# Arg-reductions


def argmax(a, axis: int | None = None, out=None, keepdims: bool | None = None):
    check_no_out("argmax", out)
    return _arg_reduce("argmax", lax.argmax, a, axis, keepdims)


def argmin(a, axis: int | None = None, out=None, keepdims: bool | None = None):
    check_no_out("argmin", out)
    return _arg_reduce("argmin", lax.argmin, a, axis, keepdims)


def _arg_reduce(name: str, arg_reduce: Callable, a, axis, keepdims):
    a = to_array(a)
    if axis is None:
        x, axis_ = lax.reshape(a, (a.size,)), 0
    else:
        axis_ = canonicalize_axis(axis, a.ndim, name)
        x = a
    if x.shape[axis_] == 0:
        raise ValueError(f"{name}: cannot take the {name} of an empty axis (shape {a.shape})")
    result = arg_reduce(x, axis_, dtypes.default_int)
    if keepdims:
        axes = tuple(range(a.ndim)) if axis is None else (axis_,)
        result = lax.reshape(result, tuple(1 if i in axes else d for i, d in enumerate(a.shape)))
    return result


def nanargmax(a, axis: int | None = None, out=None, keepdims: bool | None = None):
    """argmax ignoring NaNs; a slice of only NaNs gives -1 (NumPy raises there)."""
    check_no_out("nanargmax", out)
    return _nan_arg_reduce(argmax, a, -np.inf, axis, keepdims)


def nanargmin(a, axis: int | None = None, out=None, keepdims: bool | None = None):
    """argmin ignoring NaNs; a slice of only NaNs gives -1 (NumPy raises there)."""
    check_no_out("nanargmin", out)
    return _nan_arg_reduce(argmin, a, np.inf, axis, keepdims)


def _nan_arg_reduce(arg_reduce: Callable, a, fill: float, axis, keepdims):
    """`arg_reduce` with NaNs replaced by `fill`, and -1, an index no element has, for slices
    of only NaNs, whose replacements would otherwise pass for an element found."""
    a = to_array(a)
    index = arg_reduce(_replace_nan(a, lambda dtype: fill), axis, keepdims=keepdims)
    if not dtypes.is_inexact(a.dtype):
        return index
    only_nans = all(isnan(a), axis, keepdims=bool(keepdims))
    return lax.select(only_nans, lax.full_like(index, -1), index)


# ---------------------------------------------------------------------------------------------
# NaN-ignoring reductions


def _replace_nan(a, fill: Callable):
    a = to_array(a)
    if not dtypes.is_inexact(a.dtype):
        return a
    return lax.select(isnan(a), lax.full(a.shape, fill(a.dtype), a.dtype), a)


def nansum(
    a,
    axis: Axis = None,
    dtype=None,
    out=None,
    keepdims: bool = False,
    initial=None,
    where=None,
):
    check_no_out("nansum", out)
    a = _replace_nan(a, lambda dtype: 0)
    return sum(a, axis, dtype, keepdims=keepdims, initial=initial, where=where)


def nanprod(
    a,
    axis: Axis = None,
    dtype=None,
    out=None,
    keepdims: bool = False,
    initial=None,
    where=None,
):
    check_no_out("nanprod", out)
    a = _replace_nan(a, lambda dtype: 1)
    return prod(a, axis, dtype, keepdims=keepdims, initial=initial, where=where)


def nanmax(a, axis: Axis = None, out=None, keepdims: bool = False, initial=None, where=None):
    check_no_out("nanmax", out)
    return _nan_extremum(max, dtypes.lowest, a, axis, keepdims, initial, where)


def nanmin(a, axis: Axis = None, out=None, keepdims: bool = False, initial=None, where=None):
    check_no_out("nanmin", out)
    return _nan_extremum(min, dtypes.highest, a, axis, keepdims, initial, where)


def _nan_extremum(reduction: Callable, identity: Callable, a, axis, keepdims, initial, where):
    a = to_array(a)
    if dtypes.is_complex(a.dtype):
        return reduction(a, axis, None, keepdims, initial, where)  # which names the cause
    result = reduction(_replace_nan(a, identity), axis, None, keepdims, initial, where)
    if not dtypes.is_float(a.dtype) or initial is not None:
        return result
    # A slice of only NaNs has no number to return: its result is NaN, as in NumPy.
    only_nan = all(isnan(a), axis, keepdims=keepdims)
    return lax.select(only_nan, lax.full_like(result, np.nan), result)


def nanmean(a, axis: Axis = None, dtype=None, out=None, keepdims: bool = False, *, where=None):
    check_no_out("nanmean", out)
    a = to_array(a)
    if not dtypes.is_inexact(a.dtype):
        return mean(a, axis, dtype, keepdims=keepdims, where=where)
    result_dtype = _nan_reduction_dtype("nanmean", a, dtype)
    compute_dtype = accumulation_dtype(result_dtype)
    axes = reduction_axes("nanmean", axis, a.ndim)
    valid = _valid_mask(a, where)
    total = nansum(a, axes, compute_dtype, keepdims=keepdims, where=where)
    count = sum(valid, axes, dtype=compute_dtype, keepdims=keepdims)
    return convert(lax.div(total, count), result_dtype)


def nanvar(
    a,
    axis: Axis = None,
    dtype=None,
    out=None,
    ddof: int = 0,
    keepdims: bool = False,
    *,
    where=None,
    mean=None,
    correction: int | float | None = None,
):
    """The variance of the elements that are not NaN; a given `mean` is taken as the center
    (as in `var`)."""
    check_no_out("nanvar", out)
    a = to_array(a)
    if not dtypes.is_inexact(a.dtype):
        return var(
            a, axis, dtype, None, ddof, keepdims, where=where, mean=mean, correction=correction
        )
    ddof = _ddof("nanvar", ddof, correction)
    result_dtype = dtypes.real_dtype(_nan_reduction_dtype("nanvar", a, dtype))
    compute_dtype = accumulation_dtype(result_dtype)
    axes = reduction_axes("nanvar", axis, a.ndim)
    x = convert(a, _working_dtype(a, compute_dtype))
    valid = _valid_mask(x, where)
    if mean is None:
        centered = subtract(x, nanmean(x, axes, keepdims=True, where=where))
    else:
        centered = subtract(x, _given_mean("nanvar", mean, x))
    # Zeros, not the NaNs, where the sum leaves elements out: its transpose sends them a
    # cotangent of 0, and 0 times the slope 2 * NaN would make every derivative NaN.
    centered = lax.select(valid, centered, lax.full_like(centered, 0))
    total = sum(squared_modulus(centered), axes, keepdims=keepdims, where=valid)
    dof = lax.sub(sum(valid, axes, dtype=total.dtype, keepdims=keepdims), scalar(ddof, total.dtype))
    # As NumPy's nanvar: no degrees of freedom left gives NaN.
    result = lax.select(
        lax.le(dof, scalar(0, dof.dtype)), lax.full_like(total, np.nan), lax.div(total, dof)
    )
    return convert(result, result_dtype)


def nanstd(
    a,
    axis: Axis = None,
    dtype=None,
    out=None,
    ddof: int = 0,
    keepdims: bool = False,
    *,
    where=None,
    mean=None,
    correction: int | float | None = None,
):
    check_no_out("nanstd", out)
    _check_inexact_dtype("nanstd", dtype)
    variance = nanvar(
        a, axis, dtype, None, ddof, keepdims, where=where, mean=mean, correction=correction
    )
    return sqrt(variance)


def _nan_reduction_dtype(name: str, a, dtype) -> np.dtype:
    """The result dtype of a NaN-ignoring mean or variance of an inexact `a`: a NaN has no
    integer counterpart to leave out, so an integer dtype is refused (as in NumPy)."""
    dtype = _inexact_dtype(a, dtype, name)
    if not dtypes.is_inexact(dtype):
        raise TypeError(
            f"{name}: the array is {a.dtype.name}, so dtype must be inexact too, got {dtype.name}"
        )
    return dtype


def _valid_mask(a, where):
    """Elements that take part in a NaN-ignoring reduction: not NaN, and selected by `where`."""
    valid = lax.bitwise_not(isnan(a))
    if where is None:
        return valid
    return lax.bitwise_and(valid, _where_mask("where", where, a.shape))


# ---------------------------------------------------------------------------------------------
# Cumulative reductions


def cumsum(a, axis: int | None = None, dtype=None, out=None):
    check_no_out("cumsum", out)
    return _cumulative("cumsum", lax.cumsum, a, axis, dtype)


def cumprod(a, axis: int | None = None, dtype=None, out=None):
    check_no_out("cumprod", out)
    return _cumulative("cumprod", lax.cumprod, a, axis, dtype)


def nancumsum(a, axis: int | None = None, dtype=None, out=None):
    check_no_out("nancumsum", out)
    return cumsum(_replace_nan(a, lambda dtype: 0), axis, dtype)


def nancumprod(a, axis: int | None = None, dtype=None, out=None):
    check_no_out("nancumprod", out)
    return cumprod(_replace_nan(a, lambda dtype: 1), axis, dtype)


def _cumulative(name: str, scan: Callable, a, axis, dtype, promote_integers: bool = False):
    """A cumulative reduction; axis=None scans the flattened array.

    As in JAX, booleans accumulate in int32 but other integers keep their dtype unless
    `promote_integers` (the array API's cumulative_sum) asks for the widening sums use.
    """
    a = to_array(a)
    if axis is None:
        a, axis = lax.reshape(a, (a.size,)), 0
    axis = canonicalize_axis(axis, a.ndim, name)
    dtype = _accumulating_dtype(a.dtype, dtype, promote_integers)
    if dtypes.is_bool(dtype):
        # Running sums in booleans are NumPy's running ors, running products its running ands.
        extremum = lax.cummax if scan is lax.cumsum else lax.cummin
        bits = convert(_as_bool(a), dtypes.uint8)
        return lax.ne(extremum(bits, axis), scalar(0, dtypes.uint8))
    return scan(convert(a, dtype), axis)


def cumulative_sum(x, /, *, axis: int | None = None, dtype=None, include_initial: bool = False):
    return _cumulative_with_initial(
        "cumulative_sum", lax.cumsum, 0, x, axis, dtype, include_initial
    )


def cumulative_prod(x, /, *, axis: int | None = None, dtype=None, include_initial: bool = False):
    return _cumulative_with_initial(
        "cumulative_prod", lax.cumprod, 1, x, axis, dtype, include_initial
    )


def _cumulative_with_initial(name, scan, identity, x, axis, dtype, include_initial):
    """The array API's cumulative reductions: axis is needed beyond 1-d, integers widen."""
    x = to_array(x)
    if axis is None:
        if x.ndim > 1:
            raise ValueError(
                f"{name}: axis must be given for an array of rank {x.ndim} (shape {x.shape})"
            )
        axis = 0
    result = _cumulative(name, scan, x, axis, dtype, promote_integers=True)
    if not include_initial:
        return result
    axis = canonicalize_axis(axis, result.ndim, name)
    padding = [(0, 0, 0)] * result.ndim
    padding[axis] = (1, 0, 0)
    return lax.pad(result, scalar(identity, result.dtype), padding)
