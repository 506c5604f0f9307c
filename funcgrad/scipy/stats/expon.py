"""The exponential distribution, as scipy.stats.expon.

Its survival function is the exponential itself, so logsf is exact and the rest derive from
it: cdf = -expm1(-y) keeps the small mass near loc, logcdf = log(1 - exp(-y)) by log1mexp.
"""

from __future__ import annotations

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike, log1mexp
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.stats._params import nan_unless, positive_scale


def _standardized(name: str, x, loc, scale):
    """The standardized argument, 0 below loc (where cdf is 0 and sf is 1)."""
    x, loc, scale = promote_args_inexact(name, x, loc, scale)
    return fnp.maximum((x - loc) / scale, 0)


@nan_unless(positive_scale)
def logpdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, loc, scale = promote_args_inexact("expon.logpdf", x, loc, scale)
    value = -(x - loc) / scale - fnp.log(scale)
    return fnp.where(x < loc, -fnp.inf, value)


def pdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.exp(logpdf(x, loc, scale))


@nan_unless(positive_scale)
def cdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    y = _standardized("expon.cdf", x, loc, scale)
    return -fnp.expm1(-y)


@nan_unless(positive_scale)
def logcdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    y = _standardized("expon.logcdf", x, loc, scale)
    return log1mexp(y)


def sf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.exp(logsf(x, loc, scale))


@nan_unless(positive_scale)
def logsf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    y = _standardized("expon.logsf", x, loc, scale)
    return -y


@nan_unless(positive_scale)
def ppf(q: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    q, loc, scale = promote_args_inexact("expon.ppf", q, loc, scale)
    return fnp.where((q >= 0) & (q <= 1), loc - scale * fnp.log1p(-q), fnp.nan)
