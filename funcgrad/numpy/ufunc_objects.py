"""NumPy's ufunc objects: `fnp.add` and its kin also reduce, accumulate, update at indices,
reduce between indices and form outer products.

The common ufuncs route their methods to the reductions, cumulative scans and scatters that
already exist (`add.reduce` is `sum`, `maximum.at` is `.at[].max`); everything else folds the
wrapped function over the array with `lax.scan`, so `frompyfunc` turns any traceable binary
function into a ufunc with every method.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from funcgrad import core, dtypes, lax
from funcgrad.numpy import reductions, ufuncs
from funcgrad.numpy._promotion import broadcast_to, convert, to_array
from funcgrad.numpy.extra import vectorize
from funcgrad.numpy.reductions import _where_mask, check_no_out, reduction_axes
from funcgrad.numpy.shape_ops import canonicalize_axis, moveaxis, reshape
from funcgrad.transforms.make_jaxpr import eval_shape

__all__ = [
    "add",
    "bitwise_and",
    "bitwise_or",
    "bitwise_xor",
    "frompyfunc",
    "logaddexp",
    "logaddexp2",
    "logical_and",
    "logical_or",
    "logical_xor",
    "maximum",
    "minimum",
    "multiply",
    "negative",
    "subtract",
    "ufunc",
]


class ufunc:
    """A function applied element by element, with NumPy's ufunc methods.

    Calling a ufunc is the eager hot path, so each ufunc is made an instance of a subclass of
    its own whose `__call__` is the wrapped function itself: `fnp.add(x, y)` runs the
    elementwise `add` with no method frame in between.

    `call` is what calling the ufunc runs: by default `func` mapped over scalars (NumPy's
    ufuncs see one element at a time); the elementwise functions of funcgrad.numpy already
    broadcast, and pass themselves. `reduce`, `accumulate` and `at` are faster routes for
    those methods, with the methods' arguments; without them the methods fold `call`.
    """

    def __new__(cls, func: Callable, /, nin: int, nout: int, **options: Any) -> ufunc:
        call = options.get("call") or vectorize(func)
        namespace = {
            "__call__": staticmethod(call),
            "__wrapped__": staticmethod(call),  # where inspect.signature looks
            "__doc__": func.__doc__,
            "__slots__": (),
        }
        return super().__new__(type(cls.__name__, (cls,), namespace))

    def __init__(
        self,
        func: Callable,
        /,
        nin: int,
        nout: int,
        *,
        name: str | None = None,
        identity: Any = None,
        call: Callable | None = None,
        reduce: Callable | None = None,
        accumulate: Callable | None = None,
        at: Callable | None = None,
    ):
        self.__name__ = name or func.__name__
        self.nin = operator.index(nin)
        self.nout = operator.index(nout)
        self.identity = identity
        self._fast_reduce = reduce
        self._fast_accumulate = accumulate
        self._fast_at = at

    def __repr__(self) -> str:
        return f"<ufunc '{self.__name__}'>"

    def __reduce__(self):
        # Pickled (and deep-copied) by name, as functions are; the subclass cannot be.
        if globals().get(self.__name__) is not self:
            raise TypeError(f"cannot pickle {self!r}: only funcgrad.numpy's own ufuncs pickle")
        return _ufunc_named, (self.__name__,)

    def reduce(
        self,
        a,
        axis: int | tuple[int, ...] | None = 0,
        dtype=None,
        out=None,
        keepdims: bool = False,
        initial=None,
        where=None,
    ):
        """Fold the ufunc over `axis` (several axes only for ufuncs with an identity, whose
        order of combination cannot matter)."""
        name = f"{self.__name__}.reduce"
        self._check_binary(name)
        check_no_out(name, out)
        fold = self._fast_reduce or self._reduce_by_scan
        return fold(a, axis, dtype, keepdims, initial, where)

    def accumulate(self, a, axis: int = 0, dtype=None, out=None):
        """The running fold along `axis`: element i combines elements 0 through i."""
        name = f"{self.__name__}.accumulate"
        self._check_binary(name)
        check_no_out(name, out)
        a = to_array(a)
        if a.ndim == 0:
            raise TypeError(f"{name}: cannot accumulate over a rank-0 array")
        axis = _single_axis(name, axis, a.ndim)
        scan = self._fast_accumulate or self._accumulate_by_scan
        return scan(a, axis, dtype)

    def at(self, a, indices, b=None, /, *, inplace: bool = True):
        """`a` with the ufunc applied at `indices` (with `b` for binary ufuncs), returned.

        Repeated positions apply once per occurrence, in order. The update is never in
        place, so `inplace=False` must be passed to ask for the returned copy.
        """
        name = f"{self.__name__}.at"
        if inplace:
            raise NotImplementedError(
                f"{name}: funcgrad arrays are immutable, so a cannot be updated in place; pass "
                f"inplace=False and use the result: a = fnp.{self.__name__}.at(a, indices"
                f"{', b' if self.nin == 2 else ''}, inplace=False)"
            )
        if self.nout != 1 or self.nin not in (1, 2):
            raise ValueError(f"{name}: only ufuncs of one or two inputs and one output have at")
        if (b is None) != (self.nin == 1):
            raise TypeError(
                f"{name}: {self.__name__} takes {self.nin} input(s), so at takes "
                f"{'no values b' if self.nin == 1 else 'the values b'}"
            )
        if self._fast_at is not None:
            return self._fast_at(to_array(a), indices, b)
        return self._at_by_scan(to_array(a), indices, b)

    def reduceat(self, a, indices, axis: int = 0, dtype=None, out=None):
        """Reductions over the slices of `axis` between consecutive `indices` (the last up to
        the end); where an index is not below the next, that slot is the element at it."""
        name = f"{self.__name__}.reduceat"
        self._check_binary(name)
        check_no_out(name, out)
        a = to_array(a)
        if a.ndim == 0:
            raise ValueError(f"{name}: a must have at least one axis, got a rank-0 array")
        axis = _single_axis(name, axis, a.ndim)
        starts = _segment_starts(name, indices, a.shape[axis])
        if dtype is None:
            # The dtype reduce gives (add widens small integers, as sum does).
            dtype = np.dtype(eval_shape(self.reduce, core.ShapeDtypeStruct((1,), a.dtype)).dtype)
        else:
            dtype = dtypes.canonicalize(dtype)
        x = convert(moveaxis(a, axis, 0), dtype)
        length = x.shape[0]
        ends = lax.concatenate([starts, lax.full((1,), length, starts.dtype)], 0)[1:]
        segment_shape = (starts.shape[0],) + (1,) * (x.ndim - 1)
        first_elements = x[starts]
        starts, ends = lax.reshape(starts, segment_shape), lax.reshape(ends, segment_shape)

        def step(result, position_and_slice):
            position, x_slice = position_and_slice
            inside = lax.bitwise_and(lax.gt(position, starts), lax.lt(position, ends))
            combined = convert(self(result, lax.expand_dims(x_slice, (0,))), dtype)
            return _select(inside, combined, result), None

        positions = lax.iota(starts.dtype, length)
        result, _ = lax.scan(step, first_elements, (positions, x))
        return moveaxis(result, 0, axis)

    def outer(self, a, b, /):
        """The ufunc on every pair of an element of `a` and one of `b`: shape a.shape +
        b.shape."""
        self._check_binary(f"{self.__name__}.outer")
        a, b = to_array(a), to_array(b)
        return self(lax.reshape(a, a.shape + (1,) * b.ndim), b)

    # -----------------------------------------------------------------------------------------
    # The generic methods, which fold `call`

    def _check_binary(self, name: str) -> None:
        if self.nin != 2 or self.nout != 1:
            raise ValueError(
                f"{name}: only binary ufuncs with one output have this method; "
                f"{self.__name__} takes {self.nin} input(s) and gives {self.nout} output(s)"
            )

    def _fold_dtype(self, a_dtype: np.dtype, dtype) -> np.dtype:
        """The requested dtype, else what the ufunc gives on two elements of `a`."""
        if dtype is not None:
            return dtypes.canonicalize(dtype)
        element = core.ShapeDtypeStruct((), a_dtype)
        return np.dtype(eval_shape(self, element, element).dtype)

    def _reduce_by_scan(self, a, axis, dtype, keepdims: bool, initial, where):
        name = f"{self.__name__}.reduce"
        a = to_array(a)
        axes = reduction_axes(name, axis, a.ndim)
        if len(axes) > 1 and self.identity is None:
            raise ValueError(
                f"{name}: {self.__name__} has no identity, so the order of combination may "
                f"matter and it reduces over one axis at a time; got axes {axes} of an array "
                f"of shape {a.shape}"
            )
        dtype = self._fold_dtype(a.dtype, dtype)
        kept_shape = tuple(size for ax, size in enumerate(a.shape) if ax not in axes)
        x = convert(_stack_axes_first(a, axes), dtype)
        mask = None
        if where is not None:
            mask = _stack_axes_first(_where_mask(name, where, a.shape), axes)
        start = None if initial is None else convert(initial, dtype)
        if start is None and self.identity is not None and (mask is not None or x.shape[0] == 0):
            # Through NumPy, which wraps an identity of -1 to all bits set in unsigned dtypes.
            start = lax.asarray(np.asarray(self.identity).astype(dtype))
        if start is None:
            if mask is not None:
                raise ValueError(
                    f"{name}: {self.__name__} has no identity, so a where mask needs an "
                    "initial value (for the slices it masks out entirely)"
                )
            if x.shape[0] == 0:
                raise ValueError(
                    f"{name}: cannot reduce an array of shape {a.shape} over a zero-size axis: "
                    f"{self.__name__} has no identity; pass an initial value"
                )
            carry, xs = x[0], (x[1:],)
        else:
            carry, xs = broadcast_to(start, kept_shape), (x,)
            if mask is not None:
                xs = (x, mask)

        def step(result, slices):
            combined = convert(self(result, slices[0]), dtype)
            if len(slices) == 2:
                combined = _select(slices[1], combined, result)
            return combined, None

        result, _ = lax.scan(step, carry, xs)
        return reductions.keep_reduced_dims(result, axes) if keepdims else result

    def _accumulate_by_scan(self, a, axis: int, dtype):
        dtype = self._fold_dtype(a.dtype, dtype)
        x = convert(moveaxis(a, axis, 0), dtype)
        if x.shape[0] == 0:
            return moveaxis(x, 0, axis)

        def step(running, x_slice):
            running = convert(self(running, x_slice), dtype)
            return running, running

        _, rest = lax.scan(step, x[0], x[1:])
        return moveaxis(lax.concatenate([x[:1], rest], 0), 0, axis)

    def _at_by_scan(self, a, indices, b):
        # Each element that a[indices] selects is updated in turn at its flat position, so
        # a position named twice is updated twice, the second time from the first's result.
        positions = lax.reshape(lax.iota(dtypes.int32, a.size), a.shape)[indices]
        flat_positions = lax.reshape(positions, (positions.size,))
        if positions.size == 0:
            return a
        xs = (flat_positions,)
        if b is not None:
            values = broadcast_to(to_array(b), positions.shape)
            xs = (flat_positions, lax.reshape(values, (values.size,)))

        def step(flat, position_and_value):
            position = position_and_value[0]
            current = lax.dynamic_slice(flat, (position,), (1,))
            updated = convert(self(current, *position_and_value[1:]), flat.dtype)
            return lax.dynamic_update_slice(flat, updated, (position,)), None

        flat, _ = lax.scan(step, lax.reshape(a, (a.size,)), xs)
        return lax.reshape(flat, a.shape)


def _ufunc_named(name: str) -> ufunc:
    return globals()[name]


def _single_axis(name: str, axis, ndim: int) -> int:
    if axis is None or isinstance(axis, (tuple, list)):
        raise ValueError(f"{name}: axis must be a single integer, got {axis!r}")
    return canonicalize_axis(operator.index(axis), ndim, name)


def _stack_axes_first(x, axes: tuple[int, ...]):
    """`x` with `axes` moved to the front and merged into one."""
    merged = math.prod(x.shape[ax] for ax in axes)
    kept_shape = tuple(size for ax, size in enumerate(x.shape) if ax not in axes)
    return reshape(moveaxis(x, axes, tuple(range(len(axes)))), (merged, *kept_shape))


def _select(pred, on_true, on_false):
    return lax.select(broadcast_to(pred, on_true.shape), on_true, on_false)


def _segment_starts(name: str, indices, length: int):
    starts = to_array(indices)
    if starts.ndim != 1 or not dtypes.is_int(starts.dtype):
        raise ValueError(
            f"{name}: indices must be a 1-d integer array, got {starts.dtype.name} of shape "
            f"{starts.shape}"
        )
    if not isinstance(starts, core.Tracer):
        bad = np.asarray(starts._value)
        bad = bad[(bad < 0) | (bad >= length)]
        if bad.size:
            raise IndexError(
                f"{name}: index {bad[0]} is out of bounds for an axis of length {length}"
            )
    return convert(starts, dtypes.int32)


# ---------------------------------------------------------------------------------------------
# Faster routes for the common ufuncs


def _as_dtype(a, dtype):
    return to_array(a) if dtype is None else convert(a, dtypes.canonicalize(dtype))


def _sum(a, axis, dtype, keepdims, initial, where):
    return reductions.sum(a, axis, dtype, None, keepdims, initial, where)


def _prod(a, axis, dtype, keepdims, initial, where):
    return reductions.prod(a, axis, dtype, None, keepdims, initial, where)


def _extremum(reduction: Callable) -> Callable:
    def reduce(a, axis, dtype, keepdims, initial, where):
        return reduction(_as_dtype(a, dtype), axis, None, keepdims, initial, where)

    return reduce


def _logical(reduction: Callable, combine: Callable) -> Callable:
    def reduce(a, axis, dtype, keepdims, initial, where):
        result = reduction(a, axis, None, keepdims, where=where)
        if initial is not None:
            result = combine(result, initial)
        return _as_dtype(result, dtype)

    return reduce


def _cumulative_sum(a, axis, dtype):
    # Integers widen as in sum (and NumPy's add.accumulate), so the last element is add.reduce.
    return reductions.cumulative_sum(a, axis=axis, dtype=dtype)


def _cumulative_prod(a, axis, dtype):
    return reductions.cumulative_prod(a, axis=axis, dtype=dtype)


def _cumulative_extremum(scan: Callable) -> Callable:
    def accumulate(a, axis, dtype):
        a = _as_dtype(a, dtype)
        if dtypes.is_bool(a.dtype):
            return convert(scan(convert(a, dtypes.uint8), axis), dtypes.bool_)
        return scan(a, axis)

    return accumulate


def _subtract_at(a, indices, b):
    return a.at[indices].add(ufuncs.negative(convert(b, a.dtype)))


def _elementwise(func: Callable, nin: int, **options: Any) -> ufunc:
    """The ufunc of one of funcgrad's own elementwise functions, which broadcast already, so
    calling the ufunc calls the function itself."""
    return ufunc(func, nin, 1, call=func, **options)


add = _elementwise(
    ufuncs.add,
    2,
    identity=0,
    reduce=_sum,
    accumulate=_cumulative_sum,
    at=lambda a, indices, b: a.at[indices].add(b),
)
multiply = _elementwise(
    ufuncs.multiply,
    2,
    identity=1,
    reduce=_prod,
    accumulate=_cumulative_prod,
    at=lambda a, indices, b: a.at[indices].multiply(b),
)
maximum = _elementwise(
    ufuncs.maximum,
    2,
    reduce=_extremum(reductions.max),
    accumulate=_cumulative_extremum(lax.cummax),
    at=lambda a, indices, b: a.at[indices].max(b),
)
minimum = _elementwise(
    ufuncs.minimum,
    2,
    reduce=_extremum(reductions.min),
    accumulate=_cumulative_extremum(lax.cummin),
    at=lambda a, indices, b: a.at[indices].min(b),
)
subtract = _elementwise(ufuncs.subtract, 2, at=_subtract_at)
logical_and = _elementwise(
    ufuncs.logical_and,
    2,
    identity=True,
    reduce=_logical(reductions.all, ufuncs.logical_and),
)
logical_or = _elementwise(
    ufuncs.logical_or,
    2,
    identity=False,
    reduce=_logical(reductions.any, ufuncs.logical_or),
)
logical_xor = _elementwise(ufuncs.logical_xor, 2, identity=False)
bitwise_and = _elementwise(ufuncs.bitwise_and, 2, identity=-1)
bitwise_or = _elementwise(ufuncs.bitwise_or, 2, identity=0)
bitwise_xor = _elementwise(ufuncs.bitwise_xor, 2, identity=0)
logaddexp = _elementwise(ufuncs.logaddexp, 2, identity=-np.inf)
logaddexp2 = _elementwise(ufuncs.logaddexp2, 2, identity=-np.inf)
negative = _elementwise(ufuncs.negative, 1)


def frompyfunc(func: Callable, /, nin: int, nout: int, *, identity: Any = None) -> ufunc:
    """A ufunc from a traceable function of `nin` scalars, which calls see element by
    element. With an `identity` it reduces empty arrays, where masks and several axes at
    once."""
    return ufunc(func, nin, nout, identity=identity)
