"""The normal distribution truncated to [a, b] (in standard units: the support is
[loc + a scale, loc + b scale]), as scipy.stats.truncnorm.

Everything is a ratio of normal masses over intervals, kept in logs: the mass of [a, b] is
taken from the tail it lies in (reflected onto the lower tail, where log_ndtr is accurate), for
an interval around 0 as 1 minus the two tails outside it, and for a narrow interval from the
density at its midpoint, where both differences would cancel. Results are nan for a >= b.
"""

from __future__ import annotations

import math

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike, log1mexp
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.special import log_ndtr, ndtr
from funcgrad.scipy.stats import norm
from funcgrad.scipy.stats._params import nan_unless

# Intervals with width * (1 + |midpoint|) below this take the midpoint expansion, whose first
# omitted term is below float64's rounding there.
_NARROW = 0.03
_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def _log_mass(a, b):
    """log(ndtr(b) - ndtr(a)) for a < b. Each branch sees only the arguments of its own case,
    so that the discarded ones pass no nan to derivatives."""
    width, midpoint = b - a, 0.5 * (a + b)
    narrow = width * (1 + fnp.abs(midpoint)) < _NARROW
    # The density's integral over the interval, relative to width * pdf(midpoint), is
    # 1 + He2(m) w^2 / 24 + He4(m) w^4 / 1920 + O((w (1 + |m|))^6 / 322560), with He the
    # Hermite polynomials (from pdf(m + t) / pdf(m) = sum_n He_n(-m) t^n / n!).
    width, midpoint = fnp.where(narrow, width, _NARROW), fnp.where(narrow, midpoint, 0)
    w2, m2 = width * width, midpoint * midpoint
    correction = fnp.log1p((m2 - 1) * w2 / 24 + (m2 * m2 - 6 * m2 + 3) * w2 * w2 / 1920)
    narrow_mass = -0.5 * midpoint * midpoint - _LOG_SQRT_2PI + fnp.log(width) + correction
    a, b = fnp.where(narrow, -1, a), fnp.where(narrow, 1, b)
    reflect = a > 0
    lo, hi = fnp.where(reflect, -b, a), fnp.where(reflect, -a, b)
    in_tail = hi <= 0
    tail_lo, tail_hi = fnp.where(in_tail, lo, -2), fnp.where(in_tail, hi, -1)
    # An unbounded interval is the tail itself: log_ndtr(-inf) would make a nan derivative.
    unbounded = tail_lo == -fnp.inf
    log_hi = log_ndtr(tail_hi)
    log_lo = log_ndtr(fnp.where(unbounded, tail_hi - 1, tail_lo))
    tail = log_hi + fnp.where(unbounded, 0, log1mexp(log_hi - log_lo))
    middle_lo, middle_hi = fnp.where(in_tail, -1, lo), fnp.where(in_tail, 1, hi)
    middle = fnp.log1p(-ndtr(middle_lo) - ndtr(-middle_hi))
    return fnp.where(narrow, narrow_mass, fnp.where(in_tail, tail, middle))


def _interior(a, b):
    """A point strictly between a and b (for a < b, either of them possibly infinite)."""
    both = (a + b) / 2
    above_a = fnp.where(fnp.isfinite(a), a + 1, 0)
    below_b = fnp.where(fnp.isfinite(b), b - 1, 0)
    return fnp.where(
        fnp.isfinite(a) & fnp.isfinite(b), both, fnp.where(fnp.isfinite(b), below_b, above_a)
    )


def _valid(a, b, scale, **_):
    return (a < b) & (scale > 0)


@nan_unless(_valid)
def logpdf(
    x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1
) -> Array:
    x, a, b, loc, scale = promote_args_inexact("truncnorm.logpdf", x, a, b, loc, scale)
    z = (x - loc) / scale
    value = norm.logpdf(x, loc, scale) - _log_mass(a, b)
    value = fnp.where((z < a) | (z > b), -fnp.inf, value)
    return fnp.where(a >= b, fnp.nan, value)


def pdf(
    x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1
) -> Array:
    return fnp.exp(logpdf(x, a, b, loc, scale))


@nan_unless(_valid)
def logcdf(
    x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1
) -> Array:
    """log(mass of [a, z] / mass of [a, b]); near 1 it is log1p(-(mass of [z, b] / mass of
    [a, b])) instead, which keeps the small complement."""
    x, a, b, loc, scale = promote_args_inexact("truncnorm.logcdf", x, a, b, loc, scale)
    z = (x - loc) / scale
    inner = fnp.where((z <= a) | (z >= b), _interior(a, b), z)
    log_total = _log_mass(a, b)
    below = _log_mass(a, inner) - log_total
    above = _log_mass(inner, b) - log_total
    value = fnp.where(below > -0.1, fnp.log1p(-fnp.exp(above)), below)
    value = fnp.where(z >= b, 0, fnp.where(z <= a, -fnp.inf, value))
    return fnp.where(a >= b, fnp.nan, value)


def cdf(
    x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1
) -> Array:
    return fnp.exp(logcdf(x, a, b, loc, scale))


@nan_unless(_valid)
def logsf(
    x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1
) -> Array:
    """The logcdf of the mirrored distribution at the mirrored point."""
    x, a, b, loc, scale = promote_args_inexact("truncnorm.logsf", x, a, b, loc, scale)
    return logcdf(-x, -b, -a, -loc, scale)


def sf(x: ArrayLike, a: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.exp(logsf(x, a, b, loc, scale))
