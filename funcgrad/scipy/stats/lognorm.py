"""The log-normal distribution with shape `s`, as scipy.stats.lognorm: log((x - loc) / scale)
is normal with mean 0 and standard deviation s.

JAX has no lognorm; this module follows scipy.stats.lognorm's signature. Its functions are
the normal distribution's of log y / s, so the tails inherit log_ndtr's precision.
"""

from __future__ import annotations

import math

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.special import log_ndtr, ndtr, ndtri
from funcgrad.scipy.stats._params import nan_unless

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


def _log_scaled(name: str, x, s, loc, scale):
    """(log y, s, scale, whether x is at or below loc), with y = (x - loc) / scale taken as 1
    where it is not positive, so that the discarded branch stays finite."""
    x, s, loc, scale = promote_args_inexact(name, x, s, loc, scale)
    y = (x - loc) / scale
    # A nan y (an infinite x and scale) is not below loc: its nan reaches every result.
    below = (x <= loc) & ~fnp.isnan(y)
    return fnp.log(fnp.where(below, 1, y)), s, scale, below


def _valid(s, scale, **_):
    return (s > 0) & (scale > 0)


@nan_unless(_valid)
def logpdf(x: ArrayLike, s: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    log_y, s, scale, below = _log_scaled("lognorm.logpdf", x, s, loc, scale)
    z = log_y / s
    value = -0.5 * z * z - log_y - fnp.log(s) - fnp.log(scale) - _LOG_SQRT_2PI
    return fnp.where(below, -fnp.inf, value)


def pdf(x: ArrayLike, s: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.exp(logpdf(x, s, loc, scale))


@nan_unless(_valid)
def cdf(x: ArrayLike, s: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    log_y, s, _, below = _log_scaled("lognorm.cdf", x, s, loc, scale)
    return fnp.where(below, 0, ndtr(log_y / s))


@nan_unless(_valid)
def logcdf(x: ArrayLike, s: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    log_y, s, _, below = _log_scaled("lognorm.logcdf", x, s, loc, scale)
    return fnp.where(below, -fnp.inf, log_ndtr(log_y / s))


@nan_unless(_valid)
def sf(x: ArrayLike, s: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    log_y, s, _, below = _log_scaled("lognorm.sf", x, s, loc, scale)
    return fnp.where(below, 1, ndtr(-log_y / s))


@nan_unless(_valid)
def logsf(x: ArrayLike, s: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    log_y, s, _, below = _log_scaled("lognorm.logsf", x, s, loc, scale)
    return fnp.where(below, 0, log_ndtr(-log_y / s))


@nan_unless(_valid)
def ppf(q: ArrayLike, s: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    q, s, loc, scale = promote_args_inexact("lognorm.ppf", q, s, loc, scale)
    return loc + scale * fnp.exp(s * ndtri(q))


@nan_unless(_valid)
def isf(q: ArrayLike, s: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    q, s, loc, scale = promote_args_inexact("lognorm.isf", q, s, loc, scale)
    return loc + scale * fnp.exp(-s * ndtri(q))
