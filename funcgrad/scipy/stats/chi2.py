"""The chi-squared distribution with `df` degrees of freedom, as scipy.stats.chi2: the gamma
distribution of shape df / 2 and scale 2 (its logcdf and logsf likewise taken in float64)."""

from __future__ import annotations

import math

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.special import gammainc, gammaincc, gammaln, xlogy
from funcgrad.scipy.stats._promotion import log_in_float64


def logpdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    """-inf below loc. At loc itself xlogy makes the density of df = 2 its limit 1/2 rather
    than 0 * log 0."""
    x, df, loc, scale = promote_args_inexact("chi2.logpdf", x, df, loc, scale)
    below = x < loc
    y = fnp.where(below, 1, (x - loc) / scale)
    half_df = 0.5 * df
    value = xlogy(half_df - 1, y) - 0.5 * y - gammaln(half_df) - half_df * math.log(2)
    return fnp.where(below, -fnp.inf, value - fnp.log(scale))


def pdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.exp(logpdf(x, df, loc, scale))


def cdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, df, loc, scale = promote_args_inexact("chi2.cdf", x, df, loc, scale)
    return gammainc(0.5 * df, fnp.maximum(0.5 * (x - loc) / scale, 0))


def logcdf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, df, loc, scale = promote_args_inexact("chi2.logcdf", x, df, loc, scale)
    return log_in_float64(cdf, x, df, loc, scale)


def sf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, df, loc, scale = promote_args_inexact("chi2.sf", x, df, loc, scale)
    return gammaincc(0.5 * df, fnp.maximum(0.5 * (x - loc) / scale, 0))


def logsf(x: ArrayLike, df: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, df, loc, scale = promote_args_inexact("chi2.logsf", x, df, loc, scale)
    return log_in_float64(sf, x, df, loc, scale)
