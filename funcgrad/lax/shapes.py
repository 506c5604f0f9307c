"""Shape primitives: broadcasting, reshaping, transposing, slicing, padding, concatenation."""

from __future__ import annotations

import collections
import math
import operator
from collections.abc import Sequence

import numpy as np

from funcgrad import core, dtypes
from funcgrad.array import Array
from funcgrad.core import Primitive, ShapedArray, never_weak
from funcgrad.interpreters.ad import defjvp_zero, deflinear, is_undefined
from funcgrad.interpreters.batching import broadcast_batch, moveaxis, not_mapped
from funcgrad.lax.base import asarray, canonical_axes, check_same_dtypes
from funcgrad.lax.elementwise import binary_operands, convert_element_type_p, select, sub
from funcgrad.lax.sharding_constraint import placed

# The builtin, which this module's `slice` wrapper shadows.
_py_slice = slice

__all__ = [
    "broadcast_in_dim",
    "broadcast",
    "broadcast_to_rank",
    "full",
    "full_like",
    "iota",
    "broadcasted_iota",
    "reshape",
    "transpose",
    "squeeze",
    "expand_dims",
    "rev",
    "slice",
    "slice_in_dim",
    "index_in_dim",
    "pad",
    "concatenate",
    "collapse",
]


def scalar_if_0d(x):
    """NumPy results of rank 0 as NumPy scalars, the form funcgrad keeps rank-0 values in."""
    return x[()] if np.ndim(x) == 0 else x


def _int_tuple(values: Sequence[int]) -> tuple[int, ...]:
    """Sizes or dimensions as Python ints: a float is refused, not truncated (2.5 -> 2)."""
    values = tuple(values)
    try:
        return tuple(operator.index(v) for v in values)
    except TypeError:
        raise TypeError(f"shapes and dimensions must be integers, got {values}") from None


def _check_dims(name: str, what: str, dims: Sequence[int], shape: tuple[int, ...]) -> None:
    """`dims` must be distinct axes of an array of `shape`."""
    if any(not 0 <= d < len(shape) for d in dims) or len(set(dims)) != len(dims):
        raise ValueError(
            f"{name}: {what} {tuple(dims)} must be distinct axes in [0, {len(shape)}) of the "
            f"operand of shape {shape}"
        )


def _lane_axes(axes: Sequence[int], batch_dim: int) -> tuple[int, ...]:
    """Axes of one lane renumbered as axes of the batched array, whose batch axis is batch_dim."""
    return tuple(a + (a >= batch_dim) for a in axes)


def _insert(items: Sequence, index: int, item) -> tuple:
    return tuple(items[:index]) + (item,) + tuple(items[index:])


# ---------------------------------------------------------------------------------------------
# Broadcasting

broadcast_in_dim_p = Primitive("broadcast_in_dim")


@broadcast_in_dim_p.def_abstract_eval
def _broadcast_in_dim_abstract_eval(
    x: ShapedArray, *, shape: tuple[int, ...], broadcast_dimensions: tuple[int, ...]
) -> ShapedArray:
    if len(broadcast_dimensions) != x.ndim:
        raise TypeError(
            f"broadcast_in_dim: broadcast_dimensions {broadcast_dimensions} must name one output "
            f"dimension for each of the operand's {x.ndim} dimensions (operand shape {x.shape})"
        )
    if any(not 0 <= d < len(shape) for d in broadcast_dimensions) or list(
        broadcast_dimensions
    ) != sorted(set(broadcast_dimensions)):
        raise TypeError(
            f"broadcast_in_dim: broadcast_dimensions {broadcast_dimensions} must be strictly "
            f"increasing dimensions of the output shape {shape}"
        )
    for operand_dim, out_dim in enumerate(broadcast_dimensions):
        if x.shape[operand_dim] not in (1, shape[out_dim]):
            raise TypeError(
                f"broadcast_in_dim: operand shape {x.shape} cannot be broadcast to {shape} "
                f"along broadcast_dimensions {broadcast_dimensions}: operand dimension "
                f"{operand_dim} has size {x.shape[operand_dim]}, output dimension {out_dim} "
                f"has size {shape[out_dim]}"
            )
    return ShapedArray(shape, x.dtype)


