"""float64 for the logs of probabilities that narrower floats would underflow."""

from __future__ import annotations

from collections.abc import Callable

from funcgrad import dtypes, lax
from funcgrad import numpy as fnp


def log_in_float64(probability: Callable, *args):
    """log(probability(*args)), computed in float64 and returned in the arguments' (common)
    dtype. The incomplete gamma and beta functions compute in float64 anyway; a float32
    probability underflows to 0 (and its log to -inf) long before its log leaves float32's
    range."""
    wide = [lax.convert_element_type(a, dtypes.float64) for a in args]
    return lax.convert_element_type(fnp.log(probability(*wide)), args[0].dtype)
