"""Sorting primitives: multi-operand stable sort and top_k.

Floats are ordered as JAX orders them. `sort` compares -0.0 and 0.0 as equal (a stable sort
keeps their order) and puts every NaN, whatever its sign, after +inf. `top_k` ranks by the
IEEE total order instead: -NaN < -inf < ... < -0.0 < 0.0 < ... < +inf < +NaN.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence

import numpy as np

from funcgrad import dtypes
from funcgrad.core import Primitive, ShapedArray
from funcgrad.interpreters import batching
from funcgrad.interpreters.ad import Zero
from funcgrad.lax import shapes
from funcgrad.lax.base import asarray, shape_text
from funcgrad.lax.indexing import gather_along_axis

__all__ = ["sort", "sort_key_val", "top_k"]


def _sort_key(x: np.ndarray) -> np.ndarray:
    # NumPy sorts float32/float64 with NaNs last and -0.0 == 0.0, but compares ml_dtypes' types
    # without regard to NaN; float32 (int32) holds every value of the half and narrow formats
    # exactly.
    return x.astype(dtypes.compute_dtype(x.dtype), copy=False)


def _total_order_key(x: np.ndarray) -> np.ndarray:
    """Signed integers that order floats as the IEEE total order does: a float's bits, with
    every bit but the sign flipped where the sign is set (so larger magnitudes of negative
    numbers, and -NaN past -inf, come lower)."""
    x = _sort_key(x)
    bits = x.view(np.dtype(f"int{x.dtype.itemsize * 8}"))
    magnitude_bits = np.iinfo(bits.dtype).max
    return np.where(bits < 0, bits ^ magnitude_bits, bits)


def _normalize_dimension(name: str, dimension: int, shape: tuple[int, ...]) -> int:
    dimension = int(dimension)
    if not -len(shape) <= dimension < len(shape):
        raise ValueError(
            f"{name}: dimension {dimension} is out of bounds for operand shape {shape}"
        )
    return dimension % len(shape)


def _take_along_axis(x, indices, axis: int):
    """x[..., indices[..., j, ...], ...] along `axis`, for in-bounds, per-line distinct
    `indices` whose other dimensions match x's: one gather, batched over those dimensions."""
    if x.size == 0:  # then there are no indices either
        return shapes.full(indices.shape, 0, x.dtype)
    return gather_along_axis(x, indices, axis, unique_indices=True)


# ---------------------------------------------------------------------------------------------
# sort

sort_p = Primitive("sort", multiple_results=True)


@sort_p.def_abstract_eval
def _sort_abstract_eval(
    *operands: ShapedArray, dimension: int, is_stable: bool, num_keys: int
) -> list[ShapedArray]:
    if not operands:
        raise TypeError("sort needs at least one operand")
    for key in operands[:num_keys]:
        if dtypes.is_complex(key.dtype):
            raise TypeError(
                f"sort does not accept complex keys (dtype {key.dtype.name}): complex numbers "
                "have no order; sort by their real parts or moduli instead"
            )
    shape = operands[0].shape
    if any(op.shape != shape for op in operands):
        raise TypeError(
            "sort: operands must have the same shape, got "
            + shape_text([op.shape for op in operands])
        )
    if not 0 <= dimension < len(shape):
        raise ValueError(f"sort: dimension {dimension} is out of bounds for operand shape {shape}")
    if not 1 <= num_keys <= len(operands):
        raise ValueError(
            f"sort: num_keys={num_keys} must be between 1 and the number of operands, "
            f"{len(operands)} (operand shapes {shape_text([op.shape for op in operands])})"
        )
    return [ShapedArray(op.shape, op.dtype) for op in operands]


@sort_p.def_impl
def _sort_impl(*operands, dimension, is_stable, num_keys):
    """Permute every operand by the lexicographic order of the first `num_keys` ones.

    The order is always stable (np.lexsort is), which satisfies `is_stable` either way.
    """
    operands = [np.asarray(op) for op in operands]
    keys = [_sort_key(op) for op in operands[:num_keys]]
    order = np.lexsort(keys[::-1], axis=dimension)  # lexsort's primary key is its last
    return [np.take_along_axis(op, order, axis=dimension) for op in operands]


@sort_p.def_weak_type
def _sort_weak_type(weak_flags, **params) -> list[bool]:
    return list(weak_flags)


@sort_p.def_jvp
def _sort_jvp(primals, tangents, *, dimension, is_stable, num_keys):
    # Sorting an iota along with the operands (never as a key) records the permutation, which
    # then moves each tangent as it moved its operand.
    shape = primals[0].shape
    index_dtype = dtypes.int32 if shape[dimension] <= np.iinfo(np.int32).max else dtypes.int64
    iota = shapes.broadcasted_iota(index_dtype, shape, dimension)
    *sorted_primals, permutation = sort_p.bind(
        *primals, iota, dimension=dimension, is_stable=is_stable, num_keys=num_keys
    )
    sorted_tangents = [
        t if type(t) is Zero else _take_along_axis(t, permutation, dimension) for t in tangents
    ]
    return sorted_primals, sorted_tangents


