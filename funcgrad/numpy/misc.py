"""Ranges, grids, triangles and diagonals, selection, and closeness tests, with NumPy's names.

Functions whose result shape depends on values (arange's bounds, nonzero's count) need those
values to be static; `nonzero` and friends take a static `size=` to work under tracing.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

from funcgrad import core, dtypes, lax
from funcgrad.array import Array
from funcgrad.lax.sharding_constraint import placed
from funcgrad.numpy import reductions, ufuncs
from funcgrad.numpy._promotion import (
    broadcast_shapes,
    broadcast_to,
    convert,
    dtype_and_weak,
    promote_args,
    promote_args_inexact,
    result_type,
    rounded_alone,
    to_array,
)
from funcgrad.numpy.creation import array
from funcgrad.numpy.shape_ops import (
    canonicalize_axis,
    moveaxis,
    ravel,
    stack,
    static_value,
)

__all__ = [
    "allclose",
    "arange",
    "argwhere",
    "array_equal",
    "array_equiv",
    "clip",
    "copy",
    "diag",
    "diagflat",
    "diagonal",
    "eye",
    "flatnonzero",
    "geomspace",
    "identity",
    "indices",
    "iscomplexobj",
    "isclose",
    "isscalar",
    "issubdtype",
    "linspace",
    "logspace",
    "meshgrid",
    "nan_to_num",
    "nonzero",
    "select",
    "trace",
    "tri",
    "tril",
    "triu",
    "where",
]

# ---------------------------------------------------------------------------------------------
# Ranges


def _static_scalar(x, name: str):
    value = static_value(x, name, "each bound and step")
    if value.ndim != 0:
        raise ValueError(f"{name}: bounds and step must be scalars, got shape {value.shape}")
    return value[()]


def arange(start, stop=None, step=None, dtype=None, *, device=None, out_sharding=None):
    """Evenly spaced values in [start, stop); the bounds are static.

    As in JAX, integer arguments give the default int and any float the default float (int32
    and float32 unless `enable_x64`; NumPy values keep their dtype); `arange(n)` is a single
    iota. The values are NumPy's arange in that dtype: its length from the arguments as given,
    its first two values start and start + step converted to the dtype, and the rest spaced
    as those two are (so arange(0.5, 10, 1.5, dtype=int32) is 0, 2, 4, ... 12, and
    arange(0, 5, 0.5, dtype=int32) all zeros).
    """
    out = _arange(start, stop, step, dtype)
    return placed(out, "arange", device, out_sharding)


def _arange(start, stop, step, dtype):
    args = [a for a in (start, stop, step) if a is not None]
    values = [_static_scalar(a, "arange") for a in args]
    if any(np.iscomplexobj(v) for v in values):
        given = [v.item() for v in values]
        raise TypeError(f"arange: start, stop and step must be real numbers, got {given}")
    if len(values) == 3 and values[2] == 0:
        raise ZeroDivisionError("arange: step must not be zero")
    dtype = dtypes.canonicalize(dtype) if dtype is not None else result_type(*args)
    if len(values) == 1 and float(values[0]).is_integer() and dtype != dtypes.bool_:
        return lax.iota(dtype, max(int(values[0]), 0))
    if dtype == dtypes.bool_:
        return lax.asarray(np.arange(*values).astype(dtype))
    if dtypes.is_narrow(dtype):  # stepped in the compute dtype, then rounded once
        return lax.asarray(np.arange(*values, dtype=dtypes.compute_dtype(dtype)).astype(dtype))
    return lax.asarray(np.arange(*values, dtype=dtype))


def _numpy_working_dtype(*args) -> np.dtype:
    """The dtype NumPy computes ranges of these arguments in: their promotion with weakly typed
    values standing for Python scalars (so ints and Python floats give float64), made
    inexact."""
    examples = []
    for a in args:
        dtype, weak = (dtypes.canonicalize(a), False) if _is_dtype(a) else dtype_and_weak(a)
        examples.append(np.zeros((), dtype).item() if weak else np.zeros((), dtype))
    try:
        working = np.result_type(*examples)
    except TypeError:  # bfloat16 mixed with a type NumPy has no promotion to it for
        working = result_type(*args, strict=False)  # (NumPy's rule, not the user's setting)
    if working == dtypes.bfloat16:
        # NumPy's ranges compute bfloat16 bounds in float64 (exponents rounded to bfloat16
        # put logspace's samples tens of percent off)
        return dtypes.float64
    return working if dtypes.is_inexact(working) else dtypes.float64


def _is_dtype(x) -> bool:
    return isinstance(x, (np.dtype, type)) or (isinstance(x, str) and bool(x))


def _float_dtypes(start, stop, dtype) -> tuple[np.dtype, np.dtype]:
    """The result dtype (by default a float, from start and stop) and NumPy's compute dtype."""
    out_dtype = (
        dtypes.canonicalize(dtype)
        if dtype is not None
        else dtypes.to_inexact(result_type(start, stop))
    )
    return out_dtype, _numpy_working_dtype(start, stop)


