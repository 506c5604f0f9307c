"""NumPy-style argument handling: dtype promotion and broadcasting, written in terms of lax.

`funcgrad.lax` primitives demand operands of one dtype and one shape; `funcgrad.numpy`
functions accept anything NumPy would, and these helpers make the operands agree. The common
case (arrays that already agree) returns early, since it is on the path of every eager `x + y`.
"""

from __future__ import annotations

import numpy as np

from funcgrad import core, dtypes, lax
from funcgrad.array import Array
from funcgrad.lax.elementwise import convert_element_type_p

_PY_SCALARS = (bool, int, float)


def dtype_and_weak(x) -> tuple[np.dtype, bool]:
    if isinstance(x, (Array, core.Tracer)):
        return x.dtype, x.weak_type
    if isinstance(x, _PY_SCALARS):
        return dtypes.scalar_dtype(x)
    if isinstance(x, (np.ndarray, np.generic)):
        return dtypes.check_supported(x.dtype), False
    if isinstance(x, (list, tuple)):
        from funcgrad.numpy.creation import asarray

        return asarray(x).dtype, False
    raise TypeError(f"{type(x).__name__} {x!r} is not a valid funcgrad array value")


def result_type(*args) -> np.dtype:
    """The dtype NumPy-style functions compute in for these arguments (weakness dropped)."""
    return result_type_and_weak(*args)[0]


def result_type_and_weak(*args) -> tuple[np.dtype, bool]:
    pairs = []
    for a in args:
        if isinstance(a, (np.dtype, type)) or (isinstance(a, str) and a):
            pairs.append((dtypes.canonicalize(a), False))
        else:
            pairs.append(dtype_and_weak(a))
    return dtypes.result_type_of(pairs)


def convert(x, dtype: np.dtype, weak_type: bool = False):
    """`x` as a funcgrad array of `dtype`, keeping weak typing where the promotion kept it."""
    if isinstance(x, _PY_SCALARS):
        return Array(np.array(x, dtype)[()], weak_type)
    x = to_array(x)
    # Dropping weakness needs no conversion: the primitive's output is strong anyway, because
    # a strong result type means some other operand is strong.
    if x.dtype == dtype and (x.weak_type == weak_type or not weak_type):
        return x
    return convert_element_type_p.bind(x, new_dtype=dtype, weak_type=weak_type)


def to_array(x):
    if type(x) is Array or isinstance(x, core.Tracer):
        return x
    if isinstance(x, (list, tuple)):
        from funcgrad.numpy.creation import asarray

        return asarray(x)
    return lax.asarray(x)


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy's broadcasting of shapes, with an error naming every shape."""
    ndim = max(len(s) for s in shapes)
    result = []
    for axis in range(-ndim, 0):
        size = 1
        for shape in shapes:
            if len(shape) >= -axis:
                dim = shape[axis]
                if dim != 1:
                    if size not in (1, dim):
                        raise ValueError(
                            "Incompatible shapes for broadcasting: shapes="
                            + str([tuple(s) for s in shapes])
                        )
                    size = dim
        result.append(size)
    return tuple(result)


def broadcast_to(x, shape: tuple[int, ...]):
    x = to_array(x)
    if x.shape == shape:
        return x
    if len(shape) < x.ndim:
        raise ValueError(
            f"cannot broadcast an array of shape {x.shape} to the smaller rank {shape}"
        )
    if broadcast_shapes(x.shape, shape) != tuple(shape):
        raise ValueError(f"cannot broadcast an array of shape {x.shape} to shape {tuple(shape)}")
    dims = tuple(range(len(shape) - x.ndim, len(shape)))
    return lax.broadcast_in_dim(x, shape, dims)


def _broadcast_operands(args: list) -> list:
    """Broadcast to one shape; rank-0 operands are left for the primitive to broadcast."""
    shapes = [a.shape for a in args]
    first = shapes[0]
    if all(s == first or s == () for s in shapes):
        return args
    shape = broadcast_shapes(*shapes)
    return [a if a.shape in ((), shape) else broadcast_to(a, shape) for a in args]


def promote_args(name: str, *args) -> list:
    """Operands of one dtype (NumPy-style promotion with weak types) and broadcast shapes."""
    first = args[0]
    if type(first) is Array or isinstance(first, core.Tracer):
        dtype, weak = first.dtype, first.weak_type
        fast = True
        for a in args[1:]:
            if not (type(a) is Array or isinstance(a, core.Tracer)) or a.dtype != dtype:
                fast = False
                break
            weak = weak and a.weak_type
        if fast and not weak:
            return _broadcast_operands(list(args))
    dtype, weak = result_type_and_weak(*args)
    return _broadcast_operands([convert(a, dtype, weak) for a in args])


def promote_args_inexact(name: str, *args) -> list:
    """Like `promote_args`, but integer and boolean results become the default float."""
    dtype, weak = result_type_and_weak(*args)
    if not dtypes.is_float(dtype):
        dtype = dtypes.default_float
    return _broadcast_operands([convert(a, dtype, weak) for a in args])


def promote_args_numeric(name: str, *args) -> list:
    """Like `promote_args`, with booleans computed as int32 where arithmetic needs numbers."""
    promoted = promote_args(name, *args)
    if dtypes.is_bool(promoted[0].dtype):
        return [convert(a, dtypes.int32, False) for a in promoted]
    return promoted


def check_arraylike(name: str, *args) -> None:
    for i, a in enumerate(args):
        if not isinstance(a, (Array, core.Tracer, np.ndarray, np.generic, *_PY_SCALARS)):
            raise TypeError(
                f"{name} requires array-like arguments, got {type(a).__name__} at position {i}"
            )
