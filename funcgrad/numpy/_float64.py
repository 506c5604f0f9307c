"""Evaluating a function in float64 whatever its inputs' dtype: the special functions'
series and continued fractions need float64's range and precision, and return the inputs'
promoted dtype, rounded once."""

from __future__ import annotations

import numpy as np

from funcgrad import dtypes, lax
from funcgrad.lax.elementwise import convert_element_type_p
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.numpy.creation import full_like

F64 = np.float64


def wide(name: str, *xs):
    """The arguments promoted together, in float64, and what to return (`narrow`): their
    dtype, weakly typed where every argument is (Python scalars), as JAX's results are."""
    xs = promote_args_inexact(name, *xs)
    if dtypes.is_complex(xs[0].dtype):
        # float64 would keep only the real parts
        raise TypeError(f"{name} takes real arguments, got {xs[0].dtype.name}")
    kind = xs[0].dtype, all(x.weak_type for x in xs)
    return [lax.convert_element_type(x, F64) for x in xs], kind


def narrow(x, kind: tuple):
    dtype, weak = kind
    return convert_element_type_p.bind(x, new_dtype=np.dtype(dtype), weak_type=weak)


def horner(coefficients, x):
    """sum_k coefficients[k] x^k."""
    result = full_like(x, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        result = result * x + c
    return result