def _bounds(start, stop, compute: np.dtype):
    start, stop = convert(start, compute), convert(stop, compute)
    shape = broadcast_shapes(start.shape, stop.shape)
    return broadcast_to(start, shape), broadcast_to(stop, shape)


def _check_num(name: str, num) -> int:
    num = operator.index(num)
    if num < 0:
        raise ValueError(f"{name}: the number of samples must be non-negative, got {num}")
    return num


def linspace(
    start,
    stop,
    num: int = 50,
    endpoint: bool = True,
    retstep: bool = False,
    dtype=None,
    axis: int = 0,
    *,
    device=None,
):
    """`num` evenly spaced samples from start to stop (arrays of bounds give one line each,
    along `axis`). The samples are NumPy's, bit for bit: computed in the dtype NumPy computes
    in (float64 for Python numbers), then rounded to the result dtype, or floored to an integer
    one."""
    num = _check_num("linspace", num)
    out_dtype, compute = _float_dtypes(start, stop, dtype)
    start, stop = _bounds(start, stop, compute)
    out, step = _linspace(start, stop, num, endpoint)
    if dtypes.is_int(out_dtype):
        out = lax.floor(out)
    out = placed(_to_axis(convert(out, out_dtype), axis), "linspace", device)
    if not retstep:
        return out
    return out, convert(step, out_dtype if dtypes.is_inexact(out_dtype) else compute)


def _linspace(start, stop, num: int, endpoint: bool):
    """Samples along a new leading axis, and the step between them, as NumPy computes them:
    k * step + start, each operation rounded, with stop itself last (with endpoint). Where a
    step is zero (a tiny difference, or equal bounds), every line is (k / divisions) * delta
    + start instead, as in NumPy."""
    divisions = num - 1 if endpoint else num
    shape = (num,) + start.shape
    across = tuple(range(1, len(shape)))

    def spread(x):
        return lax.broadcast_in_dim(x, shape, across)

    delta = lax.sub(stop, start)
    positions = lax.broadcasted_iota(dtypes.real_dtype(start.dtype), shape, 0)
    positions = lax.convert_element_type(positions, start.dtype)
    if divisions > 0:
        step = lax.div(delta, lax.full(start.shape, divisions, start.dtype))
        by_step = lax.mul(positions, spread(step))
        fractions = lax.div(positions, lax.full(shape, divisions, start.dtype))
        by_fraction = lax.mul(fractions, spread(delta))
        any_zero_step = reductions.any(lax.eq(step, lax.full(step.shape, 0, step.dtype)))
        offsets = lax.select(lax.broadcast_in_dim(any_zero_step, shape, ()), by_fraction, by_step)
    else:
        step = lax.full((), np.nan, start.dtype)  # one NaN, as NumPy's, whatever the bounds
        offsets = lax.mul(positions, spread(delta))
    out = lax.add(rounded_alone(offsets), spread(start))
    if endpoint and num > 1:
        out = lax.concatenate(
            [lax.slice_in_dim(out, 0, num - 1, 1, 0), lax.expand_dims(stop, (0,))], 0
        )
    return out, step


