"""Parameters outside their domain: every function of a distribution is nan there, whatever the
point, as SciPy's are. Without the test, the support's conventions (-inf, 0 or 1 off the
support) or a formula that happens to stay finite (expon.cdf of a negative scale was 0.63)
would answer for a distribution that does not exist."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable

from funcgrad import numpy as fnp
from funcgrad.numpy._promotion import promote_args_inexact


def nan_unless(valid: Callable) -> Callable:
    """Decorate a distribution's function so that it is nan where `valid`, called with the
    function's arguments by name (defaults filled in, promoted to arrays of one dtype), is
    false. A nan parameter fails every test, as comparisons with nan are false."""

    def decorate(fn: Callable) -> Callable:
        signature = inspect.signature(fn)

        @functools.wraps(fn)
        def checked(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            # Promoted together, as the function's own arguments are: a Python float parameter
            # compared in float32 beside float64 data could read b = a + 1e-8 as b = a.
            name = f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}"
            promoted = promote_args_inexact(name, *bound.arguments.values())
            params = dict(zip(bound.arguments, promoted))
            return fnp.where(valid(**params), fn(*args, **kwargs), fnp.nan)

        return checked

    return decorate


def positive_scale(scale, **_):
    return scale > 0


def probability(p, **_):
    return (p >= 0) & (p <= 1)
