"""The Pareto distribution with shape `b`, supported from loc + scale up, as
scipy.stats.pareto.

The survival function y^-b is exact in logs, so logsf = -b log y and the others derive from it
without cancellation: cdf = -expm1(-b log y), logcdf = log(1 - y^-b) by log1mexp.
"""

from __future__ import annotations

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike, log1mexp
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.stats._params import nan_unless


def _log_scaled(name: str, x, b, loc, scale):
    """(log y, b, scale, whether x is below the support), with y = (x - loc) / scale taken
    as 1 (the start of the support) below it. log y is log1p of y - 1 = (x - loc - scale) /
    scale, whose difference is exact near the start of the support when loc is 0, where the
    small distribution functions depend on it with a large condition number."""
    x, b, loc, scale = promote_args_inexact(name, x, b, loc, scale)
    below = x < loc + scale
    return fnp.log1p(fnp.where(below, 0, (x - loc - scale) / scale)), b, scale, below


def _valid(b, scale, **_):
    return (b > 0) & (scale > 0)


@nan_unless(_valid)
def logpdf(x: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    log_y, b, scale, below = _log_scaled("pareto.logpdf", x, b, loc, scale)
    value = fnp.log(b) - fnp.log(scale) - (b + 1) * log_y
    return fnp.where(below, -fnp.inf, value)


def pdf(x: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.exp(logpdf(x, b, loc, scale))


@nan_unless(_valid)
def cdf(x: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    log_y, b, _, below = _log_scaled("pareto.cdf", x, b, loc, scale)
    return fnp.where(below, 0, -fnp.expm1(-b * log_y))


@nan_unless(_valid)
def logcdf(x: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    log_y, b, _, below = _log_scaled("pareto.logcdf", x, b, loc, scale)
    return fnp.where(below, -fnp.inf, log1mexp(b * log_y))


def sf(x: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.exp(logsf(x, b, loc, scale))


@nan_unless(_valid)
def logsf(x: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    log_y, b, _, below = _log_scaled("pareto.logsf", x, b, loc, scale)
    # Below the support log y is 0, whose product with an infinite b would be nan.
    return fnp.where(below, 0, -b * log_y)


@nan_unless(_valid)
def ppf(q: ArrayLike, b: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    """loc + scale (1 - q)^(-1/b), with log1p keeping small q."""
    q, b, loc, scale = promote_args_inexact("pareto.ppf", q, b, loc, scale)
    value = loc + scale * fnp.exp(-fnp.log1p(-q) / b)
    return fnp.where((q >= 0) & (q <= 1), value, fnp.nan)