def _to_axis(out, axis: int):
    return moveaxis(out, 0, canonicalize_axis(axis, out.ndim, "linspace"))


def logspace(
    start,
    stop,
    num: int = 50,
    endpoint: bool = True,
    base: float = 10.0,
    dtype=None,
    axis: int = 0,
):
    """`base` raised to `num` evenly spaced exponents from start to stop. An array `base`
    broadcasts with start and stop (one line of samples each), as in NumPy. The exponents are
    linspace's; the powers are taken in the dtype NumPy takes them in."""
    num = _check_num("logspace", num)
    out_dtype, compute = _float_dtypes(start, stop, dtype)
    power_dtype = _numpy_working_dtype(base, compute)
    start, stop = _bounds(start, stop, compute)
    base = convert(base, power_dtype)
    shape = broadcast_shapes(start.shape, base.shape)
    start, stop, base = (broadcast_to(x, shape) for x in (start, stop, base))
    exponents, _ = _linspace(start, stop, num, endpoint)
    base = lax.broadcast_in_dim(base, exponents.shape, tuple(range(1, exponents.ndim)))
    out = lax.pow(base, convert(exponents, power_dtype))
    return _to_axis(convert(out, out_dtype), axis)


def geomspace(start, stop, num: int = 50, endpoint: bool = True, dtype=None, axis: int = 0):
    """A geometric progression from start to stop (both nonzero: a concrete zero raises),
    NumPy's to the bit.

    As in NumPy, start is rotated onto the positive real axis and stop with it: real ends of
    opposite signs give NaN between them, and complex ends a logarithmic spiral. The ends are
    start and stop themselves; an integer dtype truncates the others toward zero.
    """
    num = _check_num("geomspace", num)
    out_dtype = (
        dtypes.canonicalize(dtype)
        if dtype is not None
        else dtypes.to_inexact(result_type(start, stop))
    )
    # NumPy's working dtype: that of arrays of start and stop (where Python numbers are 64-bit),
    # float(num) and zeros((), dtype), which is float64 for dtype=None.
    ends = [np.asarray(x) if dtypes.is_python_scalar(x) else x for x in (start, stop)]
    given = dtypes.float64 if dtype is None else dtypes.canonicalize(dtype)
    compute = _numpy_working_dtype(*ends, 1.0, given)
    start, stop = _bounds(start, stop, compute)
    for end in (start, stop):
        # As NumPy's (traced ends give NaN there, as JAX's do)
        if not isinstance(end, core.Tracer) and (np.asarray(end) == 0).any():
            raise ValueError("geomspace: a geometric sequence cannot include zero")
    sign = ufuncs.sign(start)
    start, stop = lax.div(start, sign), lax.div(stop, sign)
    exponents, _ = _linspace(ufuncs.log10(start), ufuncs.log10(stop), num, endpoint)
    out = lax.pow(lax.full(exponents.shape, 10.0, compute), exponents)
    if num > 0:
        rows = [lax.expand_dims(start, (0,)), lax.slice_in_dim(out, 1, num, 1, 0)]
        if endpoint and num > 1:
            rows[1:] = [lax.slice_in_dim(out, 1, num - 1, 1, 0), lax.expand_dims(stop, (0,))]
        out = lax.concatenate(rows, 0)
    sign = lax.broadcast_in_dim(sign, out.shape, tuple(range(1, out.ndim)))
    return _to_axis(convert(lax.mul(out, sign), out_dtype), axis)


# ---------------------------------------------------------------------------------------------
# Matrices: eye, tri, tril, triu, diag, diagonal, trace


def _dims(name: str, *sizes) -> tuple[int, ...]:
    sizes = tuple(operator.index(n) for n in sizes)
    if any(n < 0 for n in sizes):
        raise ValueError(f"{name}: negative dimensions are not allowed, got {sizes}")
    return sizes


def _diagonal_number(n: int, m: int):
    """column - row for every element of an n x m matrix: the diagonal each one lies on."""
    columns = lax.broadcasted_iota(dtypes.default_int, (n, m), 1)
    rows = lax.broadcasted_iota(dtypes.default_int, (n, m), 0)
    return lax.sub(columns, rows)