@broadcast_in_dim_p.def_impl
def _broadcast_in_dim_impl(x, *, shape, broadcast_dimensions):
    expanded_shape = [1] * len(shape)
    for operand_dim, out_dim in enumerate(broadcast_dimensions):
        expanded_shape[out_dim] = np.shape(x)[operand_dim]
    return scalar_if_0d(np.broadcast_to(np.reshape(x, expanded_shape), shape))


def _broadcast_in_dim_transpose(ct, x, *, shape, broadcast_dimensions):
    """Sum the cotangent over every dimension the broadcast created or stretched from size 1."""
    from funcgrad.lax.reductions import reduce_sum  # reductions imports this module

    operand_shape = x.aval.shape
    stretched = {
        out_dim
        for operand_dim, out_dim in enumerate(broadcast_dimensions)
        if operand_shape[operand_dim] != shape[out_dim]
    }
    summed = tuple(d for d in range(len(shape)) if d not in broadcast_dimensions or d in stretched)
    return [reshape(reduce_sum(ct, summed) if summed else ct, operand_shape)]


deflinear(broadcast_in_dim_p, _broadcast_in_dim_transpose)


@broadcast_in_dim_p.def_batch
def _broadcast_in_dim_batch(values, dims, *, shape, broadcast_dimensions):
    """The batch axis goes to the output just before the output axis of the operand's next
    axis, so that broadcast_dimensions stay increasing without a transpose."""
    (x,), (dim,) = values, dims
    size = core.get_aval(x).shape[dim]
    out_dim = broadcast_dimensions[dim] if dim < len(broadcast_dimensions) else len(shape)
    out_dims = _insert(_lane_axes(broadcast_dimensions, out_dim), dim, out_dim)
    out = broadcast_in_dim_p.bind(
        x, shape=_insert(shape, out_dim, size), broadcast_dimensions=out_dims
    )
    return out, out_dim


def broadcast_in_dim(
    operand, shape: Sequence[int], broadcast_dimensions: Sequence[int], *, out_sharding=None
):
    operand = asarray(operand)
    shape = _int_tuple(shape)
    broadcast_dimensions = _int_tuple(broadcast_dimensions)
    order = sorted(range(len(broadcast_dimensions)), key=broadcast_dimensions.__getitem__)
    if order != list(range(len(order))) and operand.ndim == len(order):
        # Output dimensions out of order transpose the operand: put its axes in their order.
        operand = transpose(operand, order)
        broadcast_dimensions = tuple(broadcast_dimensions[i] for i in order)
    if operand.shape == shape and broadcast_dimensions == tuple(range(len(shape))):
        out = operand
    else:
        out = broadcast_in_dim_p.bind(
            operand, shape=shape, broadcast_dimensions=broadcast_dimensions
        )
    if out_sharding is not None:
        return placed(out, "broadcast_in_dim", out_sharding=out_sharding)
    return out


def broadcast(operand, sizes: Sequence[int], *, out_sharding=None):
    """Add leading dimensions of the given sizes."""
    operand = asarray(operand)
    dims = tuple(range(len(sizes), len(sizes) + operand.ndim))
    out = broadcast_in_dim(operand, tuple(sizes) + operand.shape, dims)
    return placed(out, "broadcast", out_sharding=out_sharding)


def broadcast_to_rank(x, rank: int):
    x = asarray(x)
    missing = rank - x.ndim
    return broadcast(x, (1,) * missing) if missing > 0 else x


