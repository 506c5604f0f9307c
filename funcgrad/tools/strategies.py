"""Hypothesis strategies shared by every suite and by the rule recipes, so all draw shapes,
dtypes and values alike.

Shapes are non-empty and hold at least two elements by default: bugs that mix up elements,
axes or lanes hide in arrays of one element. Empty and rank-0 arrays are deliberate cases
(`edge_shapes`, or `min_dims=0` / `min_side=0` where a suite wants them mixed in).
Hypothesis is a test-time dependency; importing this module needs it.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from funcgrad import dtypes
from funcgrad.testing import narrow_bounds

float_dtypes = st.sampled_from([dtypes.float32, dtypes.float64])
complex_dtypes = st.sampled_from([dtypes.complex64, dtypes.complex128])
all_float_dtypes = st.sampled_from(list(dtypes.float_dtypes))
int_dtypes = st.sampled_from([dtypes.int8, dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.uint32])
signed_int_dtypes = st.sampled_from([dtypes.int8, dtypes.int32, dtypes.int64])
numeric_dtypes = st.one_of(float_dtypes, int_dtypes)
any_dtypes = st.one_of(numeric_dtypes, st.just(dtypes.bool_))


def shapes(min_dims: int = 1, max_dims: int = 4, min_side: int = 1, max_side: int = 5):
    """Array shapes; with the default bounds, every shape holds two elements or more."""
    drawn = hnp.array_shapes(
        min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side
    )
    if min_dims >= 1 and min_side >= 1 and max_side >= 2:
        drawn = drawn.filter(lambda shape: math.prod(shape) >= 2)
    return drawn


def edge_shapes(max_dims: int = 3):
    """The deliberate corner cases: rank 0, and empty arrays with a zero-sized axis."""
    return st.one_of(st.just(()), shapes(1, max_dims, 0, 3).filter(lambda s: 0 in s))


def arrays(dtype, shape, *, min_value=None, max_value=None, allow_nan: bool = False):
    """NumPy arrays of `dtype` and `shape` (each may be a strategy) with bounded values.

    Floats default to [-10, 10] so that math functions stay in their well-conditioned range
    (complex numbers: both parts);
    bfloat16 and the narrow formats are drawn as float32 (int32) and cast, since hypothesis has
    no support for them.
    """

    def build(dtype, shape):
        dtype = np.dtype(dtype)
        if dtype == dtypes.bfloat16:
            return build(dtypes.float32, shape).map(lambda a: a.astype(dtypes.bfloat16))
        if dtypes.is_narrow(dtype):
            # Drawn in the compute dtype within the format's range, and rounded to it.
            lo, hi = narrow_bounds(dtype, min_value, max_value)
            wide = arrays(dtypes.compute_dtype(dtype), shape, min_value=lo, max_value=hi)
            return wide.map(lambda a: a.astype(dtype))
        if dtype.kind == "f":
            width = min(dtype.itemsize * 8, 64)
            lo = _inward(-10.0 if min_value is None else min_value, width, up=True)
            hi = _inward(10.0 if max_value is None else max_value, width, up=False)
            elements = st.floats(lo, hi, allow_infinity=False, width=width)
            if allow_nan:
                elements = elements | st.just(float("nan"))
        elif dtype.kind in "iu":
            info = np.iinfo(dtype)
            lo = info.min if min_value is None else max(int(min_value), info.min)
            hi = info.max if max_value is None else min(int(max_value), info.max)
            elements = st.integers(lo, hi)
        elif dtype.kind == "c":
            part = dtypes.real_dtype(dtype)
            return st.tuples(build(part, shape), build(part, shape)).map(
                lambda parts: (parts[0] + 1j * parts[1]).astype(dtype)
            )
        else:
            elements = st.booleans()
        return hnp.arrays(dtype, shape, elements=elements)

    dtype_st = dtype if isinstance(dtype, st.SearchStrategy) else st.just(dtype)
    shape_st = shape if isinstance(shape, st.SearchStrategy) else st.just(tuple(shape))
    return st.tuples(dtype_st, shape_st).flatmap(lambda ds: build(*ds))


def _inward(bound: float, width: int, up: bool) -> float:
    """`bound` rounded into the interval to a float of `width` bits, which hypothesis needs."""
    narrow = {16: np.float16, 32: np.float32, 64: np.float64}[width]
    value = narrow(bound)
    if (up and value < bound) or (not up and value > bound):
        value = np.nextafter(value, narrow(np.inf if up else -np.inf))
    return float(value)


@st.composite
def axes(draw, ndim: int, min_size: int = 0):
    """A sorted tuple of distinct axes of an array of rank `ndim`."""
    chosen = draw(st.lists(st.integers(0, max(ndim - 1, 0)), min_size=min_size, unique=True))
    return tuple(sorted(a for a in chosen if a < ndim))