def eye(N: int, M: int | None = None, k: int = 0, dtype=None, *, device=None):
    n, m = _dims("eye", N, N if M is None else M)
    mask = lax.eq(_diagonal_number(n, m), operator.index(k))
    return placed(convert(mask, dtypes.canonicalize(dtype or dtypes.default_float)), "eye", device)


def identity(n: int, dtype=None):
    return eye(n, dtype=dtype)


def tri(N: int, M: int | None = None, k: int = 0, dtype=None):
    """Ones on and below diagonal k, zeros above."""
    n, m = _dims("tri", N, N if M is None else M)
    mask = lax.le(_diagonal_number(n, m), operator.index(k))
    return convert(mask, dtypes.canonicalize(dtype or dtypes.default_float))


def _keep_triangle(name: str, m, k: int, lower: bool):
    m = to_array(m)
    if m.ndim < 2:
        raise ValueError(f"{name}: the array must be at least 2-d, got shape {m.shape}")
    diagonal_number = _diagonal_number(*m.shape[-2:])
    k = operator.index(k)
    keep = lax.le(diagonal_number, k) if lower else lax.ge(diagonal_number, k)
    return lax.select(broadcast_to(keep, m.shape), m, lax.full(m.shape, 0, m.dtype))


def tril(m, k: int = 0):
    return _keep_triangle("tril", m, k, lower=True)


def triu(m, k: int = 0):
    return _keep_triangle("triu", m, k, lower=False)


def diag(v, k: int = 0):
    """A 1-d array placed on diagonal k of a square matrix, or diagonal k of a 2-d array."""
    v = to_array(v)
    k = operator.index(k)
    if v.ndim == 2:
        return diagonal(v, k)
    if v.ndim != 1:
        raise ValueError(f"diag: the input must be 1-d or 2-d, got shape {v.shape}")
    n = v.shape[0] + abs(k)
    padded = lax.pad(v, 0, [(0, abs(k), 0)])
    # On diagonal k >= 0, element (i, i + k) is v[i]: v runs down the rows; for k < 0 across.
    values = lax.broadcast_in_dim(padded, (n, n), (0,) if k >= 0 else (1,))
    on_diagonal = lax.eq(_diagonal_number(n, n), k)
    return lax.select(on_diagonal, values, lax.full((n, n), 0, v.dtype))


def diagflat(v, k: int = 0):
    return diag(ravel(v), k)


def diagonal(a, offset: int = 0, axis1: int = 0, axis2: int = 1):
    """The diagonal `offset` of the matrices over axis1 and axis2, as a last axis.

    The matrix is flattened and its diagonal read as one strided slice: consecutive
    elements of a diagonal are a row plus a column (m + 1 elements) apart.
    """
    a = to_array(a)
    if a.ndim < 2:
        raise ValueError(f"diagonal: the array must be at least 2-d, got shape {a.shape}")
    ax1 = canonicalize_axis(axis1, a.ndim, "diagonal")
    ax2 = canonicalize_axis(axis2, a.ndim, "diagonal")
    if ax1 == ax2:
        raise ValueError(f"diagonal: axis1 and axis2 must differ, got {axis1} and {axis2}")
    a = moveaxis(a, (ax1, ax2), (-2, -1))
    *batch, n, m = a.shape
    offset = operator.index(offset)
    if offset >= 0:
        length, start = max(0, min(n, m - offset)), offset
    else:
        length, start = max(0, min(n + offset, m)), -offset * m
    if length == 0:
        start = 0
    flat = lax.reshape(a, (*batch, n * m))
    limit = start + max(length - 1, 0) * (m + 1) + (1 if length else 0)
    zeros = (0,) * len(batch)
    return lax.slice(flat, (*zeros, start), (*batch, limit), (*(1,) * len(batch), m + 1))


def trace(a, offset: int = 0, axis1: int = 0, axis2: int = 1, dtype=None, out=None):
    reductions.check_no_out("trace", out)
    return reductions.sum(diagonal(a, offset, axis1, axis2), axis=-1, dtype=dtype)