sort_p.not_applicable["transpose"] = "not linear"


@sort_p.def_batch
def _sort_batch(values, dims, *, dimension, is_stable, num_keys):
    # Each lane has its own permutation, which moves every operand: an unbatched operand is
    # broadcast, since its lanes end up in different orders.
    dim = next(d for d in dims if d is not batching.not_mapped)
    size = batching.batch_size(values, dims)
    aligned = [
        batching.broadcast_batch(x, size, dim)
        if d is batching.not_mapped
        else batching.moveaxis(x, d, dim)
        for x, d in zip(values, dims)
    ]
    out = sort_p.bind(
        *aligned, dimension=dimension + (dimension >= dim), is_stable=is_stable, num_keys=num_keys
    )
    return out, [dim] * len(out)


def sort(operand, dimension: int = -1, is_stable: bool = True, num_keys: int = 1):
    """Sort along `dimension`; a sequence of operands is sorted by its first `num_keys` ones.

    A single array gives a single array; a sequence gives a tuple of the permuted operands.
    """
    single = not isinstance(operand, Sequence)
    operands = [asarray(operand)] if single else [asarray(op) for op in operand]
    if not operands:
        raise TypeError("sort needs at least one operand")
    out = sort_p.bind(
        *operands,
        dimension=_normalize_dimension("sort", dimension, operands[0].shape),
        is_stable=bool(is_stable),
        num_keys=int(num_keys),
    )
    return out[0] if single else tuple(out)


def sort_key_val(keys, values, dimension: int = -1, is_stable: bool = True):
    """Sort `keys` along `dimension` and permute `values` the same way."""
    sorted_keys, sorted_values = sort((keys, values), dimension, is_stable, num_keys=1)
    return sorted_keys, sorted_values


# ---------------------------------------------------------------------------------------------
# top_k

top_k_p = Primitive("top_k", multiple_results=True)


@top_k_p.def_abstract_eval
def _top_k_abstract_eval(operand: ShapedArray, *, k: int) -> list[ShapedArray]:
    if operand.ndim == 0:
        raise TypeError("top_k needs an operand of rank at least 1, got shape ()")
    if dtypes.is_complex(operand.dtype):
        raise TypeError(f"top_k does not accept dtype {operand.dtype.name}: it has no order")
    size = operand.shape[-1]
    if not 0 <= k <= size:
        raise ValueError(
            f"top_k: k={k} must be between 0 and the size {size} of the last axis of operand "
            f"shape {operand.shape}"
        )
    shape = operand.shape[:-1] + (k,)
    return [ShapedArray(shape, operand.dtype), ShapedArray(shape, dtypes.int32)]


@top_k_p.def_impl
def _top_k_impl(operand, *, k):
    """The k largest along the last axis, descending in the IEEE total order for floats
    (+NaN first, 0.0 before -0.0, -NaN last); equal values keep their index order."""
    operand = np.asarray(operand)
    key = _total_order_key(operand) if dtypes.is_float(operand.dtype) else operand
    # ~key reverses the order of integers and booleans, without -key's overflow at the minimum.
    order = np.argsort(np.invert(key), axis=-1, kind="stable")
    indices = order[..., :k]
    return [np.take_along_axis(operand, indices, axis=-1), indices.astype(dtypes.int32)]


@top_k_p.def_weak_type
def _top_k_weak_type(weak_flags, **params) -> list[bool]:
    return [weak_flags[0], False]


@top_k_p.def_jvp
def _top_k_jvp(primals, tangents, *, k):
    (operand,), (t,) = primals, tangents
    values, indices = top_k_p.bind(operand, k=k)
    return [values, indices], [_take_along_axis(t, indices, operand.ndim - 1), Zero.like(indices)]


top_k_p.not_applicable["transpose"] = "not linear"


@top_k_p.def_batch
def _top_k_batch(values, dims, *, k):
    # top_k works along the last axis, which must stay the lane's last axis.
    (x,), (dim,) = values, dims
    if dim == x.ndim - 1:
        x, dim = batching.moveaxis(x, dim, 0), 0
    return top_k_p.bind(x, k=k), [dim, dim]


def top_k(operand, k: int, *, axis: int = -1):
    """The `k` largest elements along `axis` (the last by default), and their indices
    (int32)."""
    operand = asarray(operand)
    try:
        k = operator.index(k)
    except TypeError:
        raise TypeError(f"top_k: k must be an integer, got {k!r}") from None
    rank = max(operand.ndim, 1)
    if not -rank <= axis < rank:
        raise ValueError(f"top_k: axis {axis} is out of range for shape {operand.shape}")
    axis %= rank
    last = operand.ndim - 1
    if operand.ndim == 0 or axis == last:
        return tuple(top_k_p.bind(operand, k=k))
    order = [d for d in range(operand.ndim) if d != axis] + [axis]
    values, indices = top_k_p.bind(shapes.transpose(operand, order), k=k)
    back = list(np.argsort(order))
    return shapes.transpose(values, back), shapes.transpose(indices, back)
