"""What every primitive family shares: operand conversion and the standard shape/dtype checks."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from funcgrad import core, dtypes, transfer_guards
from funcgrad.array import Array
from funcgrad.core import ShapedArray
from funcgrad.interpreters import eval as _eval  # noqa: F401  (the bottom trace must exist)


def asarray(x, dtype=None):
    """Turn a primitive operand into a funcgrad array (tracers and arrays pass through).

    Python scalars become weakly typed arrays of the default dtype of their kind; NumPy values
    keep their dtype (float64 stays float64) and are copied, so later writes to them by the
    user cannot reach funcgrad's immutable arrays.
    """
    if type(x) is Array or isinstance(x, core.Tracer):
        return x
    if dtypes.is_python_scalar(x):
        scalar_dtype, weak = dtypes.scalar_dtype(x)
        if dtype is not None:
            return Array(np.array(x, dtypes.canonicalize(dtype))[()], False)
        try:
            return Array(np.array(x, scalar_dtype)[()], weak)
        except OverflowError:
            raise OverflowError(
                f"Python int {x} is too large to convert to {scalar_dtype.name}; "
                "pass a NumPy array or scalar of a wider dtype (e.g. np.int64)"
            ) from None
    if isinstance(x, np.ndarray | np.generic) and not x.dtype.isnative:
        x = x.astype(x.dtype.newbyteorder("="))  # (a file's big-endian data, in this CPU's order)
    if isinstance(x, np.generic):
        return Array(x if dtype is None else x.astype(dtypes.canonicalize(dtype)), False)
    if isinstance(x, np.ndarray):
        dtypes.check_supported(x.dtype)
        if transfer_guards.active:
            transfer_guards.host_data(x)
        value = np.array(x, dtype=None if dtype is None else dtypes.canonicalize(dtype))
        return Array(value[()] if value.ndim == 0 else value, False)
    raise TypeError(
        f"value of type {type(x).__name__} is not a valid funcgrad array operand: expected a "
        "funcgrad array, a NumPy array or a Python scalar"
    )


def shape_text(shapes: Sequence[tuple[int, ...]]) -> str:
    return ", ".join(str(tuple(s)) for s in shapes)


def check_same_dtypes(name: str, avals: Sequence[ShapedArray]) -> np.dtype:
    first = avals[0].dtype
    if any(a.dtype != first for a in avals[1:]):
        raise TypeError(
            f"{name} requires arguments to have the same dtypes, got "
            + ", ".join(a.dtype.name for a in avals)
            + " (funcgrad.numpy functions promote; funcgrad.lax functions do not)"
        )
    return first


def elementwise_shape(name: str, avals: Sequence[ShapedArray]) -> tuple[int, ...]:
    """Operands of an elementwise primitive share one shape; rank-0 operands broadcast."""
    shape = ()
    for aval in avals:
        if aval.shape == () or aval.shape == shape:
            continue
        if shape != ():
            raise TypeError(
                f"{name} got incompatible shapes for broadcasting: "
                + shape_text([a.shape for a in avals])
            )
        shape = aval.shape
    return shape


# Dtype classes accepted by primitives, with the words used in their error messages.
FLOAT = ("real floating-point", dtypes.is_float)
INEXACT = ("floating-point or complex", dtypes.is_inexact)
COMPLEX = ("complex", dtypes.is_complex)
INT = ("integer", dtypes.is_int)
NUMERIC = ("numeric", lambda d: dtypes.is_inexact(d) or dtypes.is_int(d))
REAL_NUMERIC = ("real numeric", lambda d: dtypes.is_float(d) or dtypes.is_int(d))
REAL = ("real (not complex)", lambda d: not dtypes.is_complex(d))
INT_OR_BOOL = ("integer or boolean", lambda d: dtypes.is_int(d) or dtypes.is_bool(d))
ANY = ("any", lambda d: True)


def check_dtype_class(name: str, aval: ShapedArray, accepted) -> None:
    words, test = accepted
    if not test(aval.dtype):
        raise TypeError(f"{name} does not accept dtype {aval.dtype.name}; it takes {words} arrays")


def canonical_axes(axes: Sequence[int], ndim: int, name: str) -> tuple[int, ...]:
    out = []
    for axis in axes:
        axis = int(axis)
        if not -ndim <= axis < ndim:
            raise ValueError(f"{name}: axis {axis} is out of bounds for an array of rank {ndim}")
        out.append(axis % ndim if ndim else axis)
    if len(set(out)) != len(out):
        raise ValueError(f"{name}: repeated axis in {tuple(axes)}")
    return tuple(out)