# ---------------------------------------------------------------------------------------------
# Grids


def meshgrid(*xi, copy: bool = True, sparse: bool = False, indexing: str = "xy") -> list:
    """Coordinate arrays over the grid of 1-d inputs; 'xy' swaps the first two axes."""
    if indexing not in ("xy", "ij"):
        raise ValueError(f"meshgrid: indexing must be 'xy' or 'ij', got {indexing!r}")
    arrays = [to_array(x) for x in xi]
    for i, a in enumerate(arrays):
        if a.ndim != 1:
            raise ValueError(f"meshgrid: inputs must be 1-d, got shape {a.shape} at position {i}")
    axes = list(range(len(arrays)))
    if indexing == "xy" and len(arrays) > 1:
        axes[0], axes[1] = 1, 0
    shape = [0] * len(arrays)
    for a, axis in zip(arrays, axes):
        shape[axis] = a.shape[0]
    grids = []
    for a, axis in zip(arrays, axes):
        if sparse:
            grids.append(lax.reshape(a, [n if d == axis else 1 for d, n in enumerate(shape)]))
        else:
            grids.append(lax.broadcast_in_dim(a, shape, (axis,)))
    return grids


def indices(dimensions: Sequence[int], dtype=None, sparse: bool = False):
    """The index of each element of a grid of shape `dimensions`, one array per axis."""
    dims = _dims("indices", *dimensions)
    dtype = dtypes.canonicalize(dtype or dtypes.default_int)
    if sparse:
        return tuple(
            lax.broadcasted_iota(dtype, [n if j == i else 1 for j, n in enumerate(dims)], i)
            for i in range(len(dims))
        )
    if not dims:
        return lax.full((0,), 0, dtype)
    return lax.concatenate(
        [lax.broadcasted_iota(dtype, (1, *dims), i + 1) for i in range(len(dims))], 0
    )


# ---------------------------------------------------------------------------------------------
# Selection: where, select, clip, nonzero


def _as_bool(x):
    x = to_array(x)
    return x if dtypes.is_bool(x.dtype) else lax.ne(x, 0)


def where(condition, x=None, y=None, /, *, size: int | None = None, fill_value=None):
    """`x` where condition holds, else `y`; with only a condition, `nonzero(condition)`."""
    if x is None and y is None:
        return nonzero(condition, size=size, fill_value=fill_value)
    if x is None or y is None:
        raise ValueError("where: give both x and y, or neither")
    if size is not None or fill_value is not None:
        raise ValueError("where: size and fill_value apply only to the one-argument form")
    condition = _as_bool(condition)
    x, y = promote_args("where", x, y)
    shape = broadcast_shapes(condition.shape, x.shape, y.shape)
    return lax.select(
        broadcast_to(condition, shape), broadcast_to(x, shape), broadcast_to(y, shape)
    )


def select(condlist: Sequence, choicelist: Sequence, default=0):
    """From each position, the choice of the first condition that holds there, else default."""
    if len(condlist) != len(choicelist):
        raise ValueError(
            f"select: condlist and choicelist must have the same length, got {len(condlist)} "
            f"and {len(choicelist)}"
        )
    if not condlist:
        raise ValueError("select: condlist must not be empty")
    conditions = [to_array(c) for c in condlist]
    for i, c in enumerate(conditions):
        if not dtypes.is_bool(c.dtype):
            raise TypeError(f"select: condlist entry {i} must be boolean, got dtype {c.dtype}")
    default, *choices = promote_args("select", default, *choicelist)
    shape = broadcast_shapes(*(a.shape for a in [default, *choices, *conditions]))
    out = broadcast_to(default, shape)
    for condition, choice in zip(reversed(conditions), reversed(choices)):
        out = lax.select(broadcast_to(condition, shape), broadcast_to(choice, shape), out)
    return out


