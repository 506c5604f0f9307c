"""float64 for the logs of probabilities that narrower floats would underflow."""

from __future__ import annotations

from collections.abc import Callable

from funcgrad import dtypes, lax
from funcgrad import numpy as fnp


def log_in_float64(probability: Callable, complement: Callable, *args):
    """log(probability(*args)), computed in float64 and returned in the arguments' (common)
    dtype. The incomplete gamma and beta functions compute in float64 anyway; a float32
    probability underflows to 0 (and its log to -inf) long before its log leaves float32's
    range. Above 1/2 it is log1p(-complement(*args)): the log of a probability near 1 kept
    only its rounding (chi2.logcdf at 1 - 6e-12 was 8.5e-6 off)."""
    wide = [lax.convert_element_type(a, dtypes.float64) for a in args]
    value = probability(*wide)
    near_one = value > 0.5
    value = fnp.where(near_one, fnp.log1p(-complement(*wide)), fnp.log(value))
    return lax.convert_element_type(value, args[0].dtype)