def full(shape: Sequence[int], fill_value, dtype=None, *, sharding=None):
    """An array of `shape` filled with `fill_value` (a broadcast of one scalar), placed as
    `device_put` places arrays on `sharding` if given."""
    shape = _int_tuple(shape)
    fill = asarray(fill_value, dtype)
    if fill.ndim != 0:
        raise TypeError(f"full: fill_value must be a scalar, got shape {fill.shape}")
    out = broadcast_in_dim(fill, shape, ())
    if sharding is not None:
        return placed(out, "full", device=sharding)
    return out


def full_like(x, fill_value, dtype=None, shape=None, sharding=None):
    """`full` with the shape and dtype of `x` unless given (anything with both, such as a
    ShapeDtypeStruct, will do)."""
    if not (hasattr(x, "shape") and hasattr(x, "dtype")):
        x = asarray(x)  # (a scalar; anything else is refused by name)
    shape = x.shape if shape is None else shape
    if dtype is None and core.get_aval(x).weak_type:
        # Like x, weakly typed: a value made in x's image promotes as x would.
        out = broadcast_in_dim(_weak_scalar(fill_value, x.dtype), _int_tuple(shape), ())
    else:
        out = full(shape, fill_value, x.dtype if dtype is None else dtype)
    return placed(out, "full_like", device=sharding)


def _weak_scalar(value, dtype):
    if isinstance(value, core.Tracer):
        return convert_element_type_p.bind(value, new_dtype=dtype, weak_type=True)
    scalar = np.asarray(value)
    if scalar.ndim != 0:
        raise TypeError(f"full_like: fill_value must be a scalar, got shape {scalar.shape}")
    return Array(scalar.astype(dtype)[()], True)


def expand_dims(array, dimensions: Sequence[int]):
    """Insert axes of size 1 at `dimensions` (axes of the result); a broadcast, not a primitive."""
    array = asarray(array)
    out_ndim = array.ndim + len(dimensions)
    new_dims = canonical_axes(dimensions, out_ndim, "expand_dims")
    shape = list(array.shape)
    for d in sorted(new_dims):
        shape.insert(d, 1)
    kept = tuple(d for d in range(out_ndim) if d not in new_dims)
    return broadcast_in_dim(array, shape, kept)


# ---------------------------------------------------------------------------------------------
# Iota

iota_p = Primitive("iota")


@iota_p.def_abstract_eval
def _iota_abstract_eval(*, dtype: np.dtype, shape: tuple[int, ...], dimension: int) -> ShapedArray:
    if not 0 <= dimension < len(shape):
        raise TypeError(f"iota: dimension {dimension} is out of range for shape {shape}")
    if not (dtypes.is_int(dtype) or dtypes.is_inexact(dtype)):
        raise TypeError(
            f"iota: dtype must be an integer, floating or complex type, got {np.dtype(dtype).name}"
        )
    return ShapedArray(shape, dtype)


@iota_p.def_impl
def _iota_impl(*, dtype, shape, dimension):
    if dtypes.is_narrow(dtype):  # (ml_dtypes' arange steps in the format: 0 + 1 is NaN in e8m0)
        line = np.arange(shape[dimension]).astype(dtype)
    else:
        line = np.arange(shape[dimension], dtype=dtype)
    expanded = [1] * len(shape)
    expanded[dimension] = shape[dimension]
    return np.broadcast_to(line.reshape(expanded), shape)


iota_p.def_weak_type(never_weak)
defjvp_zero(iota_p)
iota_p.not_applicable["transpose"] = "no operands"
iota_p.not_applicable["batch"] = "no operands: never batched"


def iota(dtype, size: int):
    """[0, 1, ..., size - 1] as a 1-d array of `dtype`."""
    return broadcasted_iota(dtype, (size,), 0)


def broadcasted_iota(dtype, shape: Sequence[int], dimension: int, *, out_sharding=None):
    """An array of `shape` whose values count along `dimension`."""
    shape = _int_tuple(shape)
    out = iota_p.bind(dtype=dtypes.canonicalize(dtype), shape=shape, dimension=int(dimension))
    if out_sharding is not None:
        return placed(out, "broadcasted_iota", out_sharding=out_sharding)
    return out


