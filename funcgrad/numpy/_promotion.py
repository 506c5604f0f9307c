"""NumPy-style argument handling: dtype promotion and broadcasting, written in terms of lax.

`funcgrad.lax` primitives demand operands of one dtype and one shape; `funcgrad.numpy`
functions accept anything NumPy would, and these helpers make the operands agree. The common
case (arrays that already agree) returns early, since it is on the path of every eager `x + y`.
"""

from __future__ import annotations

import warnings

import numpy as np

from funcgrad import core, dtypes, lax
from funcgrad.array import Array
from funcgrad.config import config
from funcgrad.lax.elementwise import convert_element_type_p

_PY_SCALARS = (bool, int, float, complex)


def dtype_and_weak(x) -> tuple[np.dtype, bool]:
    if isinstance(x, (Array, core.Tracer)):
        return x.dtype, x.weak_type
    if dtypes.is_python_scalar(x):
        return dtypes.scalar_dtype(x)
    if isinstance(x, (np.ndarray, np.generic)):
        return dtypes.check_supported(x.dtype), False
    if isinstance(x, (list, tuple)):
        from funcgrad.numpy.creation import asarray

        return asarray(x).dtype, False
    raise TypeError(f"{type(x).__name__} {x!r} is not a valid funcgrad array value")


def result_type(*args, strict: bool | None = None) -> np.dtype:
    """The dtype NumPy-style functions compute in for these arguments (weakness dropped);
    `strict` as `dtypes.result_type_of` takes it."""
    return result_type_and_weak(*args, strict=strict)[0]


def result_type_and_weak(*args, strict: bool | None = None) -> tuple[np.dtype, bool]:
    pairs = []
    for a in args:
        if a is int or a is float or a is complex:
            # Python's number types stand for their weakly typed scalars, as in JAX.
            pairs.append(dtypes.scalar_dtype(a(0)))
        elif isinstance(a, (np.dtype, type)) or (isinstance(a, str) and a):
            pairs.append((dtypes.canonicalize(a), False))
        else:
            pairs.append(dtype_and_weak(a))
    return dtypes.result_type_of(pairs, strict)


def convert(x, dtype: np.dtype, weak_type: bool = False):
    """`x` as a funcgrad array of `dtype`, keeping weak typing where the promotion kept it."""
    if dtypes.is_python_scalar(x):
        if isinstance(x, float) and dtypes.is_int(dtype):
            # As arrays convert: NaN to 0, the infinities and values out of range to the
            # nearest end (NumPy refuses NaN and the infinities of a scalar).
            x = Array(np.array(x, dtypes.float64)[()], False)
            return convert_element_type_p.bind(x, new_dtype=dtype, weak_type=weak_type)
        return Array(np.array(x, dtype)[()], weak_type)
    x = to_array(x)
    # Weakness is dropped explicitly too, as in JAX: functions like copysign build their result
    # from some operands only, so a weak one must not leave its weakness to the strong ones.
    if x.dtype == dtype and x.weak_type == weak_type:
        return x
    return convert_element_type_p.bind(x, new_dtype=dtype, weak_type=weak_type)


def rounded_alone(x):
    """`x` rounded to its dtype where it is made: the compiler may not fuse the product making
    it into the next sum (one rounding where NumPy has two)."""
    if dtypes.is_complex(x.dtype):
        return lax.complex(rounded_alone(lax.real(x)), rounded_alone(lax.imag(x)))
    info = dtypes.finfo(x.dtype)
    return lax.reduce_precision(x, info.nexp, info.nmant)


def to_array(x):
    if type(x) is Array or isinstance(x, core.Tracer):
        return x
    if isinstance(x, (list, tuple)):
        from funcgrad.numpy.creation import asarray

        return asarray(x)
    return lax.asarray(x)


def broadcast_shapes(*shapes: tuple[int, ...]) -> tuple[int, ...]:
    """NumPy's broadcasting of shapes, with an error naming every shape."""
    ndim = max((len(s) for s in shapes), default=0)
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
    first = args[0].shape
    if len(args) == 1 or all(a.shape == first or a.shape == () for a in args):
        return args
    if config.numpy_rank_promotion != "allow":
        _rank_promotion(args)
    shape = broadcast_shapes(*(a.shape for a in args))
    return [a if a.shape in ((), shape) else broadcast_to(a, shape) for a in args]


def _rank_promotion(args: list) -> None:
    """Under `config.numpy_rank_promotion` "warn" or "raise", say so where operands of
    different ranks (scalars aside) would broadcast together."""
    if len({len(a.shape) for a in args if a.shape}) < 2:
        return
    shapes = ", ".join(str(tuple(a.shape)) for a in args)
    message = (
        f"operands of shapes {shapes} have different ranks, and config.numpy_rank_promotion "
        f"is {config.numpy_rank_promotion!r}: add the missing axes explicitly (x[None, :], "
        "expand_dims), or set it to 'allow'"
    )
    if config.numpy_rank_promotion == "raise":
        raise ValueError(message)
    from funcgrad.interpreters.staging import user_source_info

    where = user_source_info()  # (the user's line, however deep inside funcgrad this is)
    if where is None:
        warnings.warn(message, stacklevel=2)
    else:
        warnings.warn_explicit(message, UserWarning, where.file, where.line)


