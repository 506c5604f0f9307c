"""Array creation with NumPy's names: array, asarray, zeros, ones, full and their *_like forms."""

from __future__ import annotations

import operator

import numpy as np

from funcgrad import core, dtypes, lax
from funcgrad.array import Array, on_default_device
from funcgrad.lax.sharding_constraint import placed
from funcgrad.numpy._promotion import convert, dtype_and_weak, result_type_and_weak

__all__ = [
    "array",
    "asarray",
    "empty",
    "empty_like",
    "full",
    "full_like",
    "ones",
    "ones_like",
    "zeros",
    "zeros_like",
]


def _shape_tuple(shape) -> tuple[int, ...]:
    """`shape` as a tuple of ints; a float (2.5) is refused, not truncated."""
    try:
        dims = (
            (operator.index(shape),) if np.ndim(shape) == 0 else tuple(map(operator.index, shape))
        )
    except TypeError:
        raise TypeError(f"shape must be an int or a sequence of ints, got {shape!r}") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"negative dimensions are not allowed, got shape {dims}")
    return dims


def array(
    object,
    dtype=None,
    copy: bool = True,
    order: str | None = "K",
    ndmin: int = 0,
    *,
    device=None,
    out_sharding=None,
):
    """A funcgrad array from an array, a scalar, or nested lists/tuples of them.

    Python floats become float32 and ints int32 (funcgrad's defaults; float64 and int64 under
    `enable_x64`); NumPy arrays keep their dtype, so float64 data stays float64. Arrays have
    no memory order to choose, so `order` is "K" (or None).
    """
    _check_order("array", order, ("K", None))
    out = _array(object, dtype)
    if out.ndim < ndmin:
        out = lax.broadcast_to_rank(out, ndmin)
    if copy and out is object and type(out) is Array:  # donating it leaves `object` alive
        out = out.copy()
    elif not isinstance(object, Array):
        out = on_default_device(out)
    return placed(out, "array", device, out_sharding)


def _check_order(name: str, order, accepted: tuple) -> None:
    if order not in accepted:
        raise NotImplementedError(
            f"{name}: order={order!r} is not supported; funcgrad arrays have no memory layout "
            f"to choose, so order can only be {' or '.join(map(repr, accepted))}"
        )


def _array(object, dtype):
    if dtype is not None:
        dtype = dtypes.canonicalize(dtype)
    if isinstance(object, (Array, core.Tracer)):
        return object if dtype is None else convert(object, dtype)
    if isinstance(object, (bool, int, float, complex)):
        # Without a dtype a Python scalar stays weakly typed, as in JAX.
        return lax.asarray(object, dtype)
    if isinstance(object, (list, tuple)):
        leaves = _nested_leaves(object)
        if any(isinstance(x, core.Tracer) for x in leaves):
            from funcgrad.numpy.shape_ops import stack

            return stack([_array(x, dtype) for x in object])
        if dtype is None:
            dtype, _ = result_type_and_weak(*leaves) if leaves else (dtypes.default_float, False)
        values = [np.asarray(x) if isinstance(x, Array) else x for x in leaves]
        nested = _rebuild(object, iter(values))
        return lax.asarray(np.array(nested, dtype=dtype))
    if isinstance(object, (np.ndarray, np.generic)):
        return lax.asarray(object, dtype)
    if hasattr(object, "__array__"):
        return lax.asarray(np.asarray(object), dtype)
    raise TypeError(f"cannot make a funcgrad array from {type(object).__name__} {object!r}")


def _nested_leaves(seq) -> list:
    leaves = []
    for x in seq:
        if isinstance(x, (list, tuple)):
            leaves.extend(_nested_leaves(x))
        else:
            leaves.append(x)
    return leaves


def _rebuild(seq, leaves):
    return [_rebuild(x, leaves) if isinstance(x, (list, tuple)) else next(leaves) for x in seq]


def asarray(a, dtype=None, order: str | None = None, *, copy=None, device=None, out_sharding=None):
    _check_order("asarray", order, ("K", None))
    out = _array(a, dtype)
    if copy and out is a and type(out) is Array:
        out = out.copy()
    elif not isinstance(a, Array):
        out = on_default_device(out)
    return placed(out, "asarray", device, out_sharding)


def full(shape, fill_value, dtype=None, *, device=None, out_sharding=None):
    shape = _shape_tuple(shape)
    if dtype is None:
        fill = array(fill_value)
    elif dtypes.is_python_scalar(fill_value):
        fill = convert(fill_value, dtypes.canonicalize(dtype))
    else:
        fill = array(fill_value, dtype)
    if fill.ndim:
        from funcgrad.numpy._promotion import broadcast_to

        out = broadcast_to(fill, shape)
    else:
        out = lax.broadcast_in_dim(fill, shape, ())
    return placed(out, "full", device, out_sharding)


def zeros(shape, dtype=None, *, device=None, out_sharding=None):
    out = lax.full(_shape_tuple(shape), 0, dtypes.canonicalize(dtype or dtypes.default_float))
    return placed(out, "zeros", device, out_sharding)


def ones(shape, dtype=None, *, device=None, out_sharding=None):
    out = lax.full(_shape_tuple(shape), 1, dtypes.canonicalize(dtype or dtypes.default_float))
    return placed(out, "ones", device, out_sharding)


def empty(shape, dtype=None, *, device=None, out_sharding=None):
    return placed(zeros(shape, dtype), "empty", device, out_sharding)


def _like(a, dtype, shape):
    a_dtype = a.dtype if hasattr(a, "dtype") else array(a).dtype
    a_shape = np.shape(a) if not hasattr(a, "shape") else a.shape
    return (
        dtypes.canonicalize(dtype) if dtype is not None else a_dtype,
        a_shape if shape is None else _shape_tuple(shape),
    )


def _scalar_like(a, value, dtype, shape):
    """`value` broadcast like `a`: weakly typed when `a` is and no dtype is given, as in JAX."""
    weak = dtype is None and dtype_and_weak(a)[1]
    dtype, shape = _like(a, dtype, shape)
    return lax.broadcast_in_dim(convert(value, dtype, weak), shape, ())


def zeros_like(a, dtype=None, shape=None, *, device=None, out_sharding=None):
    return placed(_scalar_like(a, 0, dtype, shape), "zeros_like", device, out_sharding)


def ones_like(a, dtype=None, shape=None, *, device=None, out_sharding=None):
    return placed(_scalar_like(a, 1, dtype, shape), "ones_like", device, out_sharding)


def empty_like(prototype, dtype=None, shape=None, *, device=None):
    return placed(_scalar_like(prototype, 0, dtype, shape), "empty_like", device)


def full_like(a, fill_value, dtype=None, shape=None, *, device=None, out_sharding=None):
    if isinstance(fill_value, (bool, int, float)):
        out = _scalar_like(a, fill_value, dtype, shape)
    else:
        dtype, shape = _like(a, dtype, shape)
        out = full(shape, fill_value, dtype)
    return placed(out, "full_like", device, out_sharding)