# ---------------------------------------------------------------------------------------------
# Reshape, transpose, squeeze, rev

reshape_p = Primitive("reshape")


@reshape_p.def_abstract_eval
def _reshape_abstract_eval(
    x: ShapedArray, *, new_sizes: tuple[int, ...], dimensions: tuple[int, ...] | None
) -> ShapedArray:
    if any(d < 0 for d in new_sizes):
        raise TypeError(
            f"reshape: new_sizes {new_sizes} must be non-negative (lax.reshape infers no -1 "
            "dimension; funcgrad.numpy.reshape does)"
        )
    if dimensions is not None and sorted(dimensions) != list(range(x.ndim)):
        raise TypeError(
            f"reshape: dimensions {dimensions} must be a permutation of the axes of the operand "
            f"of shape {x.shape}"
        )
    if math.prod(new_sizes) != x.size:
        raise TypeError(
            f"reshape: cannot reshape an operand of shape {x.shape} ({x.size} elements) to "
            f"new_sizes {new_sizes} ({math.prod(new_sizes)} elements)"
        )
    return ShapedArray(new_sizes, x.dtype)


@reshape_p.def_impl
def _reshape_impl(x, *, new_sizes, dimensions):
    if dimensions is not None:
        x = np.transpose(x, dimensions)
    return scalar_if_0d(np.reshape(x, new_sizes))


def _reshape_transpose(ct, x, *, new_sizes, dimensions):
    if dimensions is None:
        return [reshape(ct, x.aval.shape)]
    permuted_shape = tuple(x.aval.shape[d] for d in dimensions)
    return [transpose(reshape(ct, permuted_shape), np.argsort(dimensions))]


deflinear(reshape_p, _reshape_transpose)


@reshape_p.def_batch
def _reshape_batch(values, dims, *, new_sizes, dimensions):
    """Row-major order keeps the batch axis in place when the lane axes before it hold as
    many elements as a prefix of new_sizes; otherwise the reshape's own transpose (its
    dimensions) brings the batch axis to the front."""
    (x,), (dim,) = values, dims
    shape = core.get_aval(x).shape
    size = shape[dim]
    if dimensions is None:
        leading = math.prod(shape[:dim])
        for k in range(len(new_sizes) + 1):
            if math.prod(new_sizes[:k]) == leading:
                return reshape(x, _insert(new_sizes, k, size)), k
    lane_order = range(len(shape) - 1) if dimensions is None else dimensions
    return reshape(x, (size,) + new_sizes, (dim,) + _lane_axes(lane_order, dim)), 0


def reshape(
    operand, new_sizes: Sequence[int], dimensions: Sequence[int] | None = None, *, out_sharding=None
):
    """Reshape in row-major order, after transposing by `dimensions` when it is given."""
    operand = asarray(operand)
    new_sizes = _int_tuple(new_sizes)
    dims = None if dimensions is None else _int_tuple(dimensions)
    if dims == tuple(range(operand.ndim)):
        dims = None
    if dims is None and new_sizes == operand.shape:
        out = operand
    else:
        out = reshape_p.bind(operand, new_sizes=new_sizes, dimensions=dims)
    if out_sharding is not None:
        return placed(out, "reshape", out_sharding=out_sharding)
    return out


def collapse(operand, start_dimension: int, stop_dimension: int | None = None):
    """Merge the dimensions [start_dimension, stop_dimension) into one (Python slice rules)."""
    operand = asarray(operand)
    shape = operand.shape
    lo, hi = start_dimension, stop_dimension
    new_sizes = shape[:lo] + (math.prod(shape[lo:hi]),) + (shape[hi:] if hi is not None else ())
    return reshape(operand, new_sizes)


transpose_p = Primitive("transpose")


@transpose_p.def_abstract_eval
def _transpose_abstract_eval(x: ShapedArray, *, permutation: tuple[int, ...]) -> ShapedArray:
    if sorted(permutation) != list(range(x.ndim)):
        raise ValueError(
            f"transpose: permutation {permutation} is not a permutation of the axes of the "
            f"operand of shape {x.shape}"
        )
    return ShapedArray(tuple(x.shape[d] for d in permutation), x.dtype)