def clip(arr, /, min=None, max=None, *, a_min=None, a_max=None):
    """`arr` limited to [min, max] (either may be None); a_min/a_max are NumPy's older names."""
    if a_min is not None:
        if min is not None:
            raise TypeError("clip: give min or a_min, not both")
        min = a_min
    if a_max is not None:
        if max is not None:
            raise TypeError("clip: give max or a_max, not both")
        max = a_max
    arr = to_array(arr)
    if dtypes.is_int(arr.dtype):
        # A Python int bound beyond the dtype's range limits nothing, as in NumPy's clip
        # (where maximum and minimum would refuse the int).
        info = dtypes.iinfo(arr.dtype)
        if type(min) is int and min <= info.min:
            min = None
        if type(max) is int and max >= info.max:
            max = None
    if min is not None:
        arr = ufuncs.maximum(min, arr)
    if max is not None:
        arr = ufuncs.minimum(max, arr)
    return arr


def issubdtype(arg1, arg2) -> bool:
    """Whether dtype `arg1` is `arg2` or lies under it in NumPy's hierarchy of types, with
    ml_dtypes' types where their kind puts them (`funcgrad.dtypes.issubdtype`)."""
    return dtypes.issubdtype(arg1, arg2)


def nonzero(a, *, size: int | None = None, fill_value=None) -> tuple:
    """The indices of the nonzero elements, one array of the default int per axis, in
    row-major order.

    Their number depends on the values, so `a` must be concrete unless `size` is given: then
    the first `size` indices are returned, padded with `fill_value` (default 0; one value,
    or one per axis).
    """
    a = to_array(a)
    if a.ndim == 0:
        raise ValueError("nonzero: a 0-d array has no axes to index; use fnp.atleast_1d(a) first")
    mask = _as_bool(a)
    if size is None:
        if fill_value is not None:
            raise ValueError("nonzero: fill_value needs a static size")
        value = static_value(
            mask, "nonzero", "the number of nonzero elements", "Pass size=N for N indices."
        )
        return tuple(lax.asarray(c.astype(dtypes.default_int)) for c in np.nonzero(value))
    return _nonzero_sized(mask, operator.index(size), fill_value)


def _nonzero_sized(mask, size: int, fill_value) -> tuple:
    """Sort the flat positions, with those of zeros moved past the end; the first `size` are
    the positions of the nonzero elements, in order, then padding."""
    count = mask.size
    flat = lax.reshape(mask, (count,))
    positions = lax.iota(dtypes.default_int, count)
    past_end = lax.full((count,), count, dtypes.default_int)
    ordered = lax.sort(lax.select(flat, positions, past_end))
    if size <= count:
        ordered = lax.slice(ordered, (0,), (size,))
    else:
        ordered = lax.pad(ordered, count, [(0, size - count, 0)])
    found = lax.lt(ordered, count)
    fills = _fill_values(fill_value, mask.ndim)
    coords = []
    remaining = ordered
    for axis in reversed(range(mask.ndim)):
        if axis:
            coord = lax.rem(remaining, mask.shape[axis])
            remaining = lax.div(remaining, mask.shape[axis])
        else:
            coord = remaining
        fill = lax.broadcast_in_dim(convert(fills[axis], dtypes.default_int), (size,), ())
        coords.append(lax.select(found, coord, fill))
    return tuple(reversed(coords))


def _fill_values(fill_value, ndim: int) -> list:
    """nonzero's padding, one scalar per axis (static or traced): one scalar for all of them,
    or a sequence (or 1-d array) of one per axis."""
    if fill_value is None:
        return [0] * ndim
    if isinstance(fill_value, (tuple, list)):
        values = [to_array(v) for v in fill_value]
    else:
        value = to_array(fill_value)
        values = [value] * ndim if value.ndim == 0 else [value[i] for i in range(value.shape[0])]
    if len(values) != ndim or any(v.ndim for v in values):
        raise ValueError(
            f"nonzero: fill_value must be a scalar or one scalar for each of the {ndim} axes, "
            f"got {fill_value!r}"
        )
    return values


def flatnonzero(a, *, size: int | None = None, fill_value=None):
    return nonzero(ravel(a), size=size, fill_value=fill_value)[0]


