"""The right-skewed Gumbel (extreme value of maxima) distribution, as scipy.stats.gumbel_r:
cdf(y) = exp(-exp(-y)). Every function is nan for scale <= 0, and ppf outside (0, 1)."""

from __future__ import annotations

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.stats import gumbel_l
from funcgrad.scipy.stats._params import nan_unless, positive_scale


def _standardized(name: str, x, loc, scale):
    """(y, scale), y nan where scale <= 0 so that every function built on it is."""
    x, loc, scale = promote_args_inexact(name, x, loc, scale)
    return fnp.where(scale > 0, (x - loc) / scale, fnp.nan), scale


@nan_unless(positive_scale)
def logpdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    y, scale = _standardized("gumbel_r.logpdf", x, loc, scale)
    return -y - fnp.exp(-y) - fnp.log(scale)


def pdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.exp(logpdf(x, loc, scale))


@nan_unless(positive_scale)
def logcdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    y, _ = _standardized("gumbel_r.logcdf", x, loc, scale)
    return -fnp.exp(-y)


def cdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.exp(logcdf(x, loc, scale))


@nan_unless(positive_scale)
def logsf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    y, _ = _standardized("gumbel_r.logsf", x, loc, scale)
    return gumbel_l.standard_logcdf(-y)  # (the mirror image)


@nan_unless(positive_scale)
def sf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    """1 - exp(-exp(-y)) by expm1, which keeps the small upper tail."""
    y, _ = _standardized("gumbel_r.sf", x, loc, scale)
    return -fnp.expm1(-fnp.exp(-y))


@nan_unless(positive_scale)
def ppf(p: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    p, loc, scale = promote_args_inexact("gumbel_r.ppf", p, loc, scale)
    valid = (p > 0) & (p < 1) & (scale > 0)
    return fnp.where(valid, loc - scale * fnp.log(-fnp.log(p)), fnp.nan)