@transpose_p.def_impl
def _transpose_impl(x, *, permutation):
    return np.transpose(x, permutation)


def _transpose_transpose(ct, x, *, permutation):
    return [transpose(ct, np.argsort(permutation))]


deflinear(transpose_p, _transpose_transpose)


@transpose_p.def_batch
def _transpose_batch(values, dims, *, permutation):
    (x,), (dim,) = values, dims
    return transpose(x, _insert(_lane_axes(permutation, dim), dim, dim)), dim


def transpose(operand, permutation: Sequence[int]):
    operand = asarray(operand)
    permutation = _int_tuple(permutation)
    if permutation == tuple(range(operand.ndim)):
        return operand
    return transpose_p.bind(operand, permutation=permutation)


squeeze_p = Primitive("squeeze")


@squeeze_p.def_abstract_eval
def _squeeze_abstract_eval(x: ShapedArray, *, dimensions: tuple[int, ...]) -> ShapedArray:
    _check_dims("squeeze", "dimensions", dimensions, x.shape)
    for d in dimensions:
        if x.shape[d] != 1:
            raise ValueError(
                f"squeeze: cannot remove dimension {d} of the operand of shape {x.shape}: its "
                f"size is {x.shape[d]}, not 1"
            )
    return ShapedArray(tuple(s for d, s in enumerate(x.shape) if d not in dimensions), x.dtype)


@squeeze_p.def_impl
def _squeeze_impl(x, *, dimensions):
    return scalar_if_0d(np.squeeze(x, axis=dimensions))


def _squeeze_transpose(ct, x, *, dimensions):
    return [reshape(ct, x.aval.shape)]


deflinear(squeeze_p, _squeeze_transpose)


@squeeze_p.def_batch
def _squeeze_batch(values, dims, *, dimensions):
    (x,), (dim,) = values, dims
    out_dim = dim - sum(d < dim for d in dimensions)
    return squeeze(x, _lane_axes(dimensions, dim)), out_dim


def squeeze(array, dimensions: Sequence[int]):
    """Remove the given dimensions, each of size 1 (negative dimensions count from the end)."""
    array = asarray(array)
    dims = tuple(sorted(canonical_axes(dimensions, array.ndim, "squeeze")))
    if not dims:
        return array
    return squeeze_p.bind(array, dimensions=dims)


rev_p = Primitive("rev")


@rev_p.def_abstract_eval
def _rev_abstract_eval(x: ShapedArray, *, dimensions: tuple[int, ...]) -> ShapedArray:
    _check_dims("rev", "dimensions", dimensions, x.shape)
    return ShapedArray(x.shape, x.dtype)


@rev_p.def_impl
def _rev_impl(x, *, dimensions):
    return np.flip(x, dimensions)


def _rev_transpose(ct, x, *, dimensions):
    return [rev(ct, dimensions)]


deflinear(rev_p, _rev_transpose)


@rev_p.def_batch
def _rev_batch(values, dims, *, dimensions):
    (x,), (dim,) = values, dims
    return rev(x, _lane_axes(dimensions, dim)), dim


def rev(operand, dimensions: Sequence[int]):
    """Reverse the order of elements along each of `dimensions`."""
    operand = asarray(operand)
    dimensions = _int_tuple(dimensions)
    if not dimensions:
        return operand
    return rev_p.bind(operand, dimensions=dimensions)


# ---------------------------------------------------------------------------------------------
# Static slicing

slice_p = Primitive("slice")


