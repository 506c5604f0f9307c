"""The support test of the discrete distributions, whose pmf is 0 off the integers."""

from __future__ import annotations

from funcgrad import numpy as fnp


def off_support(y, upper=None):
    """Where y is not one of the integers 0, 1, ..., `upper` (unbounded when None): negative,
    fractional, above upper or infinite. A nan is not off the support, so that it propagates
    through the pmf as it does through the continuous densities."""
    beyond = y == fnp.inf if upper is None else y > upper
    return (y < 0) | (fnp.floor(y) < y) | beyond
