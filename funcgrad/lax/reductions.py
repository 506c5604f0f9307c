"""Reductions, cumulative reductions and windowed reductions (pooling).

Every reduction keeps its operand's dtype, as XLA does: integer sums and products wrap around,
and reducing over no elements gives the identity of the operation (0, 1, -inf, True, ...).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from funcgrad import core, dtypes
from funcgrad.core import Primitive, ShapedArray, never_weak
from funcgrad.interpreters import batching
from funcgrad.interpreters.ad import defjvp, defjvp_zero, deflinear
from funcgrad.lax import elementwise, shapes
from funcgrad.lax.base import (
    FLOAT,
    INT_OR_BOOL,
    NUMERIC,
    REAL,
    REAL_NUMERIC,
    asarray,
    check_dtype_class,
    check_same_dtypes,
)

__all__ = [
    "argmax",
    "argmin",
    "cumlogsumexp",
    "cummax",
    "cummin",
    "cumprod",
    "cumsum",
    "padtype_to_pads",
    "reduce_and",
    "reduce_max",
    "reduce_min",
    "reduce_or",
    "reduce_prod",
    "reduce_sum",
    "reduce_window",
    "select_and_scatter_add",
]

# ---------------------------------------------------------------------------------------------
# Shared helpers


def _zero(dtype: np.dtype) -> np.generic:
    return dtype.type(0)


def _accumulation_dtype(dtype: np.dtype) -> np.dtype:
    # float16, bfloat16 and the narrow formats accumulate in their compute dtype (float32, or
    # int32 for the narrow integers) and round once at the end, as XLA's backends do: a running
    # float16 sum of ones stops growing at 2048 (bfloat16: 256).
    return dtypes.compute_dtype(dtype)


def _comparable(x: np.ndarray) -> np.ndarray:
    # NumPy's searches and sorts of ml_dtypes' types do not treat NaN specially, and its
    # extrema of the narrow integers come back as int8; float32 (int32) holds every value of
    # the half and narrow formats exactly, and does.
    return x.astype(dtypes.compute_dtype(x.dtype), copy=False)


def _result(out, dtype: np.dtype):
    """`out` as `dtype`, a NumPy scalar when it is 0-d (the form funcgrad arrays hold)."""
    out = np.asarray(out).astype(dtype, copy=False)
    return out[()] if out.ndim == 0 else out


def _normalize_axes(name: str, axes: Sequence[int], shape: tuple[int, ...]) -> tuple[int, ...]:
    """User axes (negative ones count from the end) as the sorted tuple primitives take."""
    ndim = len(shape)
    normalized = []
    for axis in axes:
        axis = int(axis)
        if not -ndim <= axis < ndim:
            raise ValueError(f"{name}: axis {axis} is out of bounds for operand shape {shape}")
        normalized.append(axis % ndim)
    if len(set(normalized)) != len(normalized):
        raise ValueError(f"{name}: repeated axis in {tuple(axes)} for operand shape {shape}")
    return tuple(sorted(normalized))


def _check_axes(name: str, axes: tuple[int, ...], shape: tuple[int, ...]) -> None:
    if any(not 0 <= a < len(shape) for a in axes) or list(axes) != sorted(set(axes)):
        raise ValueError(
            f"{name}: axes {axes} must be sorted, distinct dimensions of operand shape {shape}"
        )


def _reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _pad_along(x, padding_value, axis: int, config: tuple[int, int, int]):
    """`shapes.pad` with (low, high, interior) `config` along `axis` only."""
    padding_config = [(0, 0, 0)] * x.ndim
    padding_config[axis] = config
    return shapes.pad(x, padding_value, padding_config)


# ---------------------------------------------------------------------------------------------
# Reductions over axes


def _reduction_primitive(name: str, accepted, impl: Callable) -> Primitive:
    prim = Primitive(name)

    @prim.def_abstract_eval
    def abstract_eval(x: ShapedArray, *, axes: tuple[int, ...]) -> ShapedArray:
        check_dtype_class(name, x, accepted)
        _check_axes(name, axes, x.shape)
        return ShapedArray(_reduced_shape(x.shape, axes), x.dtype)

    prim.def_impl(impl)
    return prim


def _reduce_sum(x, *, axes):
    x = np.asarray(x)
    acc = _accumulation_dtype(x.dtype)
    return _result(np.add.reduce(x.astype(acc, copy=False), axis=axes, dtype=acc), x.dtype)


def _reduce_prod(x, *, axes):
    x = np.asarray(x)
    acc = _accumulation_dtype(x.dtype)
    return _result(np.multiply.reduce(x.astype(acc, copy=False), axis=axes, dtype=acc), x.dtype)


def _reduce_max(x, *, axes):
    x = np.asarray(x)
    wide = _comparable(x) if dtypes.is_narrow(x.dtype) else x
    out = np.maximum.reduce(wide, axis=axes, initial=dtypes.lowest(x.dtype))
    return _result(_zero_of_sign(out, wide, axes, negative=False), x.dtype)


def _reduce_min(x, *, axes):
    x = np.asarray(x)
    wide = _comparable(x) if dtypes.is_narrow(x.dtype) else x
    out = np.minimum.reduce(wide, axis=axes, initial=dtypes.highest(x.dtype))
    return _result(_zero_of_sign(out, wide, axes, negative=True), x.dtype)


def _zero_of_sign(out, x: np.ndarray, axes, negative: bool):
    """A zero extreme as the compiled backends give it: +0 above -0, so a max is -0 only where
    every zero reduced is -0 (a min +0 only where every one is +0). NumPy keeps whichever
    zero its order of reduction met first."""
    if not dtypes.is_float(x.dtype):
        return out
    has_zero_of_sign = np.logical_or.reduce((x == 0) & (np.signbit(x) == negative), axis=axes)
    signed_zero = np.copysign(np.zeros((), x.dtype), -1 if negative else 1)
    return np.where((out == 0) & has_zero_of_sign, signed_zero, out)


def _reduce_and(x, *, axes):
    x = np.asarray(x)
    all_ones = np.invert(np.zeros((), x.dtype))[()]  # True for bool, every bit set for ints
    return _result(np.bitwise_and.reduce(x, axis=axes, initial=all_ones), x.dtype)


def _reduce_or(x, *, axes):
    x = np.asarray(x)
    return _result(np.bitwise_or.reduce(x, axis=axes, initial=_zero(x.dtype)), x.dtype)


reduce_sum_p = _reduction_primitive("reduce_sum", NUMERIC, _reduce_sum)
reduce_prod_p = _reduction_primitive("reduce_prod", NUMERIC, _reduce_prod)
reduce_max_p = _reduction_primitive("reduce_max", REAL, _reduce_max)
reduce_min_p = _reduction_primitive("reduce_min", REAL, _reduce_min)
reduce_and_p = _reduction_primitive("reduce_and", INT_OR_BOOL, _reduce_and)
reduce_or_p = _reduction_primitive("reduce_or", INT_OR_BOOL, _reduce_or)


def _reduction_wrapper(prim: Primitive) -> Callable:
    def reduce(operand, axes: Sequence[int]):
        operand = asarray(operand)
        return prim.bind(operand, axes=_normalize_axes(prim.name, axes, operand.shape))

    reduce.__name__ = reduce.__qualname__ = prim.name
    reduce.__doc__ = f"Reduce `operand` over `axes` (the `{prim.name}` primitive)."
    return reduce


_reduce_sum_wrapper = _reduction_wrapper(reduce_sum_p)


def reduce_sum(operand, axes: Sequence[int], *, out_sharding=None):
    """Sum `operand` over `axes` (the `reduce_sum` primitive)."""
    out = _reduce_sum_wrapper(operand, axes)
    if out_sharding is not None:
        from funcgrad.lax.sharding_constraint import placed

        return placed(out, "reduce_sum", out_sharding=out_sharding)
    return out


reduce_prod = _reduction_wrapper(reduce_prod_p)
reduce_max = _reduction_wrapper(reduce_max_p)
reduce_min = _reduction_wrapper(reduce_min_p)
reduce_and = _reduction_wrapper(reduce_and_p)
reduce_or = _reduction_wrapper(reduce_or_p)


# Derivatives. reduce_sum is linear; max and min follow the elements that attain the extreme;
# the rest are integer or boolean valued.


def _kept_dims(ndim: int, axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(d for d in range(ndim) if d not in axes)


def _broadcast_back(reduced, shape: tuple[int, ...], axes: tuple[int, ...]):
    """`reduced`, the reduction of an operand of `shape` over `axes`, broadcast to `shape`."""
    return shapes.broadcast_in_dim(reduced, shape, _kept_dims(len(shape), axes))


def _reduce_sum_transpose(ct, x, *, axes):
    return [_broadcast_back(ct, x.aval.shape, axes)]


deflinear(reduce_sum_p, _reduce_sum_transpose)


def _chooser_jvp(prim: Primitive) -> None:
    """reduce_max/min: the tangent at the extreme; ties share it equally (JAX's choice), so
    the tangent is the mean of the tangents at the elements that attain the extreme. Where
    none does (an empty reduction, or a NaN result) the tangent is 0."""

    def jvp(primals, tangents, *, axes):
        (x,), (t,) = primals, tangents
        ans = prim.bind(x, axes=axes)
        attains = elementwise.eq(x, _broadcast_back(ans, x.shape, axes))
        attains = elementwise.convert_element_type(attains, x.dtype)
        count = reduce_sum_p.bind(attains, axes=axes)
        total = reduce_sum_p.bind(elementwise.mul(t, attains), axes=axes)
        return ans, elementwise.div(total, elementwise.max(count, 1))

    prim.def_jvp(jvp)
    prim.not_applicable["transpose"] = "not linear"


_chooser_jvp(reduce_max_p)
_chooser_jvp(reduce_min_p)


@reduce_prod_p.def_jvp
def _reduce_prod_jvp(primals, tangents, *, axes):
    # d prod(x) = sum_i t_i * prod_{j != i} x_j. The product of all but x_i is the product of
    # the elements before i times that of those after i, with no division: zeros are exact.
    (x,), (t,) = primals, tangents
    ans = reduce_prod_p.bind(x, axes=axes)
    kept = _kept_dims(x.ndim, axes)
    lines = tuple(x.shape[d] for d in kept) + (math.prod(x.shape[a] for a in axes),)
    x_lines = shapes.reshape(x, lines, kept + axes)
    t_lines = shapes.reshape(t, lines, kept + axes)
    last = len(lines) - 1
    before = _pad_along(cumprod(x_lines, last), 1, last, (1, -1, 0))
    after = _pad_along(cumprod(x_lines, last, reverse=True), 1, last, (-1, 1, 0))
    others = elementwise.mul(before, after)
    return ans, reduce_sum_p.bind(elementwise.mul(t_lines, others), axes=(last,))


reduce_prod_p.not_applicable["transpose"] = "not linear"

for _prim in (reduce_and_p, reduce_or_p):
    defjvp_zero(_prim)
    _prim.not_applicable["transpose"] = "not linear"


# Batching. The batch axis is one more axis the reduction keeps: the reduced axes shift past
# it, and it lands where it was, less the reduced axes before it.


def _axes_past(axes: tuple[int, ...], dim: int) -> tuple[int, ...]:
    """Lane `axes` as axes of the batched operand, whose batch axis is `dim` (still sorted)."""
    return tuple(a + (a >= dim) for a in axes)


def _axes_reduction_batch(prim: Primitive) -> None:
    def rule(values, dims, *, axes, **params):
        (x,), (dim,) = values, dims
        out_dim = dim - sum(a < dim for a in axes)
        return prim.bind(x, axes=_axes_past(axes, dim), **params), out_dim

    prim.def_batch(rule)


# The reductions over axes (each one's params: `axes` alone).
AXES_REDUCTIONS = (
    reduce_sum_p,
    reduce_prod_p,
    reduce_max_p,
    reduce_min_p,
    reduce_and_p,
    reduce_or_p,
)

for _prim in AXES_REDUCTIONS:
    _axes_reduction_batch(_prim)

# ---------------------------------------------------------------------------------------------
# argmax and argmin


def _index_reduction_primitive(name: str, np_search: Callable) -> Primitive:
    """argmax/argmin: a NaN counts as the extreme value and ties go to the first index."""
    prim = Primitive(name)

    @prim.def_abstract_eval
    def abstract_eval(x: ShapedArray, *, axes: tuple[int, ...], index_dtype: np.dtype):
        check_dtype_class(name, x, REAL)
        _check_axes(name, axes, x.shape)
        if len(axes) != 1:
            raise ValueError(
                f"{name} reduces exactly one axis, got axes {axes} for shape {x.shape}"
            )
        if x.shape[axes[0]] == 0:
            raise ValueError(
                f"{name}: axis {axes[0]} of operand shape {x.shape} is empty, so it has no "
                "extreme element"
            )
        if not dtypes.is_int(index_dtype):
            raise TypeError(
                f"{name}: index_dtype must be an integer dtype, got {np.dtype(index_dtype).name}"
            )
        return ShapedArray(_reduced_shape(x.shape, axes), index_dtype)

    @prim.def_impl
    def impl(x, *, axes, index_dtype):
        # NumPy's argmax/argmin already return the first NaN, else the first extreme element.
        return _result(np_search(_comparable(np.asarray(x)), axis=axes[0]), index_dtype)

    prim.def_weak_type(never_weak)
    return prim


argmax_p = _index_reduction_primitive("argmax", np.argmax)
argmin_p = _index_reduction_primitive("argmin", np.argmin)

for _prim in (argmax_p, argmin_p):
    defjvp_zero(_prim)
    _prim.not_applicable["transpose"] = "not linear"
    _axes_reduction_batch(_prim)


def argmax(operand, axis: int, index_dtype):
    """Index of the largest element along `axis` (a NaN counts as the largest)."""
    operand = asarray(operand)
    axes = _normalize_axes("argmax", (axis,), operand.shape)
    return argmax_p.bind(operand, axes=axes, index_dtype=dtypes.canonicalize(index_dtype))


def argmin(operand, axis: int, index_dtype):
    """Index of the smallest element along `axis` (a NaN counts as the smallest)."""
    operand = asarray(operand)
    axes = _normalize_axes("argmin", (axis,), operand.shape)
    return argmin_p.bind(operand, axes=axes, index_dtype=dtypes.canonicalize(index_dtype))


# ---------------------------------------------------------------------------------------------
# Cumulative reductions


def _cumulative_primitive(name: str, accepted, accumulate: Callable) -> Primitive:
    prim = Primitive(name)

    @prim.def_abstract_eval
    def abstract_eval(x: ShapedArray, *, axis: int, reverse: bool) -> ShapedArray:
        check_dtype_class(name, x, accepted)
        if not 0 <= axis < x.ndim:
            raise ValueError(f"{name}: axis {axis} is out of bounds for operand shape {x.shape}")
        return ShapedArray(x.shape, x.dtype)

    @prim.def_impl
    def impl(x, *, axis, reverse):
        x = np.asarray(x)
        if reverse:
            return np.flip(accumulate(np.flip(x, axis), axis), axis)
        return accumulate(x, axis)

    return prim


def _cumsum(x, axis):
    acc = _accumulation_dtype(x.dtype)
    return np.cumsum(x.astype(acc, copy=False), axis=axis, dtype=acc).astype(x.dtype, copy=False)


def _cumprod(x, axis):
    acc = _accumulation_dtype(x.dtype)
    return np.cumprod(x.astype(acc, copy=False), axis=axis, dtype=acc).astype(x.dtype, copy=False)


def _cummax(x, axis):
    wide = _comparable(x)
    out = np.maximum.accumulate(wide, axis=axis)
    return _running_zero_of_sign(out, wide, axis, negative=False).astype(x.dtype, copy=False)


def _cummin(x, axis):
    wide = _comparable(x)
    out = np.minimum.accumulate(wide, axis=axis)
    return _running_zero_of_sign(out, wide, axis, negative=True).astype(x.dtype, copy=False)


def _running_zero_of_sign(out, x: np.ndarray, axis: int, negative: bool):
    """`_zero_of_sign` for each prefix along `axis`: cummax(1, -0.0, 0.0) ends in +0."""
    if not dtypes.is_float(x.dtype):
        return out
    seen = np.logical_or.accumulate((x == 0) & (np.signbit(x) == negative), axis=axis)
    signed_zero = np.copysign(np.zeros((), x.dtype), -1 if negative else 1)
    return np.where((out == 0) & seen, signed_zero, out)


def _cumlogsumexp(x, axis):
    # Each step is a stable log-add: logaddexp(a, b) = max(a, b) + log1p(exp(-|a - b|)), so the
    # running value carries the running maximum and exp never overflows.
    acc = _accumulation_dtype(x.dtype)
    return np.logaddexp.accumulate(x.astype(acc, copy=False), axis=axis).astype(x.dtype)


cumsum_p = _cumulative_primitive("cumsum", NUMERIC, _cumsum)
cumprod_p = _cumulative_primitive("cumprod", NUMERIC, _cumprod)
cummax_p = _cumulative_primitive("cummax", REAL_NUMERIC, _cummax)
cummin_p = _cumulative_primitive("cummin", REAL_NUMERIC, _cummin)
cumlogsumexp_p = _cumulative_primitive("cumlogsumexp", FLOAT, _cumlogsumexp)


def _cumulative_wrapper(prim: Primitive) -> Callable:
    def cumulative(operand, axis: int = 0, reverse: bool = False):
        operand = asarray(operand)
        (axis,) = _normalize_axes(prim.name, (axis,), operand.shape)
        return prim.bind(operand, axis=axis, reverse=bool(reverse))

    cumulative.__name__ = cumulative.__qualname__ = prim.name
    cumulative.__doc__ = (
        f"Running reduction along `axis`, from the end when `reverse` (the `{prim.name}` "
        "primitive)."
    )
    return cumulative


cumsum = _cumulative_wrapper(cumsum_p)
cumprod = _cumulative_wrapper(cumprod_p)
cummax = _cumulative_wrapper(cummax_p)
cummin = _cumulative_wrapper(cummin_p)
cumlogsumexp = _cumulative_wrapper(cumlogsumexp_p)


# Derivatives. cumsum is linear. The others differentiate their sequential definition
# y[i] = f(y[i - 1], x[i]): the tangent obeys the linear recurrence
# dy[i] = a[i] * dy[i - 1] + w[i] * t[i], where a and w are the partial derivatives of f,
# solved in log depth by `_linear_recurrence`.


def _cumsum_transpose(ct, x, *, axis, reverse):
    return [cumsum_p.bind(ct, axis=axis, reverse=not reverse)]


deflinear(cumsum_p, _cumsum_transpose)


def _linear_recurrence(a, b, axis: int):
    """h with h[i] = a[i] * h[i - 1] + b[i] along `axis`, where h[-1] = 0 (so a[0] is unused).

    A parallel prefix scan: neighbouring steps compose into one step (h -> a1 a0 h + a1 b0
    + b1), the recurrence at the odd positions is solved recursively at half the length, and
    each even position takes one step from the odd position before it. log2(n) levels of
    vectorized operations, linear in `b`.
    """
    n = b.shape[axis]
    if n < 2:
        return b
    half = n // 2

    def part(x, start, limit=None, stride=2):
        return shapes.slice_in_dim(x, start, limit, stride, axis)

    a_even, b_even = part(a, 0), part(b, 0)
    a_odd, b_odd = part(a, 1), part(b, 1)
    a_pair, b_pair = part(a_even, 0, half, 1), part(b_even, 0, half, 1)
    h_odd = _linear_recurrence(
        elementwise.mul(a_odd, a_pair),
        elementwise.add(elementwise.mul(a_odd, b_pair), b_odd),
        axis,
    )
    stepped = elementwise.add(
        elementwise.mul(part(a_even, 1, None, 1), part(h_odd, 0, n - half - 1, 1)),
        part(b_even, 1, None, 1),
    )
    h_even = shapes.concatenate([part(b_even, 0, 1, 1), stepped], axis)
    # Interleave: spread each half out with holes and let the other fill them.
    return elementwise.add(
        _pad_along(h_even, 0, axis, (0, 2 * half - n + 1, 1)),
        _pad_along(h_odd, 0, axis, (1, n - 2 * half, 1)),
    )


def _shifted(y, fill, axis: int):
    """y[i - 1] along `axis`, with `fill` at i = 0."""
    return _pad_along(y, fill, axis, (1, -1, 0))


def _cumprod_coefficients(x, y, axis):
    return x, _shifted(y, 1, axis)


def _tie_share(x, z, y):
    """The share of x's tangent in z = max(x, y) (or min): 1 if only x attains z, 1/2 if both
    do (JAX's rule for max and min), 0 if x does not."""
    x_attains = elementwise.convert_element_type(elementwise.eq(x, z), x.dtype)
    y_attains = elementwise.convert_element_type(elementwise.eq(y, z), x.dtype)
    return elementwise.mul(x_attains, elementwise.sub(1, elementwise.mul(0.5, y_attains)))


def _cumulative_chooser_coefficients(x, y, axis):
    # The running extreme is the left fold y[i] = max(y[i - 1], x[i]), each step splitting a
    # tie as max does: along a run of equal values the newest gets 1/2, the one before 1/4, ...
    # NaN before the first element: it equals nothing, so the first element gets its own tangent.
    # y[0] is x[0] itself, a NaN too (which equals nothing either): its share is 1 outright.
    previous = _shifted(y, np.nan, axis)
    own = _tie_share(x, y, previous)
    own = _pad_along(shapes.slice_in_dim(own, 1, None, 1, axis), 1, axis, (1, 0, 0))
    return _tie_share(previous, y, x), own


def _cumlogsumexp_coefficients(x, y, axis):
    # f(u, v) = log(exp(u) + exp(v)) has partials exp(u - f) and exp(v - f). Where the running
    # value is infinite no finite change of an input moves it: both partials are 0 there, and
    # the differences are replaced before exp so that no NaN reaches a derivative.
    previous = _shifted(y, -np.inf, axis)
    finite = elementwise.is_finite(y)
    never = shapes.full_like(y, -np.inf)

    def partial(u):
        return elementwise.exp(elementwise.select(finite, elementwise.sub(u, y), never))

    return partial(previous), partial(x)


def _cumulative_jvp(prim: Primitive, coefficients: Callable) -> None:
    """Declare prim's jvp from `coefficients(x, y, axis) -> (a, w)` of the forward scan."""

    def jvp(primals, tangents, *, axis, reverse):
        (x,), (t,) = primals, tangents
        y = prim.bind(x, axis=axis, reverse=reverse)
        if x.shape[axis] < 2:
            return y, t  # y is x itself
        if not reverse:
            a, w = coefficients(x, y, axis)
            return y, _linear_recurrence(a, elementwise.mul(w, t), axis)
        # A reverse scan is the forward scan of the reversed operand, reversed.
        x_r, t_r, y_r = (shapes.rev(v, (axis,)) for v in (x, t, y))
        a, w = coefficients(x_r, y_r, axis)
        return y, shapes.rev(_linear_recurrence(a, elementwise.mul(w, t_r), axis), (axis,))

    prim.def_jvp(jvp)
    prim.not_applicable["transpose"] = "not linear"


_cumulative_jvp(cumprod_p, _cumprod_coefficients)
_cumulative_jvp(cummax_p, _cumulative_chooser_coefficients)
_cumulative_jvp(cummin_p, _cumulative_chooser_coefficients)
_cumulative_jvp(cumlogsumexp_p, _cumlogsumexp_coefficients)


def _cumulative_batch(prim: Primitive) -> None:
    """The scan runs along the same lane axis, which shifts past the batch axis."""

    def rule(values, dims, *, axis, reverse):
        (x,), (dim,) = values, dims
        return prim.bind(x, axis=axis + (axis >= dim), reverse=reverse), dim

    prim.def_batch(rule)


for _prim in (cumsum_p, cumprod_p, cummax_p, cummin_p, cumlogsumexp_p):
    _cumulative_batch(_prim)

# ---------------------------------------------------------------------------------------------
# Windowed reductions (pooling) and the gradient of max pooling


def _dilate(size: int, dilation: int) -> int:
    """Length of `size` elements with `dilation - 1` holes between neighbours."""
    return 0 if size == 0 else (size - 1) * dilation + 1


def _window_output_shape(
    name: str,
    shape: tuple[int, ...],
    window_dimensions: tuple[int, ...],
    window_strides: tuple[int, ...],
    padding: tuple[tuple[int, int], ...],
    base_dilation: tuple[int, ...],
    window_dilation: tuple[int, ...],
) -> tuple[int, ...]:
    """Check windowing parameters against operand `shape`; return the number of windows."""
    per_dim = {
        "window_dimensions": window_dimensions,
        "window_strides": window_strides,
        "padding": padding,
        "base_dilation": base_dilation,
        "window_dilation": window_dilation,
    }
    for param, value in per_dim.items():
        if len(value) != len(shape):
            raise TypeError(
                f"{name}: {param} {value} must have one entry per dimension of operand shape "
                f"{shape}"
            )
        if param != "padding" and any(v < 1 for v in value):
            raise ValueError(f"{name}: {param} must be positive, got {value} for shape {shape}")
    if any(len(pair) != 2 or pair[0] < 0 or pair[1] < 0 for pair in padding):
        raise ValueError(
            f"{name}: padding must be non-negative (low, high) pairs, got {padding} for "
            f"operand shape {shape}"
        )
    out = []
    for size, window, stride, (lo, hi), base, dilation in zip(
        shape, window_dimensions, window_strides, padding, base_dilation, window_dilation
    ):
        room = _dilate(size, base) + lo + hi - _dilate(window, dilation)
        out.append(room // stride + 1 if room >= 0 else 0)
    return tuple(out)


def _windows(
    x: np.ndarray,
    fill: np.generic,
    window_dimensions,
    window_strides,
    padding,
    base_dilation,
    window_dilation,
) -> np.ndarray:
    """A view of `x` with one axis per output position, then one per window element.

    Padding and the holes that base dilation opens hold `fill`: the reduction's identity.
    """
    padded = np.full(
        [_dilate(n, d) + lo + hi for n, d, (lo, hi) in zip(x.shape, base_dilation, padding)],
        fill,
        x.dtype,
    )
    padded[
        tuple(
            slice(lo, lo + _dilate(n, d), d)
            for n, d, (lo, _) in zip(x.shape, base_dilation, padding)
        )
    ] = x
    spans = tuple(_dilate(w, d) for w, d in zip(window_dimensions, window_dilation))
    if any(size < span for size, span in zip(padded.shape, spans)):
        counts = tuple(
            max((size - span) // stride + 1, 0)
            for size, span, stride in zip(padded.shape, spans, window_strides)
        )
        return np.empty(counts + tuple(window_dimensions), x.dtype)
    view = np.lib.stride_tricks.sliding_window_view(padded, spans)
    every_stride = tuple(slice(None, None, s) for s in window_strides)
    every_dilation = tuple(slice(None, None, d) for d in window_dilation)
    return view[every_stride + every_dilation]


def _window_primitive(name: str, accepted, identity: Callable, np_reduce: np.ufunc) -> Primitive:
    prim = Primitive(name)

    @prim.def_abstract_eval
    def abstract_eval(x: ShapedArray, **window) -> ShapedArray:
        check_dtype_class(name, x, accepted)
        return ShapedArray(_window_output_shape(name, x.shape, **window), x.dtype)

    @prim.def_impl
    def impl(x, **window):
        x = np.asarray(x)
        # Sums accumulate in the accumulation dtype from its zero; extrema compare in the
        # narrow formats' compute dtype, from the format's own extreme.
        widen = np_reduce is np.add or dtypes.is_narrow(x.dtype)
        acc = _accumulation_dtype(x.dtype) if widen else x.dtype
        fill = identity(np.dtype(acc)) if np_reduce is np.add else identity(x.dtype)
        windows = _windows(x.astype(acc, copy=False), fill, **window)
        window_axes = tuple(range(x.ndim, 2 * x.ndim))
        out = np_reduce.reduce(windows, axis=window_axes, dtype=acc)
        if np_reduce is not np.add:
            out = _zero_of_sign(out, windows, window_axes, negative=np_reduce is np.minimum)
        return _result(out, x.dtype)

    return prim


reduce_window_sum_p = _window_primitive("reduce_window_sum", NUMERIC, _zero, np.add)
reduce_window_max_p = _window_primitive("reduce_window_max", REAL, dtypes.lowest, np.maximum)
reduce_window_min_p = _window_primitive("reduce_window_min", REAL, dtypes.highest, np.minimum)


# Derivatives. Sum pooling is linear; max and min pooling pass on the tangent of the element
# each window selects, the element select_and_scatter_add (their transpose) scatters to.


def _reduce_window_sum_transpose(
    ct, x, *, window_dimensions, window_strides, padding, base_dilation, window_dilation
):
    # Output o sums the dilated, padded operand at o * stride + k * window_dilation. Spread
    # the cotangent out by the strides and pad it so that a window-dilated sum pooling with
    # strides base_dilation lands exactly on the operand's elements (negative pads crop the
    # cotangents that only reached padding).
    shape = x.aval.shape
    if 0 in shape:
        return [shapes.full(shape, 0, ct.dtype)]
    config = []
    for n, w, s, (lo, _), b, d, m in zip(
        shape, window_dimensions, window_strides, padding, base_dilation, window_dilation, ct.shape
    ):
        low = (w - 1) * d - lo
        length = (n - 1) * b + _dilate(w, d)
        config.append((low, length - low - _dilate(m, s), s - 1))
    ones = (1,) * len(shape)
    return [
        reduce_window_sum_p.bind(
            shapes.pad(ct, 0, config),
            window_dimensions=window_dimensions,
            window_strides=base_dilation,
            padding=((0, 0),) * len(shape),
            base_dilation=ones,
            window_dilation=window_dilation,
        )
    ]


deflinear(reduce_window_sum_p, _reduce_window_sum_transpose)


def _select_and_gather(
    tangent,
    operand,
    select_prim: Primitive,
    window_dimensions,
    window_strides,
    padding,
    base_dilation,
    window_dilation,
):
    """Per window, `tangent` at the element of `operand` that the window selects.

    The selection is select_and_scatter_add's (XLA's SelectAndScatter): walk the window's
    elements in row-major order, never choosing padding or dilation holes, and move to a
    candidate unless `select_prim(selected, candidate)` holds. One strided slice per window
    offset vectorizes the walk over all windows; the result is linear in `tangent`, and its
    transpose is select_and_scatter_add.
    """
    out_shape = _window_output_shape(
        "select_and_gather",
        operand.shape,
        window_dimensions,
        window_strides,
        padding,
        base_dilation,
        window_dilation,
    )
    if 0 in out_shape:
        return shapes.full(out_shape, 0, tangent.dtype)
    config = [(lo, hi, b - 1) for (lo, hi), b in zip(padding, base_dilation)]
    values = shapes.pad(operand, 0, config)
    tangents = shapes.pad(tangent, 0, config)
    in_operand = shapes.pad(shapes.full(operand.shape, True, dtypes.bool_), False, config)
    keeps = elementwise.ge if select_prim is elementwise.ge_p else elementwise.le
    chosen = shapes.full(out_shape, False, dtypes.bool_)
    chosen_value = shapes.full(out_shape, 0, operand.dtype)
    chosen_tangent = shapes.full(out_shape, 0, tangent.dtype)
    for offset in np.ndindex(*window_dimensions):
        start = [k * d for k, d in zip(offset, window_dilation)]
        limit = [i + (m - 1) * s + 1 for i, m, s in zip(start, out_shape, window_strides)]
        value, tangent_here, valid = (
            shapes.slice(v, start, limit, window_strides) for v in (values, tangents, in_operand)
        )
        kept = elementwise.bitwise_and(chosen, keeps(chosen_value, value))
        move = elementwise.bitwise_and(valid, elementwise.bitwise_not(kept))
        chosen = elementwise.bitwise_or(chosen, valid)
        chosen_value = elementwise.select(move, value, chosen_value)
        chosen_tangent = elementwise.select(move, tangent_here, chosen_tangent)
    return chosen_tangent


def _window_chooser_jvp(prim: Primitive, select_prim: Primitive) -> None:
    def jvp(primals, tangents, **window):
        (x,), (t,) = primals, tangents
        return prim.bind(x, **window), _select_and_gather(t, x, select_prim, **window)

    prim.def_jvp(jvp)
    prim.not_applicable["transpose"] = "not linear"


_window_chooser_jvp(reduce_window_max_p, elementwise.ge_p)
_window_chooser_jvp(reduce_window_min_p, elementwise.le_p)


def _with_batch_window(window: dict, dim: int) -> dict:
    """Windowing params with a trivial window along a batch axis inserted at `dim`: size 1,
    stride 1, no padding, no dilation, so each lane is windowed on its own."""
    trivial = dict(
        window_dimensions=1, window_strides=1, padding=(0, 0), base_dilation=1, window_dilation=1
    )
    return {param: value[:dim] + (trivial[param],) + value[dim:] for param, value in window.items()}


def _window_batch(prim: Primitive) -> None:
    def rule(values, dims, **window):
        (x,), (dim,) = values, dims
        return prim.bind(x, **_with_batch_window(window, dim)), dim

    prim.def_batch(rule)


for _prim in (reduce_window_sum_p, reduce_window_max_p, reduce_window_min_p):
    _window_batch(_prim)

# The computations reduce_window accepts: each has a primitive and an identity init_value.
_WINDOW_REDUCTIONS = {
    elementwise.add: (reduce_window_sum_p, _zero),
    elementwise.max: (reduce_window_max_p, dtypes.lowest),
    elementwise.min: (reduce_window_min_p, dtypes.highest),
}


def padtype_to_pads(
    in_shape: Sequence[int],
    window_shape: Sequence[int],
    window_strides: Sequence[int],
    padding: str,
) -> list[tuple[int, int]]:
    """Explicit (low, high) pads for 'VALID' (none) or 'SAME' (output size ceil(n / stride)).

    'SAME' puts the odd element of padding at the end; 'SAME_LOWER' puts it at the start.
    """
    if not len(in_shape) == len(window_shape) == len(window_strides):
        raise ValueError(
            f"padtype_to_pads: in_shape {tuple(in_shape)}, window_shape {tuple(window_shape)} "
            f"and window_strides {tuple(window_strides)} must have the same length"
        )
    kind = padding.upper()
    if kind == "VALID":
        return [(0, 0)] * len(in_shape)
    if kind not in ("SAME", "SAME_LOWER"):
        raise ValueError(
            f"padtype_to_pads: unknown padding {padding!r}; expected 'SAME', 'SAME_LOWER', "
            "'VALID' or a sequence of (low, high) pairs"
        )
    pads = []
    for size, window, stride in zip(in_shape, window_shape, window_strides):
        out_size = -(-size // stride)
        total = max((out_size - 1) * stride + window - size, 0)
        small, large = total // 2, total - total // 2
        pads.append((small, large) if kind == "SAME" else (large, small))
    return pads


def _window_params(shape, window_dimensions, window_strides, padding, window_dilation) -> dict:
    """Canonical, hashable windowing params; string padding is resolved against `shape`."""
    window_dimensions = tuple(int(w) for w in window_dimensions)
    window_strides = tuple(int(s) for s in window_strides)
    if isinstance(padding, str):
        spans = [_dilate(w, d) for w, d in zip(window_dimensions, window_dilation)]
        padding = padtype_to_pads(shape, spans, window_strides, padding)
    return dict(
        window_dimensions=window_dimensions,
        window_strides=window_strides,
        padding=tuple(tuple(int(p) for p in pair) for pair in padding),
    )


def _dilation_param(dilation: Sequence[int] | None, ndim: int) -> tuple[int, ...]:
    return (1,) * ndim if dilation is None else tuple(int(d) for d in dilation)


def _concrete_init_value(init_value) -> np.ndarray:
    init_value = core.concrete_or_error(
        init_value,
        "reduce_window needs a concrete init_value: its value decides which windowed "
        "reduction runs.",
    )
    return np.asarray(init_value)


def reduce_window(
    operand,
    init_value,
    computation: Callable,
    window_dimensions: Sequence[int],
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
    base_dilation: Sequence[int] | None = None,
    window_dilation: Sequence[int] | None = None,
):
    """Reduce each window of `operand` with `computation`: `lax.add`, `lax.max` or `lax.min`.

    funcgrad has a primitive for each of these three monoids (sum, max and min pooling) and no
    generic windowed reduction, so `init_value` must be the computation's identity for the
    operand's dtype: 0 for add, -inf (or the integer minimum, or False) for max, +inf (or the
    integer maximum, or True) for min. String `padding` is resolved like `padtype_to_pads`,
    against the undilated operand shape and the dilated window.
    """
    operand = asarray(operand)
    if computation not in _WINDOW_REDUCTIONS:
        raise TypeError(
            f"reduce_window: computation {getattr(computation, '__name__', computation)!r} is "
            "not supported; funcgrad.lax.reduce_window takes lax.add, lax.max or lax.min"
        )
    prim, identity = _WINDOW_REDUCTIONS[computation]
    init = _concrete_init_value(init_value)
    expected = identity(operand.dtype)
    if init.shape != () or init.item() != expected.item():
        raise ValueError(
            f"reduce_window: init_value {init.tolist()} is not the identity {expected.item()} of "
            f"{computation.__name__} for an operand of dtype {operand.dtype.name} and shape "
            f"{operand.shape}; only the identity is supported (there is no generic windowed "
            "reduction)"
        )
    base_dilation = _dilation_param(base_dilation, operand.ndim)
    window_dilation = _dilation_param(window_dilation, operand.ndim)
    params = _window_params(
        operand.shape, window_dimensions, window_strides, padding, window_dilation
    )
    return prim.bind(
        operand, **params, base_dilation=base_dilation, window_dilation=window_dilation
    )


select_and_scatter_add_p = Primitive("select_and_scatter_add")


@select_and_scatter_add_p.def_abstract_eval
def _select_and_scatter_add_abstract_eval(
    source: ShapedArray,
    operand: ShapedArray,
    *,
    select_prim: Primitive,
    window_dimensions: tuple[int, ...],
    window_strides: tuple[int, ...],
    padding: tuple[tuple[int, int], ...],
) -> ShapedArray:
    name = "select_and_scatter_add"
    if select_prim is not elementwise.ge_p and select_prim is not elementwise.le_p:
        raise TypeError(f"{name}: select_prim must be ge_p or le_p, got {select_prim}")
    dtype = check_same_dtypes(name, [source, operand])
    check_dtype_class(name, source, NUMERIC)
    ones = (1,) * operand.ndim
    windows = _window_output_shape(
        name, operand.shape, window_dimensions, window_strides, padding, ones, ones
    )
    if source.shape != windows:
        raise TypeError(
            f"{name}: source shape {source.shape} must be the window-count shape {windows} of "
            f"operand shape {operand.shape} with window_dimensions {window_dimensions}, "
            f"window_strides {window_strides} and padding {padding}"
        )
    return ShapedArray(operand.shape, dtype)


@select_and_scatter_add_p.def_impl
def _select_and_scatter_add_impl(
    source, operand, *, select_prim, window_dimensions, window_strides, padding
):
    """Scatter each window's `source` value onto the element that window selects.

    Selection follows XLA's SelectAndScatter: walk the window's in-bounds elements in row-major
    order and move to a candidate unless `select_prim(selected, candidate)` holds, so ge picks
    the first maximum and le the first minimum. Padding is never selected.
    """
    source, operand = np.asarray(source), np.asarray(operand)
    ones = (1,) * operand.ndim
    window = dict(
        window_dimensions=window_dimensions,
        window_strides=window_strides,
        padding=padding,
        base_dilation=ones,
        window_dilation=ones,
    )
    values = _windows(operand, _zero(operand.dtype), **window)
    flat_positions = np.arange(operand.size).reshape(operand.shape)
    positions = _windows(flat_positions, flat_positions.dtype.type(-1), **window)
    keeps_selected = np.greater_equal if select_prim is elementwise.ge_p else np.less_equal
    selected_value = np.zeros(source.shape, operand.dtype)
    selected_position = np.full(source.shape, -1)
    for offset in np.ndindex(*window_dimensions):
        value, position = values[(..., *offset)], positions[(..., *offset)]
        move = (position >= 0) & ((selected_position < 0) | ~keeps_selected(selected_value, value))
        selected_value = np.where(move, value, selected_value)
        selected_position = np.where(move, position, selected_position)
    out = np.zeros(operand.size, source.dtype)
    chosen = selected_position >= 0
    np.add.at(out, selected_position[chosen], source[chosen])
    return _result(out.reshape(operand.shape), source.dtype)


@select_and_scatter_add_p.def_weak_type
def _select_and_scatter_add_weak_type(weak_flags, **params) -> bool:
    return weak_flags[0]  # the values come from source; operand only chooses where they go


def _select_and_scatter_add_tangent(t, source, operand, **params):
    return select_and_scatter_add_p.bind(t, operand, **params)


# Linear in source; the operand only decides where values go (piecewise constant).
defjvp(select_and_scatter_add_p, _select_and_scatter_add_tangent, None)


@select_and_scatter_add_p.def_transpose
def _select_and_scatter_add_transpose(
    ct, source, operand, *, select_prim, window_dimensions, window_strides, padding
):
    ones = (1,) * len(window_dimensions)
    ct_source = _select_and_gather(
        ct, operand, select_prim, window_dimensions, window_strides, padding, ones, ones
    )
    return [ct_source, None]


@select_and_scatter_add_p.def_batch
def _select_and_scatter_add_batch(values, dims, *, select_prim, **window):
    # Both operands need the batch axis at the same place, each lane selecting in its own
    # operand and scattering its own source: an unbatched one is broadcast, as no lane shares
    # its result with another.
    (source, operand), (source_dim, operand_dim) = values, dims
    size = batching.batch_size(values, dims)
    dim = operand_dim if operand_dim is not batching.not_mapped else source_dim
    if source_dim is batching.not_mapped:
        source = batching.broadcast_batch(source, size, dim)
    else:
        source = batching.moveaxis(source, source_dim, dim)
    if operand_dim is batching.not_mapped:
        operand = batching.broadcast_batch(operand, size, dim)
    out = select_and_scatter_add_p.bind(
        source, operand, select_prim=select_prim, **_with_batch_window(window, dim)
    )
    return out, dim


def select_and_scatter_add(
    source,
    operand,
    select_prim: Primitive,
    window_dimensions: Sequence[int],
    window_strides: Sequence[int],
    padding: str | Sequence[tuple[int, int]],
):
    """Add each window's `source` value at the element of `operand` that the window selects.

    With `select_prim=ge_p` this is the gradient of max pooling (`le_p`: min pooling):
    `source` has the shape of the pooled output and the result has `operand`'s shape.
    """
    source, operand = asarray(source), asarray(operand)
    ones = (1,) * operand.ndim
    params = _window_params(operand.shape, window_dimensions, window_strides, padding, ones)
    return select_and_scatter_add_p.bind(source, operand, select_prim=select_prim, **params)
