"""Shape primitives: broadcasting, reshaping, transposing, slicing, padding, concatenation."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from funcgrad import dtypes
from funcgrad.core import Primitive, ShapedArray, never_weak
from funcgrad.lax.base import asarray

__all__ = [
    "broadcast_in_dim",
    "broadcast",
    "broadcast_to_rank",
    "full",
    "full_like",
    "iota",
    "broadcasted_iota",
]

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
    return np.broadcast_to(np.reshape(x, expanded_shape), shape)


def broadcast_in_dim(operand, shape: Sequence[int], broadcast_dimensions: Sequence[int]):
    operand = asarray(operand)
    shape = tuple(int(d) for d in shape)
    broadcast_dimensions = tuple(int(d) for d in broadcast_dimensions)
    if operand.shape == shape and broadcast_dimensions == tuple(range(len(shape))):
        return operand
    return broadcast_in_dim_p.bind(operand, shape=shape, broadcast_dimensions=broadcast_dimensions)


def broadcast(operand, sizes: Sequence[int]):
    """Add leading dimensions of the given sizes."""
    operand = asarray(operand)
    dims = tuple(range(len(sizes), len(sizes) + operand.ndim))
    return broadcast_in_dim(operand, tuple(sizes) + operand.shape, dims)


def broadcast_to_rank(x, rank: int):
    x = asarray(x)
    missing = rank - x.ndim
    return broadcast(x, (1,) * missing) if missing > 0 else x


def full(shape: Sequence[int], fill_value, dtype=None):
    """An array of `shape` filled with `fill_value` (a broadcast of one scalar)."""
    shape = tuple(int(d) for d in shape)
    fill = asarray(fill_value, dtype)
    if fill.ndim != 0:
        raise TypeError(f"full: fill_value must be a scalar, got shape {fill.shape}")
    return broadcast_in_dim(fill, shape, ())


def full_like(x, fill_value, dtype=None, shape=None):
    """`full` with the shape and dtype of `x` unless given."""
    return full(
        x.shape if shape is None else shape, fill_value, x.dtype if dtype is None else dtype
    )


iota_p = Primitive("iota")


@iota_p.def_abstract_eval
def _iota_abstract_eval(*, dtype: np.dtype, shape: tuple[int, ...], dimension: int) -> ShapedArray:
    if not 0 <= dimension < len(shape):
        raise TypeError(f"iota: dimension {dimension} is out of range for shape {shape}")
    if not (dtypes.is_int(dtype) or dtypes.is_float(dtype)):
        raise TypeError(f"iota: dtype must be numeric, got {np.dtype(dtype).name}")
    return ShapedArray(shape, dtype)


@iota_p.def_impl
def _iota_impl(*, dtype, shape, dimension):
    line = np.arange(shape[dimension], dtype=dtype)
    expanded = [1] * len(shape)
    expanded[dimension] = shape[dimension]
    return np.broadcast_to(line.reshape(expanded), shape)


iota_p.def_weak_type(never_weak)


def iota(dtype, size: int):
    """[0, 1, ..., size - 1] as a 1-d array of `dtype`."""
    return broadcasted_iota(dtype, (int(size),), 0)


def broadcasted_iota(dtype, shape: Sequence[int], dimension: int):
    """An array of `shape` whose values count along `dimension`."""
    shape = tuple(int(d) for d in shape)
    return iota_p.bind(dtype=dtypes.canonicalize(dtype), shape=shape, dimension=int(dimension))
