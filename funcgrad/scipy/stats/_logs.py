"""The dtypes the distributions compute in: promotion without broadcasting, and float64 for
the logs of probabilities that narrower floats would underflow."""

from __future__ import annotations

from collections.abc import Callable

from funcgrad import dtypes, lax
from funcgrad import numpy as fnp
from funcgrad.numpy._promotion import convert, result_type


def promote_dtypes_inexact(*args) -> list:
    """The arguments as arrays of their common dtype, the default float if that is not
    inexact; shapes are left as they are."""
    dtype = result_type(*args)
    if not dtypes.is_inexact(dtype):
        dtype = dtypes.default_float
    return [convert(a, dtype) for a in args]


def log_in_float64(probability: Callable, *args):
    """log(probability(*args)), computed in float64 and returned in the arguments' (common)
    dtype. The incomplete gamma and beta functions compute in float64 anyway; a float32
    probability underflows to 0 (and its log to -inf) long before its log leaves float32's
    range."""
    wide = [lax.convert_element_type(a, dtypes.float64) for a in args]
    return lax.convert_element_type(fnp.log(probability(*wide)), args[0].dtype)
