"""Shape manipulation with NumPy's names: reshape, transpose, concatenate, stack, pad, ...

Shapes, axes, split points, repeat counts and pad widths are static Python values, so NumPy is
used freely on them; the arrays themselves only ever go through funcgrad.lax.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence

import numpy as np

from funcgrad import core, dtypes, lax
from funcgrad.array import Array
from funcgrad.lax.shapes import reshape_p
from funcgrad.lax.sharding_constraint import placed
from funcgrad.numpy import _promotion
from funcgrad.numpy._promotion import (
    broadcast_shapes,
    convert,
    result_type,
    rounded_alone,
    to_array,
)

__all__ = [
    "array_split",
    "atleast_1d",
    "atleast_2d",
    "atleast_3d",
    "broadcast_arrays",
    "broadcast_to",
    "column_stack",
    "concatenate",
    "dsplit",
    "dstack",
    "expand_dims",
    "flip",
    "fliplr",
    "flipud",
    "hsplit",
    "hstack",
    "moveaxis",
    "ndim",
    "pad",
    "ravel",
    "repeat",
    "reshape",
    "roll",
    "rot90",
    "shape",
    "size",
    "split",
    "squeeze",
    "stack",
    "swapaxes",
    "tile",
    "transpose",
    "vsplit",
    "vstack",
]

Axes = int | Sequence[int] | None

# ---------------------------------------------------------------------------------------------
# Axis handling shared with the other funcgrad.numpy modules


def canonicalize_axis(axis, ndim: int, name: str) -> int:
    """`axis` as a non-negative int, or NumPy's AxisError naming the function."""
    axis = operator.index(axis)
    if not -ndim <= axis < ndim:
        raise np.exceptions.AxisError(axis, ndim, msg_prefix=name)
    return axis % ndim


def canonicalize_axes(axes, ndim: int, name: str) -> tuple[int, ...]:
    """An int or a sequence of ints as distinct non-negative axes, in the order given."""
    if isinstance(axes, Sequence):
        result = tuple(canonicalize_axis(a, ndim, name) for a in axes)
    else:
        result = (canonicalize_axis(axes, ndim, name),)
    if len(set(result)) != len(result):
        raise ValueError(f"{name}: repeated axis in {axes}")
    return result


def static_value(x, name: str, what: str, hint: str = "") -> np.ndarray:
    """The NumPy value of an argument that decides the result's shape, so must be known now."""
    if isinstance(x, (list, tuple)):
        return np.asarray([static_value(v, name, what, hint) for v in x])
    message = f"{name}: {what} decides the shape of the result, so it must be static. {hint}"
    return np.asarray(core.concrete_or_error(x, message))


# ---------------------------------------------------------------------------------------------
# Shape queries


def ndim(a) -> int:
    return a.ndim if isinstance(a, (Array, core.Tracer)) else to_array(a).ndim


def shape(a) -> tuple[int, ...]:
    return a.shape if isinstance(a, (Array, core.Tracer)) else to_array(a).shape


def size(a, axis: int | None = None) -> int:
    dims = shape(a)
    if axis is None:
        return math.prod(dims)
    return dims[canonicalize_axis(axis, len(dims), "size")]


# ---------------------------------------------------------------------------------------------
# Reshaping


def _shape_arg(shape) -> tuple[int, ...]:
    if isinstance(shape, Sequence):
        return tuple(operator.index(d) for d in shape)
    return (operator.index(shape),)