@slice_p.def_abstract_eval
def _slice_abstract_eval(
    x: ShapedArray,
    *,
    start_indices: tuple[int, ...],
    limit_indices: tuple[int, ...],
    strides: tuple[int, ...] | None,
) -> ShapedArray:
    strides = (1,) * x.ndim if strides is None else strides
    if not len(start_indices) == len(limit_indices) == len(strides) == x.ndim:
        raise TypeError(
            f"slice: start_indices {start_indices}, limit_indices {limit_indices} and strides "
            f"{strides} must each have one entry per dimension of the operand of shape {x.shape}"
        )
    if any(s < 1 for s in strides):
        raise ValueError(f"slice: strides {strides} must be positive")
    if not all(0 <= lo <= hi <= n for lo, hi, n in zip(start_indices, limit_indices, x.shape)):
        raise TypeError(
            f"slice: start_indices {start_indices} and limit_indices {limit_indices} do not fit "
            f"the operand of shape {x.shape}: each dimension needs 0 <= start <= limit <= size"
        )
    shape = tuple(
        -(-(hi - lo) // step) for lo, hi, step in zip(start_indices, limit_indices, strides)
    )
    return ShapedArray(shape, x.dtype)


@slice_p.def_impl
def _slice_impl(x, *, start_indices, limit_indices, strides):
    strides = (1,) * len(start_indices) if strides is None else strides
    return x[tuple(map(_py_slice, start_indices, limit_indices, strides))]


def _slice_transpose(ct, x, *, start_indices, limit_indices, strides):
    """Put the cotangent back where the slice read it: zeros around and between its elements."""
    strides = (1,) * len(start_indices) if strides is None else strides
    config = []
    for start, size, n, step in zip(start_indices, ct.shape, x.aval.shape, strides):
        last = start + (size - 1) * step + 1 if size else start  # one past the last element read
        config.append((start, n - last, step - 1))
    return [pad(ct, 0, config)]


deflinear(slice_p, _slice_transpose)


@slice_p.def_batch
def _slice_batch(values, dims, *, start_indices, limit_indices, strides):
    (x,), (dim,) = values, dims
    size = core.get_aval(x).shape[dim]
    out = slice(
        x,
        _insert(start_indices, dim, 0),
        _insert(limit_indices, dim, size),
        None if strides is None else _insert(strides, dim, 1),
    )
    return out, dim


def slice(
    operand,
    start_indices: Sequence[int],
    limit_indices: Sequence[int],
    strides: Sequence[int] | None = None,
):
    """The elements from `start_indices` up to (not including) `limit_indices`, every `strides`."""
    operand = asarray(operand)
    start_indices = _int_tuple(start_indices)
    limit_indices = _int_tuple(limit_indices)
    strides = None if strides is None else _int_tuple(strides)
    if strides is not None and all(s == 1 for s in strides):
        strides = None
    if strides is None and start_indices == (0,) * operand.ndim and limit_indices == operand.shape:
        return operand
    return slice_p.bind(
        operand,
        start_indices=start_indices,
        limit_indices=limit_indices,
        strides=strides,
    )


def slice_in_dim(
    operand, start_index: int | None, limit_index: int | None, stride: int = 1, axis: int = 0
):
    """`slice` along one axis; negative indices count from the end, None means the end."""
    operand = asarray(operand)
    (axis,) = canonical_axes((axis,), operand.ndim, "slice_in_dim")
    size = operand.shape[axis]
    start = 0 if start_index is None else int(start_index)
    limit = size if limit_index is None else int(limit_index)
    start_indices = [0] * operand.ndim
    limit_indices = list(operand.shape)
    strides = [1] * operand.ndim
    start_indices[axis] = start + size if start < 0 else start
    limit_indices[axis] = limit + size if limit < 0 else limit
    strides[axis] = int(stride)
    return slice(operand, start_indices, limit_indices, strides)


def index_in_dim(operand, index: int, axis: int = 0, keepdims: bool = True):
    """Element `index` along `axis` (negative counts from the end), keeping the axis if asked."""
    operand = asarray(operand)
    (axis,) = canonical_axes((axis,), operand.ndim, "index_in_dim")
    size = operand.shape[axis]
    index = int(index)
    if not -size <= index < size:
        raise IndexError(
            f"index_in_dim: index {index} is out of bounds for axis {axis} of size {size} "
            f"(operand shape {operand.shape})"
        )
    index = index + size if index < 0 else index
    result = slice_in_dim(operand, index, index + 1, 1, axis)
    return result if keepdims else squeeze(result, (axis,))


# ---------------------------------------------------------------------------------------------
# Padding

pad_p = Primitive("pad")


def _padded_size(size: int, lo: int, hi: int, interior: int) -> int:
    return lo + hi + size + max(size - 1, 0) * interior


@pad_p.def_abstract_eval
def _pad_abstract_eval(
    x: ShapedArray, padding_value: ShapedArray, *, padding_config: tuple[tuple[int, int, int], ...]
) -> ShapedArray:
    dtype = check_same_dtypes("pad", [x, padding_value])
    if padding_value.ndim != 0:
        raise TypeError(f"pad: padding_value must be a scalar, got shape {padding_value.shape}")
    if len(padding_config) != x.ndim:
        raise TypeError(
            f"pad: padding_config {padding_config} must have one (low, high, interior) entry per "
            f"dimension of the operand of shape {x.shape}"
        )
    if any(len(entry) != 3 for entry in padding_config):
        raise TypeError(
            f"pad: each padding_config entry is (low, high, interior), got {padding_config}"
        )
    if any(interior < 0 for _, _, interior in padding_config):
        raise ValueError(f"pad: interior padding must be non-negative, got {padding_config}")
    shape = tuple(_padded_size(n, *config) for n, config in zip(x.shape, padding_config))
    if any(n < 0 for n in shape):
        raise ValueError(
            f"pad: padding_config {padding_config} gives the operand of shape {x.shape} the "
            f"negative size {shape}"
        )
    return ShapedArray(shape, dtype)


@pad_p.def_impl
def _pad_impl(x, padding_value, *, padding_config):
    # Pad with the non-negative part of each low/high amount, then crop the negative part.
    grown = tuple(
        _padded_size(n, max(lo, 0), max(hi, 0), i)
        for n, (lo, hi, i) in zip(np.shape(x), padding_config)
    )
    out = np.full(grown, padding_value, dtype=x.dtype)
    placed = tuple(
        _py_slice(max(lo, 0), max(lo, 0) + _padded_size(n, 0, 0, i), i + 1)
        for n, (lo, _, i) in zip(np.shape(x), padding_config)
    )
    out[placed] = x
    cropped = tuple(
        _py_slice(max(-lo, 0), max(-lo, 0) + _padded_size(n, lo, hi, i))
        for n, (lo, hi, i) in zip(np.shape(x), padding_config)
    )
    return scalar_if_0d(out[cropped])


def _pad_transpose(ct, x, padding_value, *, padding_config):
    """The operand's cotangent is read off the interior; the padding value's is the rest.

    Padding the cotangent by the negated low/high amounts removes the edges (and gives zeros
    for operand elements that negative padding cropped away); a strided slice then drops the
    interior padding.
    """
    from funcgrad.lax.reductions import reduce_sum  # reductions imports this module

    unpadded = pad(ct, 0, [(-lo, -hi, 0) for lo, hi, _ in padding_config])
    strides = [interior + 1 for _, _, interior in padding_config]
    ct_x = slice(unpadded, (0,) * ct.ndim, unpadded.shape, strides)
    ct_padding_value = None
    if is_undefined(padding_value):
        every_dim = tuple(range(ct.ndim))
        ct_padding_value = sub(reduce_sum(ct, every_dim), reduce_sum(ct_x, every_dim))
    return [ct_x if is_undefined(x) else None, ct_padding_value]


deflinear(pad_p, _pad_transpose)


@pad_p.def_batch
def _pad_batch(values, dims, *, padding_config):
    """A padding value per lane cannot be a pad's scalar: the operand is padded with 0, and a
    select puts each lane's value wherever a padded mask says no operand element landed."""
    (x, padding_value), (x_dim, value_dim) = values, dims
    x_shape = core.get_aval(x).shape
    if x_dim is not_mapped:
        out_dim, lane_shape = 0, x_shape
        size = core.get_aval(padding_value).shape[0]
        padded = broadcast_batch(pad(x, 0, padding_config), size, out_dim)
    else:
        out_dim, lane_shape = x_dim, x_shape[:x_dim] + x_shape[x_dim + 1 :]
        config = _insert(padding_config, x_dim, (0, 0, 0))
        if value_dim is not_mapped:
            return pad(x, padding_value, config), out_dim
        padded = pad(x, 0, config)
    out_shape = core.get_aval(padded).shape
    lane_axes = tuple(d for d in range(len(out_shape)) if d != out_dim)
    from_x = pad(full(lane_shape, True), False, padding_config)
    from_x = broadcast_in_dim(from_x, out_shape, lane_axes)
    lane_values = broadcast_in_dim(padding_value, out_shape, (out_dim,))
    return select(from_x, padded, lane_values), out_dim


def pad(operand, padding_value, padding_config: Sequence[tuple[int, int, int]]):
    """Pad each dimension by (low, high, interior) elements of `padding_value`.

    Low and high may be negative, which crops; interior padding goes between elements.
    """
    operand, padding_value = binary_operands(operand, padding_value)
    config = tuple(_int_tuple(entry) for entry in padding_config)
    return pad_p.bind(operand, padding_value, padding_config=config)


# ---------------------------------------------------------------------------------------------
# Concatenation

concatenate_p = Primitive("concatenate")


@concatenate_p.def_abstract_eval
def _concatenate_abstract_eval(*xs: ShapedArray, dimension: int) -> ShapedArray:
    if not xs:
        raise TypeError("concatenate needs at least one operand")
    dtype = check_same_dtypes("concatenate", xs)
    first = xs[0].shape
    if not 0 <= dimension < len(first):
        raise ValueError(
            f"concatenate: dimension {dimension} is out of range for operands of shapes "
            + ", ".join(str(x.shape) for x in xs)
        )
    for x in xs:
        if len(x.shape) != len(first) or any(
            a != b for d, (a, b) in enumerate(zip(x.shape, first)) if d != dimension
        ):
            raise TypeError(
                f"concatenate: operands must have equal shapes except along dimension "
                f"{dimension}, got " + ", ".join(str(x.shape) for x in xs)
            )
    size = sum(x.shape[dimension] for x in xs)
    return ShapedArray(first[:dimension] + (size,) + first[dimension + 1 :], dtype)


@concatenate_p.def_impl
def _concatenate_impl(*xs, dimension):
    return np.concatenate(xs, axis=dimension)


def _concatenate_transpose(ct, *xs, dimension):
    cts, start = [], 0
    for x in xs:
        limit = start + core.get_aval(x).shape[dimension]
        cts.append(slice_in_dim(ct, start, limit, axis=dimension) if is_undefined(x) else None)
        start = limit
    return cts


deflinear(concatenate_p, _concatenate_transpose)


@concatenate_p.def_batch
def _concatenate_batch(values, dims, *, dimension):
    """Operands meet at the batch axis most of them already have; unbatched operands are
    broadcast there, as each lane of the result holds a copy of them."""
    batched = [(core.get_aval(x).shape[d], d) for x, d in zip(values, dims) if d is not not_mapped]
    size = batched[0][0]
    out_dim = collections.Counter(d for _, d in batched).most_common(1)[0][0]
    operands = [
        broadcast_batch(x, size, out_dim) if d is not_mapped else moveaxis(x, d, out_dim)
        for x, d in zip(values, dims)
    ]
    return concatenate(operands, dimension + (dimension >= out_dim)), out_dim


def concatenate(operands: Sequence, dimension: int):
    """Join arrays of one dtype along `dimension`."""
    operands = [asarray(x) for x in operands]
    if len(operands) == 1:
        return operands[0]
    return concatenate_p.bind(*operands, dimension=int(dimension))