def argwhere(a, *, size: int | None = None, fill_value=None):
    """The indices of the nonzero elements as rows of an (count, a.ndim) array."""
    a = to_array(a)
    if a.ndim == 0:
        rows = argwhere(lax.reshape(a, (1,)), size=size, fill_value=fill_value)
        return lax.slice(rows, (0, 0), (rows.shape[0], 0))
    return stack(nonzero(a, size=size, fill_value=fill_value), axis=1)


def nan_to_num(x, copy: bool = True, nan: float = 0.0, posinf=None, neginf=None):
    """NaN → `nan`, +inf → `posinf` and -inf → `neginf` (default: the dtype's extremes)."""
    x = to_array(x)
    if dtypes.is_complex(x.dtype):
        parts = (lax.real(x), lax.imag(x))
        return lax.complex(*(nan_to_num(p, copy, nan, posinf, neginf) for p in parts))
    if not dtypes.is_float(x.dtype):
        return x
    info = dtypes.finfo(x.dtype)
    replacements = [
        (ufuncs.isnan(x), nan),
        (ufuncs.isposinf(x), float(info.max) if posinf is None else posinf),
        (ufuncs.isneginf(x), float(info.min) if neginf is None else neginf),
    ]
    for found, value in replacements:
        x = lax.select(found, broadcast_to(convert(value, x.dtype), x.shape), x)
    return x


# ---------------------------------------------------------------------------------------------
# Comparisons


def isclose(a, b, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):
    """|a - b| <= atol + rtol * |b| elementwise, with infinities close only to themselves.

    As in NumPy and JAX, integer and boolean arrays too are compared with the tolerances (in
    the default float, as JAX's), not for equality.
    """
    a, b = promote_args_inexact("isclose", a, b)
    tolerance = ufuncs.add(atol, ufuncs.multiply(rtol, lax.abs(b)))
    close = ufuncs.logical_and(
        ufuncs.less_equal(lax.abs(ufuncs.subtract(a, b)), tolerance), ufuncs.isfinite(b)
    )
    close = ufuncs.logical_or(close, ufuncs.equal(a, b))
    if equal_nan:
        close = ufuncs.logical_or(close, ufuncs.logical_and(ufuncs.isnan(a), ufuncs.isnan(b)))
    return close


def allclose(a, b, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False):
    return reductions.all(isclose(a, b, rtol, atol, equal_nan))


def array_equal(a1, a2, equal_nan: bool = False):
    """Whether the arrays have the same shape and elements (a 0-d bool array)."""
    a1, a2 = to_array(a1), to_array(a2)
    if a1.shape != a2.shape:
        return lax.asarray(np.bool_(False))
    equal = ufuncs.equal(a1, a2)
    if equal_nan:
        equal = ufuncs.logical_or(equal, ufuncs.logical_and(ufuncs.isnan(a1), ufuncs.isnan(a2)))
    return reductions.all(equal)


def array_equiv(a1, a2):
    """Whether the arrays broadcast to one shape and are equal there (a 0-d bool array)."""
    a1, a2 = to_array(a1), to_array(a2)
    try:
        broadcast_shapes(a1.shape, a2.shape)
    except ValueError:
        return lax.asarray(np.bool_(False))
    return reductions.all(ufuncs.equal(a1, a2))


# ---------------------------------------------------------------------------------------------
# Small predicates and copies


def copy(a, order=None):
    """`a` as a distinct funcgrad array (sharing the immutable buffer: donating it to a
    jitted call leaves `a` alive)."""
    return array(a)


def iscomplexobj(x) -> bool:
    """True when `x`'s dtype is complex (whatever its values)."""
    from funcgrad.numpy._promotion import dtype_and_weak

    return dtypes.is_complex(dtype_and_weak(x)[0])


def isscalar(element) -> bool:
    """True for Python and NumPy scalars and, as in JAX, for 0-d arrays."""
    if isinstance(element, (Array, core.Tracer, np.ndarray)):
        return element.ndim == 0
    return isinstance(element, (bool, int, float, complex, np.generic))