def _common_strong_dtype(args) -> np.dtype | None:
    """The dtype of the common case: strong arrays of one dtype, and Python scalars that fit it.

    Then promotion is the identity and the scalars just take that dtype; anything else (mixed
    dtypes, weak arrays, NumPy values, lists) returns None and takes the general path.
    """
    dtype = None
    for a in args:
        if type(a) is Array or isinstance(a, core.Tracer):
            if a.weak_type:
                return None
            if dtype is None:
                dtype = a.dtype
            elif a.dtype != dtype:
                return None
    if dtype is None:
        return None
    for a in args:
        kind = type(a)
        fits = dtypes.scalar_fits.get(kind)
        if fits is not None:
            if dtype not in fits:
                return None
        elif kind is not Array and not isinstance(a, core.Tracer):
            return None
    return dtype


def _promote_pair(x, y):
    """The eager hot path of `x + y`: two strong concrete arrays of one dtype and compatible
    shapes, or a strong concrete array and a Python scalar that fits its dtype. Anything else
    returns None and takes the general path."""
    if type(x) is Array and not x.weak_type:
        value = x._value
        if type(y) is Array:
            other = y._value
            if y.weak_type or other.dtype != value.dtype:
                return None
            if other.shape == value.shape or not other.shape or not value.shape:
                return (x, y)
            return None
        fits = dtypes.scalar_fits.get(type(y))
        if fits is not None and value.dtype in fits:
            return (x, Array(value.dtype.type(y), False))
        return None
    if type(y) is Array and not y.weak_type:
        fits = dtypes.scalar_fits.get(type(x))
        if fits is not None and y._value.dtype in fits:
            return (Array(y._value.dtype.type(x), False), y)
    return None


def promote_args(name: str, *args) -> list:
    """Operands of one dtype (NumPy-style promotion with weak types) and broadcast shapes."""
    if len(args) == 2:
        pair = _promote_pair(*args)
        if pair is not None:
            return pair
    dtype = _common_strong_dtype(args)
    if dtype is None:
        dtype, weak = result_type_and_weak(*args)
        return _broadcast_operands([convert(a, dtype, weak) for a in args])
    return _broadcast_operands([_scalar_as(a, dtype) for a in args])


def _scalar_as(a, dtype: np.dtype):
    return Array(dtype.type(a), False) if type(a) in _PY_SCALAR_TYPES else a


_PY_SCALAR_TYPES = frozenset(_PY_SCALARS)
_INEXACT_DTYPES = dtypes.scalar_fits[float]


def promote_args_inexact(name: str, *args) -> list:
    """Like `promote_args`, but integer and boolean results become floats
    (`dtypes.to_inexact`: float32, or float64 for 64-bit integers under `enable_x64`)."""
    if len(args) == 1:
        (x,) = args
        if type(x) is Array and not x.weak_type and x._value.dtype in _INEXACT_DTYPES:
            return args
    elif len(args) == 2:
        pair = _promote_pair(*args)
        if pair is not None and pair[0]._value.dtype in _INEXACT_DTYPES:
            return pair
    dtype = _common_strong_dtype(args)
    if dtype in _INEXACT_DTYPES:
        return _broadcast_operands([_scalar_as(a, dtype) for a in args])
    dtype, weak = result_type_and_weak(*args)
    return _broadcast_operands([convert(a, dtypes.to_inexact(dtype), weak) for a in args])


def promote_dtypes_inexact(*args) -> list:
    """The arguments in their common dtype, a float where that is not inexact (integers and
    bools, as `dtypes.to_inexact` says), each keeping its own shape (matrices and their
    right-hand sides, a distribution's vector arguments); Python numbers convert exactly, not
    through float32."""
    dtype = dtypes.to_inexact(result_type(*args))
    return [convert(a if dtypes.is_python_scalar(a) else to_array(a), dtype) for a in args]


def promote_args_numeric(name: str, *args) -> list:
    """Like `promote_args`, with booleans computed as int32 where arithmetic needs numbers."""
    promoted = promote_args(name, *args)
    if promoted[0].dtype == dtypes.bool_:
        return [convert(a, dtypes.int32, False) for a in promoted]
    return promoted


def check_arraylike(name: str, *args) -> None:
    for i, a in enumerate(args):
        if not isinstance(a, (Array, core.Tracer, np.ndarray, np.generic, *_PY_SCALARS)):
            raise TypeError(
                f"{name} requires array-like arguments, got {type(a).__name__} at position {i}"
            )
