"""The left-skewed Gumbel (extreme value of minima) distribution, as scipy.stats.gumbel_l:
sf(y) = exp(-exp(y)), the mirror image of gumbel_r. Every function is nan for scale <= 0, and
ppf outside (0, 1)."""

from __future__ import annotations

from funcgrad import numpy as fnp
from funcgrad.array import Array
from funcgrad.nn.functions import ArrayLike, log1mexp
from funcgrad.numpy._promotion import promote_args_inexact
from funcgrad.scipy.stats._params import nan_unless, positive_scale


def _standardized(name: str, x, loc, scale):
    """(y, scale), y nan where scale <= 0 so that every function built on it is."""
    x, loc, scale = promote_args_inexact(name, x, loc, scale)
    return fnp.where(scale > 0, (x - loc) / scale, fnp.nan), scale


@nan_unless(positive_scale)
def logpdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    y, scale = _standardized("gumbel_l.logpdf", x, loc, scale)
    return y - fnp.exp(y) - fnp.log(scale)


def pdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.exp(logpdf(x, loc, scale))


def standard_logcdf(y):
    """log(1 - exp(-exp(y))); below y = -20 as y - exp(y) / 2 (next term exp(2y) / 24, under
    1e-18), since exp(y) underflowed to 0 there and the log to -inf (logcdf(-200) in
    float32)."""
    far = y < -20
    near = log1mexp(fnp.exp(fnp.where(far, 0.0, y)))
    return fnp.where(far, y - fnp.exp(y) / 2, near)


@nan_unless(positive_scale)
def logcdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    y, _ = _standardized("gumbel_l.logcdf", x, loc, scale)
    return standard_logcdf(y)


@nan_unless(positive_scale)
def cdf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    """1 - exp(-exp(y)) by expm1, which keeps the small lower tail."""
    y, _ = _standardized("gumbel_l.cdf", x, loc, scale)
    return -fnp.expm1(-fnp.exp(y))


@nan_unless(positive_scale)
def logsf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    y, _ = _standardized("gumbel_l.logsf", x, loc, scale)
    return -fnp.exp(y)


def sf(x: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    return fnp.exp(logsf(x, loc, scale))


@nan_unless(positive_scale)
def ppf(p: ArrayLike, loc: ArrayLike = 0, scale: ArrayLike = 1) -> Array:
    p, loc, scale = promote_args_inexact("gumbel_l.ppf", p, loc, scale)
    valid = (p > 0) & (p < 1) & (scale > 0)
    return fnp.where(valid, loc + scale * fnp.log(-fnp.log1p(-p)), fnp.nan)