def _resolve_shape(old_shape: tuple[int, ...], new_shape: tuple[int, ...]) -> tuple[int, ...]:
    """`new_shape` with its one allowed -1 filled in, checked to hold as many elements."""
    old_size = math.prod(old_shape)
    unknown = [i for i, d in enumerate(new_shape) if d == -1]
    if len(unknown) > 1 or any(d < -1 for d in new_shape):
        raise ValueError(
            f"reshape: new shape {new_shape} may contain at most one -1 and no other negative sizes"
        )
    known_size = math.prod(d for d in new_shape if d != -1)
    if unknown and known_size != 0 and old_size % known_size == 0:
        return tuple(old_size // known_size if d == -1 else d for d in new_shape)
    if unknown or known_size != old_size:
        raise ValueError(
            f"cannot reshape array of shape {old_shape} (size {old_size}) into shape "
            f"{new_shape}" + ("" if unknown else f" (size {known_size})")
        )
    return new_shape


def reshape(a, shape, order: str = "C", *, copy: bool | None = None, out_sharding=None):
    """`a` with a new shape holding the same elements; one dimension may be -1 (inferred).

    order='F' reads and writes the elements in column-major order. Arrays are immutable, so
    whether the result copies `a` cannot be seen: `copy` changes nothing.
    """
    if type(a) is Array and type(shape) is tuple and order == "C" and out_sharding is None:
        value = a._value
        if shape != value.shape and -1 not in shape and math.prod(shape) == value.size:
            # The eager hot path: the reshape the general path stages, bound directly.
            return reshape_p.bind(a, new_sizes=tuple(map(operator.index, shape)), dimensions=None)
    return placed(_reshape(a, shape, order), "reshape", out_sharding=out_sharding)


def _reshape(a, shape, order: str):
    a = to_array(a)
    new_shape = _resolve_shape(a.shape, _shape_arg(shape))
    if order == "C":
        return lax.reshape(a, new_shape)
    if order == "F":
        reversed_dims = tuple(range(a.ndim))[::-1]
        flat = lax.reshape(a, new_shape[::-1], dimensions=reversed_dims)
        return lax.transpose(flat, tuple(range(len(new_shape)))[::-1])
    raise ValueError(f"reshape: order must be 'C' or 'F', got {order!r}")


def ravel(a, order: str = "C", *, out_sharding=None):
    return reshape(a, (-1,), order=order, out_sharding=out_sharding)


def transpose(a, axes: Sequence[int] | None = None):
    a = to_array(a)
    if axes is None:
        return lax.transpose(a, tuple(range(a.ndim))[::-1])
    perm = canonicalize_axes(tuple(axes), a.ndim, "transpose")
    if len(perm) != a.ndim:
        raise ValueError(
            f"transpose: axes {tuple(axes)} do not match an array of shape {a.shape}: give "
            f"one axis per dimension ({a.ndim})"
        )
    return lax.transpose(a, perm)


def moveaxis(a, source: int | Sequence[int], destination: int | Sequence[int]):
    a = to_array(a)
    source = canonicalize_axes(source, a.ndim, "moveaxis")
    destination = canonicalize_axes(destination, a.ndim, "moveaxis")
    if len(source) != len(destination):
        raise ValueError(
            f"moveaxis: source {source} and destination {destination} must have the same "
            "number of axes"
        )
    perm = [d for d in range(a.ndim) if d not in source]
    for dest, src in sorted(zip(destination, source)):
        perm.insert(dest, src)
    return lax.transpose(a, perm)


def swapaxes(a, axis1: int, axis2: int):
    a = to_array(a)
    perm = list(range(a.ndim))
    i = canonicalize_axis(axis1, a.ndim, "swapaxes")
    j = canonicalize_axis(axis2, a.ndim, "swapaxes")
    perm[i], perm[j] = perm[j], perm[i]
    return lax.transpose(a, perm)


def squeeze(a, axis: Axes = None):
    a = to_array(a)
    if axis is None:
        dims = tuple(d for d, n in enumerate(a.shape) if n == 1)
    else:
        dims = canonicalize_axes(axis, a.ndim, "squeeze")
    wide = [d for d in dims if a.shape[d] != 1]
    if wide:
        raise ValueError(
            f"squeeze: cannot remove axis {wide[0]} of an array of shape {a.shape}: its size "
            f"is {a.shape[wide[0]]}, not 1"
        )
    return lax.squeeze(a, dims)


def expand_dims(a, axis: int | Sequence[int]):
    a = to_array(a)
    count = len(axis) if isinstance(axis, Sequence) else 1
    dims = canonicalize_axes(axis, a.ndim + count, "expand_dims")
    return lax.expand_dims(a, dims)


# ---------------------------------------------------------------------------------------------
# Broadcasting and minimum ranks


def broadcast_to(array, shape, *, out_sharding=None):
    out = _promotion.broadcast_to(array, _shape_arg(shape))
    return placed(out, "broadcast_to", out_sharding=out_sharding)


def broadcast_arrays(*args) -> list:
    arrays = [to_array(a) for a in args]
    if not arrays:
        return []
    common = broadcast_shapes(*(a.shape for a in arrays))
    return [_promotion.broadcast_to(a, common) for a in arrays]


def _atleast(arrays, fix):
    results = [fix(to_array(a)) for a in arrays]
    return results[0] if len(results) == 1 else results


def atleast_1d(*arys):
    return _atleast(arys, lambda a: a if a.ndim >= 1 else lax.reshape(a, (1,)))


def atleast_2d(*arys):
    return _atleast(arys, lambda a: a if a.ndim >= 2 else lax.broadcast_to_rank(a, 2))


def atleast_3d(*arys):
    """Rank 0 → (1, 1, 1); (N,) → (1, N, 1); (M, N) → (M, N, 1), as NumPy."""

    def fix(a):
        if a.ndim >= 3:
            return a
        if a.ndim == 0:
            return lax.reshape(a, (1, 1, 1))
        if a.ndim == 1:
            return lax.reshape(a, (1, a.shape[0], 1))
        return lax.reshape(a, a.shape + (1,))

    return _atleast(arys, fix)


# ---------------------------------------------------------------------------------------------
# Joining


def _promoted(name: str, arrays, dtype=None) -> list:
    arrays = [to_array(a) for a in arrays]
    if not arrays:
        raise ValueError(f"{name}: need at least one array to join")
    target = dtypes.canonicalize(dtype) if dtype is not None else result_type(*arrays)
    return [convert(a, target) for a in arrays]


def concatenate(arrays, axis: int | None = 0, dtype=None):
    arrays = _promoted("concatenate", arrays, dtype)
    if axis is None:
        arrays = [lax.reshape(a, (a.size,)) for a in arrays]
        axis = 0
    first = arrays[0]
    if first.ndim == 0:
        raise ValueError("concatenate: zero-dimensional arrays cannot be concatenated")
    axis = canonicalize_axis(axis, first.ndim, "concatenate")
    for a in arrays:
        if a.ndim != first.ndim or any(
            x != y for d, (x, y) in enumerate(zip(a.shape, first.shape)) if d != axis
        ):
            raise ValueError(
                f"concatenate: all arrays must have the same shape except along axis {axis}, "
                "got shapes " + ", ".join(str(b.shape) for b in arrays)
            )
    return lax.concatenate(arrays, axis)


def stack(arrays, axis: int = 0, out=None, dtype=None):
    if out is not None:
        raise NotImplementedError(
            "stack: the out argument is not supported, because funcgrad arrays are immutable; "
            "use the returned array instead"
        )
    arrays = _promoted("stack", arrays, dtype)
    shapes = {a.shape for a in arrays}
    if len(shapes) != 1:
        raise ValueError(
            "stack: all arrays must have the same shape, got shapes "
            + ", ".join(str(a.shape) for a in arrays)
        )
    axis = canonicalize_axis(axis, arrays[0].ndim + 1, "stack")
    return lax.concatenate([lax.expand_dims(a, (axis,)) for a in arrays], axis)


def vstack(tup, dtype=None):
    return concatenate([atleast_2d(a) for a in tup], 0, dtype)


def hstack(tup, dtype=None):
    arrays = [atleast_1d(a) for a in tup]
    return concatenate(arrays, 0 if arrays and arrays[0].ndim == 1 else 1, dtype)


def dstack(tup, dtype=None):
    return concatenate([atleast_3d(a) for a in tup], 2, dtype)


def column_stack(tup):
    """1-d arrays become columns; 2-d arrays are joined as they are."""
    arrays = [to_array(a) for a in tup]
    arrays = [lax.reshape(a, (a.size, 1)) if a.ndim < 2 else a for a in arrays]
    return concatenate(arrays, 1)


# ---------------------------------------------------------------------------------------------
# Splitting


def _split_points(indices_or_sections, length: int, name: str, even: bool) -> list[int]:
    """The boundaries of the pieces: [0, ..., length] for sections, else the given indices."""
    if isinstance(indices_or_sections, (int, np.integer)):
        sections = int(indices_or_sections)
        if sections <= 0:
            raise ValueError(f"{name}: number of sections must be positive, got {sections}")
        if even and length % sections:
            raise ValueError(
                f"{name}: an axis of size {length} cannot be split into {sections} equal parts"
            )
        base, extra = divmod(length, sections)
        sizes = [base + 1] * extra + [base] * (sections - extra)
        return [0, *np.cumsum(sizes).tolist()]
    indices = static_value(indices_or_sections, name, "the split indices")
    return [0, *(int(i) for i in indices.reshape(-1)), length]


def _split(name: str, ary, indices_or_sections, axis: int, even: bool) -> list:
    ary = to_array(ary)
    axis = canonicalize_axis(axis, ary.ndim, name)
    n = ary.shape[axis]
    points = _split_points(indices_or_sections, n, name, even)
    pieces = []
    for lo, hi in zip(points[:-1], points[1:]):
        # Each piece is ary[lo:hi] along the axis, with Python's slice rules.
        start, stop, _ = slice(lo, hi).indices(n)
        pieces.append(lax.slice_in_dim(ary, start, max(start, stop), 1, axis))
    return pieces


def split(ary, indices_or_sections, axis: int = 0) -> list:
    return _split("split", ary, indices_or_sections, axis, even=True)


def array_split(ary, indices_or_sections, axis: int = 0) -> list:
    return _split("array_split", ary, indices_or_sections, axis, even=False)


def vsplit(ary, indices_or_sections) -> list:
    if ndim(ary) < 2:
        raise ValueError(f"vsplit needs an array of rank 2 or more, got shape {shape(ary)}")
    return split(ary, indices_or_sections, 0)


def hsplit(ary, indices_or_sections) -> list:
    if ndim(ary) == 0:
        raise ValueError("hsplit needs an array of rank 1 or more, got a scalar")
    return split(ary, indices_or_sections, 1 if ndim(ary) > 1 else 0)


def dsplit(ary, indices_or_sections) -> list:
    if ndim(ary) < 3:
        raise ValueError(f"dsplit needs an array of rank 3 or more, got shape {shape(ary)}")
    return split(ary, indices_or_sections, 2)


# ---------------------------------------------------------------------------------------------
# Repeating


def tile(A, reps):
    A = to_array(A)
    reps = _shape_arg(reps)
    if any(r < 0 for r in reps):
        raise ValueError(f"tile: repetitions {reps} must be non-negative")
    rank = max(A.ndim, len(reps))
    reps = (1,) * (rank - len(reps)) + reps
    A = lax.broadcast_to_rank(A, rank)
    # Broadcast to (r0, s0, r1, s1, ...) and merge each pair: every repetition is a whole copy.
    interleaved = tuple(n for r, s in zip(reps, A.shape) for n in (r, s))
    copies = lax.broadcast_in_dim(A, interleaved, tuple(range(1, 2 * rank, 2)))
    return lax.reshape(copies, tuple(r * s for r, s in zip(reps, A.shape)))


def repeat(
    a,
    repeats,
    axis: int | None = None,
    *,
    total_repeat_length: int | None = None,
    out_sharding=None,
):
    """Repeat each element along `axis` (the flattened array if None) `repeats` times.

    `repeats` is static: one count, or one per element. With `total_repeat_length`, as in JAX,
    the result is cut to that length, or padded by repeating its last element.
    """
    out = _repeat(a, repeats, axis, total_repeat_length)
    return placed(out, "repeat", out_sharding=out_sharding)


def _repeat(a, repeats, axis: int | None, total_repeat_length: int | None):
    a = to_array(a)
    if axis is None or a.ndim == 0:  # (NumPy repeats a 0-d array as a 1-d one)
        a, axis = ravel(a), 0 if axis is None else axis
    axis = canonicalize_axis(axis, a.ndim, "repeat")
    n = a.shape[axis]
    counts = static_value(repeats, "repeat", "repeats").astype(np.int64)
    if (counts < 0).any():
        raise ValueError(f"repeat: repeats must be non-negative, got {counts.tolist()}")
    if counts.ndim == 0 and total_repeat_length in (None, int(counts) * n):
        return _repeat_each(a, int(counts), axis)
    if counts.size not in (1, n) or counts.ndim > 1:
        raise ValueError(
            f"repeat: repeats of shape {counts.shape} do not match axis {axis} of size {n} "
            f"(array shape {a.shape})"
        )
    source = np.repeat(np.arange(n), np.broadcast_to(counts.reshape(-1), (n,)))
    if total_repeat_length is not None:
        source = _fit_length(source, operator.index(total_repeat_length))
    from funcgrad.numpy.indexing import take

    return take(a, source.astype(np.int32), axis=axis, mode="clip")


def _fit_length(source: np.ndarray, length: int) -> np.ndarray:
    if len(source) >= length:
        return source[:length]
    if not len(source):
        raise ValueError(
            f"repeat: cannot fill total_repeat_length={length} when no element is repeated"
        )
    return np.concatenate([source, np.full(length - len(source), source[-1])])


def _repeat_each(a, count: int, axis: int):
    expanded = a.shape[: axis + 1] + (count,) + a.shape[axis + 1 :]
    dims = tuple(d for d in range(a.ndim + 1) if d != axis + 1)
    copies = lax.broadcast_in_dim(a, expanded, dims)
    return lax.reshape(copies, a.shape[:axis] + (a.shape[axis] * count,) + a.shape[axis + 1 :])


# ---------------------------------------------------------------------------------------------
# Reordering


def flip(m, axis: Axes = None):
    m = to_array(m)
    axes = tuple(range(m.ndim)) if axis is None else canonicalize_axes(axis, m.ndim, "flip")
    return lax.rev(m, axes)


def fliplr(m):
    m = to_array(m)
    if m.ndim < 2:
        raise ValueError(f"fliplr needs an array of rank 2 or more, got shape {m.shape}")
    return lax.rev(m, (1,))


def flipud(m):
    m = to_array(m)
    if m.ndim < 1:
        raise ValueError("flipud needs an array of rank 1 or more, got a scalar")
    return lax.rev(m, (0,))


def roll(a, shift, axis: Axes = None):
    """Shift elements along `axis` cyclically; `shift` is static, as are the axes."""
    a = to_array(a)
    if axis is None:
        return lax.reshape(roll(ravel(a), shift, 0), a.shape)
    shifts = static_value(shift, "roll", "shift")
    axes = np.asarray(axis)
    try:
        shifts, axes = np.broadcast_arrays(shifts, axes)
    except ValueError:
        raise ValueError(
            f"roll: shift {shift} and axis {axis} must have the same length (or be scalars)"
        ) from None
    for s, ax in zip(shifts.reshape(-1).tolist(), axes.reshape(-1).tolist()):
        ax = canonicalize_axis(ax, a.ndim, "roll")
        n = a.shape[ax]
        s = s % n if n else 0
        if s:
            tail = lax.slice_in_dim(a, n - s, n, 1, ax)
            head = lax.slice_in_dim(a, 0, n - s, 1, ax)
            a = lax.concatenate([tail, head], ax)
    return a


def rot90(m, k: int = 1, axes: tuple[int, int] = (0, 1)):
    m = to_array(m)
    if len(axes) != 2:
        raise ValueError(f"rot90: axes must name two axes, got {axes}")
    ax0, ax1 = (canonicalize_axis(ax, m.ndim, "rot90") for ax in axes)
    if ax0 == ax1:
        raise ValueError(f"rot90: the two axes must differ, got {axes}")
    k = operator.index(k) % 4
    if k == 0:
        return m
    if k == 2:
        return lax.rev(m, (ax0, ax1))
    perm = list(range(m.ndim))
    perm[ax0], perm[ax1] = ax1, ax0
    if k == 1:
        return lax.transpose(lax.rev(m, (ax1,)), perm)
    return lax.rev(lax.transpose(m, perm), (ax1,))


# ---------------------------------------------------------------------------------------------
# Padding

_PAD_MODES = (
    "constant",
    "edge",
    "empty",
    "linear_ramp",
    "maximum",
    "mean",
    "median",
    "minimum",
    "reflect",
    "symmetric",
    "wrap",
)
_STAT_MODES = ("maximum", "mean", "median", "minimum")


def pad(
    array,
    pad_width,
    mode: str = "constant",
    constant_values=0,
    *,
    end_values=0,
    stat_length=None,
    reflect_type: str = "even",
):
    """NumPy's pad, all modes but callables (any width).

    Axes are padded one after the other, as NumPy does, so corners come from the last axis.
    `stat_length` limits the statistic modes to that many elements at each end; `end_values`
    are where linear ramps start; reflect_type="odd" reflects through the edge values.
    """
    array = to_array(array)
    widths = _pad_widths(pad_width, array.ndim)
    if mode == "constant":
        return _pad_constant(array, widths, constant_values)
    if mode == "empty":  # the padding is undefined; zeros are as good as anything
        return _pad_constant(array, widths, 0)
    if mode not in _PAD_MODES:
        raise NotImplementedError(
            f"pad: mode {mode!r} is not supported; supported modes: " + ", ".join(_PAD_MODES)
        )
    if reflect_type not in ("even", "odd"):
        raise ValueError(f"pad: reflect_type must be 'even' or 'odd', got {reflect_type!r}")
    if mode in _STAT_MODES:
        if stat_length is None:
            lengths = [(n, n) for n in array.shape]
        else:
            lengths = _pad_widths(stat_length, array.ndim)
    if mode == "linear_ramp":
        end_values = static_value(end_values, "pad", "end_values")
        ends = np.broadcast_to(end_values, (array.ndim, 2))
        ramp_dtype = _ramp_dtype(end_values, array.dtype)
    for axis, (lo, hi) in enumerate(widths):
        if not (lo or hi):
            continue
        if mode in _STAT_MODES:
            array = _pad_with_statistic(array, axis, lo, hi, mode, lengths[axis])
        elif mode == "linear_ramp":
            array = _pad_with_ramps(array, axis, lo, hi, ends[axis], ramp_dtype)
        elif reflect_type == "odd" and mode in ("reflect", "symmetric"):
            array = _pad_odd_reflection(array, axis, lo, hi, mode)
        else:
            array = _pad_by_copying(array, axis, lo, hi, mode)
    return array


def _pad_widths(pad_width, rank: int) -> list[tuple[int, int]]:
    widths = static_value(pad_width, "pad", "pad_width")
    if widths.dtype.kind not in "iu":
        raise TypeError(f"pad: pad_width must be integers, got {pad_width!r}")
    try:
        widths = np.broadcast_to(widths, (rank, 2))
    except ValueError:
        raise ValueError(
            f"pad: pad_width {pad_width!r} does not fit an array of rank {rank}: give one "
            "width, one (before, after) pair, or one pair per axis"
        ) from None
    if (widths < 0).any():
        raise ValueError(f"pad: pad widths must be non-negative, got {widths.tolist()}")
    return [(int(lo), int(hi)) for lo, hi in widths]


def _pad_constant(array, widths, constant_values):
    values = to_array(constant_values)
    if values.ndim == 0:
        value = convert(values, array.dtype)
        return lax.pad(array, value, [(lo, hi, 0) for lo, hi in widths])
    values = convert(broadcast_to(values, (array.ndim, 2)), array.dtype)
    for axis, sides in enumerate(widths):
        for side, width in enumerate(sides):
            if width:
                value = lax.reshape(lax.slice(values, (axis, side), (axis + 1, side + 1)), ())
                config = [(0, 0, 0)] * array.ndim
                config[axis] = (width, 0, 0) if side == 0 else (0, width, 0)
                array = lax.pad(array, value, config)
    return array


def _check_nonempty_axis(array, axis: int, mode: str) -> None:
    if array.shape[axis] == 0:
        raise ValueError(
            f"pad: cannot pad axis {axis} of an array of shape {array.shape} with mode {mode!r}: "
            "the axis is empty, so there is nothing to copy"
        )


def _pad_with_statistic(array, axis: int, lo: int, hi: int, mode: str, lengths):
    """Pad each end with a statistic of the `lengths` elements nearest to it (NumPy rounds
    means and medians of integers to the nearest, ties to even)."""
    _check_nonempty_axis(array, axis, mode)
    n = array.shape[axis]
    pieces = []
    for width, length, at_start in ((lo, lengths[0], True), (hi, lengths[1], False)):
        if length < 1:
            # NumPy pads with the NaN of an empty mean (or fails on an empty maximum).
            raise ValueError(
                f"pad: stat_length {length} on axis {axis} leaves no values for mode {mode!r} "
                "to pad with; it must be at least 1"
            )
        length = min(length, n)
        region = lax.slice_in_dim(
            array, 0 if at_start else n - length, length if at_start else n, 1, axis
        )
        value = _statistic(region, axis, mode, array.dtype)
        shape = array.shape[:axis] + (width,) + array.shape[axis + 1 :]
        pieces.append(lax.broadcast_in_dim(value, shape, tuple(range(array.ndim))))
    return lax.concatenate([pieces[0], array, pieces[1]], axis)


def _statistic(region, axis: int, mode: str, dtype):
    """The statistic of `region` along `axis`, kept as an axis of size 1, in `dtype`."""
    if mode in ("maximum", "minimum"):
        reduce = lax.reduce_max if mode == "maximum" else lax.reduce_min
        return lax.expand_dims(reduce(region, (axis,)), (axis,))
    n = region.shape[axis]
    exact = dtypes.is_inexact(dtype)
    # Integers average in float64, as NumPy's mean does.
    work = region if exact else convert(region, dtypes.float64)
    if mode == "mean":
        total = lax.expand_dims(lax.reduce_sum(work, (axis,)), (axis,))
        value = lax.div(total, lax.full((), n, work.dtype))
    else:
        ordered = lax.sort(work, axis)
        low = lax.slice_in_dim(ordered, (n - 1) // 2, (n - 1) // 2 + 1, 1, axis)
        high = lax.slice_in_dim(ordered, n // 2, n // 2 + 1, 1, axis)
        value = lax.div(lax.add(low, high), lax.full((), 2, work.dtype))
    if exact:
        return value
    if dtypes.is_bool(dtype):  # True where any is: NumPy casts the statistic, 0.5 included
        return lax.ne(value, lax.full((), 0, value.dtype))
    return convert(lax.round(value, lax.RoundingMethod.TO_NEAREST_EVEN), dtype)


def _ramp_dtype(end_values: np.ndarray, dtype: np.dtype) -> np.dtype:
    """The dtype NumPy's pad computes linear ramps in: one end value, or one pair for every
    axis, keeps its dtype in the promotion with the array's; more are taken as Python numbers,
    so the array's dtype rules. Integers compute in float64."""
    one_pair = end_values.size == 1 or (end_values.size == 2 and end_values.shape != (2, 1))
    try:
        working = np.result_type(end_values.dtype, dtype) if one_pair else dtype
    except TypeError:  # NumPy promotes no integer with bfloat16 or the narrow floats
        return dtypes.compute_dtype(dtype)
    return working if dtypes.is_inexact(working) else dtypes.float64


def _pad_with_ramps(array, axis: int, lo: int, hi: int, ends, working: np.dtype):
    """Pad each end with a linear ramp from its end value to (not including) the edge value,
    as NumPy's linspace(end, edge, width, endpoint=False): in the `working` dtype, each
    operation rounded, then rounded to the array's dtype (integers round down)."""
    _check_nonempty_axis(array, axis, "linear_ramp")
    n = array.shape[axis]
    work = convert(array, working)
    pieces = []
    for width, end_value, at_start in ((lo, ends[0], True), (hi, ends[1], False)):
        edge = lax.slice_in_dim(work, 0 if at_start else n - 1, 1 if at_start else n, 1, axis)
        steps = np.arange(width) if at_start else np.arange(width)[::-1]
        shape = array.shape[:axis] + (width,) + array.shape[axis + 1 :]
        end = lax.full((), float(end_value), working)
        width_value = lax.full((), float(max(width, 1)), working)
        # As NumPy's linspace: i * ((edge - end) / width) + end, the product rounded on its own
        # so that no compiled kernel fuses it into the sum (with one rounding, 7 * (3 / 7) - 3
        # is -4.4e-16, which an integer ramp floors to -1 where NumPy has 0); where any step
        # of the side is zero, (i / width) * (edge - end) + end throughout.
        delta = lax.broadcast_in_dim(lax.sub(edge, end), shape, tuple(range(array.ndim)))
        step = lax.div(delta, width_value)
        position = lax.broadcast_in_dim(lax.asarray(steps.astype(working)), shape, (axis,))
        by_step = lax.mul(position, step)
        by_fraction = lax.mul(lax.div(position, width_value), delta)
        zero_step = lax.eq(step, lax.full((), 0, working))
        any_zero_step = lax.reduce_or(zero_step, tuple(range(array.ndim)))
        offsets = lax.select(lax.broadcast(any_zero_step, shape), by_fraction, by_step)
        ramp = lax.add(rounded_alone(offsets), end)
        if not dtypes.is_inexact(array.dtype):
            ramp = lax.floor(ramp)
        pieces.append(convert(ramp, array.dtype))
    return lax.concatenate([pieces[0], array, pieces[1]], axis)


def _pad_odd_reflection(array, axis: int, lo: int, hi: int, mode: str):
    """Odd reflection (2 * edge - mirror image) as NumPy computes it: chunks of at most the
    filled length are added at each end in turn, each from the values already there, so wide
    pads reflect reflections. Only the new values are computed, so a NaN or an infinity
    spoils no element but those reflected from it (a product with a matrix of coefficients
    made 0 * inf = NaN everywhere)."""
    _check_nonempty_axis(array, axis, mode)
    n = array.shape[axis]
    if n == 1:  # NumPy extends a single element as its edge
        return _pad_by_copying(array, axis, lo, hi, "edge")
    dtype = array.dtype
    # As NumPy's 2 * edge - chunk: booleans compute as integers (True where either is),
    # integers wrap.
    work = convert(array, dtypes.int8) if dtypes.is_bool(dtype) else array
    two = lax.full((), 2, work.dtype)
    filled = work
    include_edge = mode == "symmetric"
    while lo > 0 or hi > 0:
        length = filled.shape[axis]
        if include_edge:
            chunk_limit = length // n * n
        else:
            chunk_limit = (length - 1) // (n - 1) * (n - 1)
        if lo > 0:
            size = min(chunk_limit, lo)
            start = 0 if include_edge else 1
            mirror = lax.rev(lax.slice_in_dim(filled, start, start + size, 1, axis), (axis,))
            edge = lax.slice_in_dim(filled, 0, 1, 1, axis)
            filled = lax.concatenate([_reflected(two, edge, mirror), filled], axis)
            lo -= size
        if hi > 0:
            size = min(chunk_limit, hi)
            end = filled.shape[axis] - (0 if include_edge else 1)
            mirror = lax.rev(lax.slice_in_dim(filled, end - size, end, 1, axis), (axis,))
            last = filled.shape[axis]
            edge = lax.slice_in_dim(filled, last - 1, last, 1, axis)
            filled = lax.concatenate([filled, _reflected(two, edge, mirror)], axis)
            hi -= size
    if dtypes.is_bool(dtype):
        return lax.ne(filled, lax.full((), 0, filled.dtype))
    return filled


def _reflected(two, edge, mirror):
    """2 * edge - mirror, the edge broadcast along the padded axis."""
    doubled = lax.mul(lax.broadcast_in_dim(two, edge.shape, ()), edge)
    dims = tuple(range(edge.ndim))
    return lax.sub(lax.broadcast_in_dim(doubled, mirror.shape, dims), mirror)


def _pad_by_copying(array, axis: int, lo: int, hi: int, mode: str):
    """Pad one axis with copies of its elements: NumPy's own pad of the element positions says
    which element each new position copies; each run of consecutive positions is one slice."""
    n = array.shape[axis]
    if n == 0:
        raise ValueError(
            f"pad: cannot pad axis {axis} of an array of shape {array.shape} with mode {mode!r}: "
            "the axis is empty, so there is nothing to copy"
        )
    source = np.pad(np.arange(n), (lo, hi), mode=mode)
    pieces = [
        _copy_runs(array, axis, source[:lo]),
        [array],
        _copy_runs(array, axis, source[lo + n :]),
    ]
    return lax.concatenate([p for group in pieces for p in group], axis)


def _copy_runs(array, axis: int, source: np.ndarray) -> list:
    pieces = []
    i = 0
    while i < len(source):
        first = int(source[i])
        step = int(source[i + 1] - first) if i + 1 < len(source) else 1
        length = 1
        if step in (-1, 0, 1):
            while i + length < len(source) and source[i + length] - source[i + length - 1] == step:
                length += 1
        else:
            step = 1
        pieces.append(_copy_run(array, axis, first, step, length))
        i += length
    return pieces


def _copy_run(array, axis: int, first: int, step: int, length: int):
    if step == 1:
        return lax.slice_in_dim(array, first, first + length, 1, axis)
    if step == -1:
        return lax.rev(lax.slice_in_dim(array, first - length + 1, first + 1, 1, axis), (axis,))
    element = lax.slice_in_dim(array, first, first + 1, 1, axis)
    shape = element.shape[:axis] + (length,) + element.shape[axis + 1 :]
    return lax.broadcast_in_dim(element, shape, tuple(range(array.ndim)))
