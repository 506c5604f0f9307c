"""Reductions, cumulative reductions and windowed reductions (pooling).

Every reduction keeps its operand's dtype, as XLA does: integer sums and products wrap around,
and reducing over no elements gives the identity of the operation (0, 1, -inf, True, ...).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from funcgrad import core, dtypes
from funcgrad.core import Primitive, ShapedArray, never_weak
from funcgrad.errors import ConcretizationTypeError
from funcgrad.lax import elementwise
from funcgrad.lax.base import (
    ANY,
    FLOAT,
    INT_OR_BOOL,
    NUMERIC,
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


def _lowest(dtype: np.dtype) -> np.generic:
    """The identity of max: nothing of `dtype` is smaller."""
    if dtypes.is_float(dtype):
        return dtype.type(-np.inf)
    if dtypes.is_bool(dtype):
        return dtype.type(False)
    return dtype.type(np.iinfo(dtype).min)


def _highest(dtype: np.dtype) -> np.generic:
    """The identity of min: nothing of `dtype` is larger."""
    if dtypes.is_float(dtype):
        return dtype.type(np.inf)
    if dtypes.is_bool(dtype):
        return dtype.type(True)
    return dtype.type(np.iinfo(dtype).max)


def _zero(dtype: np.dtype) -> np.generic:
    return dtype.type(0)


def _accumulation_dtype(dtype: np.dtype) -> np.dtype:
    # float16 and bfloat16 sums and products accumulate in float32 and round once at the end, as
    # XLA's backends do: a running float16 sum of ones stops growing at 2048 (bfloat16: 256).
    if dtype == dtypes.float16 or dtype == dtypes.bfloat16:
        return dtypes.float32
    return dtype


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
    return _result(np.maximum.reduce(x, axis=axes, initial=_lowest(x.dtype)), x.dtype)


def _reduce_min(x, *, axes):
    x = np.asarray(x)
    return _result(np.minimum.reduce(x, axis=axes, initial=_highest(x.dtype)), x.dtype)


def _reduce_and(x, *, axes):
    x = np.asarray(x)
    all_ones = np.invert(np.zeros((), x.dtype))[()]  # True for bool, every bit set for ints
    return _result(np.bitwise_and.reduce(x, axis=axes, initial=all_ones), x.dtype)


def _reduce_or(x, *, axes):
    x = np.asarray(x)
    return _result(np.bitwise_or.reduce(x, axis=axes, initial=_zero(x.dtype)), x.dtype)


reduce_sum_p = _reduction_primitive("reduce_sum", NUMERIC, _reduce_sum)
reduce_prod_p = _reduction_primitive("reduce_prod", NUMERIC, _reduce_prod)
reduce_max_p = _reduction_primitive("reduce_max", ANY, _reduce_max)
reduce_min_p = _reduction_primitive("reduce_min", ANY, _reduce_min)
reduce_and_p = _reduction_primitive("reduce_and", INT_OR_BOOL, _reduce_and)
reduce_or_p = _reduction_primitive("reduce_or", INT_OR_BOOL, _reduce_or)


def _reduction_wrapper(prim: Primitive) -> Callable:
    def reduce(operand, axes: Sequence[int]):
        operand = asarray(operand)
        return prim.bind(operand, axes=_normalize_axes(prim.name, axes, operand.shape))

    reduce.__name__ = reduce.__qualname__ = prim.name
    reduce.__doc__ = f"Reduce `operand` over `axes` (the `{prim.name}` primitive)."
    return reduce


reduce_sum = _reduction_wrapper(reduce_sum_p)
reduce_prod = _reduction_wrapper(reduce_prod_p)
reduce_max = _reduction_wrapper(reduce_max_p)
reduce_min = _reduction_wrapper(reduce_min_p)
reduce_and = _reduction_wrapper(reduce_and_p)
reduce_or = _reduction_wrapper(reduce_or_p)

# ---------------------------------------------------------------------------------------------
# argmax and argmin


def _comparable(x: np.ndarray) -> np.ndarray:
    # NumPy's searches and sorts of ml_dtypes' bfloat16 do not treat NaN specially; float32
    # holds every float16 and bfloat16 value exactly and does.
    if x.dtype == dtypes.float16 or x.dtype == dtypes.bfloat16:
        return x.astype(dtypes.float32)
    return x


def _index_reduction_primitive(name: str, np_search: Callable) -> Primitive:
    """argmax/argmin: a NaN counts as the extreme value and ties go to the first index."""
    prim = Primitive(name)

    @prim.def_abstract_eval
    def abstract_eval(x: ShapedArray, *, axes: tuple[int, ...], index_dtype: np.dtype):
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
    return np.maximum.accumulate(x, axis=axis)


def _cummin(x, axis):
    return np.minimum.accumulate(x, axis=axis)


def _cumlogsumexp(x, axis):
    # Each step is a stable log-add: logaddexp(a, b) = max(a, b) + log1p(exp(-|a - b|)), so the
    # running value carries the running maximum and exp never overflows.
    acc = _accumulation_dtype(x.dtype)
    return np.logaddexp.accumulate(x.astype(acc, copy=False), axis=axis).astype(x.dtype)


cumsum_p = _cumulative_primitive("cumsum", NUMERIC, _cumsum)
cumprod_p = _cumulative_primitive("cumprod", NUMERIC, _cumprod)
cummax_p = _cumulative_primitive("cummax", NUMERIC, _cummax)
cummin_p = _cumulative_primitive("cummin", NUMERIC, _cummin)
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
        acc = _accumulation_dtype(x.dtype) if np_reduce is np.add else x.dtype
        windows = _windows(x.astype(acc, copy=False), identity(np.dtype(acc)), **window)
        window_axes = tuple(range(x.ndim, 2 * x.ndim))
        return _result(np_reduce.reduce(windows, axis=window_axes, dtype=acc), x.dtype)

    return prim


reduce_window_sum_p = _window_primitive("reduce_window_sum", NUMERIC, _zero, np.add)
reduce_window_max_p = _window_primitive("reduce_window_max", ANY, _lowest, np.maximum)
reduce_window_min_p = _window_primitive("reduce_window_min", ANY, _highest, np.minimum)

# The computations reduce_window accepts: each has a primitive and an identity init_value.
_WINDOW_REDUCTIONS = {
    elementwise.add: (reduce_window_sum_p, _zero),
    elementwise.max: (reduce_window_max_p, _lowest),
    elementwise.min: (reduce_window_min_p, _highest),
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
    if isinstance(init_value, core.Tracer):
        try:
            init_value = init_value.to_concrete_value()
        except ConcretizationTypeError:
            raise ConcretizationTypeError(
                init_value,
                "reduce_window needs a concrete init_value: its value decides which windowed "
                "reduction runs.",
            ) from None
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
