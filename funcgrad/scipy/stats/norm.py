"""The normal distribution N(loc, scale^2), as scipy.stats.norm.

The tails go through log_ndtr and ndtr of the standardized argument on the side where they are
small, so that cdf, sf and their logs keep their relative precision far from loc.
"""

from __future__ import annotations

import math

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.special import log_ndtr, ndtr, ndtri
from funcgrad.scipy.stats._params import nan_unless, positive_scale

_LOG_SQRT_2PI = 0.5 * math.log(2 * math.pi)


@nan_unless(positive_scale)
def logpdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, loc, scale = promote_args_inexact("norm.logpdf", x, loc, scale)
    z = (x - loc) / scale
    return -0.5 * z * z - fnp.log(scale) - _LOG_SQRT_2PI


def pdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.exp(logpdf(x, loc, scale))


@nan_unless(positive_scale)
def cdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, loc, scale = promote_args_inexact("norm.cdf", x, loc, scale)
    return ndtr((x - loc) / scale)


@nan_unless(positive_scale)
def logcdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, loc, scale = promote_args_inexact("norm.logcdf", x, loc, scale)
    return log_ndtr((x - loc) / scale)


@nan_unless(positive_scale)
def sf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    """1 - cdf, as the cdf of the reflected argument (no cancellation in the upper tail)."""
    x, loc, scale = promote_args_inexact("norm.sf", x, loc, scale)
    return ndtr((loc - x) / scale)


@nan_unless(positive_scale)
def logsf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    x, loc, scale = promote_args_inexact("norm.logsf", x, loc, scale)
    return log_ndtr((loc - x) / scale)


@nan_unless(positive_scale)
def ppf(q: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    q, loc, scale = promote_args_inexact("norm.ppf", q, loc, scale)
    return loc + scale * ndtri(q)


@nan_unless(positive_scale)
def isf(q: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    """The inverse of sf, as the reflected quantile -ppf(q), which needs no 1 - q."""
    q, loc, scale = promote_args_inexact("norm.isf", q, loc, scale)
    return loc - scale * ndtri(q)
